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
}

/// GET /v1/apps/{namespace}/{name}/revisions: newest last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionList {
    pub app: String,
    pub revisions: Vec<RevisionInfo>,
}

/// POST /v1/apps/{namespace}/{name}/undo.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UndoRequest {
    /// The revision to go back to; the one before the current when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_revision: Option<u64>,
}
