//! Endpoints (issue 27): per app and port name, the Ready instances and where they answer. The
//! leading `steward-sched run` keeps them in its desired store and hands them to every daemon
//! (PUT /v1/endpoints/{namespace}/{name}); a daemon serves them back, watched by long poll.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One app's endpoints at one revision.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppEndpoints {
    pub namespace: String,
    pub name: String,
    /// Grows by one at every change of the app's endpoints (never reused, across leaders).
    pub revision: u64,
    /// When the scheduler made this revision (ms since the epoch).
    pub updated_ms: u64,
    /// Port name → its Ready instances, by node and instance id.
    pub ports: BTreeMap<String, Vec<Endpoint>>,
    /// The app's services (seed 003), each port's target resolved to a port name: what every
    /// daemon forwards and names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceEntry>,
    /// Port name → its protocol, where it is not TCP (what DNS SRV names say: `_udp`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub port_protocols: BTreeMap<String, crate::spec::model::Protocol>,
    /// A stateful set's instance names (seed 003): `NAME-K.DOMAIN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinals: Option<OrdinalNames>,
    /// A pod's seed-003 `hostname` and `subdomain`: `HOSTNAME.SUBDOMAIN.NS.<zone>` names its
    /// Ready instances. Only when the pod sets a subdomain (and a hostname, or is a stateful set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_names: Option<PodNames>,
}

/// Seed 003 pod `hostname` and `subdomain`, as the app's endpoints carry them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodNames {
    /// Every instance's host name; empty in a stateful set that sets none: each ordinal's is
    /// its own `NAME-K` (Kubernetes' rule).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    pub subdomain: String,
}

/// Seed 003 `statefulSet.name` and `domain`, as the app's endpoints carry them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrdinalNames {
    pub name: String,
    pub domain: String,
}

impl AppEndpoints {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        self.app().to_string()
    }

    /// Its app.
    pub fn app(&self) -> crate::spec::AppId {
        crate::spec::AppId::new(&self.namespace, &self.name)
    }
}

/// One port of a service, as a daemon forwards it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEntry {
    /// The service's name (seed 003 `services[].name`).
    pub service: String,
    #[serde(rename = "type")]
    pub kind: crate::spec::model::ServiceType,
    pub export: bool,
    pub protocol: crate::spec::model::Protocol,
    /// The service's port.
    pub port: u16,
    /// NodePort: the port every host answers on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<u16>,
    /// The app's port name whose endpoints it forwards to.
    pub target: String,
    /// The service's virtual address, answered on every host (steward-sched's choice from the
    /// cluster's `serviceRange`).
    #[serde(default, rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
}

/// A Ready instance's port: where it answers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The node's address (its daemon's `host_ip`).
    pub ip: String,
    pub port: u16,
    /// The node's name in the cluster file.
    pub node: String,
    pub instance: u32,
}

/// GET /v1/endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EndpointsList {
    pub items: Vec<AppEndpoints>,
}
