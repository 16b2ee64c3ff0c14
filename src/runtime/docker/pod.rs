//! Starting a pod: its network holder (the pause image, imported on first need), then each
//! container's create request built from the rendered spec (seed 001's command, env, ports,
//! resources and NUMA rules), created and started in order, undone on failure or cancel.

use super::{
    numa, Docker, DockerError, HOLDER_INDEX, LABEL_CONTAINER, LABEL_INDEX, LABEL_INSTANCE, LABEL_OWNER, PAUSE_IMAGE,
};
use crate::spec::model::pod::NetworkMode;
use crate::spec::render::pod::{RenderedContainer, RenderedContainerPort, RenderedPod};
use bollard::models::{ContainerCreateBody, HostConfig, PortBinding, ThrottleDevice};
use bollard::query_parameters as q;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::path::Path;

/// The holder's program (src/runtime/docker/pause.c, built by build.rs), imported as
/// [`PAUSE_IMAGE`] when a pod first needs it: nothing is pulled.
const PAUSE_PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

/// How a pod's containers are identified and what else goes into them.
pub struct PodStart<'a> {
    /// `namespace/name/index`.
    pub instance: &'a str,
    /// `namespace.name.index`: the containers' name prefix.
    pub pod_id: &'a str,
    pub pod: &'a RenderedPod,
    /// Per container: env vars from secrets and configmaps.
    pub injected_env: &'a [Vec<(String, String)>],
    /// The same per init container.
    pub init_injected_env: &'a [Vec<(String, String)>],
    /// The spec's metadata labels, copied onto every container.
    pub labels: &'a std::collections::BTreeMap<String, String>,
    /// The instance's run directory: a failed start's output is kept there.
    pub log_dir: &'a Path,
    /// Networked by CNI: the holder is made with no network, and nothing is published.
    pub cni: bool,
    /// Values of seed-001 `$` variables known only now (a CNI pod's `HOST`, `BCS_CNI_NAME`):
    /// the env entries that copy them take them (see `RenderedContainer::copies`).
    pub dollar: &'a [(String, String)],
    /// A ClusterFirst pod's resolver (the daemon's responder and its search domains), before
    /// the pod's own `dnsConfig`.
    pub cluster_dns: Option<&'a crate::spec::pod::DnsConfig>,
}

/// A pod's network holder as started.
#[derive(Debug, Clone)]
pub struct Holder {
    pub id: String,
    /// Its pause process: the pod's network namespace is `/proc/PID/ns/net`.
    pub pid: i64,
}

/// The Docker network a pod's own network mode names.
fn own_network(start: &PodStart<'_>) -> String {
    match start.pod.network {
        NetworkMode::Host => "host".to_string(),
        NetworkMode::Bridge => "bridge".into(),
        NetworkMode::None => "none".into(),
        NetworkMode::User => start.pod.user_network.clone().unwrap_or_default(),
    }
}

/// The engine's request for `count` GPUs (-1: all), as `docker run --gpus N` makes it: any
/// driver that has the `gpu` capability (the NVIDIA runtime's). An engine without one refuses
/// the start with "could not select device driver", which fails the pod with that reason.
pub fn gpu_request(count: i64) -> bollard::models::DeviceRequest {
    bollard::models::DeviceRequest {
        driver: Some(String::new()),
        count: Some(count),
        device_ids: None,
        capabilities: Some(vec![vec!["gpu".to_string()]]),
        options: Some(HashMap::new()),
    }
}

