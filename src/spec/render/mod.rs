//! Rendering one instance of a validated spec: every `${variable}` resolved, every path
//! checked to lie inside the configured roots, ports and checks resolved to numbers.
//! This is what the supervisor runs.

pub mod pod;
pub mod probe;

use super::error::{Errors, Path, SpecErrors};
use super::model::*;
use super::template::{Template, Var};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, PathBuf};

/// Where instances may keep files: `${work_base_dir}` and `${run_base_dir}`; and where their
/// kept (Dynamic, Isolated) volumes live, one directory per app, volume and ordinal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roots {
    pub work_base_dir: PathBuf,
    pub run_base_dir: PathBuf,
    #[serde(default = "default_volume_root")]
    pub volume_root: PathBuf,
}

/// The daemon's default `volume_root`.
pub fn default_volume_root() -> PathBuf {
    PathBuf::from("/var/lib/steward/volumes")
}

/// What an instance's rendering depends on besides its spec.
#[derive(Debug, Clone)]
pub struct RenderContext<'a> {
    pub roots: &'a Roots,
    pub host_ip: String,
    /// Ports allocated for `hostPort: 0`, by port name.
    pub allocated_ports: &'a BTreeMap<String, u16>,
}

/// `namespace/name/index`: the identity of one instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InstanceId {
    pub namespace: String,
    pub name: String,
    pub index: u32,
}

impl std::fmt::Display for InstanceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.name, self.index)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedInstance {
    pub id: InstanceId,
    pub labels: BTreeMap<String, String>,
    pub restart_policy: RestartPolicy,
    pub kill_grace_period_secs: u64,
    /// `${run_base_dir}/${namespace}.${processname}.${instanceid}`: logs and runtime files.
    pub run_dir: PathBuf,
    pub processes: Vec<RenderedProcess>,
    /// `kind: pod`: the containers to run (and no processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<pod::RenderedPod>,
    /// A process instance's volumes (a pod's are its `pod.volumes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<pod::RenderedVolume>,
}

impl RenderedInstance {
    /// The instance's volumes, a pod's or its processes'.
    pub fn volumes(&self) -> &[pod::RenderedVolume] {
        match &self.pod {
            Some(pod) => &pod.volumes,
            None => &self.volumes,
        }
    }
}

