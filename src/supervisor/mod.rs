//! The supervisor: instance state machine, restart policy, and one actor per instance that
//! carries transitions out. [`Supervisor`] is the library API the daemon exposes: its requests
//! and listings are here; its start in `load`, an apply in `apply`, log rotation in `rotation`.

mod actors;
mod admission;
pub mod instance;
pub mod policy;
pub mod record;
pub mod state;
pub mod values;

mod apply;
mod cron;
pub mod desired;
mod driver;
mod failed_rollout;
mod hook_facts;
mod job;
mod kept;
mod load;
mod paths;
pub mod revisions;
pub mod rollout;
mod rotation;
mod scale_in;

pub use apply::ApplyOutcome;
use load::{ensure_reachable, open_store};
pub use rotation::rotate_all;
use rotation::rotate_logs;
pub use scale_in::AppDelete;

use crate::cgroups::{CgroupConfig, Hierarchy};
use crate::protocol::{DaemonEvent, EventBody, InstanceChange};
use crate::runtime::reaper::Reaper;
use crate::spec::{InstanceId, ProcessSpec, Roots};
use crate::store::{Batch, Store, Table};
use instance::{Command, Msg, SpecEntry};
use record::{now_ms, InstanceRecord, InstanceStatus, Usage};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};
use values::ValueKind;

/// What the supervisor needs from the daemon's configuration.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    pub state_dir: PathBuf,
    pub roots: Roots,
    pub host_ip: String,
    pub cgroups: CgroupConfig,
    pub logs: LogRotation,
    /// Range random ports come from (inclusive).
    pub port_range: (u16, u16),
    /// Package downloads: cache and repository.
    pub fetch: crate::fetch::FetchOptions,
    /// Pods: the Docker Engine's socket, and where the NUMA topology is read.
    pub docker_socket: PathBuf,
    pub numa_root: PathBuf,
    /// Steward's own files and directories (config key, path): the state store, the package
    /// cache, the socket. No instance's directory may be or hold one of them.
    pub own_paths: Vec<(String, PathBuf)>,
    /// Revisions kept per app (`revision_history`).
    pub revision_history: usize,
    /// Pods' CNI networking (seed 001's CNI mode).
    pub cni: CniSettings,
    /// What instances may request here (admission.rs).
    pub resources: crate::resources::HostResources,
    /// Most bytes of an answer a hook measurement reads (`hook_max_response_bytes`).
    pub hook_max_response_bytes: u64,
    /// The tasks limit of a process or container that sets none (`default_tasks_max`
    /// resolved; None: unlimited).
    pub default_tasks_max: Option<u64>,
    /// `runtime = "hollow"`: every instance is hollow (instance/hollow.rs), and nothing of the
    /// host's runtime is used (no pidfile watch, no log rotation, no CNI retries).
    pub hollow: bool,
    /// What ClusterFirst pods ask (`[services] pod_dns`); None: they are refused.
    pub pod_dns: Option<crate::services::dns::PodResolver>,
}

/// Where the CNI plugins and configurations are, and whether BRIDGE and USER pods use them.
#[derive(Debug, Clone, Default)]
pub struct CniSettings {
    /// `network_mode = "cni"`.
    pub enabled: bool,
    pub bin_dir: PathBuf,
    pub conf_dir: PathBuf,
    /// A BRIDGE pod's network (None: the first configuration).
    pub network: Option<String>,
}

/// Size-based rotation of the instances' log files.
#[derive(Debug, Clone, Copy)]
pub struct LogRotation {
    pub max_bytes: u64,
    pub keep: u32,
    pub every: std::time::Duration,
}

/// The roots instances' directories are made below, held open (see [`crate::safefs::HeldRoot`]).
#[derive(Debug)]
pub struct RootDirs {
    pub work: crate::safefs::HeldRoot,
    pub run: crate::safefs::HeldRoot,
}

impl RootDirs {
    fn of(roots: &Roots) -> RootDirs {
        let held = crate::safefs::HeldRoot::new;
        RootDirs { work: held(&roots.work_base_dir), run: held(&roots.run_base_dir) }
    }

