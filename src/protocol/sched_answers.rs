//! What steward-sched answers and sends beyond its records (sched_records.rs): an app's
//! placements with what the nodes report, nodes, the engine, rollouts across nodes,
//! dependencies, hook templates, deletes, and the notifications it POSTs.

use super::sched_records::{Cordon, Maintenance, NodeRecord, PlacementState, SchedRollout};
use super::{Constraint, RolloutBody, RolloutProgress};
use crate::hooks::run::{HookRunSummary, HookTemplateSummary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One instance's placement, as deploy and status report it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacedInstance {
    pub instance: String,
    pub node: String,
    pub placement: PlacementState,
    /// What the node reports (`Running`, ...), `unreachable`, or `missing`.
    pub state: String,
    /// Seed 003's Ready condition as the node reports it (false when it reports nothing).
    #[serde(default)]
    pub ready: bool,
    /// Restarts its node counted (its restart policy's, a failed check's, a REMOTE check's).
    #[serde(default)]
    pub restarts: u64,
    pub message: String,
}

/// A node as `node ls` shows it: the cluster file's, with the leader's record and its cordon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeListing {
    pub name: String,
    /// In the cluster file this process read.
    pub in_cluster_file: bool,
    /// The leader's record, if one was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<NodeRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cordon: Option<Cordon>,
    /// What its daemon says now (seed 002's GET /api/nodes); None: it did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<NodeLive>,
    /// Why it did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
}

/// A node as its daemon describes itself now: its labels and attributes (what constraints and
/// affinities read), its cpu and memory (capacity, allocatable, what is admitted) and load.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeLive {
    pub hostname: String,
    pub host_ip: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub attributes: std::collections::BTreeMap<String, String>,
    /// Seed 003's topology facts it reports, by short name (`zone`, `os`, `arch`).
    pub topology: std::collections::BTreeMap<String, String>,
    pub resources: crate::protocol::ResourcesDocument,
    pub instances: usize,
    pub free_ports: usize,
}

/// The engine as `status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineStatus {
    /// The `run` that leads (acts), if one does.
    pub leader: Option<String>,
    pub store: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    pub cordons: BTreeMap<String, Cordon>,
    /// Seed 002's constraints, which cordon the nodes they do not let in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Constraint>,
    /// Node → why it did not answer.
    pub unreachable: BTreeMap<String, String>,
}

/// One instance a drift moved (or could not).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drifted {
    pub instance: String,
    pub from: String,
    /// Where it runs now; None when it was not moved (`reason` says why).
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// `steward-sched rollout status`: the app's rollout and each node's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedRolloutStatus {
    pub app: String,
    pub rollout: Option<SchedRollout>,
    /// The sums over the nodes that answered.
    pub progress: RolloutProgress,
    /// Each node the app has instances on: its rollout there, or why it did not answer.
    pub nodes: BTreeMap<String, NodeRollout>,
}

/// A node's answer to GET /v1/apps/{namespace}/{name}/rollout, or why there was none.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NodeRollout {
    Answered(Box<RolloutBody>),
    Unreachable { unreachable: String },
}

/// `GET /v1/apps/{namespace}/{name}/revisions`: each node's revision history of the app (the
/// web console's app page).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedRevisions {
    pub app: String,
    /// Each node the app has instances on: its revisions there, or why it did not answer.
    pub nodes: BTreeMap<String, NodeRevisions>,
}

/// A node's answer to GET /v1/apps/{namespace}/{name}/revisions, or why there was none.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NodeRevisions {
    Answered(super::RevisionList),
    Unreachable { unreachable: String },
}

/// `GET /v1/apps/{namespace}/{name}/revisions/{revision}`: that revision and its spec as one
/// node keeps it (each node numbers its own revisions; the web console's diffs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SchedRevision {
    /// The node that answered.
    pub node: String,
    #[serde(flatten)]
    pub revision: super::RevisionSpec,
}

/// A dependency as `depend ls` shows it: each copy with its dependents.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DependencyStatus {
    pub dependency: String,
    pub revision: u64,
    pub grace_secs: u64,
    /// Apps that declare it.
    pub dependents: Vec<String>,
    pub copies: Vec<CopyStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyStatus {
    /// The copy's instance (`namespace/name/0`).
    pub instance: String,
    pub node: String,
    /// Dependent instances placed with it (its reference count).
    pub refs: usize,
    pub revision: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_since_ms: Option<u64>,
}

/// What storing a template did: the nodes that took it, and why the others did not.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateStored {
    pub template: HookTemplateSummary,
    pub nodes: Vec<String>,
    /// Node → why it did not take it (it gets it when `run` hears it again).
    pub unreachable: BTreeMap<String, String>,
}

/// A run and the node that holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOnNode {
    pub node: String,
    #[serde(flatten)]
    pub run: HookRunSummary,
}

/// What `delete` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    pub app: String,
    /// Instances removed from the nodes that answered.
    pub removed: usize,
    /// Node → why it did not answer: it gets the delete when it answers again (`run`).
    pub pending: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum NotificationKind {
    /// Its main process ended (Exited, Failed).
    Exited,
    /// Placed on a node that lacks it, or on a node that was lost.
    Missing,
    /// Running without the address it declares (a port it was not given).
    NoAddress,
    /// Restarted more than [`RESTART_LIMIT`] times within [`RESTART_WINDOW`].
    Restarts,
    /// Rescheduled seed 000's `maxtimes` times: it stays Failed (DESIGN § 7).
    MaxtimesReached,
}

/// One POSTed document.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// Unique per notification: `{who}-{n}`.
    pub id: String,
    pub kind: NotificationKind,
    pub instance: String,
    pub node: String,
    pub at_ms: u64,
    pub detail: String,
}

/// One line of `config get`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigEntry {
    pub key: String,
    pub value: u64,
    pub default: u64,
    pub range: String,
    pub about: String,
}
