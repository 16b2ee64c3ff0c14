//! The BCS process spec (seed 000) as serde types, field names in the file's own spelling.
//!
//! Every struct is `#[serde(default)]`: a missing field takes the seed's default, and fields the
//! seed requires are checked by [`super::validate`], so one pass can name every mistake.
//! Spellings seen in real files (`KeyOrPath`, `imagePullPolicy`, `scaler`) are separate fields here
//! and folded into the canonical one by [`ProcessSpec::normalize`]; docs/spec.md lists them.

mod constraint;
mod controllers;
mod cron;
mod depends;
mod job;
pub mod pod;
mod probe;
mod schedule;
pub mod service;
mod strategy;
mod topology;

pub use constraint::*;
pub use controllers::*;
pub use cron::*;
pub use depends::*;
pub use job::*;
pub use pod::{Container, ImagePullPolicy, NetworkMode, Parameter};
pub use probe::*;
pub use schedule::*;
use serde::{Deserialize, Serialize};
pub use service::{Service, ServicePort, ServiceType, NODE_PORTS};
use std::collections::BTreeMap;
pub use strategy::*;
pub use topology::{TopologyKey, HOSTNAME_TOPOLOGY};

pub const API_VERSION: &str = "v4";
pub const KIND: &str = "process";
/// `kind` of a pod spec (seed 001).
pub const POD_KIND: &str = "pod";

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProcessSpec {
    pub api_version: String,
    pub kind: String,
    pub restart_policy: RestartPolicy,
    pub kill_policy: KillPolicy,
    pub metadata: Metadata,
    pub spec: SpecBody,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<Constraint>,
    /// How a changed spec reaches the running instances (rollouts).
    #[serde(skip_serializing_if = "UpdateStrategy::is_empty")]
    pub strategy: UpdateStrategy,
    /// Run to completion instead of being kept running (seed 003 Job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobSpec>,
    /// Run as a job at every tick of a cron rule (seed 003 CronJob).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron_job: Option<CronJobSpec>,
    /// One instance on every matching host (seed 003 DaemonSet; steward-sched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon_set: Option<DaemonSetSpec>,
    /// Instance k starts once instance k-1 is ready (seed 003 StatefulSet; steward-sched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stateful_set: Option<StatefulSetSpec>,
    /// Apps started beside this one on its hosts (seed 002's dependency pods; steward-sched).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<DependencyRef>,
    /// Affinity, anti-affinity and tolerations (seed 003 `schedule`; steward-sched).
    #[serde(skip_serializing_if = "Schedule::is_empty")]
    pub schedule: Schedule,
    /// A stable address for the app across hosts (seed 003 `services`; steward-sched).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
    /// What happens while its host is cut off from the schedulers (steward-sched; issue 43).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disconnect: Option<Disconnect>,
}

pub(crate) fn is_default_reconcile(r: &DisconnectReconcile) -> bool {
    *r == DisconnectReconcile::default()
}

impl ProcessSpec {
    /// A job or a cron job: its instances are runs that end, with ids of their own.
    pub fn runs_to_completion(&self) -> bool {
        self.job.is_some() || self.cron_job.is_some()
    }

    /// The names of its kept volumes (seed 003 Dynamic, Isolated): their data is on the host
    /// each ordinal runs on, so an ordinal is not moved off it without the operator's word.
    pub fn kept_volumes(&self) -> Vec<&str> {
        use pod::VolumeType;
        let volumes = &self.spec.template.spec.volumes;
        volumes
            .iter()
            .filter(|v| matches!(v.kind, VolumeType::Dynamic | VolumeType::Isolated))
            .map(|v| v.name.as_str())
            .collect()
    }

