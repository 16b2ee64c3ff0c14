//! stewardd's configuration (`/etc/steward/stewardd.toml`). Every key is optional; with no file
//! at all the embedded defaults apply, so the daemon and the CLI work out of the box.

use crate::spec::Roots;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/steward/stewardd.toml";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `${work_base_dir}`: instances' work directories live below it.
    pub work_base_dir: PathBuf,
    /// `${run_base_dir}`: instances' pidfiles, logs and runtime files live below it.
    pub run_base_dir: PathBuf,
    /// Kept volumes (seed 003 Dynamic, Isolated): a directory per app, volume and ordinal,
    /// outliving the instance.
    pub volume_root: PathBuf,
    /// `${hostip}`; detected from the host's interfaces when unset.
    pub host_ip: Option<IpAddr>,
    /// The durable store (instance records and the event journal).
    pub state_dir: PathBuf,
    /// The local API's unix socket.
    pub socket: PathBuf,
    /// Root and this group may change things through the socket (mode 0660 root:group).
    pub socket_group: String,
    /// Let every local user read (list, status, events, node, metrics): the socket becomes
    /// 0666 and the caller's uid/gid (SO_PEERCRED) decide who may change things.
    pub allow_read_for_all: bool,
    /// Name of the cgroup under which every instance gets its own.
    pub cgroup_parent: String,
    /// cgroupfs mount point.
    pub cgroup_root: PathBuf,
    /// Set the kernel's `favordynmods` on the cgroup v2 mount at start (see `cgroups::dynmods`).
    pub cgroup_favor_dynmods: bool,
    /// Let go of the code pages a start-up or a burst mapped, at a quiet tick (see
    /// `daemon::memory::release_code_pages`).
    pub release_code_pages: bool,
    /// cpu kept back from instances' requests (cores or "500m"): allocatable is what the host
    /// has less this.
    pub reserved_cpu: crate::spec::model::NumberText,
    /// Memory kept back from instances' requests (MiB, or "512Mi", "1Gi").
    pub reserved_memory: crate::spec::model::NumberText,
    /// An instance's log file is rotated when it grows past this many bytes.
    pub log_max_bytes: u64,
    /// Rotated copies kept per log file (`.1` newest).
    pub log_keep: u32,
    /// How often log sizes are checked, in seconds.
    pub log_check_secs: u64,
    /// Most instances one app may ask for (`spec.instance`).
    pub max_instances_per_app: u32,
    /// Revisions kept per app for `steward rollout history` and `undo` (the current one always).
    pub revision_history: usize,
    /// First port of the range random ports (hostPort 0) come from.
    pub port_range_start: u16,
    /// Last port of that range (inclusive).
    pub port_range_end: u16,
    /// Where the range overlaps the kernel's ephemeral ports, reserve it from them at start
    /// (net.ipv4.ip_local_reserved_ports), so no outgoing connection takes an instance's port.
    pub reserve_port_range: bool,
    /// Base URL for `uris[].value` given as a repository path (`/prod/app.tar.gz`, seed 000):
    /// http(s):// or file://.
    pub package_repository: Option<String>,
    /// Downloaded packages, kept by URL for pullPolicy IfNotPresent and revalidation.
    pub fetch_cache_dir: PathBuf,
    /// A package archive that decompresses to more than this many bytes is refused.
    pub fetch_max_extracted_bytes: u64,
    /// A package archive with more entries (files, directories, links) than this is refused.
    pub fetch_max_extracted_files: u64,
    /// A package archive that decompresses to more than this many times its own size is
    /// refused (a gzip or xz bomb), long before the size limit.
    pub fetch_max_extraction_ratio: u64,
    /// The Docker Engine's API socket, for pods (seed 001).
    pub docker_socket: PathBuf,
    /// Where the NUMA topology is read for pods' cpuset placement.
    pub numa_root: PathBuf,
    /// How BRIDGE and USER pods are networked (seed 001's `--network-mode`): `cnm`, Docker's
    /// own networks; `cni`, a network container given its address by the CNI plugins.
    pub network_mode: NetworkModeConfig,
    /// Where the CNI plugins are (seed 001: /data/bcs/bcs-cni/bin).
    pub cni_bin_dir: PathBuf,
    /// Where the CNI network configurations are (`*.conflist`, `*.conf`, `*.json`).
    pub cni_conf_dir: PathBuf,
    /// The CNI network of a BRIDGE pod (a USER pod names its own with its `net` parameter);
    /// unset: the first configuration in `cni_conf_dir` by file name.
    pub cni_network: Option<String>,
    /// What the scheduler may place by: labels (free-form) and attributes (e.g. idc, district).
    pub node: NodeConfig,
    /// The remote listener for the scheduler: TCP with TLS and bearer tokens (off by default).
    pub remote: RemoteConfig,
    /// The event journal as remote readers see it: retention and heartbeats.
    pub events: EventsConfig,
    /// Limits of the API's connections, on the local socket and the remote listener alike.
    pub connections: ConnectionsConfig,
    /// Services steward-sched hands this daemon (issue 27): how node ports are forwarded.
    pub services: ServicesConfig,
    /// Most bytes of an answer a hook measurement reads (a web GET, a Prometheus query); a
    /// longer one is an error and the read stops there.
    pub hook_max_response_bytes: u64,
    /// The tasks (processes and threads) an instance's process or container may have when its
    /// spec sets no `limits.pids`: `N%` of the kernel's pid_max and threads-max (the smaller),
    /// a count, or `infinity` (systemd's DefaultTasksMax, and its default).
    pub default_tasks_max: String,
    /// What runs instances: `real` (processes and containers) or `hollow` (nothing: see
    /// [`HollowConfig`]).
    pub runtime: RuntimeMode,
    /// What a hollow host claims to have and its instances to use.
    pub hollow: HollowConfig,
}