    /// The held root `dir` is below: the work root for a workPath, else the run root.
    pub fn of_dir(&self, dir: &std::path::Path) -> &crate::safefs::HeldRoot {
        if dir.starts_with(self.work.path()) {
            &self.work
        } else {
            &self.run
        }
    }
}

/// Shared by every instance actor.
pub struct Shared {
    pub store: Store,
    pub reaper: Reaper,
    pub cgroups: Hierarchy,
    pub roots: Roots,
    /// `roots.work_base_dir` and `roots.run_base_dir` held open for instances' first starts.
    pub root_dirs: RootDirs,
    pub host_ip: String,
    pub counters: Counters,
    /// Host ports held by instances (durable in the store's Ports table).
    pub ports: Mutex<crate::ports::Allocator>,
    pub prober: crate::health::Prober,
    /// Secrets and configmaps by (kind, `namespace/name`).
    pub values: Mutex<BTreeMap<(values::ValueKind, String), values::Values>>,
    pub fetcher: crate::fetch::Fetcher,
    /// Starts being prepared and launched at once (staging, its commit, the spawn). Hundreds of
    /// instances applied together then queue here instead of all holding their half-done start
    /// in memory at the same time; each group commit still takes many of them.
    pub launches: Arc<tokio::sync::Semaphore>,
    /// The Docker Engine, for pods.
    pub docker: crate::runtime::docker::Docker,
    /// See [`SupervisorConfig::own_paths`].
    pub own_paths: Vec<(String, PathBuf)>,
    /// The CNI side of pods: owed DELs are given back even in CNM mode (a daemon that ran in
    /// CNI mode before may owe some).
    pub networks: Arc<crate::cni::pods::PodNetworks>,
    /// BRIDGE and USER pods get CNI networking.
    pub cni_mode: bool,
    /// See [`SupervisorConfig::pod_dns`].
    pub pod_dns: Option<crate::services::dns::PodResolver>,
    /// Pidfile directories watched by starts waiting for their pidfile.
    pub dirs: crate::runtime::dirwatch::DirWatch,
    /// The tasks limit of a process that sets none (`default_tasks_max`; None: unlimited).
    pub default_tasks_max: Option<u64>,
    /// Every app's wake-up for its driver (a rollout, a job, a cron job).
    pub wakers: driver::Wakers,
    /// The scheduler's writes in order, and each placed app's last apply (desired.rs).
    pub marks: Arc<desired::MarkClock>,
    pub applied_marks: desired::Marked,
    /// When a scheduler last reached this daemon (its fences count from it).
    pub contact: desired::Contact,
    /// Every instance is hollow (see [`SupervisorConfig::hollow`]).
    pub hollow: bool,
    /// The ordinals with a kept volume here (kept.rs), as a scheduler asks for them at every
    /// read of the node: walked once at start, then kept as volumes are made and removed.
    pub kept_ordinals: Mutex<std::collections::BTreeSet<String>>,
}

/// How many instances may be between staging and their spawn at once (see [`Shared::launches`]).
pub const CONCURRENT_LAUNCHES: usize = 32;

