//! The cluster file (`/etc/steward/cluster.toml`): where every daemon's remote API is, the
//! token to present and the CA that signs the daemons' certificates.

use super::SchedError;
use crate::client::Client;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// The scheduler's own store (desired state).
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// PEM CA certificate(s) the daemons' certificates are checked against.
    pub ca: PathBuf,
    /// File holding the bearer token (first line).
    pub token_file: PathBuf,
    /// A node whose event stream has carried nothing (no event, no heartbeat) for this long is
    /// lost. Keep it above the daemons' events.heartbeat_secs.
    #[serde(default = "default_heartbeat_timeout")]
    pub heartbeat_timeout_secs: u64,
    /// Where the desired state lives when several steward-sched share it:
    /// `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`. Default: the embedded store in `state_dir`.
    #[serde(default)]
    pub store: Option<String>,
    /// Where services' cluster IPs are chosen from (issue 27): a private IPv4 range routed
    /// nowhere else, the same for every scheduler sharing the store.
    #[serde(default = "default_service_range")]
    pub service_range: ipnet::Ipv4Net,
    /// Where `steward-sched serve` answers (`host:port`, or `https://host:port`): commands
    /// given this file are its clients instead of acting themselves (`--server` overrides it).
    #[serde(default)]
    pub server: Option<String>,
    /// The name the server's certificate is checked for; the host part of `server` by default.
    #[serde(default)]
    pub server_name: Option<String>,
    /// The token presented to the server; `token_file` by default.
    #[serde(default)]
    pub server_token_file: Option<PathBuf>,
    /// `steward-sched serve`'s own listener.
    #[serde(default)]
    pub serve: Option<ServeSection>,
    #[serde(rename = "node", default)]
    pub nodes: Vec<NodeEntry>,
}

/// `[serve]`: where `steward-sched serve` listens, with the daemons' remote listener's TLS,
/// tokens (`TOKEN [read|write]` per line, root's, mode 0600) and limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    pub listen: std::net::SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub tokens_file: PathBuf,
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    #[serde(default = "default_rate")]
    pub rate_per_sec: f64,
    #[serde(default = "default_burst")]
    pub rate_burst: u32,
}

fn default_max_body() -> usize {
    crate::config::MAX_BODY
}

fn default_rate() -> f64 {
    200.0
}

fn default_burst() -> u32 {
    400
}

impl ServeSection {
    /// As given on the command line, with the default limits.
    pub fn new(listen: std::net::SocketAddr, cert: PathBuf, key: PathBuf, tokens_file: PathBuf) -> ServeSection {
        ServeSection {
            listen,
            cert,
            key,
            tokens_file,
            max_body_bytes: default_max_body(),
            rate_per_sec: default_rate(),
            rate_burst: default_burst(),
        }
    }

    /// As the daemons' remote listener takes it.
    pub fn remote_config(&self, listen: Option<std::net::SocketAddr>) -> crate::config::RemoteConfig {
        crate::config::RemoteConfig {
            listen: Some(listen.unwrap_or(self.listen)),
            cert: Some(self.cert.clone()),
            key: Some(self.key.clone()),
            tokens_file: self.tokens_file.clone(),
            max_body_bytes: self.max_body_bytes,
            rate_per_sec: self.rate_per_sec,
            rate_burst: self.rate_burst,
        }
    }
}

fn default_service_range() -> ipnet::Ipv4Net {
    "10.254.0.0/16".parse().expect("a range")
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// How the scheduler names the node (placements, output).
    pub name: String,
    /// The daemon's remote listener, `host:port`.
    pub address: String,
    /// The name its certificate is checked for; the host part of `address` by default.
    pub server_name: Option<String>,
    /// This node's token file, when it differs from the cluster's.
    pub token_file: Option<PathBuf>,
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/steward-sched")
}

fn default_heartbeat_timeout() -> u64 {
    45
}