/// What runs this daemon's instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeMode {
    /// Processes in cgroups, pods in Docker.
    #[default]
    Real,
    /// A hollow host (issue 46 item 4): the supervisor, store, journal, events, admission and
    /// API are real; instances run nothing, start and stop at once, and report simulated use.
    /// For proving steward-sched at fleet scale with many daemons on one machine.
    Hollow,
}

/// `[hollow]`: the simulated host of `runtime = "hollow"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HollowConfig {
    /// The cpus it reports and admits by (cores, or "500m").
    pub cpu: crate::spec::model::NumberText,
    /// The memory it reports and admits by (MiB, or "64Gi").
    pub memory: crate::spec::model::NumberText,
}

impl Default for HollowConfig {
    fn default() -> Self {
        HollowConfig {
            cpu: crate::spec::model::NumberText("16".into()),
            memory: crate::spec::model::NumberText("64Gi".into()),
        }
    }
}

impl HollowConfig {
    /// The simulated host's capacity.
    pub fn capacity(&self) -> Result<crate::resources::Requests, String> {
        use crate::resources::{parse_cpu, parse_memory, Quantity};
        let amount = |key: &str, parsed: Result<Quantity, String>| match parsed {
            Ok(Quantity::Amount(n)) if n > 0.0 => Ok(n),
            Ok(_) => Err(format!("hollow.{key} must be a positive amount")),
            Err(why) => Err(format!("hollow.{key}: {why}")),
        };
        let cpu = amount("cpu", parse_cpu(&self.cpu.0))?;
        let memory = amount("memory", parse_memory(&self.memory.0))?;
        Ok(crate::resources::Requests::of(cpu, memory))
    }
}

