//! Pods on the Docker Engine API (seed 001), through bollard: create and start a pod's
//! containers in order (the first is the main one, the others join its network namespace),
//! wait for their exits, stop or kill them, inspect them, follow their logs into files, run
//! COMMAND checks in them, and find the containers carrying our labels.

pub mod numa;

use crate::spec::model::pod::NetworkMode;
use crate::spec::render::pod::{RenderedContainer, RenderedContainerPort, RenderedPod};
use bollard::models::{ContainerCreateBody, HostConfig, PortBinding, ThrottleDevice};
use bollard::query_parameters as q;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which daemon owns a container (its state directory): daemons sharing one dockerd never
/// touch each other's containers.
pub const LABEL_OWNER: &str = "io.steward.owner";
/// `namespace/name/index` of the instance a container belongs to.
pub const LABEL_INSTANCE: &str = "io.steward.instance";
/// The container's name in the pod spec.
pub const LABEL_CONTAINER: &str = "io.steward.container";
/// The container's place in the pod (0 = main).
pub const LABEL_INDEX: &str = "io.steward.index";
/// `io.steward.index` of a pod's network holder: the first container of a pod with more than
/// one (unless HOST), whose network namespace the others join, so a main container that exits
/// at once does not take the pod's network with it (Kubernetes' pause container).
pub const HOLDER_INDEX: &str = "network";
/// The holder's program (src/runtime/docker/pause.c, built by build.rs), imported as
/// [`PAUSE_IMAGE`] when a pod first needs it: nothing is pulled.
const PAUSE_PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));
/// The holder's image, one per Steward version.
pub const PAUSE_IMAGE: &str = concat!("steward-pause:", env!("CARGO_PKG_VERSION"));

/// Engine API version spoken: old enough for the Debian 12 dockerd (20.10), new enough for all
/// the fields used here.
const API_VERSION: bollard::ClientVersion = bollard::ClientVersion { major_version: 1, minor_version: 41 };
/// Requests other than waits and log streams give up after this long.
const REQUEST_TIMEOUT_SECS: u64 = 60;

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// dockerd does not answer (not running, socket gone, connection cut).
    #[error("dockerd at {socket} is unreachable: {why}")]
    Unreachable { socket: String, why: String },
    #[error("image {image:?} is not on this host (images are not pulled by Steward; docker load or import it)")]
    NoImage { image: String },
    #[error("container {container:?}: image {image:?} has no entrypoint and command.value is empty, so there is nothing to run")]
    NoCommand { container: String, image: String },
    #[error("no such container {0}")]
    NoContainer(String),
    #[error("container {container:?}: {message}")]
    Api { container: String, message: String },
    /// A stop or delete came while the pod was starting: what was created is removed.
    #[error("pod start cancelled")]
    Cancelled,
}

impl DockerError {
    pub fn is_unreachable(&self) -> bool {
        matches!(self, DockerError::Unreachable { .. })
    }
}

/// Seed 001's `BcsContainerInfo`, field names as the seed spells them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContainerInfo {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Pid", default)]
    pub pid: i64,
    #[serde(rename = "StartAt", default)]
    pub start_at: String,
    #[serde(rename = "FinishAt", default)]
    pub finish_at: String,
    /// created, running, paused, restarting, exited, dead.
    #[serde(rename = "Status", default)]
    pub status: String,
    #[serde(rename = "ExitCode", default)]
    pub exit_code: i64,
    #[serde(rename = "Hostname", default)]
    pub hostname: String,
    #[serde(rename = "NetworkMode", default)]
    pub network_mode: String,
    #[serde(rename = "IPAddress", default)]
    pub ip_address: String,
    /// The kernel's OOM killer ended it (over its memory limit).
    #[serde(rename = "OOMKilled", default, skip_serializing_if = "std::ops::Not::not")]
    pub oom_killed: bool,
}

impl ContainerInfo {
    pub fn is_running(&self) -> bool {
        matches!(self.status.as_str(), "running" | "restarting" | "paused")
    }
}