impl Cluster {
    pub fn load(path: &Path) -> Result<Cluster, SchedError> {
        let err = |message: String| SchedError::Cluster { path: path.to_path_buf(), message };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let mut cluster: Cluster = toml::from_str(&text).map_err(|e| err(e.to_string().trim_end().to_string()))?;
        if cluster.nodes.is_empty() && cluster.server.is_none() {
            return Err(err("lists no [[node]] (and no `server` to be a client of)".into()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, n) in cluster.nodes.iter().enumerate() {
            if n.name.is_empty() || !seen.insert(n.name.clone()) {
                return Err(err(format!("node[{i}].name {:?} is empty or not unique", n.name)));
            }
            if n.address.rsplit_once(':').is_none_or(|(_, p)| p.parse::<u16>().is_err()) {
                return Err(err(format!("node[{i}].address {:?} is not host:port", n.address)));
            }
        }
        if let Some(url) = &cluster.store {
            crate::sched::etcd::parse_url(url).map_err(|e| err(format!("store: {e}")))?;
        }
        if cluster.service_range.prefix_len() > 30 {
            return Err(err(format!("service_range {} holds no address to give (at most /30)", cluster.service_range)));
        }
        if cluster.heartbeat_timeout_secs == 0 {
            return Err(err("heartbeat_timeout_secs must be above 0".into()));
        }
        // Relative paths are relative to the cluster file.
        let base = path.parent().unwrap_or(Path::new("."));
        let serve = cluster.serve.as_mut().map(|s| [&mut s.cert, &mut s.key, &mut s.tokens_file]);
        for p in [&mut cluster.state_dir, &mut cluster.ca, &mut cluster.token_file]
            .into_iter()
            .chain(cluster.server_token_file.as_mut())
            .chain(serve.into_iter().flatten())
            .chain(cluster.nodes.iter_mut().filter_map(|n| n.token_file.as_mut()))
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(cluster)
    }

    /// A client for every node, in the file's order.
    pub fn clients(&self) -> Result<Vec<(String, Client)>, SchedError> {
        let tls = crate::tls::client_config(&self.ca).map_err(|e| SchedError::Tls(e.to_string()))?;
        let default_token = read_token(&self.token_file)?;
        self.nodes
            .iter()
            .map(|n| {
                let token = match &n.token_file {
                    Some(f) => read_token(f)?,
                    None => default_token.clone(),
                };
                let client = Client::remote(&n.address, n.server_name.as_deref(), tls.clone(), &token)
                    .map_err(|e| SchedError::Node { node: n.name.clone(), message: e.to_string() })?;
                Ok((n.name.clone(), client))
            })
            .collect()
    }
}

impl Cluster {
    /// A client of `steward-sched serve` at `server` (`host:port` or `https://host:port`),
    /// checked against the cluster's CA, presenting `server_token_file` (else `token_file`).
    pub fn server_client(&self, server: &str) -> Result<crate::sched::client::SchedClient, SchedError> {
        let addr = server.trim_start_matches("https://").trim_end_matches('/');
        let tls = crate::tls::client_config(&self.ca).map_err(|e| SchedError::Tls(e.to_string()))?;
        let token = read_token(self.server_token_file.as_ref().unwrap_or(&self.token_file))?;
        let client = Client::remote(addr, self.server_name.as_deref(), tls, &token)
            .map_err(|e| SchedError::Node { node: addr.to_string(), message: e.to_string() })?;
        Ok(crate::sched::client::SchedClient::new(client))
    }
}

fn read_token(path: &Path) -> Result<String, SchedError> {
    crate::client::read_token_file(path).map_err(|e| SchedError::Cluster { path: e.path, message: e.message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nodes_and_resolves_relative_paths() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        std::fs::write(
            &path,
            "ca = \"ca.pem\"\ntoken_file = \"/etc/t\"\n[[node]]\nname = \"h1\"\naddress = \"10.0.0.1:7443\"\n",
        )
        .unwrap();
        let c = Cluster::load(&path).unwrap();
        assert_eq!(c.ca, dir.path().join("ca.pem"));
        assert_eq!(c.token_file, PathBuf::from("/etc/t"));
        assert_eq!(c.heartbeat_timeout_secs, 45);
        std::fs::write(&path, "ca = \"ca.pem\"\ntoken_file = \"t\"\n[[node]]\nname = \"h1\"\naddress = \"h1\"\n")
            .unwrap();
        let e = Cluster::load(&path).unwrap_err().to_string();
        assert!(e.contains("node[0].address \"h1\" is not host:port") && e.contains("cluster.toml"), "{e}");
        std::fs::write(&path, "ca = \"ca.pem\"\ntoken_file = \"t\"\n").unwrap();
        assert!(Cluster::load(&path).unwrap_err().to_string().contains("no [[node]]"));
    }
}
