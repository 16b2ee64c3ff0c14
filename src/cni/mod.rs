//! CNI, the container network interface, from the runtime's side (seed 001's CNI mode): a
//! network configuration read from the configuration directory, each plugin of it run as a
//! program with the `CNI_*` variables and its configuration on stdin — ADD through the list in
//! order (each given the result before it), DEL in reverse, CHECK in order (both given the ADD's
//! result) — and the result's addresses read. The rules are the CNI specification's (1.0.0;
//! Debian's plugins also speak 0.4.0, whose results read the same).
//!
//! No crate does the runtime side well (rust-cni and cni are 0.1 releases without tests;
//! rscni's runtime half is planned), and the protocol is small: programs, variables, JSON.

mod conf;
mod exec;
pub mod leases;
pub mod pods;

pub use conf::NetworkList;
pub use exec::{Attachment, Cni};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("CNI network configuration {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("no CNI network {name:?} in {dir} (found: {found})")]
    NoNetwork { name: String, dir: PathBuf, found: String },
    #[error("CNI plugin {plugin:?} is in none of {dirs}")]
    PluginNotFound { plugin: String, dirs: String },
    /// The plugin answered with the specification's error document (or exited without one).
    #[error("CNI plugin {plugin} ({command}): {msg}{}", if details.is_empty() { String::new() } else { format!(": {details}") })]
    Plugin { plugin: String, command: String, code: u32, msg: String, details: String },
    #[error("CNI plugin {plugin}: {message}")]
    Io { plugin: String, message: String },
}

/// What ADD returned (the last plugin's result): the interfaces made and their addresses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CniResult {
    #[serde(default)]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    /// Everything else the plugin said (routes, dns), kept to hand back as `prevResult`.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// The namespace it is in; empty for one on the host (a bridge, a veth's host end).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpConfig {
    /// CIDR: `10.22.0.5/24`.
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

impl CniResult {
    /// The container's first address (one on an interface inside the namespace, else the first).
    pub fn address(&self) -> Option<std::net::IpAddr> {
        let in_sandbox = |ip: &&IpConfig| {
            ip.interface.and_then(|i| self.interfaces.get(i)).is_some_and(|iface| !iface.sandbox.is_empty())
        };
        let ip = self.ips.iter().find(in_sandbox).or(self.ips.first())?;
        ip.address.split('/').next()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_the_containers_interfaces() {
        let result: CniResult = serde_json::from_value(serde_json::json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "cni0", "mac": "aa"}, {"name": "veth1", "mac": "bb"},
                           {"name": "eth0", "mac": "cc", "sandbox": "/run/netns/p"}],
            "ips": [{"address": "10.22.0.1/24", "interface": 0},
                    {"address": "10.22.0.5/24", "gateway": "10.22.0.1", "interface": 2}],
            "dns": {}
        }))
        .unwrap();
        assert_eq!(result.address(), Some("10.22.0.5".parse().unwrap()));
        assert!(result.rest.contains_key("dns"), "kept for prevResult");
        assert_eq!(CniResult::default().address(), None);
    }
}