/// The pod's host name, domain and resolver (seed 003 `hostname`, `subdomain`, `dns`,
/// `dnsConfig`) on the container that owns its network: its holder, or its only container.
fn pod_identity(start: &PodStart<'_>, body: &mut ContainerCreateBody) {
    let pod = start.pod;
    if !pod.hostname.is_empty() {
        body.hostname = Some(pod.hostname.clone());
    }
    if !pod.subdomain.is_empty() {
        body.domainname = Some(pod.subdomain.clone());
    }
    let Some(host) = body.host_config.as_mut() else { return };
    // The responder's server and searches first, the pod's own after them.
    let parts: Vec<&crate::spec::pod::DnsConfig> = start.cluster_dns.into_iter().chain(&pod.dns).collect();
    let list = |of: fn(&crate::spec::pod::DnsConfig) -> &Vec<String>| {
        let all: Vec<String> = parts.iter().flat_map(|d| of(d).iter().cloned()).collect();
        (!all.is_empty()).then_some(all)
    };
    host.dns = list(|d| &d.servers);
    host.dns_search = list(|d| &d.searches);
    host.dns_options = list(|d| &d.options);
}

impl Docker {
    /// Runs the pod's init containers to completion, one after another, then creates and
    /// starts its containers in order, all in one network namespace: the network holder's when
    /// there is more than one container or any init container (unless HOST), else the first
    /// container's own. Any failure removes what was created and names the container. Returns
    /// the containers' ids in spec order.
    ///
    /// `cancelled` is asked after every request: a start is never dropped half-way, since a
    /// create dockerd has received completes whether or not its answer is awaited (dropping it
    /// left a container in Created state that nobody tracked). Once cancelled, everything the
    /// start made is removed before it returns [`DockerError::Cancelled`].
    pub async fn start_pod(
        &self,
        start: &PodStart<'_>,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Vec<String>, DockerError> {
        let holder = self.start_pod_holder(start, cancelled).await?;
        self.start_pod_containers(start, holder.as_ref(), cancelled).await
    }

