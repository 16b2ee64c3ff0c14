//! Rendering a pod for one instance: its containers as they will be created, `$` copies
//! resolved, ports, secret and configmap files, volumes and resources.

use super::InstanceId;
use super::{Injection, InjectionSource, InjectionTarget, RenderContext, RenderedCheck};
use crate::spec::error::{Errors, Path};
use crate::spec::model::pod::{parse_rate, DeviceRate};
use crate::spec::model::*;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One container as it will be created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedContainer {
    pub name: String,
    pub image: String,
    /// Seed 003's `imagePullPolicy` as written; None: its default (Always), which leaves
    /// images made on the host alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<crate::spec::model::ImagePullPolicy>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    /// Replaces the image's entrypoint when set.
    pub entrypoint: Option<String>,
    pub arguments: Vec<String>,
    /// `PORT_<name>` first, then the spec's env with `$VAR` resolved.
    pub env: Vec<EnvVar>,
    /// Which env entries copy a seed-001 `$` variable, (entry, variable): those whose value is
    /// known only when the container is created (a CNI pod's `HOST` and `BCS_CNI_NAME`, after
    /// its ADD) are filled in then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<(String, String)>,
    pub ports: Vec<RenderedContainerPort>,
    pub resources: RenderedResources,
    pub health_checks: Vec<RenderedCheck>,
    /// Seed 003 probes and hooks (EXEC runs inside the container).
    #[serde(default, skip_serializing_if = "super::probe::RenderedLifecycle::is_empty")]
    pub lifecycle: super::probe::RenderedLifecycle,
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
    /// A pod volume's mount (seed 003 `mounts`): the volume's name and the `subpath` of it that
    /// `host_path` is; checked (no symlink on the way) and made before every start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subpath: String,
    /// Where the mount's content is when a workload can reach a path on the way to it (a
    /// volume's subpath, a host path): `host_path` is then a point in the root-only staging
    /// directory ([`staging_point`]) on which the daemon bind-mounts the content, opened by
    /// descriptor, before every start. The engine is never handed a path a workload can change
    /// between the daemon's check and its mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
}

/// The directory below an instance's run dir (root's, 0700) holding its staged mounts.
pub fn staging_dir(run_dir: &std::path::Path) -> PathBuf {
    run_dir.join("mounts")
}

/// Where container `container`'s mount number `index` is staged.
pub fn staging_point(run_dir: &std::path::Path, container: &str, index: usize) -> PathBuf {
    staging_dir(run_dir).join(container).join(index.to_string())
}

/// A pod volume (seed 003) as the host holds it: `<run dir>/volumes/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedVolume {
    pub name: String,
    pub host_path: PathBuf,
    pub content: VolumeContent,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum VolumeContent {
    /// An empty directory, kept across the pod's restarts and removed with the instance; on a
    /// tmpfs of `limit_bytes` when `memory`.
    Temp { memory: bool, limit_bytes: Option<u64> },
    /// A configmap's or secret's keys as files, written afresh at every start.
    Files { source: InjectionSource, store: String, items: Vec<RenderedVolumeItem>, optional: bool },
    /// A directory of the instance's ordinal below the daemon's `volume_root` (seed 003 Dynamic,
    /// Isolated): made at its first start, kept when the instance goes (see `steward volume`).
    /// With `limit_bytes` (class `image`), a filesystem image of that size loop-mounted on
    /// `host_path` (runtime/volumes.rs).
    Kept {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit_bytes: Option<u64>,
        /// When the instance goes, the cases in which the volume goes with it (`whenDeleted`,
        /// `whenScaled`: Delete); none: kept for `steward volume rm`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removed_when: Vec<DeleteCause>,
    },
    /// A host directory (seed 003 Static), shared by every instance mounting it: made, with
    /// `owner` (empty: root) and `mode`, when missing; never removed by Steward.
    Static { owner: String, mode: u32, read_only: bool },
}

/// Why an instance is deleted, as far as its kept volumes care: durable in its record from the
/// delete's request on (a delete a daemon restart resumes keeps its cause).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeleteCause {
    /// Its id named by an operator's delete: its kept volumes stay.
    Operator,
    /// Removed by scaling in: an apply or a rollout to fewer replicas (`whenScaled`).
    ScaledIn,
    /// Its app deleted (`whenDeleted`).
    AppDeleted,
}

