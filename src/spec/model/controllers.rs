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
