//! What steward-sched writes: the lines `watch` and `run` print (the nodes' events, tagged with
//! their node, and the scheduler's own), and the bodies it journals in its desired-state store.
//!
//! These are their own enums, not variants of the daemon's [`super::event::EventBody`]: the
//! scheduler's journal and its printed lines reuse type names (`applied`, `rescheduled`,
//! `nodeBack`) with other shapes, and neither is ever read as a daemon's event.

use super::event::Event;
use crate::spec::model::RestartPolicyKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The name the scheduler's own lines carry as their `node`.
pub const SCHED_NODE: &str = "sched";

/// One printed line of `steward-sched watch` and `run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WatchLine {
    /// What a node's event stream brought.
    Node(NodeLine),
    /// What the scheduler noticed or did.
    Sched(SchedLine),
}

/// An item of one node's event stream: `{"node": NAME, ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeLine {
    pub node: String,
    #[serde(flatten)]
    pub item: NodeItem,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NodeItem {
    Heartbeat {
        heartbeat: NodeHeartbeat,
    },
    /// Events `from..=to` were pruned before the follower could read them.
    Gap {
        gap: Gap,
    },
    /// The stream ended; the follower reconnects from `resume_after`.
    Disconnected {
        disconnected: Disconnected,
    },
    /// The daemon's journal is behind the cursor (its state directory is new: a re-imaged host,
    /// a new disk): the follower goes on from its newest event, and `run` reconciles the node.
    Resync {
        resync: Resync,
    },
    Event(Event),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resync {
    /// The cursor the follower had.
    pub was: u64,
    /// The daemon's newest event, followed from now on.
    pub last_seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeHeartbeat {
    /// The node's newest event.
    pub last_seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    pub from: u64,
    pub to: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disconnected {
    pub reason: String,
    pub resume_after: u64,
}

/// The scheduler's own line: `{"node": "sched", "at_ms", "body"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedLine {
    /// Always [`SCHED_NODE`].
    pub node: String,
    pub at_ms: u64,
    pub body: SchedEvent,
}

impl SchedLine {
    /// `body`, happening now.
    pub fn now(body: SchedEvent) -> SchedLine {
        SchedLine { node: SCHED_NODE.into(), at_ms: crate::clock::now_ms(), body }
    }
}

/// What the scheduler noticed or did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum SchedEvent {
    /// The node's stream carried something for the first time.
    NodeUp {
        node: String,
    },
    /// A lost node answers again.
    NodeBack {
        node: String,
    },
    /// The node's stream was silent past the heartbeat timeout.
    NodeLost {
        node: String,
        silent_secs: f64,
    },
    /// An instance placed on a lost node.
    InstanceLost {
        instance: String,
        node: String,
    },
    /// Lost or failed instances stay where they are: their restart policy says so. About an
    /// app (a lost node's) or one instance (a failed one).
    NotRescheduled {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        app: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        node: String,
        policy: RestartPolicyKind,
        reason: String,
    },
    /// An instance was placed on another node; `to` is None when it found none.
    Rescheduled {
        instance: String,
        from: String,
        to: Option<String>,
        reason: String,
    },
    RescheduleFailed {
        app: String,
        from: String,
        error: String,
    },
    /// An instance found on a returning node, placed elsewhere meanwhile, deleted there.
    StrayDeleted {
        instance: String,
        node: String,
        ok: bool,
    },
    /// A returning node's instances are reconciled with the placements.
    NodeReconciled {
        node: String,
    },
    /// A REMOTE check names no port the instance has.
    RemoteCheckInvalid {
        instance: String,
        message: String,
    },
    /// A REMOTE check's result changed.
    RemoteHealth {
        instance: String,
        node: String,
        healthy: Option<bool>,
        message: String,
    },
    /// REMOTE checks failed enough: the instance was failed through its daemon, whose restart
    /// policy restarts it (counted, with backoff) or gives up (Failed).
    RemoteCheckRestart {
        instance: String,
        node: String,
        reason: String,
        ok: bool,
    },
    /// A node away when its app was deleted got the delete (`removed` instances).
    DeleteDone {
        app: String,
        node: String,
        removed: usize,
    },
    /// The operator stopped the instance (on its node, or `steward-sched stop`): it keeps its
    /// node and is never rescheduled or started by the scheduler.
    InstanceStopped {
        instance: String,
        node: String,
    },
    /// The operator started a stopped instance again.
    InstanceStarted {
        instance: String,
        node: String,
    },
    /// `run` read the cluster file again (SIGHUP, or the file changed): nodes it now follows
    /// and stopped following.
    ClusterReloaded {
        added: Vec<String>,
        removed: Vec<String>,
        changed: Vec<String>,
    },
    /// The changed cluster file cannot be used: `run` goes on with the nodes it had.
    ClusterReloadFailed {
        error: String,
    },
    /// This `run` leads the schedulers sharing the store: it acts from now on.
    Leading {
        who: String,
    },
    /// This `run` no longer leads (its lease could not be kept, or the campaign failed): it
    /// acts on nothing and campaigns again.
    LeadershipLost {
        who: String,
        reason: String,
    },
    /// Placements stored but not yet applied (a deploy handed over, or one cut short) were
    /// applied.
    PendingApplied {
        app: String,
    },
    /// Maintenance mode turned on (the leader follows and reports, and changes nothing) or off.
    MaintenanceChanged {
        on: bool,
        reason: String,
    },
    /// The reconcile found a placed instance its node lacks (deleted there by hand, say): the
    /// app is applied to the node again.
    InstanceMissing {
        instance: String,
        node: String,
    },
    /// The reconcile found `node` running another spec of the app than the one meant for it (it
    /// missed a rollout, or one was undone there): the spec was applied again (`revision`: the
    /// app's revision there now; `error` when the apply failed, tried at the next reconcile).
    RevisionBehind {
        app: String,
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A copy of a dependency was started (or applied again: missing, or an older revision) on
    /// `node` for its dependents there; `error` when the apply failed.
    DependencyStarted {
        dependency: String,
        instance: String,
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A copy's last dependent left its node (namespace): it is removed after `graceSecs`.
    DependencyIdle {
        dependency: String,
        instance: String,
        node: String,
        grace_secs: u64,
    },
    /// A copy idle for its whole grace period (or deleted with --force) was removed.
    DependencyRemoved {
        dependency: String,
        instance: String,
        node: String,
        ok: bool,
    },
    /// An app's endpoints changed (issue 27): `revision` is the new one, `ready` how many
    /// instance ports it lists, `nodes` how many daemons took it (of `of`).
    EndpointsUpdated {
        app: String,
        revision: u64,
        ready: usize,
        nodes: usize,
        of: usize,
    },
    /// A node took its whole desired set (issue 43) and it changed something there: apps
    /// and endpoints it held and the set does not name are gone; `lacking`: apps the set
    /// names that it has no spec of (the leader applies them).
    DesiredHanded {
        node: String,
        #[serde(default)]
        dropped_apps: Vec<String>,
        #[serde(default)]
        dropped_endpoints: Vec<String>,
        #[serde(default)]
        lacking: Vec<String>,
        /// Apps it holds and the set does not name, deleted there at their scaleIn hook's word.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        draining_apps: Vec<String>,
    },
}

/// A node's state as the leading `run` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NodeState {
    /// Its daemon's stream carries events and heartbeats.
    Up,
    /// Silent past the heartbeat timeout.
    Lost,
    /// Gone from the cluster file.
    Removed,
}

/// Why the scheduler changed an app's desired state, journaled with the change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DesiredChange {
    /// `deploy`: the app was placed.
    Deployed {
        app: String,
        placements: BTreeMap<String, String>,
    },
    /// `scale`: placed for a new instance count.
    Scaled {
        instances: u32,
        app: String,
        placements: BTreeMap<String, String>,
    },
    /// `restart APP [--instance N]`: every instance restarted by the rollout rules, or one.
    Restarted {
        app: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<u32>,
    },
    /// `config set KEY VALUE`: one of the scheduler's settings changed.
    ConfigChanged {
        key: String,
        value: u64,
    },
    /// Lost or failed instances placed again.
    Rescheduled {
        reason: String,
        app: String,
        placements: BTreeMap<String, String>,
    },
    /// The placements' applies are done (each Placed or Pending).
    Applied {
        app: String,
    },
    /// A node was lost: these instances of the app are Lost.
    Lost {
        app: String,
        node: String,
        instances: Vec<u32>,
    },
    /// A lost node answers again: its placements are Placed again.
    NodeBack {
        app: String,
        node: String,
    },
    /// The daemon gave up on the instance.
    Failed {
        instance: String,
        node: String,
    },
    /// The app is gone from every node.
    AppDeleted {
        app: String,
    },
    /// `delete` was asked: `nodes` have yet to get it (each does when it answers again).
    Deleting {
        app: String,
        nodes: Vec<String>,
    },
    /// A node away at the delete got it.
    DeletedOn {
        app: String,
        node: String,
    },
    /// The operator stopped these instances: never rescheduled or started by the scheduler.
    Stopped {
        app: String,
        instances: Vec<u32>,
    },
    /// The operator started them again.
    Started {
        app: String,
        instances: Vec<u32>,
    },
    /// Maintenance mode on: the leader follows and reports, and changes nothing.
    MaintenanceOn {
        reason: String,
    },
    MaintenanceOff {},
    /// Nothing new is placed on `node` (`preferred`: only when no other node fits).
    Cordoned {
        node: String,
        preferred: bool,
        reason: String,
    },
    Uncordoned {
        node: String,
    },
    /// Seed 002's constraint set (`type==value` or `type!=value`).
    ConstraintSet {
        constraint: super::Constraint,
    },
    /// Constraints of `kind` (on `value`, or all of them) removed.
    ConstraintRemoved {
        kind: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
    /// The leading run saw the node's state change (up, lost, removed from the cluster file).
    NodeState {
        node: String,
        state: NodeState,
    },
    /// `depend apply`: a dependency stored (`revision` bumped when its spec changed).
    DependencyStored {
        dependency: String,
        revision: u64,
    },
    /// A copy of the dependency started, gained or lost its last dependent, or was removed.
    DependencyCopies {
        dependency: String,
        copy: String,
        what: String,
    },
    DependencyDeleted {
        dependency: String,
    },
    /// A notification URL registered (seed 002's notify callbacks).
    NotifyAdded {
        url: String,
    },
    NotifyRemoved {
        url: String,
    },
    /// An instance moved off a node (drift, drain): removed there, deployed on `to`.
    Drifted {
        app: String,
        instance: u32,
        from: String,
        to: String,
    },
    /// A deploy changed what runs: it rolls out over the app's nodes, one at a time.
    RolloutStarted {
        app: String,
    },
    /// A node took the new spec (`revision`: the app's revision there); its daemon rolls it out.
    RolloutNode {
        app: String,
        node: String,
        revision: u64,
    },
    RolloutPaused {
        app: String,
    },
    RolloutResumed {
        app: String,
    },
    /// Every node runs the new spec.
    RolloutCompleted {
        app: String,
    },
    /// A node's rollout failed: the nodes after it keep the previous spec.
    RolloutFailed {
        app: String,
        reason: String,
    },
    /// A HookTemplate was stored (and given to every node that answered).
    HookTemplateStored {
        namespace: String,
        name: String,
    },
    HookTemplateDeleted {
        namespace: String,
        name: String,
    },
}

/// What a deploy is for; with the app and its placements it becomes the journaled
/// [`DesiredChange`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeployCause {
    Deployed,
    Scaled {
        instances: u32,
    },
    Rescheduled {
        reason: String,
    },
    Restarted,
    /// The leader applies placements a deploy stored (it carries out the operator's deploy).
    PendingApplied,
}

impl DeployCause {
    /// Whether the operator asked for the app to run (a deploy, scale or restart, or the leader
    /// carrying one out): instances their nodes gave up on are started again. A reschedule,
    /// the reconcile or room found never revive (seed 000's maxtimes, DESIGN § 7).
    pub fn by_operator(&self) -> bool {
        !matches!(self, DeployCause::Rescheduled { .. })
    }

    /// The journal's body for placing `app` at `placements` (instance index → node).
    pub fn change(&self, app: &str, placements: BTreeMap<String, String>) -> DesiredChange {
        let app = app.to_string();
        match self {
            DeployCause::Deployed => DesiredChange::Deployed { app, placements },
            DeployCause::Scaled { instances } => DesiredChange::Scaled { instances: *instances, app, placements },
            DeployCause::Rescheduled { reason } => {
                DesiredChange::Rescheduled { reason: reason.clone(), app, placements }
            }
            DeployCause::Restarted => DesiredChange::Restarted { app, instance: None },
            DeployCause::PendingApplied => {
                DesiredChange::Rescheduled { reason: "placements not applied yet".into(), app, placements }
            }
        }
    }
}

impl SchedEvent {
    /// Its `type`.
    pub fn kind(&self) -> String {
        let body = serde_json::to_value(self).unwrap_or_default();
        body["type"].as_str().unwrap_or_default().to_string()
    }

    /// What happened beyond its type and subject, for people: where, why, what came of it.
    pub fn detail(&self) -> String {
        use SchedEvent::*;
        let list = |v: &[String]| if v.is_empty() { "-".to_string() } else { v.join(",") };
        match self {
            NodeUp { .. } | NodeBack { .. } | NodeReconciled { .. } => String::new(),
            NodeLost { silent_secs, .. } => format!("silent for {silent_secs:.1} s"),
            InstanceLost { node, .. } => format!("on {node}"),
            NotRescheduled { node, policy, reason, .. } => format!("on {node}: {reason} (restartPolicy {policy:?})"),
            Rescheduled { from, to: Some(to), reason, .. } => format!("{from} -> {to} ({reason})"),
            Rescheduled { from, to: None, reason, .. } => format!("from {from}: no node took it ({reason})"),
            RescheduleFailed { from, error, .. } => format!("from {from}: {error}"),
            StrayDeleted { node, ok: true, .. } => format!("on {node}"),
            StrayDeleted { node, ok: false, .. } => format!("on {node}: the delete failed (retried when it returns)"),
            RemoteCheckInvalid { message, .. } => message.clone(),
            RemoteHealth { node, healthy, message, .. } => {
                let word = match healthy {
                    Some(true) => "healthy",
                    Some(false) => "unhealthy",
                    None => "health unknown",
                };
                if message.is_empty() {
                    format!("on {node}: {word}")
                } else {
                    format!("on {node}: {word}: {message}")
                }
            }
            RemoteCheckRestart { node, reason, ok, .. } => {
                let how = if *ok {
                    "failed through its daemon, its restart policy follows"
                } else {
                    "its daemon did not take it"
                };
                format!("on {node}: {reason}; {how}")
            }
            DeleteDone { node, removed, .. } => format!("on {node}, back: {removed} instance(s) removed"),
            InstanceStopped { node, .. } => format!("on {node}, by the operator: stays stopped, never rescheduled"),
            InstanceStarted { node, .. } => format!("on {node}, by the operator"),
            ClusterReloaded { added, removed, changed } => {
                format!("added {}, removed {}, changed {}", list(added), list(removed), list(changed))
            }
            ClusterReloadFailed { error } => format!("{error}; going on with the nodes already known"),
            Leading { .. } => "leads: acts from now on".into(),
            LeadershipLost { reason, .. } => format!("{reason}; acts on nothing, campaigns again"),
            PendingApplied { .. } => "placements stored but not applied were applied".into(),
            MaintenanceChanged { on: true, reason } => {
                format!("maintenance on: following, changing nothing ({reason})")
            }
            MaintenanceChanged { on: false, .. } => "maintenance off: acting again".into(),
            InstanceMissing { node, .. } => format!("placed on {node}, which lacks it: applied there again"),
            RevisionBehind { node, error: None, revision, .. } => format!(
                "{node} ran another spec than the one meant for it: applied again (revision {} there)",
                revision.unwrap_or_default()
            ),
            RevisionBehind { node, error: Some(e), .. } => {
                format!("{node} runs another spec than the one meant for it; applying it: {e} (tried again)")
            }
            DependencyStarted { dependency, node, error: None, .. } => format!("{dependency} on {node}"),
            DependencyStarted { dependency, node, error: Some(e), .. } => {
                format!("{dependency} on {node}: the apply failed: {e} (tried again)")
            }
            DependencyIdle { node, grace_secs, .. } => {
                format!("on {node}: no dependent left; removed in {grace_secs} s unless one comes")
            }
            EndpointsUpdated { revision, ready, nodes, of, .. } => {
                format!("revision {revision}: {ready} ready endpoint(s), handed to {nodes} of {of} node(s)")
            }
            DesiredHanded { dropped_apps, dropped_endpoints, lacking, draining_apps, .. } => {
                let mut said = Vec::new();
                if !dropped_apps.is_empty() {
                    said.push(format!("deleted app(s) no longer meant for it: {}", dropped_apps.join(", ")));
                }
                if !draining_apps.is_empty() {
                    said.push(format!(
                        "deleting app(s) no longer meant for it at their scale-in hook's word: {}",
                        draining_apps.join(", ")
                    ));
                }
                if !dropped_endpoints.is_empty() {
                    said.push(format!("forgot endpoints of {}", dropped_endpoints.join(", ")));
                }
                if !lacking.is_empty() {
                    said.push(format!("lacks {}", lacking.join(", ")));
                }
                said.join("; ")
            }
            DependencyRemoved { node, ok: true, .. } => format!("on {node}"),
            DependencyRemoved { node, ok: false, .. } => format!("on {node}: the delete failed"),
        }
    }

    /// What it is about, for people: an instance, else an app, else a node.
    pub fn subject(&self) -> &str {
        use SchedEvent::*;
        match self {
            NodeUp { node }
            | NodeBack { node }
            | NodeLost { node, .. }
            | NodeReconciled { node }
            | DesiredHanded { node, .. } => node,
            DeleteDone { app, .. }
            | PendingApplied { app }
            | RevisionBehind { app, .. }
            | EndpointsUpdated { app, .. } => app,
            Leading { who } | LeadershipLost { who, .. } => who,
            ClusterReloaded { .. } | ClusterReloadFailed { .. } | MaintenanceChanged { .. } => "cluster",
            InstanceStopped { instance, .. }
            | InstanceStarted { instance, .. }
            | InstanceMissing { instance, .. }
            | DependencyStarted { instance, .. }
            | DependencyIdle { instance, .. }
            | DependencyRemoved { instance, .. }
            | InstanceLost { instance, .. }
            | Rescheduled { instance, .. }
            | StrayDeleted { instance, .. }
            | RemoteCheckInvalid { instance, .. }
            | RemoteHealth { instance, .. }
            | RemoteCheckRestart { instance, .. } => instance,
            NotRescheduled { app, instance, node, .. } => instance.as_deref().or(app.as_deref()).unwrap_or(node),
            RescheduleFailed { app, .. } => app,
        }
    }
}
