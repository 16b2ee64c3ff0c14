//! Pods on the Docker Engine API (seed 001), through bollard: create and start a pod's
//! containers in order (the first is the main one, the others join its network namespace),
//! wait for their exits, stop or kill them, inspect them, follow their logs into files, run
//! COMMAND checks in them, and find the containers carrying our labels.
//!
//! This file holds the client, the labels and the calls on one container; starting a pod is
//! in pod.rs, its output in logs.rs, COMMAND checks in exec.rs, cpuset placement in numa.rs,
//! files copied in (`steward cp`) in archive.rs.

mod archive;
mod exec;
mod init;
mod logs;
pub mod numa;
mod pod;
mod pull;

pub use pod::{gpu_request, Holder, PodStart};
pub use pull::{parse_docker_config, PullOutcome, RegistryAuth};

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
/// The container's place in the pod (0 = main; `init-N` for init container N).
pub const LABEL_INDEX: &str = "io.steward.index";
/// `io.steward.index` of a pod's network holder: the first container of a pod with more than
/// one (unless HOST), whose network namespace the others join, so a main container that exits
/// at once does not take the pod's network with it (Kubernetes' pause container).
pub const HOLDER_INDEX: &str = "network";
/// The holder's image, one per Steward version (its program is in pod.rs).
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
    #[error("image {image:?} is not on this host (imagePullPolicy Never: docker load or import it)")]
    NoImage { image: String },
    /// The pull failed: the engine's message, which is the registry's.
    #[error("pulling image {image:?}: {message}")]
    Pull { image: String, message: String },
    #[error("container {container:?}: image {image:?} has no entrypoint and command.value is empty, so there is nothing to run")]
    NoCommand { container: String, image: String },
    #[error("no such container {0}")]
    NoContainer(String),
    #[error("container {container:?}: {message}")]
    Api { container: String, message: String },
    /// The engine refused a request about an image (not a container's).
    #[error("image {image:?}: {message}")]
    Image { image: String, message: String },
    /// An init container ended with a failure (seed 003: the pod's containers never start).
    #[error("init container {container:?} {detail}")]
    InitFailed { container: String, detail: String },
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
    /// Its cgroup as the kernel says (`/proc/PID/cgroup`: the unified one, else the pids or
    /// memory controller's), while it runs.
    #[serde(rename = "Cgroup", default, skip_serializing_if = "String::is_empty")]
    pub cgroup: String,
}

/// The cgroup of process `pid`: the v2 path, else the v1 pids (or memory) controller's.
fn cgroup_of(pid: i64) -> String {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { return String::new() };
    let line = |want: &dyn Fn(&str) -> bool| {
        text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            want(controllers).then(|| path.to_string())
        })
    };
    line(&|c| c.split(',').any(|c| c == "pids"))
        .or_else(|| line(&|c| c.split(',').any(|c| c == "memory")))
        .or_else(|| line(&|c| c.is_empty()))
        .unwrap_or_default()
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

#[derive(Clone)]
pub struct Docker {
    /// Made at the first request that finds the socket: dockerd may be installed or started
    /// after stewardd, and the daemon must start without it.
    client: std::sync::Arc<std::sync::Mutex<Option<bollard::Docker>>>,
    /// Image pulls under way (pull.rs): one per image at a time.
    pulls: pull::Pulls,
    socket: String,
    numa_root: PathBuf,
    owner: String,
    /// Where pods' ports are published (the daemon's host_ip); None: every address.
    publish_ip: Option<String>,
    /// Docker's own copy of a container's output (json-file) is kept to this size, two files.
    log_max_bytes: u64,
    /// The tasks limit of a container that sets none (None: unlimited).
    default_tasks_max: Option<u64>,
    /// stewardd's `cgroup_parent`, where pods' containers go too (None: left to Docker).
    cgroup_parent: Option<String>,
    /// The engine's cgroup driver (`cgroupfs`, `systemd`), asked once.
    cgroup_driver: std::sync::Arc<tokio::sync::OnceCell<Option<String>>>,
}

impl Docker {
    /// A client for the engine at `socket` (nothing is connected until the first request).
    /// `numa_root` is where the NUMA topology is read (`/sys/devices/system/node`); `owner`
    /// marks this daemon's containers.
    pub fn new(socket: &Path, numa_root: &Path, owner: &str) -> Docker {
        Docker {
            client: Default::default(),
            pulls: Default::default(),
            socket: socket.display().to_string(),
            numa_root: numa_root.to_path_buf(),
            owner: owner.to_string(),
            publish_ip: None,
            log_max_bytes: 10 * 1024 * 1024,
            default_tasks_max: None,
            cgroup_parent: None,
            cgroup_driver: Default::default(),
        }
    }

    /// Pods' containers go under `cgroup_parent` as stewardd's processes do (see
    /// [`Docker::cgroup_parent_for`]); None where stewardd's instances are not under it
    /// (systemd on cgroup v2: the delegated subtree is stewardd's own).
    pub fn with_cgroup_parent(mut self, parent: Option<&str>) -> Docker {
        self.cgroup_parent = parent.map(String::from);
        self
    }

    /// The CgroupParent of instance `instance`'s containers: `/<cgroup_parent>/<ns>.<name>.<i>`
    /// with Docker's cgroupfs driver (the directory a process instance of that key has), the
    /// `<cgroup_parent>.slice` with its systemd driver (which takes only a slice); None: Docker's
    /// own default.
    pub(super) async fn cgroup_parent_for(&self, instance: &str) -> Option<String> {
        let parent = self.cgroup_parent.as_ref()?;
        let driver = self
            .cgroup_driver
            .get_or_init(|| async {
                let info = self.client().ok()?.info().await.ok()?;
                info.cgroup_driver.map(|d| d.to_string())
            })
            .await;
        match driver.as_deref() {
            Some("cgroupfs") => Some(format!("/{parent}/{}", instance.replace('/', "."))),
            Some("systemd") if parent.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                Some(format!("{parent}.slice"))
            }
            _ => None,
        }
    }

    /// Pods publish their ports on `publish_ip` only, Docker keeps at most two files of
    /// `log_max_bytes` of each container's output (Steward's own log files hold it too), and a
    /// container that sets no tasks limit gets `default_tasks_max`.
    pub fn with_pod_defaults(mut self, publish_ip: &str, log_max_bytes: u64, default_tasks_max: Option<u64>) -> Docker {
        self.publish_ip = Some(publish_ip.to_string());
        self.log_max_bytes = log_max_bytes.max(4096);
        self.default_tasks_max = default_tasks_max;
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

    /// As [`Self::error`], for a request about `image`.
    fn image_error(&self, image: &str, e: bollard::errors::Error) -> DockerError {
        match self.error(image, e) {
            DockerError::Api { message, .. } => DockerError::Image { image: image.to_string(), message },
            other => other,
        }
    }

    pub async fn ping(&self) -> Result<(), DockerError> {
        self.client()?.ping().await.map(|_| ()).map_err(|e| self.error("", e))
    }

    /// Removes the network holder of `instance`, if it has one (its pod has stopped).
    pub async fn remove_holder(&self, instance: &str) -> Result<(), DockerError> {
        for c in self.labelled().await?.into_iter().filter(|c| c.instance == instance && c.holder) {
            self.remove(&c.id).await?;
        }
        Ok(())
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
            cgroup: state.pid.filter(|p| *p > 0).map(cgroup_of).unwrap_or_default(),
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
}
