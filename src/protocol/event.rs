//! The daemon's event journal on the wire: the envelope GET /v1/events sends, one per line, and
//! the bodies the daemon journals, typed.
//!
//! A body is about one instance (`{"instance": ..., "type": ...}`) or about the daemon's specs
//! and values (`{"type": ..., "app" | "namespace": ...}`); the two keep their own field order,
//! so the typed bodies serialize to the very bytes the journal has always held.

use super::state::{ExitStatus, Kind, State};
use crate::runtime::docker::ContainerInfo;
use serde::{Deserialize, Serialize};

/// One journal entry as GET /v1/events sends it (note the snake_case `at_ms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Sequence number: 1, 2, 3... with no gaps, never reused.
    pub seq: u64,
    /// When the store committed it, unix milliseconds.
    pub at_ms: u64,
    pub body: EventBody,
}

/// What happened.
///
/// `Other` keeps a body this build does not know whole: a newer daemon may journal new types
/// (or new shapes), and an older client or steward-sched following it must go on reading the
/// stream, not fail on the first line it cannot type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EventBody {
    Instance(InstanceEvent),
    Daemon(DaemonEvent),
    Other(serde_json::Value),
}

/// Something that happened to one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceEvent {
    /// The instance id, `namespace/name/index`.
    pub instance: String,
    #[serde(flatten)]
    pub change: InstanceChange,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum InstanceChange {
    /// Created by an apply (committed with the spec).
    Created { state: State },
    /// A state change.
    Transition(Transition),
    /// The instance got a changed spec (it restarts if it was running).
    SpecUpdated { detail: SpecUpdated },
    /// Reloaded (reloadCmd, or SIGHUP to a pod's containers).
    Reloaded { detail: NoDetail },
    /// Restarted in place by its restartCmd.
    Restarted { detail: RestartedBy },
    /// A process's health check result changed.
    HealthChanged { detail: HealthChanged },
    /// The instance's Ready condition changed (seed 003 readiness).
    ReadyChanged { detail: ReadyChanged },
    /// The main process ended and the OOM killer had struck in the instance's cgroup.
    OomKilled { detail: OomKilled },
    /// One of a pod's containers ended (a failing one ends the pod).
    ContainerExited { detail: ContainerExited },
    /// A pod's start pulled an image (seed 003 `imagePullPolicy`), or used the one on the host
    /// when the pull failed under the default policy.
    ImagePulled { detail: ImagePulled },
    /// A file was copied into the running instance (`steward cp`, seed 001's local file).
    FileCopied { detail: FileCopied },
    /// Deleted, record and all.
    Deleted,
}

/// A state change. What says nothing is left out (issue 32: a crash loop journals four of these
/// per restart, and the journal is what fills the disk); events journaled before issue 32 have
/// `state`, `message` and `pids` always, those before 0.2 no `reason`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    pub from: Kind,
    pub to: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The new state, when it holds more than `to` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Main pid of each process, when the instance has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<Vec<Option<i32>>>,
    /// A pod's containers, when it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containers: Option<Vec<ContainerInfo>>,
}

impl Transition {
    /// The transition to `state` from `from`, leaving out what says nothing: `state` when it
    /// holds nothing beyond its kind, an empty `message`, no `pids`, no `containers`.
    pub fn new(
        from: Kind,
        state: &State,
        reason: &str,
        message: &str,
        pids: Vec<Option<i32>>,
        containers: &[ContainerInfo],
    ) -> Transition {
        let carries_data = !matches!(state, State::Staging | State::Starting | State::Running | State::Stopped);
        Transition {
            from,
            to: state.kind(),
            reason: Some(reason.to_string()),
            state: carries_data.then(|| state.clone()),
            message: (!message.is_empty()).then(|| message.to_string()),
            pids: (!pids.is_empty()).then_some(pids),
            containers: (!containers.is_empty()).then(|| containers.to_vec()),
        }
    }
}