/// A labelled container as listed.
#[derive(Debug, Clone)]
pub struct Labelled {
    pub id: String,
    pub instance: String,
    pub name: String,
    pub running: bool,
    /// The pod's network holder (see [`HOLDER_INDEX`]), not one of its containers.
    pub holder: bool,
}

/// How a pod's containers are identified and what else goes into them.
pub struct PodStart<'a> {
    /// `namespace/name/index`.
    pub instance: &'a str,
    /// `namespace.name.index`: the containers' name prefix.
    pub pod_id: &'a str,
    pub pod: &'a RenderedPod,
    /// Per container: env vars from secrets and configmaps.
    pub injected_env: &'a [Vec<(String, String)>],
    /// The spec's metadata labels, copied onto every container.
    pub labels: &'a std::collections::BTreeMap<String, String>,
    /// The instance's run directory: a failed start's output is kept there.
    pub log_dir: &'a Path,
}

#[derive(Clone)]
pub struct Docker {
    /// Made at the first request that finds the socket: dockerd may be installed or started
    /// after stewardd, and the daemon must start without it.
    client: std::sync::Arc<std::sync::Mutex<Option<bollard::Docker>>>,
    socket: String,
    numa_root: PathBuf,
    owner: String,
    /// Where pods' ports are published (the daemon's host_ip); None: every address.
    publish_ip: Option<String>,
    /// Docker's own copy of a container's output (json-file) is kept to this size, two files.
    log_max_bytes: u64,
}

impl Docker {
    /// A client for the engine at `socket` (nothing is connected until the first request).
    /// `numa_root` is where the NUMA topology is read (`/sys/devices/system/node`); `owner`
    /// marks this daemon's containers.
    pub fn new(socket: &Path, numa_root: &Path, owner: &str) -> Docker {
        Docker {
            client: Default::default(),
            socket: socket.display().to_string(),
            numa_root: numa_root.to_path_buf(),
            owner: owner.to_string(),
            publish_ip: None,
            log_max_bytes: 10 * 1024 * 1024,
        }
    }

    /// Pods publish their ports on `publish_ip` only, and Docker keeps at most two files of
    /// `log_max_bytes` of each container's output (Steward's own log files hold it too).
    pub fn with_pod_defaults(mut self, publish_ip: &str, log_max_bytes: u64) -> Docker {
        self.publish_ip = Some(publish_ip.to_string());
        self.log_max_bytes = log_max_bytes.max(4096);
        self
    }

    /// The API client, connected on first use (bollard checks that the socket exists).
    fn client(&self) -> Result<bollard::Docker, DockerError> {
        let mut slot = self.client.lock().expect("docker client lock");
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = bollard::Docker::connect_with_unix(&self.socket, REQUEST_TIMEOUT_SECS, &API_VERSION)
            .map_err(|e| DockerError::Unreachable { socket: self.socket.clone(), why: e.to_string() })?;
        *slot = Some(c.clone());
        Ok(c)
    }

    fn error(&self, container: &str, e: bollard::errors::Error) -> DockerError {
        use bollard::errors::Error as E;
        match e {
            E::DockerResponseServerError { status_code: 404, message } if message.contains("No such container") => {
                DockerError::NoContainer(container.to_string())
            }
            E::DockerResponseServerError { message, .. } => {
                DockerError::Api { container: container.to_string(), message }
            }
            E::DockerContainerWaitError { error, code } => {
                DockerError::Api { container: container.to_string(), message: format!("wait: {error} ({code})") }
            }
            other => DockerError::Unreachable { socket: self.socket.clone(), why: other.to_string() },
        }
    }

    pub async fn ping(&self) -> Result<(), DockerError> {
        self.client()?.ping().await.map(|_| ()).map_err(|e| self.error("", e))
    }

