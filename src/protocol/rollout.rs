//! Revisions and rollouts as the API shows them (issue 18).

use serde::{Deserialize, Serialize};

/// One revision of an app: an applied spec that changed what runs (anything but the count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionInfo {
    pub revision: u64,
    /// SHA-256 of the spec without its instance count, first 16 hex digits: two revisions with
    /// the same hash run the same thing.
    pub hash: String,
    pub created_ms: u64,
    /// Who applied it: `user NAME (uid N)` on the local socket, `remote write token` over TLS,
    /// `undo to revision N by ...`.
    pub applied_by: String,
    /// The revision the app's instances are meant to run now.
    pub current: bool,
    /// How its rollout here ended (`complete`, or `failed` with the reason); absent while it
    /// rolls out, and for a revision that never rolled out (an app's first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RolloutPhase>,
}

/// GET /v1/apps/{namespace}/{name}/revisions: newest last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionList {
    pub app: String,
    pub revisions: Vec<RevisionInfo>,
}

/// GET /v1/apps/{namespace}/{name}/revisions/{revision}: one kept revision and the spec it
/// applied, as the host keeps it (what `undo` would apply again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionSpec {
    pub app: String,
    #[serde(flatten)]
    pub info: RevisionInfo,
    pub spec: serde_json::Value,
}

/// POST /v1/apps/{namespace}/{name}/undo.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UndoRequest {
    /// The revision to go back to; the one before the current when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_revision: Option<u64>,
}

/// An app's rollout on this host: kept beside its spec, durable, resumed after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// The revision the instances move to.
    pub target: u64,
    /// The revision they came from.
    pub from: u64,
    /// The last revision whose rollout completed before this one started (or which ran before
    /// any rollout): what autoRollback and an `undo` without a number go back to. 0: unknown
    /// (stored by an older version; `from` stands in).
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub last_good: u64,
    /// `phase` and, when failed, `reason`, beside the other fields.
    #[serde(flatten)]
    pub phase: RolloutPhase,
    pub started_ms: u64,
    pub updated_ms: u64,
    /// Serial: the instance the rollout stopped, and since when (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<(u32, u64)>,
    /// Surge instances the rollout added (removed at its end).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares: Vec<u32>,
    /// Surge instances whose failure failed it, kept stopped (no process, no port) so that
    /// their last run's logs and exit stay readable until the app's next apply or delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<u32>,
    /// Steps taken so far (instances replaced, held, started, spares added and removed).
    #[serde(default)]
    pub steps: u64,
    /// It is an autoRollback's: should it fail too, it does not roll back again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback: bool,
    /// An autoRollback's: the failed revision it goes back from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u64>,
    /// The gate it is at: an index into the strategy's pre hook, steps, final move of every
    /// instance and post hook, in that order (0 and only the final move when it has no steps).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gate: u32,
    /// When it reached that gate (a pause counts from here).
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub gate_started_ms: u64,
    /// What the gate waits for, or why it paused: `hook run NAME`, `pause 60 s`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_ms(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum RolloutPhase {
    Progressing,
    Paused,
    Complete,
    Failed { reason: String },
}

impl RolloutPhase {
    /// Whether the rollout has ended (complete or failed).
    pub fn has_ended(&self) -> bool {
        matches!(self, RolloutPhase::Complete | RolloutPhase::Failed { .. })
    }

    /// The phase's name, as `phase` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            RolloutPhase::Progressing => "progressing",
            RolloutPhase::Paused => "paused",
            RolloutPhase::Complete => "complete",
            RolloutPhase::Failed { .. } => "failed",
        }
    }
}

/// Where an app's instances here stand against its current revision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutProgress {
    /// The app's instances here (surge instances not counted).
    pub instances: u32,
    /// Of those, the ones on the current revision (running it, or to run it at their next start).
    pub updated: u32,
    /// Of those, the ones running it and ready.
    pub ready: u32,
    /// Surge instances running beside them.
    pub spares: u32,
}

/// GET /v1/apps/{namespace}/{name}/rollout: the app's rollout here (none: never rolled out) and
/// where its instances stand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutBody {
    pub app: String,
    /// The app's current revision.
    pub revision: u64,
    pub rollout: Option<Rollout>,
    pub progress: RolloutProgress,
    /// Instances a scale-in removes once the app's `strategy.scaleIn` hook says so.
    #[serde(default, rename = "scaleIn", skip_serializing_if = "Vec::is_empty")]
    pub scale_in: Vec<ScaleIn>,
}

/// An instance the app no longer counts, removed only at its `strategy.scaleIn` hook's word
/// (issue 47; seed 004's hooks on scaling, GameDeployment's PreDeleteHook).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleIn {
    pub ordinal: u32,
    /// When the scale-in asked for its removal (ms).
    pub since_ms: u64,
    /// The HookRun that decides it (in the app's namespace).
    pub run: String,
    pub phase: ScaleInPhase,
    /// Why it is kept or held: the run's verdict and message, or the time limit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScaleInPhase {
    /// Its hook runs: the instance serves meanwhile.
    Waiting,
    /// The hook said no (Failed, Error) or the time limit kept it: it stays until an operator
    /// resumes (the hook runs again) or scales back over it.
    Kept,
    /// Inconclusive: waits for an operator (resume removes it).
    Held,
}
