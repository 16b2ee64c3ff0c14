//! A pod's `template.spec` (seed 001): its containers and network, as serde types. A pod spec
//! shares everything else with the process spec (metadata, restartPolicy, killPolicy, instance
//! count); only `template.spec` differs: `containers` (and the pod's `network`) instead of
//! `processes`.

use super::{is_default, ConfigMapRef, EnvVar, HealthCheck, Lifecycle, Limits, Probes, Protocol, SecretRef};
use serde::{Deserialize, Serialize};

/// The variables seed 001's `$` operator may copy into another env var (no nesting).
pub const DOLLAR_VARS: [&str; 4] = ["HOST", "BCS_NODE_ADDR", "BCS_POD_ID", "BCS_CNI_NAME"];
/// Seed 001's network types (upper case, as Mesos spells them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum NetworkMode {
    #[serde(rename = "HOST")]
    Host,
    #[default]
    #[serde(rename = "BRIDGE")]
    Bridge,
    #[serde(rename = "NONE")]
    None,
    /// A user-defined network named by the `net` parameter.
    #[serde(rename = "USER")]
    User,
}

/// A docker parameter (seed 001: USER mode takes `--net` from here).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Parameter {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    /// Unique in the pod; part of the docker container's name.
    pub name: String,
    pub image: String,
    /// Seed 003: Always (its default), IfNotPresent or Never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Seed 003: a terminal for the container.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// Seed 003: the working directory (absolute), instead of the image's.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    #[serde(skip_serializing_if = "is_default")]
    pub command: ContainerCommand,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Seed 003: every key of a configmap or secret as an env var.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<super::EnvFrom>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    #[serde(skip_serializing_if = "is_default")]
    pub resources: ContainerResources,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
    /// Seed 003 probes (EXEC runs inside the container).
    #[serde(skip_serializing_if = "Probes::is_empty")]
    pub probe: Probes,
    #[serde(skip_serializing_if = "Lifecycle::is_empty")]
    pub lifecycle: Lifecycle,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretRef>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub configmaps: Vec<ConfigMapRef>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// Seed 003: where the pod's `volumes` appear in this container.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<VolumeMount>,
}

/// A pod's resolver: name servers (IP addresses), search domains, resolver options.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DnsConfig {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// Seed 003 pod `dns`: whose resolver the pod's containers ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DnsPolicy {
    /// The host's (Docker's copy of the host's resolv.conf): seed 003's default.
    #[default]
    Default,
    /// The daemon's DNS responder (`[services] pod_dns`), searching `NS.<zone>` and `<zone>`;
    /// it forwards every other name to the host's resolvers. A HOST pod takes Default.
    ClusterFirst,
    /// ClusterFirst, for a HOST pod too.
    ClusterFirstWithHostNet,
}

impl DnsPolicy {
    /// Whether a pod networked as `network` asks the responder (Kubernetes' rule: a plain
    /// ClusterFirst HOST pod keeps the host's resolver).
    pub fn cluster_first(self, network: NetworkMode) -> bool {
        match self {
            DnsPolicy::Default => false,
            DnsPolicy::ClusterFirst => network != NetworkMode::Host,
            DnsPolicy::ClusterFirstWithHostNet => true,
        }
    }
}

/// Seed 003 `host`: the host's namespaces a pod shares (`network` is seed 001's HOST mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HostNamespaces {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pid: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ipc: bool,
}

/// When a start pulls its container's image (seed 003 `imagePullPolicy`, default Always).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ImagePullPolicy {
    /// Every start: a changed tag is picked up. Not written, an image made on the host (no
    /// registry digest) is left alone, and a failed pull falls back to the image on the host.
    #[default]
    Always,
    /// Only when the host lacks it.
    IfNotPresent,
    /// Never: the image must be on the host.
    Never,
}

/// Seed 001: `value` replaces the image's entrypoint; `arguments` follow it (or, without a
/// value, are the arguments of the image's entrypoint).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerCommand {
    pub value: String,
    pub arguments: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    pub name: String,
    /// The port inside the container (BRIDGE / USER); with HOST networking the host port is it.
    pub container_port: i64,
    /// 0 = a random port from the shared allocator (env `PORT_<name>`).
    pub host_port: i64,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerResources {
    /// `cpu` in cores, `memory` in MiB, as for processes.
    pub limits: Limits,
    /// As for processes: what the container is counted as using when placed and admitted.
    #[serde(skip_serializing_if = "is_default")]
    pub requests: super::Requests,
    /// Pin to `ceil(cpu)` cpus of one NUMA node (seed 001's rules).
    pub cpu_set: bool,
    /// Also cap cpu time at `cpu` cores (cfs quota), not only weight it (shares).
    pub cpu_quota: bool,
    /// MiB of memory + swap; -1 unlimited; less than memory means unlimited (seed 001).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_swap: Option<i64>,
    /// 0-100; 0 disables swap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swappiness: Option<i64>,
    #[serde(skip_serializing_if = "is_default")]
    pub blkio: Blkio,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Blkio {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_bps: Vec<DeviceRate>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub write_bps: Vec<DeviceRate>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_iops: Vec<DeviceRate>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub write_iops: Vec<DeviceRate>,
}

/// `path: /dev/sda, rate: "10mb"` (bps: kb, mb, gb or bytes; iops: a plain number).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DeviceRate {
    pub path: String,
    pub rate: String,
}