/// `[services]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServicesConfig {
    pub node_ports: NodePortMode,
    /// Where the DNS responder answers (UDP and TCP); off when unset.
    pub dns: Option<std::net::SocketAddr>,
    /// The zone it answers for: `APP.NAMESPACE.<dns_domain>`.
    pub dns_domain: String,
    /// The address ClusterFirst pods (seed 003 `dns`) are pointed at: the responder answers on
    /// its port 53 (UDP and TCP), the address held on the host's loopback when no link has it
    /// (so every pod network reaches it through its gateway), and forwards names outside the
    /// zone to `dns_upstream`. Unset: a ClusterFirst pod is refused.
    pub pod_dns: Option<std::net::Ipv4Addr>,
    /// Where names outside the zone asked at `pod_dns` go (`IP` or `IP:PORT`); empty: the
    /// `nameserver`s of the host's /etc/resolv.conf, read again when it changes.
    pub dns_upstream: Vec<String>,
    /// Most connections (TCP) and sessions (UDP) the userspace proxy holds over all node
    /// ports; within the daemon's descriptor limit less a reserve for its own work.
    pub proxy_max_connections: usize,
    /// Most connections or sessions one node port holds.
    pub proxy_max_connections_per_port: usize,
}

/// Bound of the proxy's caps: far above any descriptor limit a host gives a process.
const MAX_PROXY_CONNECTIONS: usize = 1 << 24;

impl Default for ServicesConfig {
    fn default() -> Self {
        ServicesConfig {
            node_ports: NodePortMode::default(),
            dns: None,
            dns_domain: "steward".into(),
            pod_dns: None,
            dns_upstream: Vec::new(),
            proxy_max_connections: 16384,
            proxy_max_connections_per_port: 4096,
        }
    }
}

/// How node ports are forwarded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodePortMode {
    /// nftables when `nft` works here, else the userspace proxy.
    #[default]
    Auto,
    /// In the kernel: Steward's own nftables table (`ip steward`).
    Nftables,
    /// A socket of the daemon per node port, relaying to the endpoints.
    Userspace,
    /// Not at all (the endpoints are still kept and served).
    Off,
}

/// Seed 001's network modes of the pod executor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkModeConfig {
    /// Docker's own networks (bridge, a user network).
    #[default]
    Cnm,
    /// CNI: a network container, its address from the plugins.
    Cni,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionsConfig {
    /// A request's headers must arrive within this many seconds of the connection's start or
    /// of the previous response's end (an idle connection is closed after it too); also the
    /// remote listener's TLS handshake time.
    pub header_timeout_secs: u64,
    /// Open connections per listener.
    pub max_total: usize,
    /// Open connections per peer (a local user other than root, a remote address).
    pub max_per_peer: usize,
    /// Open streams (event streams, followed logs) in all.
    pub max_streams: usize,
    /// Open streams per local user other than root (the remote listener's callers count as one).
    pub max_streams_per_peer: usize,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        ConnectionsConfig {
            header_timeout_secs: 10,
            max_total: 1024,
            max_per_peer: 64,
            max_streams: 256,
            max_streams_per_peer: 16,
        }
    }
}

/// The limits of one listener, as the API's server applies them (built from
/// [`ConnectionsConfig`]; defined here so the API depends on the configuration, not back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    pub header_timeout: std::time::Duration,
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
}

/// Largest spec body accepted on the local socket, and the remote listener's default.
pub const MAX_BODY: usize = 1024 * 1024;