/// The env var a process finds volume `name` at: `VOLUME_` and the name in capitals, '-' as
/// '_' (names are lowercase letters, digits and '-': no two volumes share one).
pub fn volume_env_name(name: &str) -> String {
    format!("VOLUME_{}", name.to_ascii_uppercase().replace('-', "_"))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedProcess {
    pub proc_name: String,
    pub user: String,
    pub work_path: PathBuf,
    pub pid_file: Option<PathBuf>,
    pub start_cmd: String,
    pub start_grace_period_secs: u64,
    pub stop_cmd: Option<String>,
    pub restart_cmd: Option<String>,
    pub reload_cmd: Option<String>,
    pub ports: Vec<RenderedPort>,
    pub uris: Vec<RenderedUri>,
    pub env: Vec<EnvVar>,
    pub health_checks: Vec<RenderedCheck>,
    /// Seed 003 probes and hooks.
    #[serde(default, skip_serializing_if = "probe::RenderedLifecycle::is_empty")]
    pub lifecycle: probe::RenderedLifecycle,
    /// Run in order before every start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_steps: Vec<probe::RenderedInitStep>,
    pub limits: RenderedLimits,
    pub injections: Vec<Injection>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedPort {
    pub name: String,
    pub host_port: u16,
    pub protocol: Protocol,
    /// Allocated by Steward (`hostPort: 0` in the spec).
    pub random: bool,
}

/// A password that never shows in JSON output, logs or `Debug`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Redacted(pub String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

impl Serialize for Redacted {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("***")
    }
}

impl<'de> Deserialize<'de> for Redacted {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Redacted)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedUri {
    /// An absolute URL, or a `/path` in the configured package repository.
    pub value: String,
    pub user: Option<String>,
    pub password: Option<Redacted>,
    pub pull_policy: PullPolicy,
    pub output_dir: PathBuf,
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedCheck {
    #[serde(rename = "type")]
    pub kind: CheckType,
    pub delay_seconds: u64,
    pub interval_seconds: u64,
    pub timeout_seconds: u64,
    pub consecutive_failures: u32,
    pub grace_period_seconds: u64,
    pub probe: Probe,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Probe {
    Http {
        scheme: Scheme,
        port: u16,
        path: String,
        headers: BTreeMap<String, String>,
        /// The request's Host header (seed 003 `host`); None: the address probed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
    },
    Tcp {
        port: u16,
    },
    Command {
        command: String,
    },
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedLimits {
    /// None = unlimited.
    pub cpu_cores: Option<f64>,
    pub memory_mb: Option<f64>,
    /// `limits.pids` as written: None unset (the daemon's default), Some(None) unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Option<u64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InjectionSource {
    Secret,
    ConfigMap,
}

/// One secret or configmap key to inject into a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Injection {
    pub source: InjectionSource,
    /// The secret's or configmap's name in the instance's namespace.
    pub store: String,
    pub data_key: String,
    pub target: InjectionTarget,
    /// A missing store or key is no error (seed 003 `optional`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

impl Injection {
    /// Key `item.dataKey` of store `store` into `target`.
    pub fn of_item(
        source: InjectionSource,
        store: &str,
        item: &KeyItem,
        target: InjectionTarget,
        optional: bool,
    ) -> Injection {
        Injection { source, store: store.to_string(), data_key: item.data_key.clone(), target, optional }
    }

    /// The injections of `envFrom` entries: every key of each store, with its prefix.
    pub fn from_env_from(list: &[crate::spec::model::EnvFrom]) -> Vec<Injection> {
        list.iter()
            .map(|e| Injection {
                source: match e.kind {
                    crate::spec::model::EnvFromType::Config => InjectionSource::ConfigMap,
                    crate::spec::model::EnvFromType::Secret => InjectionSource::Secret,
                },
                store: e.name.clone(),
                data_key: String::new(),
                target: InjectionTarget::AllEnv { prefix: e.prefix.clone() },
                optional: e.optional,
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum InjectionTarget {
    Env {
        name: String,
    },
    File {
        path: PathBuf,
        mode: u32,
        owner: String,
    },
    /// Every key of the store, as `prefix` + key (`envFrom`).
    AllEnv {
        prefix: String,
    },
}

/// Renders instance `index` of `spec` (which must have passed validation).
pub fn render(spec: &ProcessSpec, index: u32, ctx: &RenderContext) -> Result<RenderedInstance, SpecErrors> {
    // A job's runs take ids of their own, one per run, whatever `spec.instance` says.
    if index >= spec.spec.instance && !spec.runs_to_completion() {
        let ids = match spec.spec.instance {
            0 => "it has none".to_string(),
            1 => "its only id is 0".to_string(),
            n => format!("ids 0 to {}", n - 1),
        };
        let message = format!("instance {index} does not exist ({ids})");
        return Err(SpecErrors(vec![super::SpecError::new("spec.instance", message)]));
    }
    render_any_index(spec, index, ctx)
}

/// [`render`] without the check that `index` is below `spec.instance`: validation uses it to
/// check paths even when the instance count itself is wrong.
pub(crate) fn render_any_index(
    spec: &ProcessSpec,
    index: u32,
    ctx: &RenderContext,
) -> Result<RenderedInstance, SpecErrors> {
    let mut errors = Errors::default();
    let id = InstanceId { namespace: spec.metadata.namespace.clone(), name: spec.metadata.name.clone(), index };
    let run_dir = ctx.roots.run_base_dir.join(format!("{}.{}.{}", id.namespace, id.name, id.index));

    // Ports first: every process may name any port of the instance.
    let procs_path = Path::root().field("spec").field("template").field("spec").field("processes");
    let mut port_values = BTreeMap::new();
    let mut ports_per_process = Vec::new();
    for (pi, p) in spec.spec.template.spec.processes.iter().enumerate() {
        let mut ports = Vec::with_capacity(p.ports.len());
        for (i, port) in p.ports.iter().enumerate() {
            let at = procs_path.index(pi).field("ports").index(i);
            if let Some(n) = host_port(&port.name, port.host_port, ctx, &at, &mut errors) {
                port_values.insert(port.name.clone(), n);
                ports.push(RenderedPort {
                    name: port.name.clone(),
                    host_port: n,
                    protocol: port.protocol,
                    random: port.host_port == 0,
                });
            }
        }
        ports_per_process.push(ports);
    }

    // Exact: a few hundred bytes each, kept per instance for its whole life (a growing Vec
    // would hold room for four).
    let mut processes = Vec::with_capacity(spec.spec.template.spec.processes.len());
    for ((pi, p), ports) in spec.spec.template.spec.processes.iter().enumerate().zip(ports_per_process) {
        let at = procs_path.index(pi);
        let scope = Scope { spec, index, ctx, ports: &port_values, work_path: String::new(), pid_file: String::new() };
        if let Some(mut rp) = render_process(p, &at, scope, &run_dir, ports, &mut errors) {
            // A foreground job run records its end (a forking one's main process is another).
            if spec.runs_to_completion() && rp.pid_file.is_none() {
                rp.start_cmd = job_wrapper(&rp.start_cmd, &job_exit_file(&rp.work_path, &rp.proc_name));
            }
            processes.push(rp);
        }
    }
    let pod = spec.is_pod().then(|| pod::render_pod(spec, &id, ctx, &run_dir, &mut errors));
    let volumes = match spec.is_pod() {
        true => Vec::new(),
        false => process_volumes(spec, &id, ctx, &run_dir, &mut processes),
    };
    let instance = RenderedInstance {
        pod,
        volumes,
        id,
        labels: spec.metadata.labels.clone(),
        restart_policy: spec.restart_policy.clone(),
        kill_grace_period_secs: spec.kill_policy.grace_period,
        run_dir,
        processes,
    };
    errors.finish(instance)
}

/// A process instance's volumes, each told to every process as `VOLUME_<NAME>` (its host
/// directory; after the spec's own env, which cannot take the name from it). A Static volume
/// Steward makes is the first process's user's unless `source.owner` says otherwise.
fn process_volumes(
    spec: &ProcessSpec,
    id: &InstanceId,
    ctx: &RenderContext,
    run_dir: &std::path::Path,
    processes: &mut [RenderedProcess],
) -> Vec<pod::RenderedVolume> {
    let t = &spec.spec.template.spec;
    if t.volumes.is_empty() {
        return Vec::new();
    }
    let owner = t.processes.first().map(|p| p.user.as_str()).unwrap_or(DEFAULT_USER);
    let volumes = pod::render_volumes(&t.volumes, run_dir, &ctx.roots.volume_root, id, owner);
    for p in processes {
        p.env.retain(|e| !volumes.iter().any(|v| volume_env_name(&v.name) == e.name));
        for v in &volumes {
            p.env.push(EnvVar { name: volume_env_name(&v.name), value: v.host_path.display().to_string() });
        }
    }
    volumes
}

/// The values variables take while rendering one process.
struct Scope<'a> {
    spec: &'a ProcessSpec,
    index: u32,
    ctx: &'a RenderContext<'a>,
    ports: &'a BTreeMap<String, u16>,
    work_path: String,
    pid_file: String,
}

impl Scope<'_> {
    fn value(&self, v: &Var) -> String {
        match v {
            Var::Namespace => self.spec.metadata.namespace.clone(),
            Var::ProcessName => self.spec.metadata.name.clone(),
            Var::InstanceId => self.index.to_string(),
            Var::HostIp => self.ctx.host_ip.clone(),
            Var::Port(name) => self.ports.get(name).map(u16::to_string).unwrap_or_default(),
            Var::WorkBaseDir => self.ctx.roots.work_base_dir.display().to_string(),
            Var::RunBaseDir => self.ctx.roots.run_base_dir.display().to_string(),
            Var::WorkPath => self.work_path.clone(),
            Var::PidFile => self.pid_file.clone(),
        }
    }

    fn render(&self, text: &str) -> String {
        // Validation has parsed every templated field already.
        match Template::parse(text) {
            Ok(t) => t.render(|v| self.value(v)),
            Err(_) => text.to_string(),
        }
    }
}

fn render_process(
    p: &Process,
    at: &Path,
    mut scope: Scope,
    run_dir: &std::path::Path,
    ports: Vec<RenderedPort>,
    errors: &mut Errors,
) -> Option<RenderedProcess> {
    let roots = [&scope.ctx.roots.work_base_dir, &scope.ctx.roots.run_base_dir];
    let roots_text =
        format!("below {} or {}", scope.ctx.roots.work_base_dir.display(), scope.ctx.roots.run_base_dir.display());
    // Render in dependency order: workPath, then pidFile (may use workPath), then the rest.
    let work_path_text = scope.render(&p.work_path);
    let (work_path, work_path_ok) = match confine(&work_path_text, None, &roots) {
        Ok(path) => (path, true),
        Err(why) => {
            errors.add(&at.field("workPath"), format!("{work_path_text:?} {why}; it must lie {roots_text}"));
            // Go on with a stand-in below the work root, so the other paths are checked too.
            (scope.ctx.roots.work_base_dir.join("workPath"), false)
        }
    };
    scope.work_path = work_path.display().to_string();
    let pid_file = if p.pid_file.is_empty() {
        None
    } else {
        let text = scope.render(&p.pid_file);
        match confine(&text, Some(&work_path), &roots) {
            Ok(path) => Some(path),
            Err(why) => {
                errors.add(&at.field("pidFile"), format!("{text:?} {why}; it must lie {roots_text}"));
                None
            }
        }
    };
    scope.pid_file = pid_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let optional = |s: &str| (!s.is_empty()).then(|| scope.render(s));

    let mut uris = Vec::with_capacity(p.uris.len());
    for (i, u) in p.uris.iter().enumerate() {
        let text = if u.output_dir.is_empty() { scope.work_path.clone() } else { scope.render(&u.output_dir) };
        match confine(&text, Some(&work_path), &roots) {
            Ok(output_dir) => uris.push(RenderedUri {
                value: scope.render(&u.value),
                user: (!u.user.is_empty()).then(|| u.user.clone()),
                password: (!u.pwd.is_empty()).then(|| Redacted(u.pwd.clone())),
                pull_policy: u.effective_pull_policy(),
                output_dir,
                sha256: (!u.sha256.is_empty()).then(|| u.sha256.to_ascii_lowercase()),
            }),
            Err(why) => errors.add(
                &at.field("uris").index(i).field("outputDir"),
                format!("{text:?} {why}; it must lie {roots_text}"),
            ),
        }
    }

    let port_of = |port: i64, name: &str| -> u16 {
        if port > 0 {
            u16::try_from(port).unwrap_or_default()
        } else {
            scope.ports.get(name).copied().unwrap_or_default()
        }
    };
    let mut health_checks = render_checks(&p.health_checks, &port_of, &|t: &str| scope.render(t));
    let mut lifecycle = probe::render_lifecycle(&p.probe, &p.lifecycle, &port_of, &|t: &str| scope.render(t));
    let https: Vec<u16> =
        p.ports.iter().filter(|q| q.protocol == Protocol::Https).map(|q| port_of(q.host_port, &q.name)).collect();
    probe::tls_on_https_ports(&mut health_checks, &mut lifecycle, &https);
    let init_steps = probe::render_init_steps(&p.initializers, &|t: &str| scope.render(t));

    // Secret and configmap files go into the instance's own directories only.
    let own_dirs = [&work_path, &run_dir.to_path_buf()];
    let own_text = format!("below the instance's {} or {}", work_path.display(), run_dir.display());
    let mut injections = Injection::from_env_from(&p.env_from);
    let sources = p
        .secrets
        .iter()
        .enumerate()
        .map(|(i, s)| (InjectionSource::Secret, &s.secret_name, &s.items, s.optional, at.field("secrets").index(i)))
        .chain(p.configmaps.iter().enumerate().map(|(i, c)| {
            (InjectionSource::ConfigMap, &c.name, &c.items, c.optional, at.field("configmaps").index(i))
        }));
    for (source, store, items, optional, sp) in sources {
        for (ii, item) in items.iter().enumerate() {
            let target = match item.kind {
                Some(ItemType::Env) => InjectionTarget::Env { name: item.key_or_path.clone() },
                Some(ItemType::File) => {
                    let key_or_path = scope.render(&item.key_or_path);
                    let alias = scope.render(&item.data_key_alias);
                    let ip = sp.field("items").index(ii);
                    let alias_escapes = alias.starts_with('/') || alias.split('/').any(|c| c == "..");
                    if source == InjectionSource::ConfigMap && alias_escapes {
                        errors.add(
                            &ip.field("dataKeyAlias"),
                            format!("{alias:?} must be a relative name without '..' (it is joined to keyOrPath)"),
                        );
                        continue;
                    }
                    let rel = if source == InjectionSource::ConfigMap && !alias.is_empty() {
                        // seed 000: the alias names the file (and may add directories) under keyOrPath.
                        format!("{}/{alias}", key_or_path.trim_end_matches('/'))
                    } else {
                        key_or_path
                    };
                    match confine(&rel, Some(&work_path), &own_dirs) {
                        Ok(path) => InjectionTarget::File {
                            path,
                            mode: file_mode(source, item.read_only),
                            owner: if item.user.is_empty() { DEFAULT_USER.to_string() } else { item.user.clone() },
                        },
                        Err(why) => {
                            errors.add(&ip.field("keyOrPath"), format!("{rel:?} {why}; it must lie {own_text}"));
                            continue;
                        }
                    }
                }
                None => continue,
            };
            injections.push(Injection::of_item(source, store, item, target, optional));
        }
    }

    if !work_path_ok {
        return None;
    }
    injections.shrink_to_fit(); // kept for the instance's life
    let env = port_env(&ports)
        .chain(p.env.iter().map(|e| EnvVar { name: e.name.clone(), value: scope.render(&e.value) }))
        .collect();
    Some(RenderedProcess {
        proc_name: p.proc_name.clone(),
        user: p.user.clone(),
        start_cmd: scope.render(&p.start_cmd),
        start_grace_period_secs: p.start_grace_period,
        stop_cmd: optional(&p.stop_cmd),
        restart_cmd: optional(&p.restart_cmd),
        reload_cmd: optional(&p.reload_cmd),
        ports,
        uris,
        env,
        health_checks,
        lifecycle,
        init_steps,
        limits: RenderedLimits {
            cpu_cores: p.resources.limits.cpu_cores(),
            memory_mb: p.resources.limits.memory_mib(),
            tasks: p.resources.limits.tasks(),
        },
        injections,
        work_path,
        pid_file,
    })
}

/// The checks that have a type, their ports resolved (`port` > 0, else the named port's number)
/// and command text rendered.
pub(super) fn render_checks(
    checks: &[HealthCheck],
    port_of: &dyn Fn(i64, &str) -> u16,
    render_text: &dyn Fn(&str) -> String,
) -> Vec<RenderedCheck> {
    checks.iter().filter_map(|c| render_check(c, &|port, name| Some(port_of(port, name)), render_text)).collect()
}

/// One check as it is probed: its port resolved by `port_of` (`port` > 0, else the named
/// port's number) and its command text rendered. None when it has no type, no block for its
/// type, or a port `port_of` does not know.
pub fn render_check(
    c: &HealthCheck,
    port_of: &dyn Fn(i64, &str) -> Option<u16>,
    render_text: &dyn Fn(&str) -> String,
) -> Option<RenderedCheck> {
    let kind = c.kind?;
    let probe = match kind {
        CheckType::Http | CheckType::RemoteHttp => {
            let h = c.http.as_ref()?;
            Probe::Http {
                scheme: h.scheme,
                port: port_of(h.port, &h.port_name)?,
                path: h.path.clone(),
                headers: h.headers.clone(),
                host: None,
            }
        }
        CheckType::Tcp | CheckType::RemoteTcp => {
            let t = c.tcp.as_ref()?;
            Probe::Tcp { port: port_of(t.port, &t.port_name)? }
        }
        CheckType::Command => Probe::Command { command: render_text(&c.command.as_ref()?.value) },
    };
    Some(RenderedCheck {
        kind,
        delay_seconds: c.delay_seconds,
        interval_seconds: c.interval_seconds,
        timeout_seconds: c.timeout_seconds,
        consecutive_failures: c.consecutive_failures,
        grace_period_seconds: c.grace_period_seconds,
        probe,
    })
}

/// A port's number on the host, for processes and pods alike: its fixed hostPort, or the one
/// the allocator holds for it (hostPort 0, seed 000's random port). None (with the error at
/// `at`): random, and nothing allocated.
pub(super) fn host_port(name: &str, fixed: i64, ctx: &RenderContext, at: &Path, errors: &mut Errors) -> Option<u16> {
    let number = if fixed > 0 { u16::try_from(fixed).ok() } else { ctx.allocated_ports.get(name).copied() };
    if number.is_none() {
        errors.add(
            &at.field("hostPort"),
            format!("port {name:?} is random (hostPort 0) and no port was allocated for it"),
        );
    }
    number
}

/// `PORT_<name>` of a port (seed 001; a '-' in the name becomes '_'), put before the spec's own
/// env, which may override it.
pub(super) fn port_env_var(name: &str, host_port: u16) -> EnvVar {
    EnvVar { name: format!("PORT_{}", name.replace('-', "_")), value: host_port.to_string() }
}

fn port_env(ports: &[RenderedPort]) -> impl Iterator<Item = EnvVar> + '_ {
    ports.iter().map(|p| port_env_var(&p.name, p.host_port))
}

/// seed 000 / issue 5: readOnly → 0400 (secret) or 0444 (configmap), else 0600 or 0644.
fn file_mode(source: InjectionSource, read_only: bool) -> u32 {
    match (source, read_only) {
        (InjectionSource::Secret, true) => 0o400,
        (InjectionSource::Secret, false) => 0o600,
        (InjectionSource::ConfigMap, true) => 0o444,
        (InjectionSource::ConfigMap, false) => 0o644,
    }
}

/// Resolves `text` to a clean absolute path strictly below one of `roots`.
/// Relative paths are taken from `relative_to`. Any `..` is refused rather than resolved,
/// so that no spelling can escape (symlinks are the runtime's concern: it opens with O_NOFOLLOW).
pub fn confine(text: &str, relative_to: Option<&PathBuf>, roots: &[&PathBuf]) -> Result<PathBuf, String> {
    let raw = PathBuf::from(text);
    if text.is_empty() {
        return Err("is empty".into());
    }
    let full = if raw.is_absolute() {
        raw
    } else {
        match relative_to {
            Some(base) => base.join(raw),
            None => return Err("is not an absolute path".into()),
        }
    };
    let mut clean = PathBuf::new();
    for c in full.components() {
        match c {
            Component::ParentDir => return Err("contains '..'".into()),
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    if roots.iter().any(|r| clean.starts_with(r) && clean != **r) {
        Ok(clean)
    } else if roots.iter().any(|r| clean == **r) {
        Err("is a root itself, shared by every instance".into())
    } else {
        Err("is outside the allowed directories".into())
    }
}

/// Where a job run's process records how it ended: in its own workPath (the daemon's run
/// directory is not the workload's to write), so a run that ends while stewardd is away — whose
/// exit status the kernel then gives to another parent — is still known.
pub fn job_exit_file(work_path: &std::path::Path, proc_name: &str) -> PathBuf {
    work_path.join(format!(".steward-exit-{proc_name}"))
}

/// A job run's startCmd, run in a subshell whose exit code the outer shell writes to `exit_file`
/// (a stop's SIGTERM is passed on to it). The file says `started` before the command runs:
/// after a crash of the daemon during the start, it tells a run that began (taken up, never
/// started again) from one that did not (the daemon removes the file before the start's
/// record is durable; see `Processes::take_up_start`).
fn job_wrapper(start_cmd: &str, exit_file: &std::path::Path) -> String {
    let file = shell_quote(&exit_file.display().to_string());
    format!(
        "printf 'started\\n' > {file}\n( {start_cmd}\n) &\nchild=$!\ntrap 'kill -TERM $child 2>/dev/null' TERM INT\n\
         wait $child; code=$?\nwhile kill -0 $child 2>/dev/null; do wait $child; code=$?; done\n\
         printf '%s\\n' \"$code\" > {file}.tmp && mv -f {file}.tmp {file}\nexit $code"
    )
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Roots {
        Roots {
            work_base_dir: "/data/work".into(),
            run_base_dir: "/data/run".into(),
            volume_root: "/data/volumes".into(),
        }
    }

    #[test]
    fn confine_accepts_below_roots_only() {
        let r = roots();
        let rs = [&r.work_base_dir, &r.run_base_dir];
        assert_eq!(confine("/data/work/a/./b", None, &rs).unwrap(), PathBuf::from("/data/work/a/b"));
        assert_eq!(
            confine("pid/x.pid", Some(&PathBuf::from("/data/run/i")), &rs).unwrap(),
            PathBuf::from("/data/run/i/pid/x.pid")
        );
        assert!(confine("/data/work", None, &rs).unwrap_err().contains("root itself"));
        assert!(confine("/data/workshop/x", None, &rs).unwrap_err().contains("outside"));
        assert!(confine("/data/work/../etc", None, &rs).unwrap_err().contains(".."));
        assert!(confine("relative", None, &rs).unwrap_err().contains("absolute"));
        assert!(confine("/etc/passwd", None, &rs).is_err());
    }

    /// A process instance's volumes reach every process as `VOLUME_<NAME>` (over an `env` of
    /// that name): a kept one at its ordinal's directory, a Static one made the first
    /// process's user's unless `source.owner` says.
    #[test]
    fn process_volumes_are_env_vars_of_every_process() {
        let text = r#"{"apiVersion": "v4", "kind": "process", "metadata": {"name": "db", "namespace": "ns"},
            "statefulSet": {}, "spec": {"instance": 2, "template": {"spec": {
            "processes": [
                {"procName": "a", "user": "mysql", "workPath": "${work_base_dir}/a${instanceid}", "startCmd": "x",
                 "env": [{"name": "VOLUME_DB_DATA", "value": "mine"}]},
                {"procName": "b", "workPath": "${work_base_dir}/b${instanceid}", "startCmd": "y"}],
            "volumes": [
                {"name": "db-data", "type": "Isolated"},
                {"name": "shelf", "type": "Static", "source": {"target": "/srv/shelf"}},
                {"name": "named", "type": "Static", "source": {"owner": "1:2"}}]}}}}"#;
        let spec: ProcessSpec = serde_json::from_str(text).unwrap();
        let r = roots();
        let ports = BTreeMap::new();
        let ctx = RenderContext { roots: &r, host_ip: "192.0.2.1".into(), allocated_ports: &ports };
        let one = render(&spec, 1, &ctx).unwrap();
        let env = |p: &RenderedProcess, name: &str| -> Vec<String> {
            p.env.iter().filter(|e| e.name == name).map(|e| e.value.clone()).collect()
        };
        for p in &one.processes {
            assert_eq!(env(p, "VOLUME_DB_DATA"), ["/data/volumes/ns/db/1/db-data"]);
            assert_eq!(env(p, "VOLUME_SHELF"), ["/srv/shelf"]);
            assert_eq!(env(p, "VOLUME_NAMED"), ["/data/volumes/ns/.static/named"]);
        }
        let owners: Vec<_> = one
            .volumes()
            .iter()
            .map(|v| match &v.content {
                pod::VolumeContent::Static { owner, .. } => owner.as_str(),
                _ => "-",
            })
            .collect();
        assert_eq!(owners, ["-", "mysql", "1:2"]);
    }

    #[test]
    fn redacted_never_prints() {
        let r = Redacted("hunter2".into());
        assert_eq!(format!("{r:?}"), "\"***\"");
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"***\"");
    }
}