/// Daemon-wide counters for /metrics.
#[derive(Debug, Default)]
pub struct Counters {
    pub check_failures: std::sync::atomic::AtomicU64,
    pub fetch_bytes: std::sync::atomic::AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CounterValues {
    pub check_failures: u64,
    pub fetch_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("no {0}")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
    /// The request itself is wrong (a bad name, empty data).
    #[error("{0}")]
    Invalid(String),
    /// A spec that breaks a rule only the daemon's state can check (a hook step's template and
    /// args), each mistake with its field path.
    #[error("{0}")]
    InvalidSpec(crate::spec::SpecErrors),
    /// The request cannot be carried out as things are (a port is taken, none is free).
    #[error("{0}")]
    Conflict(String),
    /// The store's own error, kept whole (its variant says what failed; it names the file).
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("cgroups: {0}")]
    Cgroups(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub(super) struct Handle {
    tx: instance::Mailbox,
    status: watch::Receiver<InstanceRecord>,
}

/// The supervisor of every instance on this host.
/// Cheap to clone (every part is shared): a rollout's task holds one.
#[derive(Clone)]
pub struct Supervisor {
    shared: Arc<Shared>,
    /// Shared with the watchers of the actors' tasks (see `spawn_supervised`).
    instances: Arc<Mutex<BTreeMap<InstanceId, Handle>>>,
    specs: Arc<Mutex<BTreeMap<String, Arc<SpecEntry>>>>,
    /// Applies one at a time up to their instances' creation: two at once could both find an
    /// instance missing and start it twice.
    applying: Arc<tokio::sync::Mutex<()>>,
    /// Every app's revisions (their specs stay in the store).
    history: Arc<Mutex<revisions::History>>,
    revision_history: usize,
    /// What instances may request here (admission.rs).
    resources: crate::resources::HostResources,
    /// Per app, held by the task driving its rollout: one at a time (see rollout.rs).
    drivers: Arc<Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    /// HookTemplates and HookRuns (seed 004), in the same store.
    hooks: crate::hooks::Hooks,
    /// The endpoints steward-sched handed this daemon (issue 27).
    endpoints: crate::services::EndpointsKeeper,
}

/// Filters for [`Supervisor::list`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub state: Option<state::Kind>,
}

pub(crate) fn app_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Supervisor {
    /// Opens the store, re-adopts or resumes every instance it holds, and starts reaping.
    /// Must run inside a tokio runtime.
    pub async fn open(config: SupervisorConfig) -> Result<Supervisor, SupervisorError> {
        let store = open_store(&config.state_dir).await?;
        let hooks = crate::hooks::Hooks::open(store.clone(), config.hook_max_response_bytes)?;
        let marks = Arc::new(desired::MarkClock::default());
        let endpoints = crate::services::EndpointsKeeper::open(store.clone(), marks.clone())?;
        ensure_reachable(&[&config.roots.work_base_dir, &config.roots.run_base_dir])?;
        let cgroups = Hierarchy::detect(&config.cgroups).map_err(|e| SupervisorError::Cgroups(e.to_string()))?;
        let reaper = Reaper::start()?;
        let fetcher =
            crate::fetch::Fetcher::new(config.fetch.clone()).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        let docker = crate::runtime::docker::Docker::new(
            &config.docker_socket,
            &config.numa_root,
            &config.state_dir.display().to_string(),
        )
        .with_pod_defaults(&config.host_ip, config.logs.max_bytes, config.default_tasks_max)
        .with_cgroup_parent((!cgroups.delegated()).then_some(config.cgroups.parent.as_str()));
        let networks = Arc::new(crate::cni::pods::PodNetworks::new(
            crate::cni::Cni { bin_dirs: vec![config.cni.bin_dir.clone()], reaper: Some(reaper.clone()) },
            docker.clone(),
            config.cni.conf_dir.clone(),
            config.cni.network.clone(),
            store.clone(),
            &config.state_dir.display().to_string(),
        ));
        if config.cni.enabled {
            match networks.network(None) {
                Ok(net) => tracing::info!("pods on CNI: network {} ({})", net.name, net.path.display()),
                Err(e) => {
                    tracing::error!("network_mode = \"cni\": {e}; BRIDGE and USER pods fail to start until it is there")
                }
            }
        }
        let shared = Arc::new(Shared {
            // One inotify instance each: a thousand hollow daemons on one machine would run out.
            dirs: if config.hollow {
                crate::runtime::dirwatch::DirWatch::off()
            } else {
                crate::runtime::dirwatch::DirWatch::start()
            },
            default_tasks_max: config.default_tasks_max,
            networks,
            cni_mode: config.cni.enabled,
            pod_dns: config.pod_dns,
            docker,
            store,
            reaper,
            cgroups,
            root_dirs: RootDirs::of(&config.roots),
            roots: config.roots,
            host_ip: config.host_ip,
            counters: Counters::default(),
            ports: Mutex::new(crate::ports::Allocator::new(config.port_range.0, config.port_range.1)),
            prober: crate::health::Prober::new(),
            values: Mutex::new(BTreeMap::new()),
            fetcher,
            launches: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_LAUNCHES)),
            own_paths: config.own_paths,
            wakers: Default::default(),
            marks,
            applied_marks: Default::default(),
            contact: Default::default(),
            hollow: config.hollow,
            kept_ordinals: Default::default(),
        });
        let sup = Supervisor {
            shared,
            instances: Default::default(),
            specs: Default::default(),
            applying: Default::default(),
            history: Default::default(),
            revision_history: config.revision_history.max(1),
            resources: config.resources,
            drivers: Default::default(),
            hooks,
            endpoints,
        };
        // Before any actor may ADD: leases nothing names are given back.
        sup.settle_pod_networks().await?;
        sup.load(config.port_range).await?;
        sup.hooks.resume();
        sup.spawn_fence_watch();
        // A hollow host owes no CNI DELs and writes no logs.
        if !config.hollow {
            sup.shared.networks.spawn_retries();
            tokio::spawn(rotate_logs(sup.shared.roots.run_base_dir.clone(), config.logs));
        }
        Ok(sup)
    }

    /// HookTemplates and HookRuns.
    pub fn hooks(&self) -> &crate::hooks::Hooks {
        &self.hooks
    }

    pub fn endpoints(&self) -> &crate::services::EndpointsKeeper {
        &self.endpoints
    }

    /// The daemon's reaper (the one waitpid caller): programs the daemon runs go through it.
    pub fn reaper(&self) -> &crate::runtime::reaper::Reaper {
        &self.shared.reaper
    }

    fn spawn_actor(&self, rec: InstanceRecord, spec: Arc<SpecEntry>) -> oneshot::Receiver<()> {
        let watch = actors::ActorWatch {
            shared: self.shared.clone(),
            instances: self.instances.clone(),
            specs: self.specs.clone(),
        };
        watch.spawn(rec, spec, None)
    }

    async fn commit(&self, batch: Batch) -> Result<(), SupervisorError> {
        self.shared.store.commit(batch).await.map(|_| ()).map_err(SupervisorError::from)
    }

    fn send(&self, id: &InstanceId, cmd: Command, reply: Option<instance::Reply>) -> Result<(), SupervisorError> {
        self.send_noting(id, cmd, reply, None)
    }

    /// [`Self::send`], and `recorded` told once the instance has the command durably (see
    /// `instance::Msg::Recorded`).
    fn send_noting(
        &self,
        id: &InstanceId,
        cmd: Command,
        reply: Option<instance::Reply>,
        recorded: Option<oneshot::Sender<()>>,
    ) -> Result<(), SupervisorError> {
        let instances = self.instances.lock().expect("instances lock");
        let handle = instances.get(id).ok_or_else(|| SupervisorError::NotFound(format!("instance {id}")))?;
        let gone = |_| SupervisorError::NotFound(format!("instance {id}"));
        handle.tx.send(Msg::Request(cmd, reply)).map_err(gone)?;
        if let Some(recorded) = recorded {
            handle.tx.send(Msg::Recorded(recorded)).map_err(gone)?;
        }
        Ok(())
    }

    /// Sends a command and waits until the instance has carried it out.
    async fn request(&self, id: &InstanceId, cmd: Command) -> Result<(), SupervisorError> {
        self.request_noting(id, cmd, None).await
    }

    /// [`Self::request`]; `recorded`, when given, is told as soon as the instance has the
    /// command durably, which may be long before it is carried out (a stop's grace period).
    async fn request_noting(
        &self,
        id: &InstanceId,
        cmd: Command,
        recorded: Option<oneshot::Sender<()>>,
    ) -> Result<(), SupervisorError> {
        let (tx, rx) = oneshot::channel();
        self.send_noting(id, cmd, Some(tx), recorded)?;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(SupervisorError::Failed(reason)),
            Err(_) => Err(SupervisorError::NotFound(format!("instance {id}"))),
        }
    }

    pub async fn start(&self, id: &InstanceId) -> Result<(), SupervisorError> {
        self.request(id, Command::Start).await
    }

    /// An operator's action on instance `id` (start, stop, restart, reload, fail, crash), done
    /// when this returns; `recorded` is told once the instance has it durably: the API answers
    /// a request it does not wait for only then (an answer before it could be lost to a kill -9).
    /// A crash (its run ends as if its main process exited so; its restart policy follows) is
    /// for a hollow host's instances only (409 elsewhere).
    pub async fn act(
        &self,
        id: &InstanceId,
        cmd: Command,
        recorded: oneshot::Sender<()>,
    ) -> Result<(), SupervisorError> {
        if matches!(cmd, Command::Crash(_)) && !self.shared.hollow {
            return Err(SupervisorError::Conflict(instance::CRASH_NEEDS_HOLLOW.into()));
        }
        self.request_noting(id, cmd, Some(recorded)).await
    }

    pub async fn stop(&self, id: &InstanceId) -> Result<(), SupervisorError> {
        self.request(id, Command::Stop).await
    }

    /// Writes a file into what instance `id` runs (`steward cp`): where it went.
    pub async fn copy_in(
        &self,
        id: &InstanceId,
        file: instance::FileCopy,
    ) -> Result<crate::protocol::FileCopied, SupervisorError> {
        let (done_tx, done_rx) = oneshot::channel();
        self.request(id, Command::CopyIn(Box::new(file), done_tx)).await?;
        match done_rx.await {
            Ok(Ok(copied)) => Ok(copied),
            Ok(Err(reason)) => Err(SupervisorError::Failed(reason)),
            Err(_) => Err(SupervisorError::NotFound(format!("instance {id}"))),
        }
    }

    /// Stops and removes an instance (an operator's delete). When it was the last of its app, the
    /// app's spec goes too. `recorded` is told once the instance has the delete durably.
    pub async fn delete(&self, id: &InstanceId, recorded: oneshot::Sender<()>) -> Result<(), SupervisorError> {
        self.delete_instance_noting(id, crate::spec::pod::DeleteCause::Operator, Some(recorded)).await?;
        let last = !self
            .instances
            .lock()
            .expect("instances lock")
            .keys()
            .any(|i| i.namespace == id.namespace && i.name == id.name);
        if last {
            self.forget_app(&id.namespace, &id.name).await?;
        }
        Ok(())
    }

    /// Stops and removes instance `id`; its app's spec stays. One whose actor has already ended
    /// (a delete resumed after a daemon restart finished by itself) is simply gone.
    async fn delete_instance(
        &self,
        id: &InstanceId,
        cause: crate::spec::pod::DeleteCause,
    ) -> Result<(), SupervisorError> {
        self.delete_instance_noting(id, cause, None).await
    }

    async fn delete_instance_noting(
        &self,
        id: &InstanceId,
        cause: crate::spec::pod::DeleteCause,
        recorded: Option<oneshot::Sender<()>>,
    ) -> Result<(), SupervisorError> {
        match self.request_noting(id, Command::Delete(cause), recorded).await {
            Ok(()) | Err(SupervisorError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        self.instances.lock().expect("instances lock").remove(id);
        Ok(())
    }

    /// Drops the handles of instances whose actor has ended: it ends only once the instance is
    /// deleted, which a delete interrupted by a daemon restart completes on its own after the
    /// restart, with nobody waiting to remove the handle.
    fn sweep(&self) {
        self.instances.lock().expect("instances lock").retain(|_, h| h.status.has_changed().is_ok());
    }

    /// Removes an app's spec (once it has no instance here).
    async fn forget_app(&self, namespace: &str, name: &str) -> Result<(), SupervisorError> {
        let app = app_key(namespace, name);
        if self.specs.lock().expect("specs lock").remove(&app).is_some() {
            self.wake(&app);
            let body = EventBody::Daemon(DaemonEvent::AppDeleted { app: app.clone() }).to_value();
            let mut batch = Batch::new().delete(Table::Specs, &app).event(body);
            self.forget_revisions(&app, &mut batch);
            self.commit(batch).await?;
            // Its rollouts' hook runs go with it (a new app of that name starts at revision 1
            // again, and would find them by name).
            if let Err(e) = self.hooks.delete_runs_labelled(rollout::HOOK_APP_LABEL, &app).await {
                tracing::warn!(app = %app, "removing the app's hook runs: {e}");
            }
        }
        Ok(())
    }

    /// Deletes a whole app: every instance of it here (stopped concurrently, each by its own
    /// grace period), then its spec. Returns the instances deleted.
    pub async fn delete_app(&self, namespace: &str, name: &str) -> Result<Vec<InstanceId>, SupervisorError> {
        let app = app_key(namespace, name);
        // A job first stops starting runs: one started meanwhile would outlive the delete. Its
        // task may commit a tick or a run's end in between (a conflict: it looked first): then
        // again, on what is now (a delete right after a cron trigger answered 409).
        let mut tries = 0;
        loop {
            let Some(entry) = self.specs.lock().expect("specs lock").get(&app).cloned() else {
                return Err(SupervisorError::NotFound(format!("app {app}")));
            };
            let ended = match self.end_job(&entry, "deleted").await {
                Ok(()) => self.end_cron(&entry, "deleted").await,
                Err(e) => Err(e),
            };
            match ended {
                Err(SupervisorError::Conflict(_)) if tries < 20 => tries += 1,
                ended => break ended?,
            }
        }
        self.sweep();
        let ids: Vec<InstanceId> = self
            .instances
            .lock()
            .expect("instances lock")
            .keys()
            .filter(|i| i.namespace == namespace && i.name == name)
            .cloned()
            .collect();
        let results = futures_util::future::join_all(
            ids.iter().map(|id| self.delete_instance(id, crate::spec::pod::DeleteCause::AppDeleted)),
        )
        .await;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            // Some instance could not be stopped: the app stays, with what is left of it.
            return Err(e);
        }
        self.forget_app(namespace, name).await?;
        Ok(ids)
    }

    /// Every instance matching `filter`, in id order.
    pub fn list(&self, filter: &ListFilter) -> Vec<InstanceStatus> {
        self.sweep();
        let kept = self.kept_ids();
        let instances = self.instances.lock().expect("instances lock");
        instances
            .iter()
            .filter(|(id, _)| filter.namespace.as_ref().is_none_or(|n| *n == id.namespace))
            .filter(|(id, _)| filter.name.as_ref().is_none_or(|n| *n == id.name))
            .map(|(id, h)| InstanceStatus {
                kept: kept.contains(id),
                ..InstanceStatus::from_record(&h.status.borrow(), None)
            })
            .filter(|s| filter.state.is_none_or(|k| s.state.kind() == k))
            .collect()
    }

    /// One instance, with its cgroup's resource use.
    pub fn status(&self, id: &InstanceId) -> Result<InstanceStatus, SupervisorError> {
        let rec = {
            let instances = self.instances.lock().expect("instances lock");
            // An ended actor's handle (see `sweep`) answers for nothing; this one handle is
            // checked, not all of them: status is asked often (apply --wait polls it).
            let h = instances.get(id).ok_or_else(|| SupervisorError::NotFound(format!("instance {id}")))?;
            let r = h.status.borrow().clone();
            // Its actor ended: deleted (record gone), or panicked and about to be replaced by
            // one that records it Failed (record kept: answer with the last one, not a 404).
            if h.status.has_changed().is_err()
                && !self.shared.store.get(Table::Instances, &r.key()).is_ok_and(|v| v.is_some())
            {
                return Err(SupervisorError::NotFound(format!("instance {id}")));
            }
            r
        };
        let usage = if self.shared.hollow { self.hollow_usage(&rec) } else { self.cgroup_usage(&rec) };
        Ok(InstanceStatus { kept: self.kept_ids().contains(id), ..InstanceStatus::from_record(&rec, usage) })
    }

    /// What the kernel accounts to the instance's cgroup.
    fn cgroup_usage(&self, rec: &InstanceRecord) -> Option<Usage> {
        let cgroup = self.shared.cgroups.instance(&instance::cgroup_key(rec));
        cgroup.usage().ok().map(|u| Usage {
            cpu_usage_usec: u.cpu_usage_usec,
            memory_bytes: u.memory_bytes,
            oom_kills: u.oom_kills,
            tasks: u.tasks,
            tasks_max: u.tasks_max,
        })
    }

    /// A hollow instance's simulated use (see instance/hollow.rs).
    fn hollow_usage(&self, rec: &InstanceRecord) -> Option<Usage> {
        let entry = self.specs.lock().expect("specs lock").get(&app_key(&rec.id.namespace, &rec.id.name)).cloned()?;
        instance::hollow::usage(&entry.spec, rec, now_ms())
    }

    /// Whether this is a hollow host (`runtime = "hollow"`).
    pub fn is_hollow(&self) -> bool {
        self.shared.hollow
    }

    /// A hollow host's simulated use of its instances together: (thousandths of a core kept
    /// busy, memory bytes held), as `steward node` reports them.
    pub fn hollow_load(&self) -> (u64, u64) {
        let specs = self.specs.lock().expect("specs lock").clone();
        let instances = self.instances.lock().expect("instances lock");
        let now = now_ms();
        instances.iter().fold((0, 0), |(cpu, memory), (id, h)| {
            let Some(entry) = specs.get(&app_key(&id.namespace, &id.name)) else { return (cpu, memory) };
            match instance::hollow::usage(&entry.spec, &h.status.borrow(), now) {
                Some(u) => (cpu + instance::hollow::busy_milli_cpu(&entry.spec), memory + u.memory_bytes),
                None => (cpu, memory),
            }
        })
    }

    /// Whether `name` is one of instance `id`'s processes (procName) or, for a pod, containers
    /// (init containers too), as its app's spec has them; Err names those it has. Without a
    /// spec (a job's run, say) every name is taken.
    pub fn check_workload_name(&self, id: &InstanceId, name: &str) -> Result<(), String> {
        let Some(entry) = self.specs.lock().expect("specs lock").get(&app_key(&id.namespace, &id.name)).cloned() else {
            return Ok(());
        };
        let t = &entry.spec.spec.template.spec;
        let (what, within, names): (_, _, Vec<&str>) = match entry.spec.is_pod() {
            true => ("container", "pod", t.initializers.iter().chain(&t.containers).map(|c| c.name.as_str()).collect()),
            false => ("process", "instance", t.processes.iter().map(|p| p.proc_name.as_str()).collect()),
        };
        if names.contains(&name) {
            return Ok(());
        }
        Err(format!("no {what} {name:?} in the {within} (it has {})", names.join(", ")))
    }

    /// Waits until instance `id` satisfies `done`, or returns its last status at `timeout`.
    pub async fn wait_for(
        &self,
        id: &InstanceId,
        timeout: std::time::Duration,
        done: impl Fn(&InstanceRecord) -> bool,
    ) -> Result<InstanceStatus, SupervisorError> {
        let mut rx = {
            let instances = self.instances.lock().expect("instances lock");
            instances.get(id).ok_or_else(|| SupervisorError::NotFound(format!("instance {id}")))?.status.clone()
        };
        let _ = tokio::time::timeout(timeout, rx.wait_for(|r| done(r))).await;
        let rec = rx.borrow().clone();
        Ok(InstanceStatus::from_record(&rec, None))
    }

    /// Creates or replaces a secret or configmap; instances see it at their next (re)start.
    pub async fn put_values(
        &self,
        kind: values::ValueKind,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<values::ValuesSummary, SupervisorError> {
        values::check(kind, namespace, name, &data).map_err(SupervisorError::Invalid)?;
        let key = values::Values::key(namespace, name);
        let v = values::Values { namespace: namespace.into(), name: name.into(), data, updated_ms: now_ms() };
        // The event names the store and its keys only, never a value.
        let (namespace, name, keys) = (namespace.to_string(), name.to_string(), v.summary().keys);
        let body = EventBody::Daemon(match kind {
            ValueKind::Secret => DaemonEvent::SecretUpdated { namespace, name, keys },
            ValueKind::ConfigMap => DaemonEvent::ConfigmapUpdated { namespace, name, keys },
        })
        .to_value();
        let value = serde_json::to_value(&v).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        self.commit(Batch::new().put(kind.table(), &key, &value).event(body)).await?;
        let summary = v.summary();
        self.shared.values.lock().expect("values lock").insert((kind, key), v);
        Ok(summary)
    }

    /// Names and keys (never values), optionally of one namespace.
    pub fn list_values(&self, kind: values::ValueKind, namespace: Option<&str>) -> Vec<values::ValuesSummary> {
        let stores = self.shared.values.lock().expect("values lock");
        stores
            .iter()
            .filter(|((k, _), v)| *k == kind && namespace.is_none_or(|n| n == v.namespace))
            .map(|(_, v)| v.summary())
            .collect()
    }

    pub async fn delete_values(
        &self,
        kind: values::ValueKind,
        namespace: &str,
        name: &str,
    ) -> Result<(), SupervisorError> {
        let key = values::Values::key(namespace, name);
        if !self.shared.values.lock().expect("values lock").contains_key(&(kind, key.clone())) {
            return Err(SupervisorError::NotFound(format!("{} {key}", kind.word())));
        }
        let (namespace, name) = (namespace.to_string(), name.to_string());
        let body = EventBody::Daemon(match kind {
            ValueKind::Secret => DaemonEvent::SecretDeleted { namespace, name },
            ValueKind::ConfigMap => DaemonEvent::ConfigmapDeleted { namespace, name },
        })
        .to_value();
        self.commit(Batch::new().delete(kind.table(), &key).event(body)).await?;
        self.shared.values.lock().expect("values lock").remove(&(kind, key));
        Ok(())
    }

    /// The port range in effect: the one the allocator was built with.
    pub fn port_range(&self) -> (u16, u16) {
        self.shared.ports.lock().expect("ports lock").range()
    }

    /// Ports of the range that no instance holds and nothing on the host listens on.
    pub fn free_ports(&self) -> usize {
        self.shared.ports.lock().expect("ports lock").free_count(&crate::host::ports_in_use())
    }

    pub fn counters(&self) -> CounterValues {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.shared.counters;
        CounterValues { check_failures: c.check_failures.load(Relaxed), fetch_bytes: c.fetch_bytes.load(Relaxed) }
    }

    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    pub fn specs(&self) -> Vec<ProcessSpec> {
        self.specs.lock().expect("specs lock").values().map(|e| e.spec.clone()).collect()
    }
}

#[cfg(test)]
mod footprint {
    use super::instance::{Actor, Hollow, Pod, Processes, Workload};

    fn future_size<F: Fn(A) -> Fut, A, Fut>(_: &F) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// Every instance keeps its actor's future for as long as it exists: it must hold the boxed
    /// actor and the wait for the next message, never the actor itself (an async fn's argument
    /// is kept twice in its future) nor a timer or a start in progress (those are boxed).
    fn idle_actor_future_is_small<W: Workload>() {
        let future = future_size(&|a: Actor<W>| Box::new(a).run());
        let actor = std::mem::size_of::<Actor<W>>();
        assert!(future < 512, "Actor::run's future is {future} bytes");
        assert!(future < actor, "Actor::run's future ({future} bytes) holds the actor ({actor} bytes)");
    }

    #[test]
    fn an_idle_actor_future_is_small() {
        idle_actor_future_is_small::<Processes>();
        idle_actor_future_is_small::<Hollow>();
        idle_actor_future_is_small::<Pod>();
    }
}

#[cfg(test)]
mod roots {
    /// A root that cannot be made says which path failed (it said only "Not a directory").
    #[test]
    fn an_unreachable_root_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let root = file.join("work");
        let e = super::load::ensure_reachable(&[&root]).unwrap_err().to_string();
        assert!(e.contains(&root.display().to_string()), "{e}");
    }
}
