//! `job`: the app runs to completion (seed 003 Job) instead of being kept running. Its runs are
//! instances with ids of their own, started up to `parallelism` at once until `completions`
//! of them succeeded; a run that fails is retried, with a growing delay, until `backoffLimit`
//! failures fail the job.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct JobSpec {
    /// Runs at once at most (seed 003: pint, 1).
    pub parallelism: u32,
    /// Successful runs that complete the job (seed 003: pint, 1).
    pub completions: u32,
    /// Seconds a run may take before it is stopped and counts as failed; 0: no limit (seed 003
    /// `active`).
    pub active: u64,
    /// Seconds the whole job may take before its runs are stopped and it fails; 0: no limit.
    pub job_deadline: u64,
    /// Failed runs (and restarts of a run under OnFailure) the job tolerates: one more fails it.
    /// The seed gives none; 6, as Kubernetes.
    pub backoff_limit: u32,
    /// Seconds from a failed run to the next start, doubled at each further failure, at most
    /// 360 (Kubernetes: 10 s doubling to 6 min).
    pub backoff_seconds: u64,
}

pub const DEFAULT_BACKOFF_LIMIT: u32 = 6;
pub const DEFAULT_BACKOFF_SECS: u64 = 10;
/// The longest delay between a failed run and the next.
pub const MAX_BACKOFF_SECS: u64 = 360;

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            parallelism: 1,
            completions: 1,
            active: 0,
            job_deadline: 0,
            backoff_limit: DEFAULT_BACKOFF_LIMIT,
            backoff_seconds: DEFAULT_BACKOFF_SECS,
        }
    }
}

impl JobSpec {
    /// The delay before the next run after `failures` failed ones (none before the first).
    pub fn backoff_ms(&self, failures: u32) -> u64 {
        if failures == 0 {
            return 0;
        }
        let doubled = self.backoff_seconds.saturating_mul(1u64 << (failures - 1).min(20));
        doubled.min(MAX_BACKOFF_SECS.max(self.backoff_seconds)) * 1000
    }
}
