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

/// One tick of a cron job: its runs, as a job's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronExecution {
    /// The tick it is for (unix ms); a trigger's is when it was asked.
    pub tick_ms: u64,
    /// Started by `steward cron trigger`, not by the rule.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub triggered: bool,
    pub job: JobStatus,
}

/// A cron job's status on this host: durable, beside its spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronStatus {
    /// Ticks up to here have been dealt with (started, skipped or missed).
    pub handled_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_tick_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tick_ms: Option<u64>,
    /// `steward cron suspend` (the spec's `suspend` also holds it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// Ticks that started runs, were skipped (Forbid, or suspended), were missed (the daemon
    /// down, or past the starting deadline).
    pub started: u32,
    pub skipped: u32,
    pub missed: u32,
    pub succeeded: u32,
    pub failed: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_ms: Option<u64>,
    /// Why the last failed tick failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_failure: String,
    /// The next run's instance id (never reused).
    pub next_index: u32,
    /// Ticks going, and the finished ones history keeps.
    pub executions: Vec<CronExecution>,
}

impl CronStatus {
    pub fn new(now_ms: u64) -> CronStatus {
        CronStatus {
            handled_ms: now_ms,
            next_tick_ms: None,
            last_tick_ms: None,
            suspended: false,
            started: 0,
            skipped: 0,
            missed: 0,
            succeeded: 0,
            failed: 0,
            last_success_ms: None,
            last_failure_ms: None,
            last_failure: String::new(),
            next_index: 0,
            executions: Vec::new(),
        }
    }

    pub fn active(&self) -> u32 {
        self.executions.iter().filter(|e| e.job.phase == JobPhase::Running).count() as u32
    }
}

/// GET /v1/cronjobs/{namespace}/{name}.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronBody {
    pub app: String,
    pub rule: String,
    pub time_zone: String,
    pub policy: String,
    /// Suspended by the spec or by `steward cron suspend`.
    pub suspended: bool,
    pub status: CronStatus,
}

/// GET /v1/cronjobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronList {
    pub items: Vec<CronBody>,
}