/// One key's file; `items` empty in [`VolumeContent::Files`] is every key at its own name, with
/// the volume's default mode (an item with an empty key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedVolumeItem {
    pub key: String,
    pub path: String,
    pub mode: u32,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedResources {
    pub cpu_cores: Option<f64>,
    pub memory_mb: Option<f64>,
    /// `limits.pids` as written: None unset (the daemon's default), Some(None) unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Option<u64>>,
    pub cpu_set: bool,
    pub cpu_quota: bool,
    pub memory_swap_mb: Option<i64>,
    pub swappiness: Option<i64>,
    /// (device, bytes per second) and (device, operations per second).
    pub read_bps: Vec<(String, i64)>,
    pub write_bps: Vec<(String, i64)>,
    pub read_iops: Vec<(String, i64)>,
    pub write_iops: Vec<(String, i64)>,
    /// GPUs the engine gives the container (seed 001 `gpus`): a count, -1 for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<i64>,
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
    /// Seed 003 `initializers`: run to completion, in order, before `containers` start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<RenderedContainer>,
    /// Secrets whose docker config JSON gives the image pulls their credentials.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<String>,
    /// The pod's host name and domain (seed 003 `hostname`, `subdomain`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subdomain: String,
    /// Seed 003 `dns` ClusterFirst as the pod's network takes it: its resolver is the daemon's
    /// DNS responder (`[services] pod_dns`), then `dns`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_dns: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<crate::spec::pod::DnsConfig>,
    #[serde(default)]
    pub host: crate::spec::pod::HostNamespaces,
    /// Seed 003 `volumes`, mounted by the containers' `mounts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<RenderedVolume>,
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
pub fn short_container_name<'a>(id: &InstanceId, docker_name: &'a str) -> &'a str {
    let prefix = format!("steward-{}-", pod_id(id));
    docker_name.strip_prefix(prefix.as_str()).unwrap_or(docker_name)
}

/// The docker container name's pod part and `BCS_POD_ID`: `namespace.name.index`.
pub fn pod_id(id: &InstanceId) -> String {
    format!("{}.{}.{}", id.namespace, id.name, id.index)
}