    /// Creates and starts the pod's containers in order; the first one's id is the network the
    /// others join. Any failure removes what was created and names the container. Returns the
    /// containers' ids in spec order.
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
        // Leftovers of an earlier run of this instance (kept for inspection until now).
        self.remove_instance(start.instance).await?;
        let topology = numa::Topology::read(&self.numa_root);
        let own_network = match start.pod.network {
            NetworkMode::Host => "host".to_string(),
            NetworkMode::Bridge => "bridge".into(),
            NetworkMode::None => "none".into(),
            NetworkMode::User => start.pod.user_network.clone().unwrap_or_default(),
        };
        let holder = if start.pod.containers.len() > 1 && start.pod.network != NetworkMode::Host {
            let holder = match self.start_holder(start, &own_network).await {
                Ok(id) if cancelled() => {
                    let _ = self.remove(&id).await;
                    Err(DockerError::Cancelled)
                }
                other => other,
            };
            match holder {
                Ok(id) => Some(id),
                Err(e) => {
                    let _ = self.remove_instance(start.instance).await;
                    return Err(e);
                }
            }
        } else {
            None
        };
        let mut ids: Vec<String> = Vec::new();
        for (i, c) in start.pod.containers.iter().enumerate() {
            let network = match holder.as_ref().or(ids.first()) {
                Some(owner) => format!("container:{owner}"),
                None => own_network.clone(),
            };
            // Ports are published by whichever container owns the network namespace.
            let publish = holder.is_none() && i == 0;
            let result = async {
                let body = self.container_body(start, i, c, network, &topology, publish).await?;
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

    /// Creates and starts the pod's network holder: the pod's network, its published ports,
    /// the pause program. Returns its id.
    async fn start_holder(&self, start: &PodStart<'_>, network: &str) -> Result<String, DockerError> {
        const NAME: &str = "(network holder)";
        self.ensure_pause_image().await?;
        let mut labels: HashMap<String, String> = HashMap::new();
        labels.insert(LABEL_OWNER.into(), self.owner.clone());
        labels.insert(LABEL_INSTANCE.into(), start.instance.into());
        labels.insert(LABEL_CONTAINER.into(), HOLDER_INDEX.into());
        labels.insert(LABEL_INDEX.into(), HOLDER_INDEX.into());
        let ports: Vec<&RenderedContainerPort> = start.pod.containers.iter().flat_map(|c| &c.ports).collect();
        let (exposed, bindings) = self.publishing(&ports);
        let body = ContainerCreateBody {
            image: Some(PAUSE_IMAGE.into()),
            entrypoint: Some(vec!["/pause".into()]),
            labels: Some(labels),
            exposed_ports: (!exposed.is_empty()).then_some(exposed),
            host_config: Some(HostConfig {
                network_mode: Some(network.to_string()),
                port_bindings: (!bindings.is_empty()).then_some(bindings),
                ..Default::default()
            }),
            ..Default::default()
        };
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
            Err(e) => return Err(self.error(PAUSE_IMAGE, e)),
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
            step.map_err(|e| self.error(PAUSE_IMAGE, e))?;
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

    /// Appends everything container `id` has written to the log files of `name` in `dir` (with
    /// Docker's timestamps), as the follower would have: for a container about to be removed
    /// before anything followed it.
    async fn save_output(&self, id: &str, dir: &Path, name: &str) {
        use tokio::io::AsyncWriteExt;
        let Ok(client) = self.client() else { return };
        let options =
            q::LogsOptions { stdout: true, stderr: true, timestamps: true, tail: "all".into(), ..Default::default() };
        let mut stream = client.logs(id, Some(options));
        // In the run directory, as root: never through a symlink or hard link (see safefs).
        let open = |stream: &str| {
            let path = dir.join(format!("{name}.{stream}.log"));
            async move {
                let f = tokio::task::spawn_blocking(move || crate::safefs::open_log(&path)).await??;
                Ok::<_, std::io::Error>(tokio::fs::File::from_std(f))
            }
        };
        let (Ok(mut out), Ok(mut err)) = (open("stdout").await, open("stderr").await) else { return };
        while let Some(Ok(chunk)) = stream.next().await {
            let _ = match chunk {
                bollard::container::LogOutput::StdErr { message } => err.write_all(&message).await,
                other => out.write_all(other.as_ref()).await,
            };
        }
    }

    /// Removes the network holder of `instance`, if it has one (its pod has stopped).
    pub async fn remove_holder(&self, instance: &str) -> Result<(), DockerError> {
        for c in self.labelled().await?.into_iter().filter(|c| c.instance == instance && c.holder) {
            self.remove(&c.id).await?;
        }
        Ok(())
    }

    /// The create request of container `i`: seed 001's command rules, env, ports, resources.
    async fn container_body(
        &self,
        start: &PodStart<'_>,
        i: usize,
        c: &RenderedContainer,
        network: String,
        topology: &numa::Topology,
        publish: bool,
    ) -> Result<ContainerCreateBody, DockerError> {
        let injected_env = start.injected_env.get(i).map(Vec::as_slice).unwrap_or_default();
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
        labels.insert(LABEL_INDEX.into(), i.to_string());
        let env: Vec<String> = c
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()))
            .chain(injected_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let (exposed, bindings) = if publish && start.pod.network != NetworkMode::Host {
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
            blkio_device_read_bps: throttle(&r.read_bps),
            blkio_device_write_bps: throttle(&r.write_bps),
            blkio_device_read_iops: throttle(&r.read_iops),
            blkio_device_write_iops: throttle(&r.write_iops),
            ..Default::default()
        };
        Ok(ContainerCreateBody {
            image: Some(c.image.clone()),
            entrypoint,
            cmd,
            env: Some(env),
            labels: Some(labels),
            exposed_ports: (!exposed.is_empty()).then_some(exposed),
            host_config: Some(host_config),
            ..Default::default()
        })
    }

    /// Seed 001's container info, from docker inspect.
    pub async fn inspect(&self, id: &str) -> Result<ContainerInfo, DockerError> {
        let c = self
            .client()?
            .inspect_container(id, None::<q::InspectContainerOptions>)
            .await
            .map_err(|e| self.error(id, e))?;
        let state = c.state.unwrap_or_default();
        let settings = c.network_settings.unwrap_or_default();
        // Bridge mode fills the top-level address; user networks only their own entry.
        let ip = settings.ip_address.filter(|a| !a.is_empty()).or_else(|| {
            settings.networks.unwrap_or_default().values().find_map(|n| n.ip_address.clone().filter(|a| !a.is_empty()))
        });
        let network_mode = c.host_config.as_ref().and_then(|h| h.network_mode.clone()).unwrap_or_default();
        // A container in another's network (the pod's holder, or its main container) has that
        // one's address: the pod's.
        let ip = match (ip, network_mode.strip_prefix("container:")) {
            (None, Some(owner)) => {
                Box::pin(self.inspect(owner)).await.ok().map(|o| o.ip_address).filter(|a| !a.is_empty())
            }
            (ip, _) => ip,
        };
        let zero_time = |t: Option<String>| t.filter(|t| !t.starts_with("0001-")).unwrap_or_default();
        Ok(ContainerInfo {
            id: c.id.unwrap_or_default(),
            name: c.name.unwrap_or_default().trim_start_matches('/').to_string(),
            pid: state.pid.unwrap_or(0),
            start_at: zero_time(state.started_at),
            finish_at: zero_time(state.finished_at),
            status: state.status.map(|s| s.to_string()).unwrap_or_default(),
            exit_code: state.exit_code.unwrap_or(0),
            hostname: c.config.and_then(|c| c.hostname).unwrap_or_default(),
            network_mode,
            ip_address: ip.unwrap_or_default(),
            oom_killed: state.oom_killed.unwrap_or(false),
        })
    }

    /// Waits until the container stops; its exit code. A dropped connection is Unreachable.
    pub async fn wait(&self, id: &str) -> Result<i64, DockerError> {
        let options = q::WaitContainerOptions { condition: "not-running".into() };
        let mut stream = self.client()?.wait_container(id, Some(options));
        match stream.next().await {
            Some(Ok(r)) => Ok(r.status_code),
            // bollard turns a non-zero exit into this error.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(e)) => Err(self.error(id, e)),
            None => {
                Err(DockerError::Unreachable { socket: self.socket.clone(), why: "wait ended without a status".into() })
            }
        }
    }

    /// SIGTERM, up to `grace`, then SIGKILL (docker stop). A gone or stopped container is fine.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), DockerError> {
        let options = q::StopContainerOptions { t: Some(grace.as_secs() as i32), signal: None };
        match self.client()?.stop_container(id, Some(options)).await.map_err(|e| self.error(id, e)) {
            Ok(()) | Err(DockerError::NoContainer(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sends `signal` (SIGKILL, SIGHUP, ...). A container that is not running is fine.
    pub async fn signal(&self, id: &str, signal: &str) -> Result<(), DockerError> {
        let options = q::KillContainerOptions { signal: signal.into() };
        match self.client()?.kill_container(id, Some(options)).await.map_err(|e| self.error(id, e)) {
            Ok(()) | Err(DockerError::NoContainer(_)) => Ok(()),
            Err(DockerError::Api { message, .. }) if message.contains("is not running") => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn remove(&self, id: &str) -> Result<(), DockerError> {
        let options = q::RemoveContainerOptions { force: true, v: true, link: false };
        match self.client()?.remove_container(id, Some(options)).await.map_err(|e| self.error(id, e)) {
            Ok(()) | Err(DockerError::NoContainer(_)) => Ok(()),
            Err(DockerError::Api { message, .. }) if message.contains("already in progress") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Removes every container of `instance` (by label), running or not.
    pub async fn remove_instance(&self, instance: &str) -> Result<(), DockerError> {
        for c in self.labelled().await?.into_iter().filter(|c| c.instance == instance) {
            self.remove(&c.id).await?;
        }
        Ok(())
    }

    /// Every container (running or not) that carries this daemon's owner label.
    pub async fn labelled(&self) -> Result<Vec<Labelled>, DockerError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_OWNER}={}", self.owner)])]);
        let options = q::ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let list = self.client()?.list_containers(Some(options)).await.map_err(|e| self.error("", e))?;
        Ok(list
            .into_iter()
            .map(|c| {
                let labels = c.labels.unwrap_or_default();
                let running = c.state.is_some_and(|s| s.to_string() == "running");
                Labelled {
                    running,
                    holder: labels.get(LABEL_INDEX).is_some_and(|i| i == HOLDER_INDEX),
                    id: c.id.unwrap_or_default(),
                    instance: labels.get(LABEL_INSTANCE).cloned().unwrap_or_default(),
                    name: c.names.and_then(|n| n.into_iter().next()).unwrap_or_default(),
                }
            })
            .collect())
    }

    /// Runs `command` with `/bin/sh -c` in the container: exit 0 within `timeout` is healthy.
    pub async fn exec_check(&self, id: &str, command: &str, timeout: Duration) -> crate::health::Outcome {
        use crate::health::Outcome;
        let run = async {
            let config = bollard::models::ExecConfig {
                cmd: Some(vec!["/bin/sh".into(), "-c".into(), command.into()]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            };
            let exec = self.client()?.create_exec(id, config).await.map_err(|e| self.error(id, e))?;
            let started = self.client()?.start_exec(&exec.id, None).await.map_err(|e| self.error(id, e))?;
            if let bollard::exec::StartExecResults::Attached { mut output, .. } = started {
                while output.next().await.is_some() {}
            }
            let inspected = self.client()?.inspect_exec(&exec.id).await.map_err(|e| self.error(id, e))?;
            Ok::<_, DockerError>(inspected.exit_code.unwrap_or(-1))
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(0)) => Outcome::Pass,
            Ok(Ok(code)) => Outcome::Fail(format!("check command exited with code {code}")),
            Ok(Err(e)) => Outcome::Fail(format!("cannot run the check command: {e}")),
            Err(_) => Outcome::Fail(format!("check command did not finish within {}s", timeout.as_secs())),
        }
    }

    /// Appends the container's output to `<dir>/<name>.stdout.log` and `.stderr.log` (where
    /// `steward logs` and log rotation find every instance's output) until it stops, resuming
    /// where an earlier follower of the same container left off (see [`LogPosition`]): a
    /// daemon restart neither replays nor loses a line.
    pub fn follow_logs(&self, id: &str, dir: &Path, name: &str) -> tokio::task::JoinHandle<()> {
        let (client, id) = (self.client(), id.to_string());
        let (out, err) = (dir.join(format!("{name}.stdout.log")), dir.join(format!("{name}.stderr.log")));
        let position_file = dir.join(format!(".{name}.logpos"));
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // In the run directory, as root: never through a symlink or hard link (see safefs).
            let open = |p: PathBuf| async move {
                let f = tokio::task::spawn_blocking(move || crate::safefs::open_log(&p)).await??;
                Ok::<_, std::io::Error>(tokio::fs::File::from_std(f))
            };
            let Ok(client) = client else { return };
            let (Ok(mut out_file), Ok(mut err_file)) = (open(out.clone()).await, open(err.clone()).await) else {
                return;
            };
            let mut position = LogPosition::resume(&position_file, &id, &out, &err);
            if position.last.is_empty() {
                // A new container: its run begins here in both files.
                let now = crate::clock::now_ms();
                let marker = format!("{} {}", crate::clock::rfc3339_utc(now), crate::logs::run_marker(now));
                let _ = out_file.write_all(marker.as_bytes()).await;
                let _ = err_file.write_all(marker.as_bytes()).await;
            }
            let options = q::LogsOptions {
                follow: true,
                stdout: true,
                stderr: true,
                timestamps: true,
                tail: "all".into(),
                ..Default::default()
            };
            let mut stream = client.logs(&id, Some(options));
            while let Some(Ok(chunk)) = stream.next().await {
                let is_err = matches!(chunk, bollard::container::LogOutput::StdErr { .. });
                let Some((stamp, _)) = split_timestamp(chunk.as_ref()) else { continue };
                if !position.is_new(&stamp) {
                    continue;
                }
                let (file, path) = if is_err { (&mut err_file, &err) } else { (&mut out_file, &out) };
                // The position first, naming the file's length before this line: a crash
                // between the two writes is told apart at resume by that length.
                position.advance(&position_file, stamp, is_err, path);
                // With Docker's timestamp in front: `steward logs --timestamps` shows it.
                let _ = file.write_all(chunk.as_ref()).await;
            }
        })
    }
}

/// Where following a container's output stopped: the Docker timestamp of the last line taken,
/// and the length its log file had before that line was written. Kept in a small file beside
/// the logs and written before each line. At resume, a log file longer than that length holds
/// the line (or was rotated since: taken as holding it); one of exactly that length lost the
/// line to a crash between the two writes, so it is taken again.
#[derive(Debug, Default)]
struct LogPosition {
    container: String,
    /// Sortable form of the last line's timestamp (see [`sortable_stamp`]); lines at or before
    /// it are skipped.
    last: String,
}

impl LogPosition {
    fn resume(file: &Path, container: &str, out: &Path, err: &Path) -> LogPosition {
        let fresh = LogPosition { container: container.to_string(), last: String::new() };
        let Ok(data) = crate::safefs::read_daemon_file(file, 4096) else { return fresh };
        let text = String::from_utf8_lossy(&data);
        // "<container> <stamp> <previous stamp> <out|err> <length before>"
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [id, stamp, previous, stream, length] = parts.as_slice() else { return fresh };
        if *id != container {
            return fresh; // another run's container: its output starts afresh
        }
        let path = if *stream == "err" { err } else { out };
        let now = crate::safefs::daemon_file_len(path);
        let written = !length.parse::<u64>().is_ok_and(|before| now == before);
        let last = if written { stamp } else { previous };
        LogPosition { container: container.to_string(), last: last.trim_start_matches('-').to_string() }
    }

    fn is_new(&self, stamp: &str) -> bool {
        stamp > self.last.as_str()
    }

    /// Records `stamp` as taken, about to be appended to `path`.
    fn advance(&mut self, file: &Path, stamp: String, is_err: bool, path: &Path) {
        let before = crate::safefs::daemon_file_len(path);
        let previous = if self.last.is_empty() { "-".to_string() } else { self.last.clone() };
        let stream = if is_err { "err" } else { "out" };
        let text = format!("{} {stamp} {previous} {stream} {before}\n", self.container);
        if let Err(e) = write_small(file, text.as_bytes()) {
            tracing::warn!("cannot record the log position in {}: {e}", file.display());
        }
        self.last = stamp;
    }
}

/// Overwrites a small file in place (one write; a reader sees old or new bytes, and the
/// content is padded to a fixed width so a shorter record never leaves a longer one's tail).
fn write_small(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut padded = data.to_vec();
    padded.resize(data.len().max(256), b' ');
    // In the run directory, as root: never through a symlink or hard link (see safefs).
    crate::safefs::write_daemon_file(path, &padded, 0o600)
}

/// Splits Docker's `2026-11-24T22:50:01.12345Z message` (logs with timestamps) into a sortable
/// stamp and the message.
fn split_timestamp(chunk: &[u8]) -> Option<(String, &[u8])> {
    let space = chunk.iter().position(|b| *b == b' ')?;
    let stamp = std::str::from_utf8(&chunk[..space]).ok()?;
    Some((sortable_stamp(stamp)?, &chunk[space + 1..]))
}

/// Docker prints RFC 3339 with nanoseconds, trailing zeros trimmed (`…:01.5Z`): padded to nine
/// digits, the stamps sort as text in time order.
fn sortable_stamp(stamp: &str) -> Option<String> {
    let body = stamp.strip_suffix('Z')?;
    let (seconds, fraction) = body.split_once('.').unwrap_or((body, ""));
    if seconds.len() != 19 || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(format!("{seconds}.{fraction:0<9}"))
}

#[cfg(test)]
mod log_position_tests {
    use super::*;

    #[test]
    fn docker_stamps_sort_as_text_once_padded() {
        let a = sortable_stamp("2026-11-24T22:50:01.5Z").unwrap();
        let b = sortable_stamp("2026-11-24T22:50:01.123456789Z").unwrap();
        let c = sortable_stamp("2026-11-24T22:50:02Z").unwrap();
        assert_eq!(a, "2026-11-24T22:50:01.500000000");
        assert!(b < a && a < c, "{b} {a} {c}");
        assert!(sortable_stamp("yesterday").is_none());
        let (stamp, message) = split_timestamp(b"2026-11-24T22:50:01.5Z hello world\n").unwrap();
        assert_eq!((stamp.as_str(), message), ("2026-11-24T22:50:01.500000000", &b"hello world\n"[..]));
    }

    #[test]
    fn resume_takes_a_line_again_only_if_the_crash_came_before_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let (pos, out, err) =
            (dir.path().join(".c.logpos"), dir.path().join("c.stdout.log"), dir.path().join("c.stderr.log"));
        std::fs::write(&out, "line-1\n").unwrap();
        let mut p = LogPosition::resume(&pos, "abc", &out, &err);
        assert!(p.is_new("2026-01-01T00:00:00.000000001"), "nothing recorded: everything is new");
        p.advance(&pos, "2026-01-01T00:00:01.000000000".into(), false, &out);
        // Crash before the line was appended: the file has the recorded length; taken again.
        let again = LogPosition::resume(&pos, "abc", &out, &err);
        assert!(again.is_new("2026-01-01T00:00:01.000000000"));
        // Appended: skipped at resume.
        std::fs::write(&out, "line-1\nline-2\n").unwrap();
        let after = LogPosition::resume(&pos, "abc", &out, &err);
        assert!(!after.is_new("2026-01-01T00:00:01.000000000"));
        assert!(after.is_new("2026-01-01T00:00:01.000000001"));
        // Another container (a new run): from its start.
        let other = LogPosition::resume(&pos, "def", &out, &err);
        assert!(other.is_new("2000-01-01T00:00:00.000000000"));
    }
}
