//! An instance as the API reports it (status, list, the actions' answers).

use super::state::{ExitStatus, State};
use crate::spec::InstanceId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An instance as `status` and `list` report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    pub id: InstanceId,
    pub state: State,
    /// The first process's main pid while it has one.
    pub pid: Option<i32>,
    pub pids: Vec<Option<i32>>,
    pub last_exit: Option<ExitStatus>,
    /// Why the last run ended (the record's `last_exit_reason`).
    #[serde(default)]
    pub last_exit_reason: Option<String>,
    pub message: String,
    pub restarts: u64,
    pub last_start_ms: Option<u64>,
    pub updated_ms: u64,
    pub ports: BTreeMap<String, u16>,
    pub usage: Option<Usage>,
    /// `healthy`, `unhealthy`, or None without checks (or before the first result).
    pub health: Option<String>,
    /// Per process with a local check: its latest result.
    pub checks: Vec<Option<crate::health::Health>>,
    /// Running and every readiness probe passing (seed 003's Ready condition).
    #[serde(default)]
    pub ready: bool,
    /// A pod's containers (seed 001's container info).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<crate::runtime::docker::ContainerInfo>,
    /// Generation of the app's spec this instance is to run.
    #[serde(default)]
    pub spec_generation: u64,
    /// Generation of the spec its current (or last) start ran.
    #[serde(default)]
    pub run_generation: u64,
    /// The app's revision this instance is to run (GET /v1/apps/{namespace}/{name}/revisions).
    #[serde(default)]
    pub revision: u64,
    /// The revision its current (or last) start ran; behind `revision` until it restarts.
    #[serde(default)]
    pub run_revision: u64,
    /// The spec's limits the instance runs under, next to `usage`: filled by GET of one
    /// instance (from the applied spec), absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::spec::model::InstanceLimits>,
    /// A surge instance whose failure failed its app's rollout, kept stopped (no process, no
    /// port) for its last run's logs and exit until the app's next apply or delete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
}

/// Resource use from the instance's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub cpu_usage_usec: u64,
    pub memory_bytes: u64,
    pub oom_kills: u64,
    /// Tasks (processes and threads) in the instance's cgroup, and its tasks limit (absent:
    /// none, or no pids controller; a pod's containers are limited one by one by the engine).
    #[serde(default)]
    pub tasks: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_max: Option<u64>,
}

/// GET /v1/instances: instances in id order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceList {
    pub instances: Vec<InstanceStatus>,
}