    /// A pod's first step: its instance's leftovers removed, then its network holder made when
    /// it needs one (always for a CNI pod: made with no network, its namespace given an address
    /// by the CNI plugins before the containers join it).
    pub async fn start_pod_holder(
        &self,
        start: &PodStart<'_>,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Option<Holder>, DockerError> {
        // Leftovers of an earlier run of this instance (kept for inspection until now).
        self.remove_instance(start.instance).await?;
        let shared_network = start.pod.containers.len() > 1 || !start.pod.init_containers.is_empty();
        if !(start.cni || shared_network && start.pod.network != NetworkMode::Host) {
            return Ok(None);
        }
        let network = if start.cni { "none".to_string() } else { own_network(start) };
        let holder = match self.start_holder(start, &network).await {
            Ok(id) if cancelled() => {
                let _ = self.remove(&id).await;
                Err(DockerError::Cancelled)
            }
            Ok(id) => match self.inspect(&id).await {
                Ok(info) if info.pid > 0 => Ok(Holder { id, pid: info.pid }),
                Ok(_) => {
                    Err(DockerError::Api { container: "(network holder)".into(), message: "it is not running".into() })
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match holder {
            Ok(h) => Ok(Some(h)),
            Err(e) => {
                let _ = self.remove_instance(start.instance).await;
                Err(e)
            }
        }
    }

    /// A pod's second step: its init containers run to completion, then its containers
    /// created and started in order, in `holder`'s network namespace when there is one. Any
    /// failure removes everything of the instance (the holder too).
    pub async fn start_pod_containers(
        &self,
        start: &PodStart<'_>,
        holder: Option<&Holder>,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Vec<String>, DockerError> {
        let topology = numa::Topology::read(&self.numa_root);
        let own_network = own_network(start);
        let holder = holder.map(|h| h.id.clone());
        let holder_network = || holder.as_ref().map_or(own_network.clone(), |h| format!("container:{h}"));
        for (n, c) in start.pod.init_containers.iter().enumerate() {
            let ran = self.run_init_container(start, (n, c), holder_network(), &topology, cancelled).await;
            if let Err(e) = ran {
                let _ = self.remove_instance(start.instance).await;
                return Err(e);
            }
        }
        let mut ids: Vec<String> = Vec::new();
        for (i, c) in start.pod.containers.iter().enumerate() {
            let network = match holder.as_ref().or(ids.first()) {
                Some(owner) => format!("container:{owner}"),
                None => own_network.clone(),
            };
            // Ports are published by whichever container owns the network namespace.
            let publish = holder.is_none() && i == 0;
            let result = async {
                let env = start.injected_env.get(i).map(Vec::as_slice).unwrap_or_default();
                let body = self.container_body(start, c, env, &i.to_string(), network, &topology, publish).await?;
                let name = format!("steward-{}-{}", start.pod_id, c.name);
                let options = q::CreateContainerOptions { name: Some(name), ..Default::default() };
                let created =
                    self.client()?.create_container(Some(options), body).await.map_err(|e| self.error(&c.name, e))?;
                ids.push(created.id.clone());
                self.client()?
                    .start_container(&created.id, None::<q::StartContainerOptions>)
                    .await
                    .map_err(|e| self.error(&c.name, e))
            }
            .await;
            let result = match result {
                Ok(()) if cancelled() => Err(DockerError::Cancelled),
                other => other,
            };
            if let Err(e) = result {
                // What the started containers said is often why the start failed: kept.
                for (id, c) in ids.iter().zip(&start.pod.containers) {
                    self.save_output(id, start.log_dir, &c.name).await;
                }
                for id in ids.iter().chain(holder.as_ref()) {
                    let _ = self.remove(id).await;
                }
                let _ = self.remove_instance(start.instance).await;
                return Err(e);
            }
        }
        Ok(ids)
    }

    /// Creates and starts the pod's network holder: the pod's network, its published ports
    /// (none on CNI: the pod's own address is where it listens), the pause program. Returns its
    /// id.
    async fn start_holder(&self, start: &PodStart<'_>, network: &str) -> Result<String, DockerError> {
        const NAME: &str = "(network holder)";
        self.ensure_pause_image().await?;
        let mut labels: HashMap<String, String> = HashMap::new();
        labels.insert(LABEL_OWNER.into(), self.owner.clone());
        labels.insert(LABEL_INSTANCE.into(), start.instance.into());
        labels.insert(LABEL_CONTAINER.into(), HOLDER_INDEX.into());
        labels.insert(LABEL_INDEX.into(), HOLDER_INDEX.into());
        let ports: Vec<&RenderedContainerPort> = start.pod.containers.iter().flat_map(|c| &c.ports).collect();
        let (exposed, bindings) = if start.cni { Default::default() } else { self.publishing(&ports) };
        let mut body = ContainerCreateBody {
            image: Some(PAUSE_IMAGE.into()),
            entrypoint: Some(vec!["/pause".into()]),
            labels: Some(labels),
            exposed_ports: (!exposed.is_empty()).then_some(exposed),
            host_config: Some(HostConfig {
                network_mode: Some(network.to_string()),
                port_bindings: (!bindings.is_empty()).then_some(bindings),
                cgroup_parent: self.cgroup_parent_for(start.instance).await,
                ..Default::default()
            }),
            ..Default::default()
        };
        // The containers that join its network take its name and resolver (Docker gives a
        // `container:` network's joiner the owner's hostname and resolv.conf).
        pod_identity(start, &mut body);
        let name = format!("steward-{}-network", start.pod_id);
        let options = q::CreateContainerOptions { name: Some(name), ..Default::default() };
        let created = self.client()?.create_container(Some(options), body).await.map_err(|e| self.error(NAME, e))?;
        let started = self.client()?.start_container(&created.id, None::<q::StartContainerOptions>).await;
        if let Err(e) = started {
            let _ = self.remove(&created.id).await;
            return Err(self.error(NAME, e));
        }
        Ok(created.id)
    }

    /// Imports [`PAUSE_IMAGE`] (one file, /pause) unless the engine has it.
    async fn ensure_pause_image(&self) -> Result<(), DockerError> {
        match self.client()?.inspect_image(PAUSE_IMAGE).await {
            Ok(_) => return Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => return Err(self.image_error(PAUSE_IMAGE, e)),
        }
        let failed = |e: std::io::Error| DockerError::Api {
            container: PAUSE_IMAGE.into(),
            message: format!("cannot build the pause image: {e}"),
        };
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(PAUSE_PROGRAM.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        archive.append_data(&mut header, "pause", PAUSE_PROGRAM).map_err(failed)?;
        let tar = archive.into_inner().map_err(failed)?;
        let (repo, tag) = PAUSE_IMAGE.split_once(':').expect("PAUSE_IMAGE is repo:tag");
        let options = q::CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(repo.into()),
            tag: Some(tag.into()),
            ..Default::default()
        };
        let mut progress = self.client()?.create_image(Some(options), Some(bollard::body_full(tar.into())), None);
        while let Some(step) = progress.next().await {
            step.map_err(|e| self.image_error(PAUSE_IMAGE, e))?;
        }
        tracing::info!("imported {PAUSE_IMAGE} (the pods' network holder)");
        Ok(())
    }

    /// Exposed ports and their bindings on this daemon's publish address.
    #[allow(clippy::type_complexity)]
    fn publishing(
        &self,
        ports: &[&RenderedContainerPort],
    ) -> (HashMap<String, HashMap<(), ()>>, HashMap<String, Option<Vec<PortBinding>>>) {
        let mut exposed = HashMap::new();
        let mut bindings = HashMap::new();
        for p in ports {
            let proto = if p.protocol == crate::spec::model::Protocol::Udp { "udp" } else { "tcp" };
            let key = format!("{}/{proto}", p.container_port);
            exposed.insert(key.clone(), HashMap::new());
            let binding = PortBinding { host_ip: self.publish_ip.clone(), host_port: Some(p.host_port.to_string()) };
            bindings.insert(key, Some(vec![binding]));
        }
        (exposed, bindings)
    }

    /// The create request of a container (`index`: its `io.steward.index` label): seed 001's
    /// command rules, env (`injected_env` from secrets and configmaps after the spec's), ports,
    /// resources.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn container_body(
        &self,
        start: &PodStart<'_>,
        c: &RenderedContainer,
        injected_env: &[(String, String)],
        index: &str,
        network: String,
        topology: &numa::Topology,
        publish: bool,
    ) -> Result<ContainerCreateBody, DockerError> {
        let image = match self.client()?.inspect_image(&c.image).await {
            Ok(image) => image,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                return Err(DockerError::NoImage { image: c.image.clone() })
            }
            Err(e) => return Err(self.error(&c.name, e)),
        };
        let image_entrypoint = image.config.and_then(|c| c.entrypoint).filter(|e| !e.is_empty());
        // seed 001: a value replaces the entrypoint, arguments follow; without a value the
        // arguments go to the image's entrypoint; without either there is nothing to run.
        let (entrypoint, cmd) = match (&c.entrypoint, image_entrypoint) {
            (Some(value), _) => (Some(vec![value.clone()]), Some(c.arguments.clone())),
            (None, Some(_)) => (None, (!c.arguments.is_empty()).then(|| c.arguments.clone())),
            (None, None) => return Err(DockerError::NoCommand { container: c.name.clone(), image: c.image.clone() }),
        };
        let mut labels: HashMap<String, String> = start.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        labels.insert(LABEL_OWNER.into(), self.owner.clone());
        labels.insert(LABEL_INSTANCE.into(), start.instance.into());
        labels.insert(LABEL_CONTAINER.into(), c.name.clone());
        labels.insert(LABEL_INDEX.into(), index.to_string());
        // An entry that copies a `$` variable known only now takes its value.
        let late = |name: &str| {
            let var = c.copies.iter().find(|(entry, _)| entry == name).map(|(_, var)| var)?;
            start.dollar.iter().find(|(v, _)| v == var).map(|(_, value)| value.as_str())
        };
        // On CNI nothing is published (seed 001: random ports are CNM's): `PORT_<name>` (the
        // first entry of each, the spec's own may follow) is the port at the pod's address.
        let mut pod_ports: HashMap<String, String> = HashMap::new();
        if start.cni {
            for p in start.pod.containers.iter().flat_map(|c| &c.ports) {
                pod_ports.insert(format!("PORT_{}", p.name.replace('-', "_")), p.container_port.to_string());
            }
        }
        let env: Vec<String> = c
            .env
            .iter()
            .map(|e| match pod_ports.remove(&e.name) {
                Some(port) => (e.name.as_str(), port),
                None => (e.name.as_str(), late(&e.name).unwrap_or(e.value.as_str()).to_string()),
            })
            .chain(injected_env.iter().map(|(k, v)| (k.as_str(), v.clone())))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let (exposed, bindings) = if publish && !start.cni && start.pod.network != NetworkMode::Host {
            self.publishing(&c.ports.iter().collect::<Vec<_>>())
        } else {
            Default::default()
        };
        let r = &c.resources;
        let placement = r.cpu_cores.and_then(|cores| numa::place(topology, cores, r.cpu_set, &mut numa::random_below));
        let mb = |v: f64| (v * 1024.0 * 1024.0) as i64;
        let throttle = |list: &[(String, i64)]| {
            (!list.is_empty()).then(|| {
                list.iter().map(|(path, rate)| ThrottleDevice { path: Some(path.clone()), rate: Some(*rate) }).collect()
            })
        };
        let binds: Vec<String> = c
            .mounts
            .iter()
            .map(|m| {
                format!("{}:{}:{}", m.host_path.display(), m.container_path, if m.read_only { "ro" } else { "rw" })
            })
            .collect();
        let log_config = bollard::models::HostConfigLogConfig {
            typ: Some("json-file".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), self.log_max_bytes.to_string()),
                ("max-file".to_string(), "2".to_string()),
            ])),
        };
        let host_config = HostConfig {
            network_mode: Some(network),
            log_config: Some(log_config),
            port_bindings: (!bindings.is_empty()).then_some(bindings),
            binds: (!binds.is_empty()).then_some(binds),
            cpu_shares: r.cpu_shares(),
            cpu_period: (r.cpu_quota && r.cpu_cores.is_some()).then_some(100_000),
            cpu_quota: r.cpu_cores.filter(|_| r.cpu_quota).map(|c| (c * 100_000.0) as i64),
            cpuset_cpus: placement.as_ref().map(numa::Placement::cpus_text),
            cpuset_mems: placement.as_ref().and_then(|p| p.mems.map(|m| m.to_string())),
            memory: r.memory_mb.map(mb),
            // seed 001: a swap limit below memory means none.
            memory_swap: r.memory_swap_mb.and_then(|s| match (s, r.memory_mb) {
                (-1, _) => Some(-1),
                (s, Some(m)) if (s as f64) >= m => Some(mb(s as f64)),
                _ => None,
            }),
            memory_swappiness: r.swappiness,
            // Docker's own spelling of unlimited is -1.
            pids_limit: Some(r.tasks.unwrap_or(self.default_tasks_max).map_or(-1, |n| n as i64)),
            blkio_device_read_bps: throttle(&r.read_bps),
            blkio_device_write_bps: throttle(&r.write_bps),
            blkio_device_read_iops: throttle(&r.read_iops),
            blkio_device_write_iops: throttle(&r.write_iops),
            device_requests: r.gpus.map(|count| vec![gpu_request(count)]),
            ..Default::default()
        };
        let owns_network = !host_config.network_mode.as_deref().unwrap_or_default().starts_with("container:");
        let host_config = HostConfig {
            cgroup_parent: self.cgroup_parent_for(start.instance).await,
            pid_mode: start.pod.host.pid.then(|| "host".to_string()),
            ipc_mode: start.pod.host.ipc.then(|| "host".to_string()),
            ..host_config
        };
        let mut body = ContainerCreateBody {
            image: Some(c.image.clone()),
            entrypoint,
            cmd,
            env: Some(env),
            labels: Some(labels),
            exposed_ports: (!exposed.is_empty()).then_some(exposed),
            host_config: Some(host_config),
            tty: c.tty.then_some(true),
            working_dir: (!c.working_dir.is_empty()).then(|| c.working_dir.clone()),
            ..Default::default()
        };
        if owns_network {
            pod_identity(start, &mut body);
        }
        Ok(body)
    }
}
