//! What the daemon keeps about an instance: the durable record (in the store, rewritten at
//! every transition) and the status it reports.

use super::policy::RestartCounter;
use super::state::{ExitStatus, State};
/// The status is a wire type: defined with the protocol, built here from the record.
pub use crate::protocol::status::{InstanceStatus, Usage};
use crate::runtime::procinfo::ProcessIdentity;
use crate::spec::InstanceId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Kept here for the callers that name it so (the supervisor's instance tasks).
pub use crate::clock::now_ms;

/// The durable truth about one instance. Written before any transition is acted on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRecord {
    pub id: InstanceId,
    pub state: State,
    pub counter: RestartCounter,
    /// Main process of each of the spec's processes, once known (same order as the spec).
    pub mains: Vec<Option<ProcessIdentity>>,
    pub last_exit: Option<ExitStatus>,
    /// Why the last run ended, for people: how its main process (a pod: which container) ended,
    /// or the health check or start failure that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit_reason: Option<String>,
    /// Runs in a row that ended for the same reason (`last_exit_reason`): a start failing the
    /// same way again and again shows as the loop it is.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub same_ends: u32,
    /// Why the instance is in its state, for people.
    pub message: String,
    /// Restarts over the instance's whole life (the policy's counter resets; this does not).
    pub restarts: u64,
    pub last_start_ms: Option<u64>,
    pub updated_ms: u64,
    /// Ports allocated for this instance (hostPort 0), by name.
    pub ports: BTreeMap<String, u16>,
    /// Generation of the spec this instance runs (bumped by apply when the spec changes).
    pub spec_generation: u64,
    /// Generation of the spec the current (or last) start ran; behind `spec_generation` until
    /// the instance has started on the newest spec.
    #[serde(default)]
    pub run_generation: u64,
    /// The app's revision this instance is to run (see supervisor/revisions.rs); 0 in a record
    /// of a version that kept none.
    #[serde(default)]
    pub revision: u64,
    /// The revision its current (or last) start ran.
    #[serde(default)]
    pub run_revision: u64,
    /// When the instance was set to `revision`: made on it, or asked by a rollout's step to
    /// move to it. A rollout's progress deadline for the instance counts from here, not from
    /// its old run's start (issue 42); durable, so a daemon restart neither resets nor ages it.
    /// None in a record of a version that kept none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_since_ms: Option<u64>,
    /// Health of the current processes, per process with a local check (not persisted per
    /// check; changes are journaled as events).
    #[serde(default)]
    pub health: Vec<Option<crate::health::Health>>,
    /// A pod's containers (seed 001's container info), in spec order, as last inspected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<crate::runtime::docker::ContainerInfo>,
    /// Running and every readiness probe passing (seed 003's Ready condition); an instance
    /// without readiness probes is ready while Running. Journaled when it changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
    /// Since when it has been ready (ms): a rollout counts it available after minReadySeconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_since_ms: Option<u64>,
    /// A CNI pod's attachment (seed 001's CNI mode): recorded before its ADD, moved to the
    /// owed DELs before it is given back (see `cni::pods`). Boxed: every record carries the
    /// field, few have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Box<crate::cni::pods::PodAttachment>>,
    /// A pod's network holder container (any network mode), while it should run: its death
    /// ends the pod, seen also when it happened while the daemon was away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Why it is being deleted, from the delete's request on: its kept volumes' policy reads it
    /// when it goes (the strongest cause asked wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_cause: Option<crate::spec::pod::DeleteCause>,
}

impl InstanceRecord {
    pub fn new(id: InstanceId, spec_generation: u64, now_ms: u64) -> InstanceRecord {
        InstanceRecord {
            id,
            state: State::Stopped,
            counter: RestartCounter::default(),
            mains: Vec::new(),
            last_exit: None,
            last_exit_reason: None,
            same_ends: 0,
            message: String::new(),
            restarts: 0,
            last_start_ms: None,
            updated_ms: now_ms,
            ports: BTreeMap::new(),
            spec_generation,
            run_generation: 0,
            revision: 0,
            run_revision: 0,
            revision_since_ms: None,
            health: Vec::new(),
            containers: Vec::new(),
            ready: false,
            ready_since_ms: None,
            network: None,
            holder: None,
            delete_cause: None,
        }
    }

    /// The store key: `namespace/name/index`.
    pub fn key(&self) -> String {
        self.id.to_string()
    }
}

impl InstanceStatus {
    pub fn from_record(r: &InstanceRecord, usage: Option<Usage>) -> InstanceStatus {
        let pids: Vec<Option<i32>> = r.mains.iter().map(|m| m.as_ref().map(|m| m.pid)).collect();
        InstanceStatus {
            id: r.id.clone(),
            state: r.state.clone(),
            pid: if r.state.has_processes() { pids.first().copied().flatten() } else { None },
            pids: if r.state.has_processes() { pids } else { Vec::new() },
            last_exit: r.last_exit,
            last_exit_reason: r.last_exit_reason.clone(),
            message: r.message.clone(),
            restarts: r.restarts,
            last_start_ms: r.last_start_ms,
            updated_ms: r.updated_ms,
            ports: r.ports.clone(),
            usage,
            health: summarize_health(&r.health),
            checks: r.health.clone(),
            ready: r.ready && r.state == crate::supervisor::state::State::Running,
            containers: r.containers.clone(),
            spec_generation: r.spec_generation,
            run_generation: r.run_generation,
            revision: r.revision,
            run_revision: r.run_revision,
            limits: None,
            kept: false,
        }
    }
}

/// One word for `ls`: unhealthy if any check fails, healthy if all that ran pass.
fn summarize_health(checks: &[Option<crate::health::Health>]) -> Option<String> {
    let results: Vec<bool> = checks.iter().flatten().filter_map(|h| h.healthy).collect();
    if results.is_empty() {
        None
    } else if results.iter().all(|h| *h) {
        Some("healthy".into())
    } else {
        Some("unhealthy".into())
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
