//! `daemonSet` and `statefulSet`: seed 003's DaemonSet and StatefulSet controllers, as
//! steward-sched placement modes (DESIGN § 6). A daemon set runs one instance on every host that
//! matches its constraint, following hosts that join and leave; a stateful set starts instance
//! k only once instance k-1 is ready. On one host (`steward apply`) they are an app like any
//! other: stewardd runs `spec.instance` instances.

use serde::{Deserialize, Serialize};

/// One instance per matching host; `spec.instance` is the scheduler's to set. Its updates
/// default to unavailable 1, surge 0 (DESIGN § 7).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DaemonSetSpec {}

/// Ordered instances: instance k is applied to its host only once instance k-1 reports Ready.
/// Named (seed 003) `NAME-K.DOMAIN` in the app's namespace, `DOMAIN` being any of them (the
/// DNS names of src/services/dns.rs); both default to the app's name.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StatefulSetSpec {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub domain: String,
}

/// What happens while the app's host is cut off from the schedulers (issue 43; after Nomad's
/// `disconnect` block and Kubernetes' eviction timeout). Without it: a lost host's instances
/// are replaced at once under restartPolicy Always, the host keeps running its copies, and the
/// replacement wins when it returns (availability first, as both anchors default).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Disconnect {
    /// The host stops the app's instances itself once no scheduler has handed it a desired
    /// set for this long: a partition then never runs the app twice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_after_secs: Option<u64>,
    /// How long after the host is declared lost its instances are placed elsewhere. Default:
    /// at once; with `stopAfterSecs`, that plus the kill grace period and a margin (and never
    /// less), so the host has stopped its copy before another starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace_after_secs: Option<u64>,
    /// Which copy stays when the host returns while both run.
    #[serde(skip_serializing_if = "crate::spec::model::is_default_reconcile")]
    pub reconcile: DisconnectReconcile,
}

/// Which copy of an instance stays when its host returns while its replacement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DisconnectReconcile {
    /// The replacement: the returning host's copy is deleted.
    #[default]
    KeepReplacement,
    /// The original, when it still runs on the returning host: the replacement is deleted
    /// and the placement goes back.
    KeepOriginal,
}

/// Seconds between the host's stop and a replacement beyond the kill grace period.
pub const DISCONNECT_MARGIN_SECS: u64 = 5;

impl Disconnect {
    /// Seconds after the host is declared lost before its instances are replaced.
    pub fn replace_after(&self, grace_period: u64) -> u64 {
        let floor = self.stop_after_secs.map_or(0, |s| s + grace_period + DISCONNECT_MARGIN_SECS);
        self.replace_after_secs.unwrap_or(floor).max(floor)
    }
}
