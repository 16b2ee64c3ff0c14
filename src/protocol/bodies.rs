//! The smaller bodies: health, apply's answer, deletions, secrets and configmaps, log lines,
//! errors.

use crate::spec::SpecError;
use serde::{Deserialize, Serialize};

/// GET /v1/health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthBody {
    /// Always `ok`: a daemon that answers is up.
    pub status: String,
    pub version: String,
}

impl HealthBody {
    /// This build's answer.
    pub fn ok() -> HealthBody {
        HealthBody { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into() }
    }
}

/// What an apply did: every instance of the spec here, the spec's generation, the instances
/// that (re)start on it, and whether nothing changed at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub instances: Vec<String>,
    #[serde(default)]
    pub generation: u64,
    /// The app's revision now (a change of the count alone keeps it).
    #[serde(default)]
    pub revision: u64,
    #[serde(default)]
    pub changed: Vec<String>,
    #[serde(default)]
    pub created: Vec<String>,
    #[serde(default)]
    pub unchanged: bool,
    /// The changed instances move by a rollout, in batches (GET /v1/apps/{namespace}/{name}/rollout).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollout: bool,
}

/// DELETE /v1/apps/{namespace}/{name}: the instances deleted, `namespace/name/index`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: Vec<String>,
}

/// A secret or configmap as listings show it: names and keys, never values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValuesSummary {
    pub namespace: String,
    pub name: String,
    pub keys: Vec<String>,
    pub updated_ms: u64,
}

/// GET /v1/secrets and /v1/configmaps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValuesList {
    pub items: Vec<ValuesSummary>,
}

/// GET /v1/volumes: the kept volumes (seed 003 Dynamic, Isolated) below the daemon's
/// `volume_root`, in namespace, app, ordinal and volume order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeList {
    pub items: Vec<KeptVolume>,
}

/// One kept volume: an ordinal's directory of one volume, and the instance using it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptVolume {
    pub namespace: String,
    /// The app's name.
    pub name: String,
    pub ordinal: u32,
    pub volume: String,
    /// Its directory on this host.
    pub path: String,
    /// The disk its files take, in whole blocks (symlinks not followed; a limited volume: its
    /// image's blocks in use).
    pub bytes: u64,
    /// `namespace/name/ordinal` when that instance exists here (it mounts the volume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// PUT /v1/secrets/... and /v1/configmaps/...: the whole content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValuesBody {
    pub data: std::collections::BTreeMap<String, String>,
}

/// One line of an instance's output (GET .../logs): defined with the log files it is read
/// from (the runtime writes them, and the runtime is below the protocol).
pub use crate::logs::LogLine;

/// The API's one error shape: `{"error": {"code", "message", "field", "errors"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Every mistake of an invalid spec (code `invalid_spec`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<SpecError>,
}