/// A host directory (below the daemon's roots) mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Volume {
    pub host_path: String,
    pub mount_path: String,
    pub read_only: bool,
}

/// Seed 003 `volumes`: storage a pod's containers share by name (`mounts`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodVolume {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: VolumeType,
    #[serde(skip_serializing_if = "is_default")]
    pub source: VolumeSource,
    #[serde(skip_serializing_if = "is_default")]
    pub storage: VolumeStorage,
}

/// Seed 003's volume types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum VolumeType {
    /// An empty directory per pod (tmpfs with `medium: Memory`), removed with the instance.
    #[default]
    Temp,
    /// A configmap's keys as files.
    #[serde(alias = "ConfigMap")]
    Config,
    /// A secret's keys as files.
    Secret,
    /// A host directory: `source.target` an absolute path, or the name of one Steward keeps
    /// per namespace (`<volume_root>/<namespace>/.static/<name>`); shared by every instance
    /// that mounts it, never removed by Steward.
    Static,
    /// A directory per instance ordinal below the daemon's `volume_root`, kept across restarts,
    /// rollouts and the app's delete.
    Dynamic,
    /// Dynamic in a stateful set (one directory per ordinal, as every Dynamic one is).
    Isolated,
}

/// `source` of every type, as one block: each type reads its own fields (seed 003).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeSource {
    /// Temp: "" (the disk below the instance's run directory) or `Memory` (tmpfs).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub medium: String,
    /// Config, Secret: the store's name in the pod's namespace. Static: the host directory (an
    /// absolute path), or a named one's name (empty: the volume's name).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub target: String,
    /// Config, Secret: the keys to write, each at its path; none: every key, named by it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<VolumeItem>,
    /// Config, Secret: the files' mode where an item gives none, octal text ("0644").
    #[serde(skip_serializing_if = "String::is_empty")]
    pub default: String,
    /// Config, Secret: a missing store (or key) is no error; the volume is empty (or lacks it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Dynamic, Isolated: the storage class and access mode.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub class: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// Static: mounted read-only in every container.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub readonly: bool,
    /// Static (Steward's): who owns the directory when Steward makes it, a host user name or a
    /// numeric `uid[:gid]`; empty: root. An existing directory is left as it is.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// Static (Steward's): the mode of the directory when Steward makes it, octal text
    /// ("0750"); empty: 0755.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub dir_mode: String,
    /// Dynamic, Isolated (Steward's, Kubernetes' StatefulSet `persistentVolumeClaimRetentionPolicy`
    /// words): `Retain` (empty) keeps the ordinal's volume when its app is deleted, for
    /// `steward volume rm`; `Delete` removes it with the app.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub when_deleted: String,
    /// Dynamic, Isolated: as `whenDeleted`, for an ordinal removed by scaling in (an apply or a
    /// rollout to fewer replicas); not for an instance an operator deletes by its id.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub when_scaled: String,
}

/// `whenDeleted`'s and `whenScaled`'s words.
pub const RETAIN: &str = "Retain";
pub const DELETE: &str = "Delete";

/// The seed's default mode of a configmap's or secret's files.
pub const DEFAULT_FILE_MODE: u32 = 0o644;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeItem {
    pub key: String,
    /// Relative to the volume's root; no `..`.
    pub path: String,
    /// Octal text ("0400"); empty: the volume's `default`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
}

/// Seed 003 `storage`: `limit` caps a Temp volume (a Memory one's tmpfs size); `request` is
/// read and not placed by (Steward places by cpu and memory).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeStorage {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub request: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub limit: String,
}

/// Seed 003 `mounts`: volume `name` at `path` in the container; `subpath` mounts a part of it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeMount {
    pub name: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub readonly: bool,
    pub path: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subpath: String,
}

/// An octal file mode as the seed writes it ("0644", "644", "0o600"): 0-0777.
pub fn parse_file_mode(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let digits = t.strip_prefix("0o").unwrap_or(t);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o777 && !digits.is_empty() => Ok(m),
        _ => Err(format!("{text:?} is not a file mode (octal, 0000-0777, e.g. \"0644\")")),
    }
}

/// `10mb`, `512kb`, `1gb`, `4096` (bytes) for bps; a plain number for iops.
pub fn parse_rate(text: &str, bytes: bool) -> Result<i64, String> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t.as_str(), ""),
    };
    let n: i64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a rate (a number{})", if bytes { " with kb, mb or gb" } else { "" }))?;
    let scale = match (unit, bytes) {
        ("", _) => 1,
        ("kb" | "k", true) => 1 << 10,
        ("mb" | "m", true) => 1 << 20,
        ("gb" | "g", true) => 1 << 30,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?}{}",
                if bytes { " (kb, mb or gb)" } else { " (iops take no unit)" }
            ))
        }
    };
    if n <= 0 {
        return Err(format!("{text:?} must be positive"));
    }
    n.checked_mul(scale).ok_or_else(|| format!("{text:?} is too large"))
}