impl ConnectionsConfig {
    pub fn limits(&self) -> ServeLimits {
        ServeLimits {
            header_timeout: std::time::Duration::from_secs(self.header_timeout_secs),
            max_connections: self.max_total,
            max_connections_per_peer: self.max_per_peer,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The node's name as the scheduler sees it (`hostname` in constraints); the host's name
    /// when unset.
    pub hostname: Option<String>,
    /// Seed 003's topology keys this host reports (`failure-domain.beta.kubernetes.io/zone`,
    /// `…/region`, `beta.kubernetes.io/instance-type`); os and arch come from the host.
    pub zone: Option<String>,
    pub region: Option<String>,
    pub instance_type: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub attributes: BTreeMap<String, String>,
}

impl NodeConfig {
    pub fn hostname(&self) -> String {
        self.hostname.clone().unwrap_or_else(crate::host::hostname)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteConfig {
    /// Address to listen on (e.g. `10.0.0.5:7443`); no remote listener when unset.
    pub listen: Option<std::net::SocketAddr>,
    /// PEM certificate chain the listener presents (required with `listen`).
    pub cert: Option<PathBuf>,
    /// PEM private key of that certificate (required with `listen`).
    pub key: Option<PathBuf>,
    /// Bearer tokens, one per line (`TOKEN` or `TOKEN read`); must be owned by root, mode 0600.
    pub tokens_file: PathBuf,
    /// Largest request body accepted on the remote listener.
    pub max_body_bytes: usize,
    /// Requests per second allowed per client address, on average.
    pub rate_per_sec: f64,
    /// Requests a client address may make in a burst above the average.
    pub rate_burst: u32,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            listen: None,
            cert: None,
            key: None,
            tokens_file: PathBuf::from("/etc/steward/tokens"),
            max_body_bytes: MAX_BODY,
            rate_per_sec: 50.0,
            rate_burst: 100,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Newest events kept in the journal; older ones are pruned (`since` below them is 410).
    pub retention: u64,
    /// Most bytes of event bodies the journal keeps; the oldest beyond are pruned too. Bounds
    /// the store when events come fast (a crash loop), whatever `retention` says.
    pub max_bytes: u64,
    /// How often the journal is pruned, in seconds (sooner when it is 10% over a bound).
    pub prune_secs: u64,
    /// An event stream with nothing to send sends a heartbeat line this often, in seconds.
    pub heartbeat_secs: u64,
}

/// Above this one measurement could hold the daemon's memory hostage again (issue 51).
pub const MAX_HOOK_RESPONSE_BYTES: u64 = 1 << 30;

/// Below this a handful of events would fill the journal and a follower could hardly keep up.
pub const MIN_EVENTS_MAX_BYTES: u64 = 64 << 10;

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig { retention: 100_000, max_bytes: 16 << 20, prune_secs: 60, heartbeat_secs: 15 }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            work_base_dir: PathBuf::from("/var/lib/steward/work"),
            run_base_dir: PathBuf::from("/var/lib/steward/run"),
            volume_root: crate::spec::render::default_volume_root(),
            host_ip: None,
            state_dir: PathBuf::from("/var/lib/steward/state"),
            socket: PathBuf::from("/run/steward/stewardd.sock"),
            socket_group: "steward".into(),
            allow_read_for_all: false,
            cgroup_parent: "steward".into(),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            cgroup_favor_dynmods: true,
            release_code_pages: true,
            reserved_cpu: crate::spec::model::NumberText("0".into()),
            reserved_memory: crate::spec::model::NumberText("0".into()),
            log_max_bytes: 10 * 1024 * 1024,
            log_keep: 3,
            log_check_secs: 10,
            max_instances_per_app: crate::spec::validate::MAX_INSTANCES,
            revision_history: crate::supervisor::revisions::DEFAULT_HISTORY,
            port_range_start: 31000,
            port_range_end: 32000,
            reserve_port_range: true,
            package_repository: Some("file:///usr/share/steward/repository".into()),
            fetch_cache_dir: PathBuf::from("/var/cache/steward/fetch"),
            fetch_max_extracted_bytes: crate::fetch::DEFAULT_MAX_EXTRACTED_BYTES,
            fetch_max_extracted_files: crate::fetch::DEFAULT_MAX_EXTRACTED_FILES,
            fetch_max_extraction_ratio: crate::fetch::DEFAULT_MAX_EXTRACTION_RATIO,
            docker_socket: PathBuf::from("/var/run/docker.sock"),
            numa_root: PathBuf::from("/sys/devices/system/node"),
            network_mode: NetworkModeConfig::Cnm,
            cni_bin_dir: PathBuf::from("/data/bcs/bcs-cni/bin"),
            cni_conf_dir: PathBuf::from("/data/bcs/bcs-cni/conf"),
            cni_network: None,
            node: NodeConfig::default(),
            remote: RemoteConfig::default(),
            events: EventsConfig::default(),
            services: ServicesConfig::default(),
            connections: ConnectionsConfig::default(),
            hook_max_response_bytes: crate::hooks::provider::DEFAULT_MAX_RESPONSE_BYTES,
            default_tasks_max: "15%".into(),
            runtime: RuntimeMode::Real,
            hollow: HollowConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl Config {
    /// `reserved_cpu` and `reserved_memory` as requests kept back from instances.
    pub fn reserved(&self) -> Result<crate::resources::Requests, String> {
        use crate::resources::{parse_cpu, parse_memory, Quantity};
        let amount = |key: &str, parsed: Result<Quantity, String>| match parsed {
            Ok(Quantity::Amount(n)) => Ok(n),
            Ok(Quantity::Unlimited) => Err(format!("{key}: -1 cannot be reserved (keep back an amount)")),
            Err(why) => Err(format!("{key}: {why}")),
        };
        let cpu = amount("reserved_cpu", parse_cpu(&self.reserved_cpu.0))?;
        let memory = amount("reserved_memory", parse_memory(&self.reserved_memory.0))?;
        Ok(crate::resources::Requests::of(cpu, memory))
    }

    /// Reads `path`; a missing file at the default location means the embedded defaults.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => Config::parse(&text).map_err(|message| ConfigError::Invalid { path, message }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        for (key, dir) in [
            ("work_base_dir", &config.work_base_dir),
            ("run_base_dir", &config.run_base_dir),
            ("volume_root", &config.volume_root),
            ("state_dir", &config.state_dir),
            ("socket", &config.socket),
            ("cgroup_root", &config.cgroup_root),
            ("fetch_cache_dir", &config.fetch_cache_dir),
            ("docker_socket", &config.docker_socket),
            ("numa_root", &config.numa_root),
            ("cni_bin_dir", &config.cni_bin_dir),
            ("cni_conf_dir", &config.cni_conf_dir),
        ] {
            if !dir.is_absolute() {
                return Err(format!("{key}: {} must be an absolute path", dir.display()));
            }
        }
        if config.port_range_start == 0 || config.port_range_start > config.port_range_end {
            return Err(format!(
                "port_range_start {} .. port_range_end {} is not a range of ports",
                config.port_range_start, config.port_range_end
            ));
        }
        config.reserved()?;
        config.hollow.capacity()?;
        let max = crate::spec::validate::MAX_INSTANCES;
        if !(1..=1000).contains(&config.revision_history) {
            return Err(format!("revision_history {} must be 1-1000", config.revision_history));
        }
        if !(1..=max).contains(&config.max_instances_per_app) {
            return Err(format!("max_instances_per_app {} must be 1-{max}", config.max_instances_per_app));
        }
        for (key, value) in [
            ("fetch_max_extracted_bytes", config.fetch_max_extracted_bytes),
            ("fetch_max_extracted_files", config.fetch_max_extracted_files),
            ("fetch_max_extraction_ratio", config.fetch_max_extraction_ratio),
        ] {
            if value == 0 {
                return Err(format!("{key} must be above 0 (no package could be installed)"));
            }
        }
        crate::cgroups::tasks_max(&config.default_tasks_max).map_err(|e| format!("default_tasks_max {e}"))?;
        if !(1..=MAX_HOOK_RESPONSE_BYTES).contains(&config.hook_max_response_bytes) {
            return Err(format!(
                "hook_max_response_bytes {} must be 1-{MAX_HOOK_RESPONSE_BYTES} (1 GiB)",
                config.hook_max_response_bytes
            ));
        }
        let remote = &config.remote;
        if remote.listen.is_some() && (remote.cert.is_none() || remote.key.is_none()) {
            return Err("remote.listen needs remote.cert and remote.key (the listener speaks TLS only)".into());
        }
        if !remote.tokens_file.is_absolute() {
            return Err(format!("remote.tokens_file: {} must be an absolute path", remote.tokens_file.display()));
        }
        if !(remote.rate_per_sec.is_finite() && remote.rate_per_sec > 0.0) || remote.rate_burst == 0 {
            return Err("remote.rate_per_sec and remote.rate_burst must be above 0".into());
        }
        if remote.max_body_bytes == 0 {
            return Err("remote.max_body_bytes must be above 0".into());
        }
        let c = &config.connections;
        if !(1..=3600).contains(&c.header_timeout_secs) || c.max_total == 0 || c.max_per_peer == 0 {
            return Err(
                "connections.header_timeout_secs must be 1-3600, connections.max_total and max_per_peer above 0".into(),
            );
        }
        if c.max_streams == 0 || c.max_streams_per_peer == 0 {
            return Err("connections.max_streams and connections.max_streams_per_peer must be above 0".into());
        }
        let events = &config.events;
        if events.retention == 0 || events.prune_secs == 0 || events.heartbeat_secs == 0 {
            return Err("events.retention, events.prune_secs and events.heartbeat_secs must be above 0".into());
        }
        if events.max_bytes < MIN_EVENTS_MAX_BYTES {
            return Err(format!("events.max_bytes must be at least {MIN_EVENTS_MAX_BYTES} (64 KiB)"));
        }
        let node = &config.node;
        for (key, value) in [
            ("hostname", &node.hostname),
            ("zone", &node.zone),
            ("region", &node.region),
            ("instance_type", &node.instance_type),
        ] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(format!("node.{key} must not be empty"));
            }
        }
        if let Err(e) = crate::services::dns::Names::new(&config.services.dns_domain) {
            return Err(format!("services.dns_domain {e}"));
        }
        let s = &config.services;
        if let Some(bad) = s.dns_upstream.iter().find(|u| crate::services::forward::upstream(u).is_none()) {
            return Err(format!("services.dns_upstream {bad:?} must be IP or IP:PORT"));
        }
        if s.pod_dns.is_some_and(|ip| ip.is_loopback() || ip.is_unspecified() || ip.is_multicast()) {
            let ip = s.pod_dns.expect("just seen");
            return Err(format!(
                "services.pod_dns {ip}: pods cannot reach a loopback, unspecified or multicast address"
            ));
        }
        for (key, value) in [
            ("proxy_max_connections", s.proxy_max_connections),
            ("proxy_max_connections_per_port", s.proxy_max_connections_per_port),
        ] {
            if !(1..=MAX_PROXY_CONNECTIONS).contains(&value) {
                return Err(format!("services.{key} {value} must be 1-{MAX_PROXY_CONNECTIONS}"));
            }
        }
        Ok(config)
    }

