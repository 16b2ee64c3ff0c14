//! `services`: seed 003's services block — a stable address for the app across hosts (issue
//! 27). Read by steward-sched, which hands each app's services with its endpoints to every
//! daemon; the daemons forward and name them (src/services/).

use super::{NumberText, Protocol};
use serde::{Deserialize, Serialize};

/// The node ports seed 003 allows (Kubernetes' default range).
pub const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Service {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ServiceType,
    /// Seed 003: whether the service is exported (outside its namespace); default true.
    pub export: bool,
    pub ports: Vec<ServicePort>,
    /// The service's virtual address (not in seed 003; Kubernetes' `clusterIP`): chosen by
    /// steward-sched from the cluster's `serviceRange` when empty, or asked for within it.
    #[serde(rename = "clusterIP", skip_serializing_if = "String::is_empty")]
    pub cluster_ip: String,
}

impl Default for Service {
    fn default() -> Self {
        Service {
            name: String::new(),
            kind: ServiceType::default(),
            export: true,
            ports: Vec::new(),
            cluster_ip: String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ServiceType {
    /// Reached by name (and a virtual address per app on each host).
    #[default]
    ClusterIP,
    /// Also on `nodePort` of every host.
    NodePort,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServicePort {
    /// Seed 003's default: HTTP (a TCP port; UDP forwards datagrams).
    pub protocol: Protocol,
    /// The instances' port: a port's name, or its number (a process's fixed `hostPort`, a pod's
    /// `containerPort`).
    pub target_port: Option<NumberText>,
    /// The service's own port.
    pub port: i64,
    /// NodePort only: 30000-32767; 0 asks steward-sched for a free one.
    #[serde(skip_serializing_if = "super::is_default")]
    pub node_port: i64,
}

impl Default for ServicePort {
    fn default() -> Self {
        ServicePort { protocol: Protocol::Http, target_port: None, port: 0, node_port: 0 }
    }
}

impl super::ProcessSpec {
    /// The name of the port a service port targets: its `targetPort` as a port name, or the
    /// port whose number it is (a process's fixed `hostPort`, a pod's `containerPort`).
    pub fn service_target(&self, p: &ServicePort) -> Option<String> {
        let text = p.target_port.as_ref()?.0.trim();
        let t = &self.spec.template.spec;
        let named = t.processes.iter().flat_map(|p| &p.ports).map(|q| (q.name.as_str(), q.host_port));
        let named =
            named.chain(t.containers.iter().flat_map(|c| &c.ports).map(|q| (q.name.as_str(), q.container_port)));
        let mut named = named.collect::<Vec<_>>().into_iter();
        match text.parse::<i64>() {
            Ok(n) => named.find(|(_, port)| *port == n).map(|(name, _)| name.to_string()),
            Err(_) => named.find(|(name, _)| *name == text).map(|(name, _)| name.to_string()),
        }
    }
}