/// An empty `detail` (`{}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoDetail {}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecUpdated {
    /// The spec generation the instance is now to run.
    pub generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartedBy {
    /// What restarted it: `restartCmd`.
    pub by: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthChanged {
    /// Index of the process (a pod: the container) in the spec.
    pub process: usize,
    /// None: unknown (no result yet).
    pub healthy: Option<bool>,
    pub last_failure: Option<String>,
}

/// The Ready condition, and the process (container) whose readiness probe changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyChanged {
    pub ready: bool,
    pub process: usize,
    /// Why not ready: the probe's last failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagePulled {
    pub image: String,
    /// `pulled`, `joined` (another start's pull of the same image, waited for) or
    /// `presentAfterFailedPull`.
    pub outcome: String,
    /// How long the pull took (pulled, joined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secs: Option<f64>,
    /// The registry's message (presentAfterFailedPull).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Where `steward cp` put a file (PUT /v1/instances/{namespace}/{name}/{index}/files, and its
/// event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileCopied {
    /// The file's path: on the host for a process, inside the container for a pod.
    pub path: String,
    pub bytes: u64,
    /// The pod's container it went into; None for a process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Its owner as `uid:gid`, and its mode in octal ("0400": `r`, "0600": `rw`).
    pub owner: String,
    pub mode: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKilled {
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerExited {
    /// The Docker container's name.
    pub container: String,
    pub status: ExitStatus,
}

/// A change to the daemon's specs or values rather than to one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DaemonEvent {
    /// A spec was applied (new or changed).
    Applied {
        /// The app, `namespace/name`.
        app: String,
        generation: u64,
        /// The spec's instance count.
        instances: u32,
        /// The instance ids this host runs, when the apply named them (a placement).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        selection: Option<Vec<u32>>,
    },
    /// The app's last instance here was deleted, and its spec with it.
    AppDeleted {
        app: String,
    },
    /// A secret was written: its keys, never its values.
    SecretUpdated {
        namespace: String,
        name: String,
        keys: Vec<String>,
    },
    SecretDeleted {
        namespace: String,
        name: String,
    },
    /// A configmap was written: its keys, never its values.
    ConfigmapUpdated {
        namespace: String,
        name: String,
        keys: Vec<String>,
    },
    ConfigmapDeleted {
        namespace: String,
        name: String,
    },
    /// A scale-in's step for one instance (the app's `strategy.scaleIn` hook): `waiting` on its
    /// run, `removed` at its word (or the time limit's, onTimeout Delete), `kept` (the hook said
    /// no, or the time limit), `held` (Inconclusive), `cancelled` (scaled back over it).
    ScaleIn {
        app: String,
        ordinal: u32,
        run: String,
        step: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reason: String,
    },
    /// A kept volume of an ordinal (seed 003 Dynamic, Isolated) was removed: by `steward volume rm`,
    /// or with its instance as its `whenDeleted` or `whenScaled` says.
    VolumeRemoved {
        namespace: String,
        name: String,
        ordinal: u32,
        volume: String,
    },
    /// A changed spec began to roll out over the app's instances here, from revision `from`.
    RolloutStarted {
        app: String,
        revision: u64,
        from: u64,
    },
    /// The rollout took a batch of steps, on the instances named.
    RolloutBatch {
        app: String,
        revision: u64,
        #[serde(flatten)]
        steps: RolloutSteps,
    },
    /// An operator paused the rollout: it takes no step until resumed.
    RolloutPaused {
        app: String,
        revision: u64,
    },
    RolloutResumed {
        app: String,
        revision: u64,
    },
    /// Every instance runs the revision, ready; the surge instances are gone.
    RolloutCompleted {
        app: String,
        revision: u64,
    },
    /// An instance of the revision failed or missed the progress deadline: the rollout stopped.
    RolloutFailed {
        app: String,
        revision: u64,
        reason: String,
    },
    /// A failed rollout went back (autoRollback): revision `to`'s spec applied again as
    /// `newRevision`.
    #[serde(rename_all = "camelCase")]
    RolloutRolledBack {
        app: String,
        revision: u64,
        to: u64,
        new_revision: u64,
    },
    /// The rollout passed a step of its strategy and is now at step `gate` (issue 19): a
    /// partition, a hook or a pause, as `what` says.
    RolloutGate {
        app: String,
        revision: u64,
        gate: u32,
        what: String,
    },
    /// A job's run ended (issue 20): its instance `index`, how, and why.
    #[serde(rename_all = "camelCase")]
    JobRunEnded {
        app: String,
        index: u32,
        phase: crate::protocol::RunPhase,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        reason: String,
    },
    /// A cron job's tick (issue 20): `started`, `triggered`, `skipped: ...` or `missed`;
    /// `missed`: earlier ticks that fell due without a run (the daemon was down).
    #[serde(rename_all = "camelCase")]
    CronTick {
        app: String,
        tick_ms: u64,
        outcome: String,
        missed: u32,
    },
    /// A job completed or failed (`reason`: why it failed).
    JobEnded {
        app: String,
        phase: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reason: String,
    },
    /// A HookTemplate was created or replaced.
    HookTemplateUpdated {
        namespace: String,
        name: String,
    },
    HookTemplateDeleted {
        namespace: String,
        name: String,
    },
    /// A HookRun was made from `template` (and starts).
    HookRunCreated {
        namespace: String,
        name: String,
        template: String,
    },
    /// One measurement of a run's metric, as committed.
    HookRunMeasured {
        namespace: String,
        name: String,
        metric: String,
        phase: crate::hooks::MeasurementPhase,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
    /// The run was decided (or terminated): its phase and why.
    HookRunFinished {
        namespace: String,
        name: String,
        phase: crate::hooks::MetricPhase,
        message: String,
    },
    HookRunDeleted {
        namespace: String,
        name: String,
    },
}

/// The instances a rollout's batch acted on, by step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSteps {
    /// Restarted on the revision (or moved to it while stopped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<u32>,
    /// Serial: stopped for the pause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<u32>,
    /// Serial: started on the revision after the pause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started: Vec<u32>,
    /// Surge instances created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares_added: Vec<u32>,
    /// Surge instances deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares_removed: Vec<u32>,
}

impl EventBody {
    /// A body about one instance.
    pub fn instance(instance: impl Into<String>, change: InstanceChange) -> EventBody {
        EventBody::Instance(InstanceEvent { instance: instance.into(), change })
    }

    /// The body as the journal stores it.
    pub fn to_value(&self) -> serde_json::Value {
        // Every field is a string, a number, a bool or a list or map of them.
        serde_json::to_value(self).expect("an event body always serializes")
    }

    /// The instance it is about, if any (an unknown body's `instance` too).
    pub fn instance_id(&self) -> Option<&str> {
        match self {
            EventBody::Instance(e) => Some(&e.instance),
            EventBody::Daemon(_) => None,
            EventBody::Other(v) => v["instance"].as_str(),
        }
    }

    /// The app it is about, if any.
    pub fn app(&self) -> Option<&str> {
        match self {
            EventBody::Daemon(
                DaemonEvent::Applied { app, .. }
                | DaemonEvent::AppDeleted { app }
                | DaemonEvent::RolloutStarted { app, .. }
                | DaemonEvent::RolloutBatch { app, .. }
                | DaemonEvent::RolloutPaused { app, .. }
                | DaemonEvent::RolloutResumed { app, .. }
                | DaemonEvent::RolloutCompleted { app, .. }
                | DaemonEvent::RolloutFailed { app, .. }
                | DaemonEvent::RolloutRolledBack { app, .. }
                | DaemonEvent::RolloutGate { app, .. }
                | DaemonEvent::ScaleIn { app, .. }
                | DaemonEvent::JobRunEnded { app, .. }
                | DaemonEvent::JobEnded { app, .. }
                | DaemonEvent::CronTick { app, .. },
            ) => Some(app),
            EventBody::Other(v) => v["app"].as_str(),
            _ => None,
        }
    }

    /// Its `type`.
    pub fn kind(&self) -> String {
        match self {
            EventBody::Other(v) => v["type"].as_str().unwrap_or_default().to_string(),
            known => known.to_value()["type"].as_str().unwrap_or_default().to_string(),
        }
    }
}

/// What an idle event stream sends instead of events: the daemon is alive and its newest event
/// is `last_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    pub at_ms: u64,
    /// The daemon's newest event.
    pub last_seq: u64,
}

/// One line of GET /v1/events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StreamLine {
    Heartbeat { heartbeat: Heartbeat },
    Event(Event),
}