    pub fn roots(&self) -> Roots {
        Roots {
            work_base_dir: self.work_base_dir.clone(),
            run_base_dir: self.run_base_dir.clone(),
            volume_root: self.volume_root.clone(),
        }
    }

    pub fn host_ip(&self) -> IpAddr {
        self.host_ip.unwrap_or_else(crate::host::detect_ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn network_mode_and_cni_dirs_are_read_and_checked() {
        let c =
            Config::parse("network_mode = \"cni\"\ncni_conf_dir = \"/etc/cni/net.d\"\ncni_network = \"pods\"").unwrap();
        assert_eq!(c.network_mode, NetworkModeConfig::Cni);
        assert_eq!((c.cni_bin_dir.to_str(), c.cni_network.as_deref()), (Some("/data/bcs/bcs-cni/bin"), Some("pods")));
        let e = Config::parse("network_mode = \"calico\"").unwrap_err();
        assert!(e.contains("network_mode") && e.contains("cnm") && e.contains("cni"), "{e}");
        assert!(Config::parse("cni_bin_dir = \"bin\"").unwrap_err().contains("cni_bin_dir"));
    }

    #[test]
    fn a_hollow_host_has_a_positive_capacity() {
        let c = Config::parse("runtime = \"hollow\"\n[hollow]\ncpu = \"500m\"\nmemory = \"2Gi\"\n").unwrap();
        assert_eq!(c.runtime, RuntimeMode::Hollow);
        assert_eq!(c.hollow.capacity().unwrap(), crate::resources::Requests::of(0.5, 2048.0));
        let e = Config::parse("[hollow]\ncpu = \"0\"\n").unwrap_err();
        assert!(e.contains("hollow.cpu must be a positive amount"), "{e}");
        assert!(Config::parse("runtime = \"ghost\"\n").is_err());
    }

    #[test]
    fn reserves_are_quantities() {
        let c = Config::parse("reserved_cpu = \"500m\"\nreserved_memory = \"1Gi\"\n").unwrap();
        assert_eq!(c.reserved().unwrap(), crate::resources::Requests::of(0.5, 1024.0));
        let c = Config::parse("reserved_cpu = 1\nreserved_memory = 512\n").unwrap();
        assert_eq!(c.reserved().unwrap(), crate::resources::Requests::of(1.0, 512.0));
        let e = Config::parse("reserved_cpu = \"lots\"\n").unwrap_err();
        assert!(e.starts_with("reserved_cpu: \"lots\" must be a positive number of cores"), "{e}");
        let e = Config::parse("reserved_memory = \"-1\"\n").unwrap_err();
        assert!(e.contains("reserved_memory: -1 cannot be reserved"), "{e}");
    }

    #[test]
    fn node_topology_keys_are_read_and_not_empty() {
        let c = Config::parse("[node]\nzone = \"sh-a\"\nregion = \"sh\"\ninstance_type = \"c6.large\"\n").unwrap();
        let n = &c.node;
        assert_eq!(
            (n.zone.as_deref(), n.region.as_deref(), n.instance_type.as_deref()),
            (Some("sh-a"), Some("sh"), Some("c6.large"))
        );
        assert_eq!(Config::parse("[node]\nzone = \" \"\n").unwrap_err(), "node.zone must not be empty");
    }

    #[test]
    fn unknown_keys_and_relative_roots_are_refused() {
        assert!(Config::parse("work_dir = \"/x\"").unwrap_err().contains("unknown field"));
        assert!(Config::parse("run_base_dir = \"run\"").unwrap_err().contains("run_base_dir"));
    }

    #[test]
    fn extraction_limits_default_and_must_be_above_zero() {
        let c = Config::default();
        assert_eq!(
            (c.fetch_max_extracted_bytes, c.fetch_max_extracted_files, c.fetch_max_extraction_ratio),
            (10 << 30, 1_000_000, 1000)
        );
        let err = Config::parse("fetch_max_extraction_ratio = 0").unwrap_err();
        assert!(err.contains("fetch_max_extraction_ratio"), "{err}");
        assert_eq!(Config::parse("fetch_max_extracted_files = 7").unwrap().fetch_max_extracted_files, 7);
    }

    #[test]
    fn hook_max_response_bytes_defaults_to_1_mib_and_is_bounded() {
        assert_eq!(Config::default().hook_max_response_bytes, 1 << 20);
        assert_eq!(Config::parse("hook_max_response_bytes = 4096").unwrap().hook_max_response_bytes, 4096);
        for bad in ["0", "1073741825"] {
            let e = Config::parse(&format!("hook_max_response_bytes = {bad}")).unwrap_err();
            assert!(e.contains("hook_max_response_bytes") && e.contains("1 GiB"), "{e}");
        }
    }

    #[test]
    fn proxy_caps_default_and_are_bounded() {
        let s = Config::default().services;
        assert_eq!((s.proxy_max_connections, s.proxy_max_connections_per_port), (16384, 4096));
        let c = Config::parse("[services]\nproxy_max_connections = 30\nproxy_max_connections_per_port = 10\n").unwrap();
        assert_eq!((c.services.proxy_max_connections, c.services.proxy_max_connections_per_port), (30, 10));
        for bad in ["proxy_max_connections = 0", "proxy_max_connections_per_port = 16777217"] {
            let e = Config::parse(&format!("[services]\n{bad}\n")).unwrap_err();
            assert!(e.contains(&format!("services.{}", bad.split(' ').next().unwrap())), "{e}");
        }
    }

    #[test]
    fn missing_default_file_is_fine_but_missing_explicit_file_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let err = Config::load(Some(&dir.path().join("nope.toml"))).unwrap_err();
        assert!(err.to_string().contains("nope.toml"));
    }
}
