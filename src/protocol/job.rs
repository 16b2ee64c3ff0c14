//! Jobs as the API shows them (issue 20): a job's status, kept beside its spec, durable.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum JobPhase {
    /// Runs are going or due.
    Running,
    /// `completions` runs succeeded.
    Complete,
    /// Past its backoff limit or its deadline: no more runs.
    Failed { reason: String },
}

impl JobPhase {
    pub fn name(&self) -> &'static str {
        match self {
            JobPhase::Running => "running",
            JobPhase::Complete => "complete",
            JobPhase::Failed { .. } => "failed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RunPhase {
    Active,
    Succeeded,
    Failed,
}

/// One run: an instance of the app with an id of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRun {
    /// Its instance id (`namespace/name/index`): its logs are that instance's.
    pub index: u32,
    pub phase: RunPhase,
    pub started_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// The exit code, when it ended with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// How it ended, or why it was stopped (`active deadline (5 s)`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Restarts of this run by restartPolicy OnFailure (each counts toward backoffLimit).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A job's status on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    #[serde(flatten)]
    pub phase: JobPhase,
    pub started_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    pub succeeded: u32,
    /// Failed runs and restarts of runs: what backoffLimit counts.
    pub failed: u32,
    /// The next run's instance id.
    pub next_index: u32,
    /// No new run before this (unix ms): the backoff after a failure.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub not_before_ms: u64,
    pub runs: Vec<JobRun>,
}

fn is_zero_ms(n: &u64) -> bool {
    *n == 0
}

impl JobStatus {
    pub fn new(now_ms: u64) -> JobStatus {
        JobStatus {
            phase: JobPhase::Running,
            started_ms: now_ms,
            finished_ms: None,
            succeeded: 0,
            failed: 0,
            next_index: 0,
            not_before_ms: 0,
            runs: Vec::new(),
        }
    }

    pub fn active(&self) -> u32 {
        self.runs.iter().filter(|r| r.phase == RunPhase::Active).count() as u32
    }
}

/// GET /v1/jobs/{namespace}/{name}: the job, its counts and every run it keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobBody {
    pub app: String,
    pub completions: u32,
    pub parallelism: u32,
    pub active: u32,
    pub status: JobStatus,
}

/// GET /v1/jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobList {
    pub items: Vec<JobBody>,
}
