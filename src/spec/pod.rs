//! Pods (seed 001): the containers of a `kind: pod` spec, their static rules, and their
//! rendering for one instance. A pod spec shares everything else with the process spec
//! (metadata, restartPolicy, killPolicy, instance count); only `template.spec` differs:
//! `containers` (and the pod's `network`) instead of `processes`.

use super::error::{Errors, Path};
use super::model::*;
use super::render::{self, Injection, InjectionSource, InjectionTarget, RenderedCheck};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The variables seed 001's `$` operator may copy into another env var (no nesting).
pub const DOLLAR_VARS: [&str; 4] = ["HOST", "BCS_NODE_ADDR", "BCS_POD_ID", "BCS_CNI_NAME"];
/// Docker refuses less (seed 001: "memory: 最小4M").
pub const MIN_MEMORY_MB: f64 = 4.0;

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
    #[serde(skip_serializing_if = "is_default")]
    pub command: ContainerCommand,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    #[serde(skip_serializing_if = "is_default")]
    pub resources: ContainerResources,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretRef>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub configmaps: Vec<ConfigMapRef>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
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

/// One container as it will be created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedContainer {
    pub name: String,
    pub image: String,
    /// Replaces the image's entrypoint when set.
    pub entrypoint: Option<String>,
    pub arguments: Vec<String>,
    /// `PORT_<name>` first, then the spec's env with `$VAR` resolved.
    pub env: Vec<EnvVar>,
    pub ports: Vec<RenderedContainerPort>,
    pub resources: RenderedResources,
    pub health_checks: Vec<RenderedCheck>,
    /// Secret and configmap keys: env vars, or files written below the instance's run dir and
    /// mounted read-only (see `mounts`).
    pub injections: Vec<Injection>,
    pub mounts: Vec<Mount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedContainerPort {
    pub name: String,
    pub container_port: u16,
    pub host_port: u16,
    pub protocol: Protocol,
    pub random: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub host_path: PathBuf,
    pub container_path: String,
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedResources {
    pub cpu_cores: Option<f64>,
    pub memory_mb: Option<f64>,
    pub cpu_set: bool,
    pub cpu_quota: bool,
    pub memory_swap_mb: Option<i64>,
    pub swappiness: Option<i64>,
    /// (device, bytes per second) and (device, operations per second).
    pub read_bps: Vec<(String, i64)>,
    pub write_bps: Vec<(String, i64)>,
    pub read_iops: Vec<(String, i64)>,
    pub write_iops: Vec<(String, i64)>,
}

impl RenderedResources {
    /// Seed 001: cpu-shares is the weight of `cpu` cores, 1024 per core.
    pub fn cpu_shares(&self) -> Option<i64> {
        self.cpu_cores.map(|c| ((c * 1024.0).round() as i64).max(2))
    }
}

/// The pod of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedPod {
    pub network: NetworkMode,
    /// USER mode: the network's name (the `net` parameter).
    pub user_network: Option<String>,
    pub containers: Vec<RenderedContainer>,
}