/// Renders the pod of instance `id`. `ports` are the instance's allocated ports by name.
pub fn render_pod(
    spec: &ProcessSpec,
    id: &InstanceId,
    ctx: &RenderContext,
    run_dir: &std::path::Path,
    errors: &mut Errors,
) -> RenderedPod {
    let t = &spec.spec.template.spec;
    let cs = Path::root().field("spec").field("template").field("spec").field("containers");
    let dollar = DollarValues {
        host: ctx.host_ip.clone(),
        node_addr: ctx.host_ip.clone(),
        pod_id: pod_id(id),
        // A CNI pod learns it at its ADD: the containers get it when created (`copies`).
        cni_name: String::new(),
    };
    let mut port_numbers = std::collections::BTreeMap::new();
    let mut rendered_ports = Vec::new();
    for (ci, c) in t.containers.iter().enumerate() {
        let mut ports = Vec::new();
        for (i, p) in c.ports.iter().enumerate() {
            let at = cs.index(ci).field("ports").index(i);
            let Some(host) = super::host_port(&p.name, p.host_port, ctx, &at, errors) else { continue };
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
    // PORT_<name> of every port of the pod, in every container: a sidecar learns the main
    // container's (random) ports.
    let port_env: Vec<EnvVar> =
        rendered_ports.iter().flatten().map(|p| super::port_env_var(&p.name, p.host_port)).collect();
    let volumes = render_volumes(&t.volumes, run_dir, &ctx.roots.volume_root, id, "");
    let https_ports: Vec<u16> = t
        .containers
        .iter()
        .flat_map(|c| &c.ports)
        .filter(|p| p.protocol == Protocol::Https)
        .filter_map(|p| port_numbers.get(&p.name).copied())
        .collect();
    let shared = Shared {
        ctx,
        run_dir,
        dollar: &dollar,
        port_env: &port_env,
        port_numbers: &port_numbers,
        volumes: &volumes,
        https_ports: &https_ports,
    };
    let mut containers = Vec::new();
    for ((ci, c), ports) in t.containers.iter().enumerate().zip(rendered_ports) {
        containers.push(render_container(c, ports, &cs.index(ci), &shared, errors));
    }
    let is = Path::root().field("spec").field("template").field("spec").field("initializers");
    let init_containers = t
        .initializers
        .iter()
        .enumerate()
        .map(|(i, c)| render_container(c, Vec::new(), &is.index(i), &shared, errors))
        .collect();
    let user_network = t.parameters.iter().find(|p| p.key == "net").map(|p| p.value.clone());
    RenderedPod {
        network: t.network,
        user_network,
        containers,
        init_containers,
        image_pull_secrets: t.image_pull_secrets.clone(),
        hostname: hostname_of(spec, id),
        subdomain: t.subdomain.clone(),
        cluster_dns: t.dns.cluster_first(t.network),
        dns: t.dns_config.clone(),
        host: t.host,
        volumes,
    }
}

/// The pod's host name: its `hostname`; else, in a stateful set, the ordinal's own `NAME-K`
/// (Kubernetes' rule: what `NAME-K.SUBDOMAIN` and `NAME-K.DOMAIN` name in the responder) where
/// that is a DNS label; else none (Docker's). A HOST pod has the host's.
fn hostname_of(spec: &ProcessSpec, id: &InstanceId) -> String {
    let t = &spec.spec.template.spec;
    match &spec.stateful_set {
        Some(set) if t.hostname.is_empty() && t.network != NetworkMode::Host => {
            let name = if set.name.is_empty() { &spec.metadata.name } else { &set.name };
            let label = format!("{name}-{}", id.index);
            if crate::spec::validate::pod::dns_label(&label) {
                label
            } else {
                String::new()
            }
        }
        _ => t.hostname.clone(),
    }
}

/// Where instance `id`'s kept volumes live: `<volume_root>/<namespace>/<app>/<ordinal>`, one
/// directory per volume below it. Keyed by the ordinal, not the instance: a restart, a rollout,
/// a daemon restart, a delete and a scale back up all find the same data.
pub fn kept_volumes_of(volume_root: &std::path::Path, id: &InstanceId) -> std::path::PathBuf {
    volume_root.join(&id.namespace).join(&id.name).join(id.index.to_string())
}

/// Where a Static volume is on the host: its `target` when a path, else the named one's
/// directory `<volume_root>/<namespace>/.static/<name>` (the volume's name when no target).
pub fn static_volume_path(
    volume_root: &std::path::Path,
    namespace: &str,
    volume: &crate::spec::pod::PodVolume,
) -> PathBuf {
    let target = &volume.source.target;
    match target.starts_with('/') {
        true => PathBuf::from(target),
        false => {
            let name = if target.is_empty() { &volume.name } else { target };
            volume_root.join(namespace).join(STATIC_DIR).join(name)
        }
    }
}

/// The `source.class` of a kept volume whose `storage.limit` is a loop-mounted filesystem image
/// of that size (the kernel refuses writes past it).
pub const KEPT_IMAGE_CLASS: &str = "image";

/// In a limited kept volume's directory: the filesystem image, and where it is mounted (what
/// the containers see).
pub const KEPT_IMAGE_FILE: &str = "disk.img";
pub const KEPT_IMAGE_MOUNT: &str = "data";

/// A `storage` size in bytes (validated before).
fn storage_bytes(text: &str) -> Option<u64> {
    crate::resources::parse_memory(text).ok().and_then(|q| q.positive()).map(|mib| (mib * 1048576.0) as u64)
}

/// The directory of a namespace's named Static volumes, below its kept volumes' (a name no
/// app has: names do not start with '.').
pub const STATIC_DIR: &str = ".static";

/// The pod's volumes, each in its own directory below `<run_dir>/volumes`, a kept one below
/// the ordinal's directory in `volume_root`, a Static one where it says (validated before);
/// a Static one with no `source.owner` is `static_owner`'s when made (empty: root).
pub(crate) fn render_volumes(
    volumes: &[crate::spec::pod::PodVolume],
    run_dir: &std::path::Path,
    volume_root: &std::path::Path,
    id: &InstanceId,
    static_owner: &str,
) -> Vec<RenderedVolume> {
    use crate::spec::pod::{parse_file_mode, VolumeType, DEFAULT_FILE_MODE};
    let kept = kept_volumes_of(volume_root, id);
    let mut rendered = Vec::new();
    for v in volumes {
        let source = &v.source;
        let content = match v.kind {
            VolumeType::Temp => {
                VolumeContent::Temp { memory: source.medium == "Memory", limit_bytes: storage_bytes(&v.storage.limit) }
            }
            VolumeType::Config | VolumeType::Secret => {
                let default = parse_file_mode(&source.default).unwrap_or(DEFAULT_FILE_MODE);
                let mode = |m: &str| if m.is_empty() { default } else { parse_file_mode(m).unwrap_or(default) };
                let mut items: Vec<RenderedVolumeItem> = source
                    .items
                    .iter()
                    .map(|i| RenderedVolumeItem { key: i.key.clone(), path: i.path.clone(), mode: mode(&i.mode) })
                    .collect();
                if items.is_empty() {
                    items.push(RenderedVolumeItem { key: String::new(), path: String::new(), mode: default });
                }
                VolumeContent::Files {
                    source: if v.kind == VolumeType::Secret {
                        InjectionSource::Secret
                    } else {
                        InjectionSource::ConfigMap
                    },
                    store: source.target.clone(),
                    items,
                    optional: source.optional,
                }
            }
            VolumeType::Dynamic | VolumeType::Isolated => {
                let limit_bytes = (source.class == KEPT_IMAGE_CLASS).then(|| storage_bytes(&v.storage.limit)).flatten();
                let dir = kept.join(&v.name);
                let removed_when =
                    [(&source.when_deleted, DeleteCause::AppDeleted), (&source.when_scaled, DeleteCause::ScaledIn)]
                        .into_iter()
                        .filter(|(word, _)| word.as_str() == crate::spec::pod::DELETE)
                        .map(|(_, cause)| cause)
                        .collect();
                rendered.push(RenderedVolume {
                    name: v.name.clone(),
                    host_path: if limit_bytes.is_some() { dir.join(KEPT_IMAGE_MOUNT) } else { dir },
                    content: VolumeContent::Kept { limit_bytes, removed_when },
                });
                continue;
            }
            VolumeType::Static => {
                rendered.push(RenderedVolume {
                    name: v.name.clone(),
                    host_path: static_volume_path(volume_root, &id.namespace, v),
                    content: VolumeContent::Static {
                        owner: if source.owner.is_empty() { static_owner.into() } else { source.owner.clone() },
                        mode: parse_file_mode(&source.dir_mode).unwrap_or(0o755),
                        read_only: source.readonly,
                    },
                });
                continue;
            }
        };
        rendered.push(RenderedVolume {
            name: v.name.clone(),
            host_path: run_dir.join("volumes").join(&v.name),
            content,
        });
    }
    rendered
}

/// What every container of a pod renders with.
struct Shared<'a> {
    ctx: &'a RenderContext<'a>,
    run_dir: &'a std::path::Path,
    dollar: &'a DollarValues,
    port_env: &'a [EnvVar],
    /// Each port name's number as probes and hooks reach it.
    port_numbers: &'a std::collections::BTreeMap<String, u16>,
    volumes: &'a [RenderedVolume],
    /// The probed numbers of the ports declared HTTPS.
    https_ports: &'a [u16],
}

/// One container (or init container, `ports` empty) of the pod, at field path `at`.
fn render_container(
    c: &Container,
    ports: Vec<RenderedContainerPort>,
    at: &Path,
    shared: &Shared<'_>,
    errors: &mut Errors,
) -> RenderedContainer {
    let Shared { ctx, run_dir, dollar, port_env, port_numbers, volumes, https_ports } = *shared;
    let roots = [&ctx.roots.work_base_dir, &ctx.roots.run_base_dir];
    let mut env: Vec<EnvVar> =
        dollar.pairs().iter().map(|(n, v)| EnvVar { name: n.to_string(), value: v.to_string() }).collect();
    let mut copies: Vec<(String, String)> =
        dollar.pairs().iter().map(|(n, _)| (n.to_string(), n.to_string())).collect();
    env.extend(port_env.iter().cloned());
    for e in &c.env {
        let copied = e.value.strip_prefix('$').and_then(|v| Some((v, dollar.get(v)?)));
        let value = match copied {
            Some((var, v)) => {
                copies.push((e.name.clone(), var.to_string()));
                v.to_string()
            }
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
    let mut health_checks = super::render_checks(&c.health_checks, &port_of, &|s: &str| s.to_string());
    let mut lifecycle = super::probe::render_lifecycle(&c.probe, &c.lifecycle, &port_of, &|s: &str| s.to_string());
    super::probe::tls_on_https_ports(&mut health_checks, &mut lifecycle, https_ports);
    // Secret and configmap files: written below the run dir, mounted read-only where asked.
    let files_dir = run_dir.join("values").join(&c.name);
    let mut injections = super::Injection::from_env_from(&c.env_from);
    let mut mounts = Vec::new();
    let sources = c
        .secrets
        .iter()
        .map(|s| (InjectionSource::Secret, &s.secret_name, &s.items, s.optional))
        .chain(c.configmaps.iter().map(|m| (InjectionSource::ConfigMap, &m.name, &m.items, m.optional)));
    for (source, store, items, optional) in sources {
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
                    mounts.push(Mount {
                        host_path: host_path.clone(),
                        container_path: path_in,
                        read_only: true,
                        volume: None,
                        subpath: String::new(),
                        source: None,
                    });
                    // Readable by its owner only: root (a container's default user), or the
                    // item's `user` (a host user name or a numeric uid[:gid], for an image
                    // that runs as another user). The directories above are root's, 0700.
                    let owner = if item.user.is_empty() { DEFAULT_USER.to_string() } else { item.user.clone() };
                    InjectionTarget::File { path: host_path, mode: 0o400, owner }
                }
                None => continue,
            };
            injections.push(Injection::of_item(source, store, item, target, optional));
        }
    }
    for (i, v) in c.volumes.iter().enumerate() {
        match super::confine(&v.host_path, None, &roots) {
            Ok(source) => mounts.push(Mount {
                host_path: staging_point(run_dir, &c.name, mounts.len()),
                container_path: v.mount_path.clone(),
                read_only: v.read_only,
                volume: None,
                subpath: String::new(),
                source: Some(source),
            }),
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
    for m in &c.mounts {
        // A name validation did not find is left out (validation said so).
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else { continue };
        let subpath = m.subpath.trim_matches('/').to_string();
        // The volume's own directory is in the root-only volumes directory; a subpath below
        // it is the containers' to change, as is the way to a Static one.
        let (host_path, source) = if subpath.is_empty() && !matches!(v.content, VolumeContent::Static { .. }) {
            (v.host_path.clone(), None)
        } else {
            (staging_point(run_dir, &c.name, mounts.len()), Some(v.host_path.join(&subpath)))
        };
        mounts.push(Mount {
            host_path,
            source,
            container_path: m.path.clone(),
            // A configmap's or secret's files are the store's, not the container's.
            read_only: m.readonly
                || matches!(v.content, VolumeContent::Files { .. } | VolumeContent::Static { read_only: true, .. }),
            volume: Some(v.name.clone()),
            subpath,
        });
    }
    let r = &c.resources;
    let rates = |list: &[DeviceRate], bytes: bool| {
        list.iter().filter_map(|d| parse_rate(&d.rate, bytes).ok().map(|n| (d.path.clone(), n))).collect()
    };
    RenderedContainer {
        name: c.name.clone(),
        image: c.image.clone(),
        pull_policy: c.image_pull_policy,
        tty: c.tty,
        working_dir: c.working_dir.clone(),
        entrypoint: (!c.command.value.is_empty()).then(|| c.command.value.clone()),
        arguments: c.command.arguments.clone(),
        env,
        copies,
        ports,
        resources: RenderedResources {
            cpu_cores: r.limits.cpu_cores(),
            memory_mb: r.limits.memory_mib(),
            tasks: r.limits.tasks(),
            cpu_set: r.cpu_set,
            cpu_quota: r.cpu_quota,
            memory_swap_mb: r.memory_swap,
            swappiness: r.swappiness,
            read_bps: rates(&r.blkio.read_bps, true),
            write_bps: rates(&r.blkio.write_bps, true),
            read_iops: rates(&r.blkio.read_iops, false),
            write_iops: rates(&r.blkio.write_iops, false),
            gpus: r.limits.gpus().or(r.requests.gpus()),
        },
        health_checks,
        lifecycle,
        injections,
        mounts,
    }
}