    /// The run parameters of a job or of each tick of a cron job.
    pub fn job_params(&self) -> JobSpec {
        self.job.clone().unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RestartPolicyKind {
    Never,
    Always,
    #[default]
    OnFailure,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RestartPolicy {
    pub policy: RestartPolicyKind,
    /// Seconds from a failure to the first restart.
    pub interval: u64,
    /// Seconds added to the delay for each further consecutive restart.
    pub backoff: u64,
    /// Restarts allowed before the instance stays Failed; 0 = unlimited.
    pub maxtimes: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct KillPolicy {
    /// Seconds between the polite stop and SIGKILL.
    pub grace_period: u64,
}

impl Default for KillPolicy {
    fn default() -> Self {
        KillPolicy { grace_period: 1 }
    }
}

pub const DEFAULT_NAMESPACE: &str = "defaultGroup";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    pub namespace: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Default for Metadata {
    fn default() -> Self {
        Metadata { name: String::new(), namespace: DEFAULT_NAMESPACE.to_string(), labels: BTreeMap::new() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SpecBody {
    /// How many instances (ids 0..instance-1).
    pub instance: u32,
    pub template: Template,
}

impl Default for SpecBody {
    fn default() -> Self {
        SpecBody { instance: 1, template: Template::default() }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Template {
    pub spec: TemplateSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TemplateSpec {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<Process>,
    /// `kind: pod` only (seed 001): the first is the main container, the rest join its network.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Container>,
    /// `kind: pod` only: how the main container is networked.
    #[serde(skip_serializing_if = "is_default")]
    pub network: NetworkMode,
    /// `kind: pod` only: docker parameters (`net` for USER networking).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<Parameter>,
    /// `kind: pod` only (seed 003): containers run to completion, in order, before the pod's
    /// containers start; each must exit 0.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub initializers: Vec<Container>,
    /// `kind: pod` only: secrets (in the pod's namespace) holding a docker config JSON under
    /// `.dockerconfigjson`: the credentials its image pulls use, by registry.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<String>,
    /// `kind: pod` only (seed 003 pod): the pod's host name, and its domain (`subdomain`),
    /// seen by every container.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subdomain: String,
    /// `kind: pod` only (seed 003 `dns`): the host's resolver (Default) or the daemon's DNS
    /// responder first (ClusterFirst, ClusterFirstWithHostNet).
    #[serde(skip_serializing_if = "is_default")]
    pub dns: pod::DnsPolicy,
    /// `kind: pod` only: the pod's resolver (its containers' /etc/resolv.conf); added to what
    /// `dns` gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<pod::DnsConfig>,
    /// `kind: pod` only (seed 003 `host`): share the host's pid and ipc namespaces.
    #[serde(skip_serializing_if = "is_default")]
    pub host: pod::HostNamespaces,
    /// Seed 003 `volumes`: storage a pod's containers share by name (`mounts`); a process
    /// instance's (Temp, Static, Dynamic, Isolated) reach its processes as `VOLUME_<NAME>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<pod::PodVolume>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Process {
    pub proc_name: String,
    pub user: String,
    pub work_path: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pid_file: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Port>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uris: Vec<Uri>,
    pub start_cmd: String,
    pub start_grace_period: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stop_cmd: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub restart_cmd: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reload_cmd: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
    /// Seed 003 probes: liveness (restart what is stuck) and readiness (Ready or not).
    #[serde(skip_serializing_if = "Probes::is_empty")]
    pub probe: Probes,
    /// Seed 003 hooks: postStart after the start, preStop before the stop signal.
    #[serde(skip_serializing_if = "Lifecycle::is_empty")]
    pub lifecycle: Lifecycle,
    /// Steps run in order before every start; each must exit 0.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub initializers: Vec<InitStep>,
    #[serde(skip_serializing_if = "is_default")]
    pub resources: Resources,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Seed 003: every key of a configmap or secret as an env var (before `env` and the items).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFrom>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretRef>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub configmaps: Vec<ConfigMapRef>,
}

/// Seed 003 `envFrom`: every key of the store `name` becomes an env var `prefix` + key (keys
/// that are no env var name are left out). `optional`: a missing store is no error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvFrom {
    #[serde(rename = "type")]
    pub kind: EnvFromType,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// Seed 003 spells a configmap `Config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum EnvFromType {
    #[default]
    #[serde(rename = "Config", alias = "ConfigMap")]
    Config,
    Secret,
}

pub const DEFAULT_USER: &str = "root";

impl Default for Process {
    fn default() -> Self {
        Process {
            proc_name: String::new(),
            user: DEFAULT_USER.to_string(),
            work_path: String::new(),
            pid_file: String::new(),
            ports: Vec::new(),
            uris: Vec::new(),
            start_cmd: String::new(),
            start_grace_period: 1,
            stop_cmd: String::new(),
            restart_cmd: String::new(),
            reload_cmd: String::new(),
            health_checks: Vec::new(),
            probe: Probes::default(),
            lifecycle: Lifecycle::default(),
            initializers: Vec::new(),
            resources: Resources::default(),
            env: Vec::new(),
            env_from: Vec::new(),
            secrets: Vec::new(),
            configmaps: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Protocol {
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "HTTP")]
    Http,
    /// TCP carrying TLS: HTTP checks and probes on the port go over HTTPS.
    #[serde(rename = "HTTPS")]
    Https,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Port {
    /// 0 = a random port from the allocator's range; otherwise the fixed port.
    /// Signed so that a negative number is reported as out of range, not as a type error.
    pub host_port: i64,
    pub name: String,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PullPolicy {
    Always,
    #[default]
    IfNotPresent,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Uri {
    pub value: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,
    /// The seed's field list spells it `imagePullPolicy`; folded into `pullPolicy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub output_dir: String,
    /// Optional hex sha256 of the downloaded file, verified before extraction.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sha256: String,
}

impl Uri {
    pub fn effective_pull_policy(&self) -> PullPolicy {
        self.pull_policy.or(self.image_pull_policy).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckType {
    #[serde(rename = "HTTP")]
    Http,
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "COMMAND")]
    Command,
    #[serde(rename = "REMOTE_HTTP")]
    RemoteHttp,
    #[serde(rename = "REMOTE_TCP")]
    RemoteTcp,
}

impl CheckType {
    /// Run by the daemon on the host (at most one per process); the others by the scheduler.
    pub fn is_local(self) -> bool {
        matches!(self, CheckType::Http | CheckType::Tcp | CheckType::Command)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HealthCheck {
    /// Required; `None` only when the file left it out.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<CheckType>,
    pub delay_seconds: u64,
    pub interval_seconds: u64,
    pub timeout_seconds: u64,
    /// Failures in a row before the instance is killed; 0 = never kill.
    pub consecutive_failures: u32,
    pub grace_period_seconds: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpCheck>,
}

/// Marathon's defaults, which the seed's template echoes (60 / 20 / 3 / 300).
impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            kind: None,
            delay_seconds: 0,
            interval_seconds: 60,
            timeout_seconds: 20,
            consecutive_failures: 3,
            grace_period_seconds: 300,
            command: None,
            http: None,
            tcp: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CommandCheck {
    pub value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Scheme {
    #[default]
    #[serde(rename = "http")]
    Http,
    #[serde(rename = "https")]
    Https,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HttpCheck {
    /// > 0 wins; otherwise `portName` names a port of the instance.
    pub port: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub port_name: String,
    pub scheme: Scheme,
    pub path: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl Default for HttpCheck {
    fn default() -> Self {
        HttpCheck {
            port: 0,
            port_name: String::new(),
            scheme: Scheme::Http,
            path: "/".to_string(),
            headers: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TcpCheck {
    pub port: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub port_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Resources {
    pub limits: Limits,
    /// What the instance is counted as using when placed and admitted (see [`Limits::request`]).
    #[serde(skip_serializing_if = "is_default")]
    pub requests: Requests,
}

/// cpu and memory as quantities (`crate::resources`): seed-000 numbers (cores, MiB) or
/// Kubernetes quantities ("100m", "128Mi", "1Gi").
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Limits {
    /// Cores, fractional allowed, or thousandths ("100m"); "-1" = unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<NumberText>,
    /// MiB (1048576 bytes) as a bare number, or bytes with a unit ("128Mi"); "-1" = unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<NumberText>,
    /// Containers only (seed 001 `gpus`, seed 003 `gpu`): how many GPUs, or "all".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<NumberText>,
    /// Tasks (processes and threads) at once, or -1 for unlimited; a limit only. Unset: the
    /// daemon's `default_tasks_max` (systemd's DefaultTasksMax; docs/spec.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<NumberText>,
}

/// The same two quantities, as requests: never unlimited (-1 is refused).
pub type Requests = Limits;

/// At most this many GPUs per container (more is surely a typo).
pub const MAX_GPUS: i64 = 64;

/// The largest tasks limit a spec may set (the kernel's largest pid_max).
pub const MAX_TASKS: i64 = 4_194_304;

impl Limits {
    /// GPUs asked for: a count, or -1 for "all" (the engine's own spelling); None: none.
    pub fn gpus(&self) -> Option<i64> {
        let text = self.gpu.as_ref()?.0.trim();
        if text.eq_ignore_ascii_case("all") {
            return Some(-1);
        }
        text.parse::<i64>().ok().filter(|n| (1..=MAX_GPUS).contains(n))
    }

    /// The tasks limit as written: None unset, Some(None) unlimited (-1), Some(Some(n)).
    pub fn tasks(&self) -> Option<Option<u64>> {
        let text = self.pids.as_ref()?.0.trim();
        match text.parse::<i64>() {
            Ok(-1) => Some(None),
            Ok(n) if (1..=MAX_TASKS).contains(&n) => Some(Some(n as u64)),
            _ => None,
        }
    }

    /// Cores of a positive cpu quantity (none, unlimited or unreadable: None).
    pub fn cpu_cores(&self) -> Option<f64> {
        self.cpu.as_ref().and_then(|t| crate::resources::parse_cpu(&t.0).ok()).and_then(|q| q.positive())
    }

    /// MiB of a positive memory quantity (none, unlimited or unreadable: None).
    pub fn memory_mib(&self) -> Option<f64> {
        self.memory.as_ref().and_then(|t| crate::resources::parse_memory(&t.0).ok()).and_then(|q| q.positive())
    }

    /// What one process or container requests: its request where given, else its limit where
    /// one is set (Kubernetes' rule), else nothing (docs/spec.md).
    pub fn request(limits: &Limits, requests: &Requests) -> crate::resources::Requests {
        let cpu = if requests.cpu.is_some() { requests.cpu_cores() } else { limits.cpu_cores() };
        let memory = if requests.memory.is_some() { requests.memory_mib() } else { limits.memory_mib() };
        crate::resources::Requests::of(cpu.unwrap_or(0.0), memory.unwrap_or(0.0))
    }
}

/// A number the seed writes as a string (`"cpu": "2"`); a bare JSON number is accepted too.
/// The text is kept as written and checked by validation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NumberText(pub String);

impl NumberText {
    pub fn as_f64(&self) -> Option<f64> {
        self.0.trim().parse::<f64>().ok().filter(|f| f.is_finite())
    }
}

impl Serialize for NumberText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for NumberText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> serde::de::Visitor<'de> for Text {
            type Value = NumberText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or a string holding a number")
            }
            fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<NumberText, D::Error> {
                d.deserialize_any(Text)
            }
            fn visit_str<E>(self, s: &str) -> Result<NumberText, E> {
                Ok(NumberText(s.to_string()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<NumberText, E> {
                Ok(NumberText(n.to_string()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<NumberText, E> {
                Ok(NumberText(n.to_string()))
            }
            fn visit_f64<E>(self, n: f64) -> Result<NumberText, E> {
                Ok(NumberText(n.to_string()))
            }
        }
        // Through the newtype hook, so the spec decoder can report a wrong type and go on.
        d.deserialize_newtype_struct(super::decode::NUMBER_TEXT, Text)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ItemType {
    #[serde(rename = "env")]
    Env,
    #[serde(rename = "file")]
    File,
}

/// One key of a secret or configmap, injected as an env var or a file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct KeyItem {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<ItemType>,
    pub data_key: String,
    /// Configmaps: the file name to use instead of `dataKey`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub data_key_alias: String,
    /// Env var name, or the file's path (relative to workPath, or absolute inside it).
    pub key_or_path: String,
    /// The seed's configmap example spells it `KeyOrPath`; folded into `keyOrPath`.
    #[serde(rename = "KeyOrPath", skip_serializing_if = "String::is_empty")]
    pub key_or_path_capitalized: String,
    /// Kubernetes only; accepted and ignored for processes.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sub_path: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// File owner; root when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecretRef {
    pub secret_name: String,
    pub items: Vec<KeyItem>,
    /// Seed 003: a missing secret (or key) is no error: its env vars are left out and its files
    /// are empty.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConfigMapRef {
    pub name: String,
    pub items: Vec<KeyItem>,
    /// As `SecretRef::optional`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// An instance's resource limits as its cgroup gets them: the sum over its processes (or a pod's
/// containers); None = unlimited (unset, -1, or any one of them unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceLimits {
    pub cpu_cores: Option<f64>,
    pub memory_mib: Option<f64>,
}

impl ProcessSpec {
    /// The limits each instance of this spec runs under.
    pub fn instance_limits(&self) -> InstanceLimits {
        let t = &self.spec.template.spec;
        let each: Vec<&Limits> = if self.is_pod() {
            t.containers.iter().map(|c| &c.resources.limits).collect()
        } else {
            t.processes.iter().map(|p| &p.resources.limits).collect()
        };
        let sum = |f: fn(&Limits) -> Option<f64>| each.iter().map(|l| f(l)).sum::<Option<f64>>();
        InstanceLimits { cpu_cores: sum(Limits::cpu_cores), memory_mib: sum(Limits::memory_mib) }
    }

    /// What one instance of this spec requests of its host: the sum over its processes (or
    /// containers) of each one's request, or its limit where it names no request.
    /// The labels its instances carry where other apps' affinity looks: `metadata.labels`
    /// with `schedule.labels` (seed 003's pod labels) over them.
    pub fn instance_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.metadata.labels.clone();
        labels.extend(self.schedule.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        labels
    }

    pub fn instance_requests(&self) -> crate::resources::Requests {
        let t = &self.spec.template.spec;
        let each: Vec<(&Limits, &Requests)> = if self.is_pod() {
            t.containers.iter().map(|c| (&c.resources.limits, &c.resources.requests)).collect()
        } else {
            t.processes.iter().map(|p| (&p.resources.limits, &p.resources.requests)).collect()
        };
        each.into_iter().fold(Default::default(), |sum, (l, r)| sum.plus(Limits::request(l, r)))
    }

    /// A pod of containers (seed 001) rather than processes.
    pub fn is_pod(&self) -> bool {
        self.kind == POD_KIND
    }

    /// A pod whose containers ask the daemon's responder (seed 003 `dns` ClusterFirst): it runs
    /// only on a host with `[services] pod_dns`.
    pub fn needs_pod_dns(&self) -> bool {
        let t = &self.spec.template.spec;
        self.is_pod() && t.dns.cluster_first(t.network)
    }

    /// A pod on a CNI network (the daemon in CNI mode, BRIDGE or USER): its ports are its own
    /// address's, nothing is published (seed 001: random ports are CNM's).
    pub fn on_cni(&self, cni_mode: bool) -> bool {
        cni_mode && self.is_pod() && matches!(self.spec.template.spec.network, NetworkMode::Bridge | NetworkMode::User)
    }

    /// A CNI pod's ports (see [`ProcessSpec::on_cni`]): each name with its container port.
    pub fn cni_ports(&self) -> BTreeMap<String, u16> {
        let ports = self.spec.template.spec.containers.iter().flat_map(|c| &c.ports);
        ports.map(|p| (p.name.clone(), u16::try_from(p.container_port).unwrap_or(0))).collect()
    }

    /// The host ports every instance needs, by name: 0 asks the allocator for a random one.
    pub fn port_wants(&self) -> Vec<crate::ports::Want> {
        let t = &self.spec.template.spec;
        let want = |name: &str, port: i64| crate::ports::Want {
            name: name.to_string(),
            port: u16::try_from(port).unwrap_or(0),
        };
        t.processes
            .iter()
            .flat_map(|p| &p.ports)
            .map(|p| want(&p.name, p.host_port))
            .chain(t.containers.iter().flat_map(|c| &c.ports).map(|p| want(&p.name, p.host_port)))
            .collect()
    }

    /// A port for each of the spec's port names (31000, 31001, ... in declaration order), for
    /// rendering an instance whose ports are not allocated (validation, path checks, warnings).
    pub fn placeholder_ports(&self) -> BTreeMap<String, u16> {
        self.port_wants().into_iter().enumerate().map(|(i, w)| (w.name, 31000u16.saturating_add(i as u16))).collect()
    }

    /// How many random (hostPort 0) ports one instance needs: a process's or a pod's alike.
    pub fn random_ports(&self) -> usize {
        self.port_wants().iter().filter(|w| w.port == 0).count()
    }

    /// Folds the tolerated alternative spellings into their canonical fields, returning a
    /// message for each field where both spellings disagree.
    pub fn normalize(&mut self) -> Vec<super::error::SpecError> {
        use super::error::{Path, SpecError};
        let mut conflicts = Vec::new();
        // A daemon set updates with unavailable 1 and no surge (DESIGN § 7): its hosts have room
        // for their one instance only.
        if self.daemon_set.is_some() {
            self.strategy.max_unavailable.get_or_insert(CountOrPercent::Count(1));
            self.strategy.max_surge.get_or_insert(CountOrPercent::Count(0));
        }
        let procs = Path::root().field("spec").field("template").field("spec").field("processes");
        for (pi, p) in self.spec.template.spec.processes.iter_mut().enumerate() {
            let pp = procs.index(pi);
            for (ui, u) in p.uris.iter_mut().enumerate() {
                if let Some(alt) = u.image_pull_policy.take() {
                    match u.pull_policy {
                        Some(cur) if cur != alt => conflicts.push(SpecError::new(
                            pp.field("uris").index(ui).to_string(),
                            format!("pullPolicy {cur:?} and imagePullPolicy {alt:?} disagree; give one"),
                        )),
                        _ => u.pull_policy = Some(alt),
                    }
                }
            }
            for (ri, r) in p.secrets.iter_mut().enumerate() {
                fold_key_or_path(&mut r.items, &pp.field("secrets").index(ri), &mut conflicts);
            }
            for (ri, r) in p.configmaps.iter_mut().enumerate() {
                fold_key_or_path(&mut r.items, &pp.field("configmaps").index(ri), &mut conflicts);
            }
        }
        let containers = Path::root().field("spec").field("template").field("spec").field("containers");
        for (ci, c) in self.spec.template.spec.containers.iter_mut().enumerate() {
            let cp = containers.index(ci);
            for (ri, r) in c.secrets.iter_mut().enumerate() {
                fold_key_or_path(&mut r.items, &cp.field("secrets").index(ri), &mut conflicts);
            }
            for (ri, r) in c.configmaps.iter_mut().enumerate() {
                fold_key_or_path(&mut r.items, &cp.field("configmaps").index(ri), &mut conflicts);
            }
        }
        if let Some(c) = &mut self.constraint {
            let base = Path::root().field("constraint").field("intersectionItem");
            for (ii, item) in c.intersection_item.iter_mut().enumerate() {
                for (ui, u) in item.union_data.iter_mut().enumerate() {
                    if let Some(alt) = u.scaler.take() {
                        match &u.scalar {
                            Some(cur) if *cur != alt => conflicts.push(SpecError::new(
                                base.index(ii).field("unionData").index(ui).to_string(),
                                "scalar and scaler disagree; give one",
                            )),
                            _ => u.scalar = Some(alt),
                        }
                    }
                }
            }
        }
        conflicts
    }
}

fn fold_key_or_path(items: &mut [KeyItem], at: &super::error::Path, conflicts: &mut Vec<super::error::SpecError>) {
    for (i, item) in items.iter_mut().enumerate() {
        let alt = std::mem::take(&mut item.key_or_path_capitalized);
        if alt.is_empty() {
            continue;
        }
        if item.key_or_path.is_empty() || item.key_or_path == alt {
            item.key_or_path = alt;
        } else {
            conflicts.push(super::error::SpecError::new(
                at.field("items").index(i).to_string(),
                "keyOrPath and KeyOrPath disagree; give one",
            ));
        }
    }
}