/// Static rules of a pod's `template.spec`; `at` is its path.
pub fn validate(t: &TemplateSpec, at: &Path, errors: &mut Errors) {
    if !t.processes.is_empty() {
        errors.add(&at.field("processes"), "a pod has containers, not processes");
    }
    let cs = at.field("containers");
    if t.containers.is_empty() {
        errors.add(&cs, "needs at least one container");
    }
    let net_param = t.parameters.iter().find(|p| p.key == "net");
    for (i, p) in t.parameters.iter().enumerate() {
        if p.key != "net" {
            errors.add(
                &at.field("parameters").index(i).field("key"),
                format!("{:?} is not supported (only \"net\")", p.key),
            );
        }
    }
    match t.network {
        NetworkMode::User if net_param.is_none_or(|p| p.value.is_empty()) => errors
            .add(&at.field("parameters"), "USER networking needs a {\"key\": \"net\", \"value\": NETWORK} parameter"),
        NetworkMode::User => {}
        _ if net_param.is_some() => {
            errors.add(&at.field("parameters"), "the net parameter is for USER networking only")
        }
        _ => {}
    }
    let mut names = BTreeSet::new();
    let mut port_names = BTreeSet::new();
    let mut fixed = BTreeSet::new();
    for (ci, c) in t.containers.iter().enumerate() {
        let at = cs.index(ci);
        match super::validate::check_name(&c.name) {
            Err(e) => errors.add(&at.field("name"), e),
            Ok(()) if !names.insert(c.name.clone()) => {
                errors.add(&at.field("name"), format!("duplicate container name {:?}", c.name))
            }
            Ok(()) => {}
        }
        if c.image.trim().is_empty() {
            errors.add(&at.field("image"), "is required");
        }
        for (i, port) in c.ports.iter().enumerate() {
            let pp = at.field("ports").index(i);
            if port.name.is_empty() || !port.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                errors.add(&pp.field("name"), format!("{:?} must be 1-63 letters, digits, '_' or '-'", port.name));
            } else if !port_names.insert(port.name.clone()) {
                errors.add(&pp.field("name"), format!("duplicate port name {:?}", port.name));
            }
            if !(0..=65535).contains(&port.host_port) {
                errors.add(&pp.field("hostPort"), format!("{} is out of range: 0 (random) or 1-65535", port.host_port));
            } else if port.host_port > 0 && !fixed.insert(port.host_port) {
                errors.add(&pp.field("hostPort"), format!("port {} is declared twice", port.host_port));
            }
            match t.network {
                NetworkMode::Bridge | NetworkMode::User if !(1..=65535).contains(&port.container_port) => {
                    errors.add(&pp.field("containerPort"), format!("{} must be 1-65535", port.container_port))
                }
                NetworkMode::None => errors.add(&pp, "a pod with network NONE cannot publish ports"),
                _ => {}
            }
            if ci > 0 && t.network != NetworkMode::Host {
                errors.add(&pp, "only the first (main) container publishes ports: the others share its network");
            }
        }
        for (i, e) in c.env.iter().enumerate() {
            let ep = at.field("env").index(i);
            if !super::validate::is_env_name(&e.name) {
                errors.add(&ep.field("name"), format!("{:?} is not a valid environment variable name", e.name));
            } else if DOLLAR_VARS.contains(&e.name.as_str()) {
                errors.add(&ep.field("name"), format!("{} is injected by Steward and cannot be redefined", e.name));
            }
            if let Some(var) = e.value.strip_prefix('$') {
                if !DOLLAR_VARS.contains(&var) {
                    errors.add(
                        &ep.field("value"),
                        format!(
                            "${var} cannot be copied: the $ operator takes only {} (no nesting)",
                            DOLLAR_VARS.map(|v| format!("${v}")).join(", ")
                        ),
                    );
                }
            }
        }
        resources(&c.resources, &at.field("resources"), errors);
        super::validate::health_checks(&c.health_checks, &at.field("healthChecks"), &port_names_of(t), errors);
        for (i, s) in c.secrets.iter().enumerate() {
            let sp = at.field("secrets").index(i);
            if s.secret_name.is_empty() {
                errors.add(&sp.field("secretName"), "is required");
            }
            super::validate::key_items(&s.items, &sp.field("items"), true, errors);
        }
        for (i, s) in c.configmaps.iter().enumerate() {
            let sp = at.field("configmaps").index(i);
            if s.name.is_empty() {
                errors.add(&sp.field("name"), "is required");
            }
            super::validate::key_items(&s.items, &sp.field("items"), true, errors);
        }
        for (i, v) in c.volumes.iter().enumerate() {
            if !v.mount_path.starts_with('/') {
                errors.add(
                    &at.field("volumes").index(i).field("mountPath"),
                    format!("{:?} must be an absolute path", v.mount_path),
                );
            }
        }
    }
}

fn port_names_of(t: &TemplateSpec) -> BTreeSet<String> {
    t.containers.iter().flat_map(|c| &c.ports).map(|p| p.name.clone()).collect()
}

fn resources(r: &ContainerResources, at: &Path, errors: &mut Errors) {
    super::validate::limits(&r.limits, &at.field("limits"), errors);
    let memory = r.limits.memory.as_ref().and_then(NumberText::as_f64).filter(|m| *m > 0.0);
    if memory.is_some_and(|m| m < MIN_MEMORY_MB) {
        errors.add(
            &at.field("limits").field("memory"),
            format!("must be at least {MIN_MEMORY_MB} (MiB) for a container"),
        );
    }
    if r.cpu_set && r.limits.cpu.as_ref().and_then(NumberText::as_f64).is_none_or(|c| c <= 0.0) {
        errors.add(&at.field("cpuSet"), "needs limits.cpu (how many cpus to pin)");
    }
    if r.cpu_quota && r.limits.cpu.as_ref().and_then(NumberText::as_f64).is_none_or(|c| c <= 0.0) {
        errors.add(&at.field("cpuQuota"), "needs limits.cpu (the quota in cores)");
    }
    if let Some(s) = r.memory_swap {
        if s != -1 && s <= 0 {
            errors.add(&at.field("memorySwap"), format!("{s} must be a positive number of MiB, or -1 for unlimited"));
        } else if s as f64 > super::validate::MAX_MEMORY_MIB {
            let max = super::validate::MAX_MEMORY_MIB;
            errors.add(&at.field("memorySwap"), format!("{s} is more than {max} MiB"));
        }
    }
    if let Some(s) = r.swappiness {
        if !(0..=100).contains(&s) {
            errors.add(&at.field("swappiness"), format!("{s} must be 0-100"));
        }
    }
    let lists = [
        ("readBps", &r.blkio.read_bps, true),
        ("writeBps", &r.blkio.write_bps, true),
        ("readIops", &r.blkio.read_iops, false),
        ("writeIops", &r.blkio.write_iops, false),
    ];
    for (name, list, bytes) in lists {
        for (i, d) in list.iter().enumerate() {
            let dp = at.field("blkio").field(name).index(i);
            if !d.path.starts_with("/dev/") {
                errors.add(&dp.field("path"), format!("{:?} must be a device under /dev", d.path));
            }
            if let Err(e) = parse_rate(&d.rate, bytes) {
                errors.add(&dp.field("rate"), e);
            }
        }
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

/// What `$` copies, per instance.
pub struct DollarValues {
    pub host: String,
    pub node_addr: String,
    pub pod_id: String,
    pub cni_name: String,
}

impl DollarValues {
    pub fn pairs(&self) -> [(&'static str, &str); 4] {
        [
            ("HOST", &self.host),
            ("BCS_NODE_ADDR", &self.node_addr),
            ("BCS_POD_ID", &self.pod_id),
            ("BCS_CNI_NAME", &self.cni_name),
        ]
    }
    fn get(&self, name: &str) -> Option<&str> {
        self.pairs().into_iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// A container's name in its pod's spec, from its Docker name (`steward-<pod id>-<name>`).
pub fn short_container_name<'a>(id: &render::InstanceId, docker_name: &'a str) -> &'a str {
    let prefix = format!("steward-{}-", pod_id(id));
    docker_name.strip_prefix(prefix.as_str()).unwrap_or(docker_name)
}

/// The docker container name's pod part and `BCS_POD_ID`: `namespace.name.index`.
pub fn pod_id(id: &render::InstanceId) -> String {
    format!("{}.{}.{}", id.namespace, id.name, id.index)
}

/// Renders the pod of instance `id`. `ports` are the instance's allocated ports by name.
pub fn render_pod(
    spec: &ProcessSpec,
    id: &render::InstanceId,
    ctx: &render::RenderContext,
    run_dir: &std::path::Path,
    errors: &mut Errors,
) -> RenderedPod {
    let t = &spec.spec.template.spec;
    let cs = Path::root().field("spec").field("template").field("spec").field("containers");
    let dollar = DollarValues {
        host: ctx.host_ip.clone(),
        node_addr: ctx.host_ip.clone(),
        pod_id: pod_id(id),
        // No CNI here: containers use docker's own networking (docs/design.md).
        cni_name: String::new(),
    };
    let mut port_numbers = std::collections::BTreeMap::new();
    let mut rendered_ports = Vec::new();
    for (ci, c) in t.containers.iter().enumerate() {
        let mut ports = Vec::new();
        for (i, p) in c.ports.iter().enumerate() {
            let host = if p.host_port > 0 {
                u16::try_from(p.host_port).ok()
            } else {
                ctx.allocated_ports.get(&p.name).copied()
            };
            let Some(host) = host else {
                errors.add(
                    &cs.index(ci).field("ports").index(i).field("hostPort"),
                    format!("port {:?} is random (hostPort 0) and no port was allocated for it", p.name),
                );
                continue;
            };
            // With host networking the process listens on the host port itself.
            let container_port =
                if t.network == NetworkMode::Host { host } else { u16::try_from(p.container_port).unwrap_or(0) };
            // Checks probe a BRIDGE or USER pod at its own address, on the container's port
            // (the host's 127.0.0.1 is not where it listens); a HOST pod on the host's.
            let probed =
                if matches!(t.network, NetworkMode::Bridge | NetworkMode::User) { container_port } else { host };
            port_numbers.insert(p.name.clone(), probed);
            ports.push(RenderedContainerPort {
                name: p.name.clone(),
                container_port,
                host_port: host,
                protocol: p.protocol,
                random: p.host_port == 0,
            });
        }
        rendered_ports.push(ports);
    }
    let roots = [&ctx.roots.work_base_dir, &ctx.roots.run_base_dir];
    // PORT_<name> of every port of the pod, in every container: a sidecar learns the main
    // container's (random) ports.
    let port_env: Vec<EnvVar> = rendered_ports
        .iter()
        .flatten()
        .map(|p| EnvVar { name: format!("PORT_{}", p.name.replace('-', "_")), value: p.host_port.to_string() })
        .collect();
    let mut containers = Vec::new();
    for ((ci, c), ports) in t.containers.iter().enumerate().zip(rendered_ports) {
        let at = cs.index(ci);
        let mut env: Vec<EnvVar> =
            dollar.pairs().iter().map(|(n, v)| EnvVar { name: n.to_string(), value: v.to_string() }).collect();
        env.extend(port_env.iter().cloned());
        for e in &c.env {
            let value = match e.value.strip_prefix('$').and_then(|v| dollar.get(v)) {
                Some(v) => v.to_string(),
                None => e.value.clone(),
            };
            env.push(EnvVar { name: e.name.clone(), value });
        }
        let port_of = |port: i64, name: &str| -> u16 {
            if port > 0 {
                u16::try_from(port).unwrap_or_default()
            } else {
                port_numbers.get(name).copied().unwrap_or_default()
            }
        };
        let health_checks = render::render_checks(&c.health_checks, &port_of, &|s: &str| s.to_string());
        // Secret and configmap files: written below the run dir, mounted read-only where asked.
        let files_dir = run_dir.join("values").join(&c.name);
        let mut injections = Vec::new();
        let mut mounts = Vec::new();
        let sources = c
            .secrets
            .iter()
            .map(|s| (InjectionSource::Secret, &s.secret_name, &s.items))
            .chain(c.configmaps.iter().map(|m| (InjectionSource::ConfigMap, &m.name, &m.items)));
        for (source, store, items) in sources {
            for item in items {
                let target = match item.kind {
                    Some(ItemType::Env) => InjectionTarget::Env { name: item.key_or_path.clone() },
                    Some(ItemType::File) => {
                        let host_path = files_dir.join(format!("{}", injections.len()));
                        let path_in = if source == InjectionSource::ConfigMap && !item.data_key_alias.is_empty() {
                            format!("{}/{}", item.key_or_path.trim_end_matches('/'), item.data_key_alias)
                        } else {
                            item.key_or_path.clone()
                        };
                        mounts.push(Mount { host_path: host_path.clone(), container_path: path_in, read_only: true });
                        // Readable by its owner only: root (a container's default user), or the
                        // item's `user` (a host user name or a numeric uid[:gid], for an image
                        // that runs as another user). The directories above are root's, 0700.
                        let owner = if item.user.is_empty() { DEFAULT_USER.to_string() } else { item.user.clone() };
                        InjectionTarget::File { path: host_path, mode: 0o400, owner }
                    }
                    None => continue,
                };
                injections.push(Injection { source, store: store.clone(), data_key: item.data_key.clone(), target });
            }
        }
        for (i, v) in c.volumes.iter().enumerate() {
            match render::confine(&v.host_path, None, &roots) {
                Ok(host_path) => {
                    mounts.push(Mount { host_path, container_path: v.mount_path.clone(), read_only: v.read_only })
                }
                Err(why) => errors.add(
                    &at.field("volumes").index(i).field("hostPath"),
                    format!(
                        "{:?} {why}; host paths must lie below {} or {}",
                        v.host_path,
                        ctx.roots.work_base_dir.display(),
                        ctx.roots.run_base_dir.display()
                    ),
                ),
            }
        }
        let r = &c.resources;
        let limit = |v: &Option<NumberText>| v.as_ref().and_then(NumberText::as_f64).filter(|n| *n > 0.0);
        let rates = |list: &[DeviceRate], bytes: bool| {
            list.iter().filter_map(|d| parse_rate(&d.rate, bytes).ok().map(|n| (d.path.clone(), n))).collect()
        };
        containers.push(RenderedContainer {
            name: c.name.clone(),
            image: c.image.clone(),
            entrypoint: (!c.command.value.is_empty()).then(|| c.command.value.clone()),
            arguments: c.command.arguments.clone(),
            env,
            ports,
            resources: RenderedResources {
                cpu_cores: limit(&r.limits.cpu),
                memory_mb: limit(&r.limits.memory),
                cpu_set: r.cpu_set,
                cpu_quota: r.cpu_quota,
                memory_swap_mb: r.memory_swap,
                swappiness: r.swappiness,
                read_bps: rates(&r.blkio.read_bps, true),
                write_bps: rates(&r.blkio.write_bps, true),
                read_iops: rates(&r.blkio.read_iops, false),
                write_iops: rates(&r.blkio.write_iops, false),
            },
            health_checks,
            injections,
            mounts,
        });
    }
    let user_network = t.parameters.iter().find(|p| p.key == "net").map(|p| p.value.clone());
    RenderedPod { network: t.network, user_network, containers }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(extra: serde_json::Value) -> serde_json::Value {
        let mut doc = serde_json::json!({
            "apiVersion": "v4", "kind": "pod",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": [
                {"name": "main", "image": "busybox", "command": {"value": "httpd", "arguments": ["-f"]},
                 "ports": [{"name": "http", "containerPort": 80, "hostPort": 0}]}
            ]}}}
        });
        merge(&mut doc, extra);
        doc
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn roots() -> render::Roots {
        render::Roots { work_base_dir: "/data/work".into(), run_base_dir: "/data/run".into() }
    }

    fn errors_of(doc: serde_json::Value) -> Vec<String> {
        match super::super::from_document(&doc, &roots()) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_valid_pod_renders_ports_env_and_dollar_copies() {
        let mut doc = pod(serde_json::json!({}));
        doc["spec"]["template"]["spec"]["containers"][0]["env"] = serde_json::json!([{"name": "MYIP", "value": "$HOST"}, {"name": "ID", "value": "$BCS_POD_ID"}, {"name": "X", "value": "plain"}]);
        let spec = super::super::from_document(&doc, &roots()).unwrap();
        let ports = [("http".to_string(), 31005u16)].into_iter().collect();
        let ctx = render::RenderContext { roots: &roots(), host_ip: "10.0.0.9".into(), allocated_ports: &ports };
        let r = render::render(&spec, 0, &ctx).unwrap();
        let pod = r.pod.expect("a pod");
        let c = &pod.containers[0];
        let env: std::collections::BTreeMap<_, _> = c.env.iter().map(|e| (e.name.as_str(), e.value.as_str())).collect();
        assert_eq!(env["PORT_http"], "31005");
        assert_eq!(env["MYIP"], "10.0.0.9");
        assert_eq!(env["ID"], "ns.web.0");
        assert_eq!(env["BCS_NODE_ADDR"], "10.0.0.9");
        assert_eq!(env["X"], "plain");
        assert_eq!(c.ports[0].container_port, 80);
        assert_eq!(c.ports[0].host_port, 31005);
        assert_eq!(c.entrypoint.as_deref(), Some("httpd"));
        assert!(r.processes.is_empty());
    }

    #[test]
    fn mistakes_name_their_fields() {
        let mut doc = pod(serde_json::json!({}));
        let c = &mut doc["spec"]["template"]["spec"]["containers"];
        c[0]["env"] = serde_json::json!([{"name": "A", "value": "$OTHER"}, {"name": "HOST", "value": "x"}]);
        c[0]["resources"] = serde_json::json!({"limits": {"memory": 2}, "swappiness": 101, "cpuSet": true,
            "blkio": {"readBps": [{"path": "/dev/sda", "rate": "10zb"}]}});
        c[0]["volumes"] = serde_json::json!([{"hostPath": "/etc", "mountPath": "/x"}]);
        c.as_array_mut().unwrap().push(serde_json::json!({"name": "main", "image": ""}));
        let errors = errors_of(doc).join("\n");
        let at = "spec.template.spec.containers";
        for want in [
            format!("{at}[0].env[0].value: $OTHER cannot be copied"),
            format!("{at}[0].env[1].name: HOST is injected"),
            format!("{at}[0].resources.limits.memory: must be at least 4"),
            format!("{at}[0].resources.cpuSet: needs limits.cpu"),
            format!("{at}[0].resources.swappiness: 101 must be 0-100"),
            format!("{at}[0].resources.blkio.readBps[0].rate:"),
            format!("{at}[0].volumes[0].hostPath: \"/etc\""),
            format!("{at}[1].name: duplicate container name"),
            format!("{at}[1].image: is required"),
        ] {
            assert!(errors.contains(&want), "missing {want:?} in:\n{errors}");
        }
    }

    #[test]
    fn user_network_needs_net_parameter_and_none_has_no_ports() {
        let errors =
            errors_of(pod(serde_json::json!({"spec": {"template": {"spec": {"network": "USER"}}}}))).join("\n");
        assert!(errors.contains("spec.template.spec.parameters: USER networking needs"), "{errors}");
        let errors =
            errors_of(pod(serde_json::json!({"spec": {"template": {"spec": {"network": "NONE"}}}}))).join("\n");
        assert!(errors.contains("ports[0]: a pod with network NONE cannot publish ports"), "{errors}");
        let errors =
            errors_of(pod(serde_json::json!({"spec": {"template": {"spec": {"network": "WIFI"}}}}))).join("\n");
        assert!(errors.contains("spec.template.spec.network: must be one of"), "{errors}");
    }

    #[test]
    fn rates_take_units() {
        assert_eq!(parse_rate("10mb", true), Ok(10 << 20));
        assert_eq!(parse_rate("512KB", true), Ok(512 << 10));
        assert_eq!(parse_rate("4096", true), Ok(4096));
        assert_eq!(parse_rate("300", false), Ok(300));
        assert!(parse_rate("300mb", false).is_err());
        assert!(parse_rate("fast", true).is_err());
        assert!(parse_rate("0", true).is_err());
    }

    #[test]
    fn toml_pods_parse_too() {
        let text = r#"
apiVersion = "v4"
kind = "pod"
[metadata]
name = "web"
[spec.template.spec]
network = "HOST"
[[spec.template.spec.containers]]
name = "main"
image = "busybox"
command = { value = "sleep", arguments = ["100"] }
ports = [{ name = "http", hostPort = 0 }]
"#;
        let spec = super::super::parse(text, super::super::Format::Toml, &roots()).unwrap();
        assert_eq!(spec.spec.template.spec.network, NetworkMode::Host);
        assert_eq!(spec.spec.template.spec.containers[0].command.arguments, vec!["100"]);
    }
}
