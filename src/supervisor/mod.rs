//! The supervisor: instance state machine, restart policy, and one actor per instance that
//! carries transitions out. [`Supervisor`] is the library API the daemon exposes.

mod actors;
pub mod instance;
pub mod policy;
pub mod record;
pub mod state;
pub mod values;

mod paths;

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
}

/// Size-based rotation of the instances' log files.
#[derive(Debug, Clone, Copy)]
pub struct LogRotation {
    pub max_bytes: u64,
    pub keep: u32,
    pub every: std::time::Duration,
}

/// Shared by every instance actor.
pub struct Shared {
    pub store: Store,
    pub reaper: Reaper,
    pub cgroups: Hierarchy,
    pub roots: Roots,
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
    #[error("no instance {0}")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
    /// The request itself is wrong (a bad name, empty data).
    #[error("{0}")]
    Invalid(String),
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
pub struct Supervisor {
    shared: Arc<Shared>,
    /// Shared with the watchers of the actors' tasks (see `spawn_supervised`).
    instances: Arc<Mutex<BTreeMap<InstanceId, Handle>>>,
    specs: Arc<Mutex<BTreeMap<String, Arc<SpecEntry>>>>,
    /// Applies one at a time up to their instances' creation: two at once could both find an
    /// instance missing and start it twice.
    applying: tokio::sync::Mutex<()>,
}

/// Filters for [`Supervisor::list`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub state: Option<state::Kind>,
}

fn app_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Supervisor {
    /// Opens the store, re-adopts or resumes every instance it holds, and starts reaping.
    /// Must run inside a tokio runtime.
    pub async fn open(config: SupervisorConfig) -> Result<Supervisor, SupervisorError> {
        let store = open_store(&config.state_dir).await?;
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
        .with_pod_defaults(&config.host_ip, config.logs.max_bytes);
        let shared = Arc::new(Shared {
            docker,
            store,
            reaper,
            cgroups,
            roots: config.roots,
            host_ip: config.host_ip,
            counters: Counters::default(),
            ports: Mutex::new(crate::ports::Allocator::new(config.port_range.0, config.port_range.1)),
            prober: crate::health::Prober::new(),
            values: Mutex::new(BTreeMap::new()),
            fetcher,
            launches: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_LAUNCHES)),
            own_paths: config.own_paths,
        });
        let sup = Supervisor {
            shared,
            instances: Default::default(),
            specs: Default::default(),
            applying: Default::default(),
        };
        sup.load(config.port_range).await?;
        tokio::spawn(rotate_logs(sup.shared.roots.run_base_dir.clone(), config.logs));
        Ok(sup)
    }

    async fn load(&self, port_range: (u16, u16)) -> Result<(), SupervisorError> {
        let snapshot = self.shared.store.snapshot()?;
        *self.shared.ports.lock().expect("ports lock") =
            crate::ports::Allocator::load(port_range.0, port_range.1, &snapshot);
        let mut specs = BTreeMap::new();
        for (key, value) in snapshot.table(Table::Specs) {
            match serde_json::from_value::<StoredSpec>(value.clone()) {
                Ok(s) => {
                    specs.insert(
                        key.to_string(),
                        Arc::new(SpecEntry {
                            spec: s.spec,
                            generation: s.generation,
                            restart_from: s.restart_from,
                            selection: s.selection,
                        }),
                    );
                }
                Err(e) => tracing::error!("stored spec {key} is unreadable: {e}"),
            }
        }
        // Secrets and configmaps before any actor resumes: a start right after the load renders them.
        {
            let mut stores = self.shared.values.lock().expect("values lock");
            for kind in [values::ValueKind::Secret, values::ValueKind::ConfigMap] {
                for (key, value) in snapshot.table(kind.table()) {
                    match serde_json::from_value::<values::Values>(value.clone()) {
                        Ok(v) => {
                            stores.insert((kind, key.to_string()), v);
                        }
                        Err(e) => tracing::error!("stored {} {key} is unreadable: {e}", kind.word()),
                    }
                }
            }
        }
        let mut records = Vec::new();
        for (key, value) in snapshot.table(Table::Instances) {
            match serde_json::from_value::<InstanceRecord>(value.clone()) {
                Ok(r) => records.push(r),
                Err(e) => tracing::error!("stored instance {key} is unreadable: {e}"),
            }
        }
        // Before any actor starts containers: no labelled container runs unowned.
        self.remove_orphan_containers(&records).await;
        let mut resumed = Vec::new();
        // What an apply or a scale-down asked for that its instances had not yet taken when the
        // daemon went away: the stored spec is the intent, and it is carried out now.
        let mut unfinished = Vec::new();
        for rec in records {
            let Some(spec) = specs.get(&app_key(&rec.id.namespace, &rec.id.name)).cloned() else {
                tracing::error!("instance {} has no stored spec; left alone", rec.key());
                continue;
            };
            if !ids_of(&spec.spec, spec.selection.as_deref()).contains(&rec.id) {
                unfinished.push((rec.id.clone(), Command::Delete));
            } else if let Some(count_only) = unfinished_replace(&rec, &spec) {
                unfinished.push((rec.id.clone(), Command::Replace(spec.clone(), count_only)));
            }
            resumed.push(self.spawn_actor(rec, spec));
        }
        for (id, cmd) in unfinished {
            tracing::info!(instance = %id, "carrying out an apply cut short by the daemon's end: {}", cmd.word());
            let _ = self.send(&id, cmd, None);
        }
        let loaded = resumed.len();
        *self.specs.lock().expect("specs lock") = specs;
        // Answer nothing before every instance is re-adopted or its end recorded: a status served
        // from the stored record could show a process that died while the daemon was away.
        let t = std::time::Instant::now();
        let all = futures_util::future::join_all(resumed);
        if tokio::time::timeout(std::time::Duration::from_secs(30), all).await.is_err() {
            tracing::warn!("some instances took over 30 s to resume; serving anyway");
        }
        tracing::info!("loaded {loaded} instance(s), all resumed in {} ms", t.elapsed().as_millis());
        Ok(())
    }

    /// Removes the containers carrying our labels that no instance owns: ones of deleted
    /// instances, or of a start the daemon did not live to record. With dockerd away this is
    /// left to the next daemon start (logged).
    async fn remove_orphan_containers(&self, records: &[InstanceRecord]) {
        let owned: std::collections::HashSet<&str> = records
            .iter()
            .filter(|r| r.state.has_processes() && r.state.kind() != state::Kind::Starting)
            .flat_map(|r| r.containers.iter().map(|c| c.id.as_str()))
            .collect();
        // A hung dockerd must not hold up the daemon's start.
        let listed = tokio::time::timeout(std::time::Duration::from_secs(10), self.shared.docker.labelled()).await;
        let labelled = match listed {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                tracing::info!("not checking for orphan containers: {e}");
                return;
            }
            Err(_) => {
                tracing::warn!("not checking for orphan containers: dockerd did not answer within 10 s");
                return;
            }
        };
        // A pod's network holder belongs to an instance whose containers may run.
        let live: std::collections::HashSet<String> = records
            .iter()
            .filter(|r| r.state.has_processes() && r.state.kind() != state::Kind::Starting)
            .map(InstanceRecord::key)
            .collect();
        let orphan = |c: &crate::runtime::docker::Labelled| {
            if c.holder {
                !live.contains(&c.instance)
            } else {
                !owned.contains(c.id.as_str())
            }
        };
        for c in labelled.into_iter().filter(|c| orphan(c)) {
            // A stopped instance's exited containers stay for inspection until its next start;
            // a running one (left by a stop that could not reach dockerd) goes.
            let kept = !c.running
                && records.iter().any(|r| {
                    r.key() == c.instance && !r.state.has_processes() && r.containers.iter().any(|k| k.id == c.id)
                });
            if kept {
                continue;
            }
            tracing::warn!("removing container {} ({}) of {}: no instance owns it", c.name, c.id, c.instance);
            if let Err(e) = self.shared.docker.remove(&c.id).await {
                tracing::warn!("cannot remove orphan container {}: {e}", c.id);
            }
        }
    }

    fn spawn_actor(&self, rec: InstanceRecord, spec: Arc<SpecEntry>) -> oneshot::Receiver<()> {
        let watch = actors::ActorWatch {
            shared: self.shared.clone(),
            instances: self.instances.clone(),
            specs: self.specs.clone(),
        };
        watch.spawn(rec, spec, None)
    }

    /// Applies a validated spec: new instances are created and started, changed ones restarted
    /// with the new spec, ones beyond `spec.instance` deleted. Returns the spec's instance ids.
    pub async fn apply(&self, spec: ProcessSpec) -> Result<Vec<InstanceId>, SupervisorError> {
        self.apply_selected(spec, None).await.map(|o| o.instances)
    }

    /// As [`Supervisor::apply`], running only the instance ids in `selection` on this host (a
    /// scheduler spreads an app's `spec.instance` ids over hosts): the others of the app that
    /// run here are deleted. A change of `spec.instance` alone restarts nothing. An unchanged
    /// spec changes nothing but brings back the instances deleted one by one.
    pub async fn apply_selected(
        &self,
        spec: ProcessSpec,
        selection: Option<Vec<u32>>,
    ) -> Result<ApplyOutcome, SupervisorError> {
        let selection = selection.map(|mut s| {
            s.sort_unstable();
            s.dedup();
            s
        });
        if let Some(bad) = selection.iter().flatten().find(|i| **i >= spec.spec.instance) {
            return Err(SupervisorError::Invalid(format!(
                "instances: id {bad} is not below spec.instance ({})",
                spec.spec.instance
            )));
        }
        let key = app_key(&spec.metadata.namespace, &spec.metadata.name);
        let applying = self.applying.lock().await;
        let previous = self.specs.lock().expect("specs lock").get(&key).cloned();
        if let Some(p) = previous.as_ref().filter(|p| p.spec.is_pod() != spec.is_pod()) {
            // Its instances run one way or the other: changing how would orphan what runs.
            return Err(SupervisorError::Invalid(format!(
                "{key} is a {} spec; delete it before applying it as a {}",
                p.spec.kind, spec.kind
            )));
        }
        self.check_paths(&spec, selection.as_deref())?;
        if let Some(entry) = previous.as_ref().filter(|p| p.spec == spec && p.selection == selection) {
            // Unchanged: nothing restarts; instances deleted one by one come back.
            let ids = ids_of(&spec, selection.as_deref());
            let missing = self.missing(&ids);
            if !missing.is_empty() {
                let mut batch = Batch::new();
                self.allocate_ports(&spec, &missing, &mut batch)?;
                let created = new_records(entry.generation, &missing, &mut batch)?;
                self.commit(batch).await?;
                self.spawn_created(entry, created);
            }
            return Ok(ApplyOutcome {
                generation: entry.generation,
                unchanged: missing.is_empty(),
                changed: missing.clone(),
                created: missing,
                instances: ids,
            });
        }
        // Only the count changed: running instances keep running (their rendering does not
        // depend on the count).
        let count_only = previous.as_ref().is_some_and(|p| same_but_count(&p.spec, &spec));
        let generation = previous.as_ref().map_or(1, |p| p.generation + 1);
        let restart_from = match &previous {
            Some(p) if count_only => p.restart_from,
            _ => generation,
        };
        let stored = StoredSpec { generation, restart_from, spec: spec.clone(), selection: selection.clone() };
        let body = EventBody::Daemon(DaemonEvent::Applied {
            app: key.clone(),
            generation,
            instances: spec.spec.instance,
            selection: selection.clone(),
        })
        .to_value();
        let value = serde_json::to_value(&stored).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        let mut batch = Batch::new().put(Table::Specs, &key, &value).event(body);
        // Ports for every instance and the records of new ones, committed with the spec: all or
        // nothing, and an instance the apply creates is durable with it (see `new_records`).
        let ids = ids_of(&spec, selection.as_deref());
        self.allocate_ports(&spec, &ids, &mut batch)?;
        let created = self.missing(&ids);
        let records = new_records(generation, &created, &mut batch)?;
        self.commit(batch).await?;
        crate::failpoint::hit("apply-spec-committed");
        let entry = Arc::new(SpecEntry { spec, generation, restart_from, selection });
        self.specs.lock().expect("specs lock").insert(key.clone(), entry.clone());

        let mut changed = Vec::new();
        for id in ids.iter().filter(|i| !created.contains(i)) {
            let instances = self.instances.lock().expect("instances lock");
            let Some(handle) = instances.get(id) else { continue };
            // An operator's stop holds: a stopped instance takes the new spec at its next start.
            if !count_only && handle.status.borrow().state.kind() != state::Kind::Stopped {
                changed.push(id.clone());
            }
            let _ = handle.tx.send(Msg::Request(Command::Replace(entry.clone(), count_only), None));
        }
        self.spawn_created(&entry, records);
        drop(applying);
        changed.extend(created.iter().cloned());
        changed.sort();
        // Scaled down or moved to another host: delete the instances not (or no longer) here.
        let extra: Vec<InstanceId> = self
            .instances
            .lock()
            .expect("instances lock")
            .keys()
            .filter(|i| i.namespace == entry.spec.metadata.namespace && i.name == entry.spec.metadata.name)
            .filter(|i| !ids.contains(i))
            .cloned()
            .collect();
        // Deleted for good (stopped, then gone from the list and the store), concurrently.
        let deletions = extra.iter().map(|id| self.delete(id));
        for (id, result) in extra.iter().zip(futures_util::future::join_all(deletions).await) {
            if let Err(e) = result {
                tracing::warn!(instance = %id, "deleting an instance the spec no longer has: {e}");
            }
        }
        Ok(ApplyOutcome { instances: ids, generation, changed, created, unchanged: false })
    }

    /// Each instance's directories are its own (issue 14): no workPath, pidFile or outputDir of
    /// `spec`'s instances may be, hold or lie in another instance's run or work directories (a
    /// workload owning them could plant links where the daemon works as root), nor Steward's
    /// own (Invalid); checked against every instance of other apps here (Conflict).
    fn check_paths(&self, spec: &ProcessSpec, selection: Option<&[u32]>) -> Result<(), SupervisorError> {
        let roots = &self.shared.roots;
        let mine: Vec<paths::InstancePaths> = ids_of(spec, selection)
            .iter()
            .filter_map(|id| {
                let ports =
                    self.instances.lock().expect("instances lock").get(id).map(|h| h.status.borrow().ports.clone());
                paths::of(spec, id.index, roots, ports)
            })
            .collect();
        for x in &mine {
            if let Some(why) = paths::own_clash(x, &self.shared.own_paths) {
                return Err(SupervisorError::Invalid(why));
            }
        }
        for (i, x) in mine.iter().enumerate() {
            for y in &mine[i + 1..] {
                if let Some(why) = paths::clash(x, y) {
                    return Err(SupervisorError::Conflict(why));
                }
            }
        }
        let key = app_key(&spec.metadata.namespace, &spec.metadata.name);
        let others: Vec<(Arc<SpecEntry>, InstanceId, BTreeMap<String, u16>)> = {
            let specs = self.specs.lock().expect("specs lock");
            let instances = self.instances.lock().expect("instances lock");
            instances
                .iter()
                .filter(|(id, _)| app_key(&id.namespace, &id.name) != key)
                .filter_map(|(id, h)| {
                    let entry = specs.get(&app_key(&id.namespace, &id.name))?.clone();
                    Some((entry, id.clone(), h.status.borrow().ports.clone()))
                })
                .collect()
        };
        for (entry, id, ports) in others {
            let Some(y) = paths::of(&entry.spec, id.index, roots, Some(ports)) else { continue };
            for x in &mine {
                if let Some(why) = paths::clash(x, &y) {
                    return Err(SupervisorError::Conflict(why));
                }
            }
        }
        Ok(())
    }

    /// The ids in `ids` that have no instance here.
    fn missing(&self, ids: &[InstanceId]) -> Vec<InstanceId> {
        self.sweep();
        let instances = self.instances.lock().expect("instances lock");
        ids.iter().filter(|id| !instances.contains_key(id)).cloned().collect()
    }

    /// Ports of `spec` for instances `ids` (keeping those they hold), added to `batch`: all or
    /// nothing.
    fn allocate_ports(&self, spec: &ProcessSpec, ids: &[InstanceId], batch: &mut Batch) -> Result<(), SupervisorError> {
        let wants = spec.port_wants();
        // /proc/net/tcp walks the whole connection table: only read it when ports are wanted.
        let host_ports = if wants.is_empty() { Default::default() } else { crate::host::ports_in_use() };
        let mut ports = self.shared.ports.lock().expect("ports lock");
        let mut trial = ports.clone();
        for id in ids {
            trial
                .allocate(&id.to_string(), &wants, &host_ports, batch)
                .map_err(|e| SupervisorError::Conflict(e.to_string()))?;
        }
        *ports = trial;
        Ok(())
    }

    /// Starts the actors of records just committed by [`new_records`]: being Staging, each
    /// starts as its actor resumes it.
    fn spawn_created(&self, entry: &Arc<SpecEntry>, records: Vec<InstanceRecord>) {
        crate::failpoint::hit("apply-created");
        for rec in records {
            let _resumed = self.spawn_actor(rec, entry.clone());
        }
    }

    async fn commit(&self, batch: Batch) -> Result<(), SupervisorError> {
        self.shared.store.commit(batch).await.map(|_| ()).map_err(SupervisorError::from)
    }

    fn send(&self, id: &InstanceId, cmd: Command, reply: Option<instance::Reply>) -> Result<(), SupervisorError> {
        let instances = self.instances.lock().expect("instances lock");
        let handle = instances.get(id).ok_or_else(|| SupervisorError::NotFound(id.to_string()))?;
        handle.tx.send(Msg::Request(cmd, reply)).map_err(|_| SupervisorError::NotFound(id.to_string()))
    }

    /// Sends a command and waits until the instance has carried it out.
    async fn request(&self, id: &InstanceId, cmd: Command) -> Result<(), SupervisorError> {
        let (tx, rx) = oneshot::channel();
        self.send(id, cmd, Some(tx))?;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(SupervisorError::Failed(reason)),
            Err(_) => Err(SupervisorError::NotFound(id.to_string())),
        }
    }

    pub async fn start(&self, id: &InstanceId) -> Result<(), SupervisorError> {
        self.request(id, Command::Start).await
    }

    pub async fn stop(&self, id: &InstanceId) -> Result<(), SupervisorError> {
        self.request(id, Command::Stop).await
    }

    pub async fn restart(&self, id: &InstanceId) -> Result<(), SupervisorError> {
        self.request(id, Command::Restart).await
    }

    pub async fn reload(&self, id: &InstanceId) -> Result<(), SupervisorError> {
        self.request(id, Command::Reload).await
    }

    /// Stops and removes an instance. When it was the last of its app, the app's spec goes too.
    pub async fn delete(&self, id: &InstanceId) -> Result<(), SupervisorError> {
        self.delete_instance(id).await?;
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
    async fn delete_instance(&self, id: &InstanceId) -> Result<(), SupervisorError> {
        match self.request(id, Command::Delete).await {
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
            let body = EventBody::Daemon(DaemonEvent::AppDeleted { app: app.clone() }).to_value();
            self.commit(Batch::new().delete(Table::Specs, &app).event(body)).await?;
        }
        Ok(())
    }

    /// Deletes a whole app: every instance of it here (stopped concurrently, each by its own
    /// grace period), then its spec. Returns the instances deleted.
    pub async fn delete_app(&self, namespace: &str, name: &str) -> Result<Vec<InstanceId>, SupervisorError> {
        let app = app_key(namespace, name);
        if !self.specs.lock().expect("specs lock").contains_key(&app) {
            return Err(SupervisorError::NotFound(format!("app {app}")));
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
        let results = futures_util::future::join_all(ids.iter().map(|id| self.delete_instance(id))).await;
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
        let instances = self.instances.lock().expect("instances lock");
        instances
            .iter()
            .filter(|(id, _)| filter.namespace.as_ref().is_none_or(|n| *n == id.namespace))
            .filter(|(id, _)| filter.name.as_ref().is_none_or(|n| *n == id.name))
            .map(|(_, h)| InstanceStatus::from_record(&h.status.borrow(), None))
            .filter(|s| filter.state.is_none_or(|k| s.state.kind() == k))
            .collect()
    }

    /// One instance, with its cgroup's resource use.
    pub fn status(&self, id: &InstanceId) -> Result<InstanceStatus, SupervisorError> {
        let rec = {
            let instances = self.instances.lock().expect("instances lock");
            // An ended actor's handle (see `sweep`) answers for nothing; this one handle is
            // checked, not all of them: status is asked often (apply --wait polls it).
            let h = instances
                .get(id)
                .filter(|h| h.status.has_changed().is_ok())
                .ok_or_else(|| SupervisorError::NotFound(id.to_string()))?;
            let r = h.status.borrow().clone();
            r
        };
        let cgroup = self.shared.cgroups.instance(&instance::cgroup_key(&rec));
        let usage = cgroup.usage().ok().map(|u| Usage {
            cpu_usage_usec: u.cpu_usage_usec,
            memory_bytes: u.memory_bytes,
            oom_kills: u.oom_kills,
        });
        Ok(InstanceStatus::from_record(&rec, usage))
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
            instances.get(id).ok_or_else(|| SupervisorError::NotFound(id.to_string()))?.status.clone()
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

/// What an apply did, for the caller to wait on and report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyOutcome {
    /// Every instance of the spec on this host.
    pub instances: Vec<InstanceId>,
    /// The spec's generation now.
    pub generation: u64,
    /// The instances that (re)start on this generation: created ones, and ones restarted
    /// with the changed spec (not those an operator stopped).
    pub changed: Vec<InstanceId>,
    /// The instances this apply created (new, or deleted one by one before).
    pub created: Vec<InstanceId>,
    /// Nothing changed at all.
    pub unchanged: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredSpec {
    generation: u64,
    /// The generation of the last change that restarts instances (a change of the count alone
    /// does not): an instance recorded below it, found at the daemon's start, restarts onto the
    /// spec; one at or above it only takes the new generation. 0 (stored by an older version):
    /// unknown, so it restarts.
    #[serde(default)]
    restart_from: u64,
    spec: ProcessSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    selection: Option<Vec<u32>>,
}

/// Whether instance `rec`, found at the daemon's start, has yet to take the stored spec's last
/// apply: Some(false) when it must restart onto it (it last ran a spec older than the last change
/// that restarts, and runs or waits to run again), Some(true) when it only takes the generation.
/// A start still to come (Staging, Starting, a Stopping that restarts) runs the stored spec
/// anyway, and an operator's stop holds.
fn unfinished_replace(rec: &InstanceRecord, spec: &SpecEntry) -> Option<bool> {
    use state::Kind;
    // 0: stored by an older version, which did not know; the apply asked for a restart.
    let restart_from = if spec.restart_from == 0 { spec.generation } else { spec.restart_from };
    let may_restart =
        matches!(rec.state.kind(), Kind::Running | Kind::Lost | Kind::Backoff | Kind::Exited | Kind::Failed);
    if may_restart && rec.run_generation < restart_from {
        Some(false)
    } else if rec.spec_generation < spec.generation {
        Some(true)
    } else {
        None
    }
}

/// How long a start waits for the store's lock: a daemon killed a moment ago may have left a
/// start's child that has not yet closed its copy of the store's descriptor (see runtime/spawn.rs);
/// another stewardd still running holds it for good, and is reported after this.
const STORE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

async fn open_store(dir: &std::path::Path) -> Result<Store, SupervisorError> {
    let dir = dir.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || Store::open_waiting(&dir, STORE_LOCK_WAIT)).await;
    opened.map_err(|e| SupervisorError::Failed(e.to_string()))?.map_err(SupervisorError::from)
}

/// Records of new instances `ids` of spec generation `generation`, put in `batch` with their
/// `created` events. They are created Staging, not Stopped: the record itself holds the apply's
/// intent to start the instance, so a daemon killed before the start resumes it (a Stopped one
/// would stay stopped).
fn new_records(generation: u64, ids: &[InstanceId], batch: &mut Batch) -> Result<Vec<InstanceRecord>, SupervisorError> {
    let now = now_ms();
    let mut created = Vec::with_capacity(ids.len());
    for id in ids {
        let mut rec = InstanceRecord::new(id.clone(), generation, now);
        rec.state = state::State::Staging;
        let value = serde_json::to_value(&rec).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        batch.push_put(Table::Instances, &rec.key(), &value);
        batch.push_event(
            EventBody::instance(rec.key(), InstanceChange::Created { state: rec.state.clone() }).to_value(),
        );
        created.push(rec);
    }
    Ok(created)
}

/// The ids of `spec` this host runs: `selection`, else all of `spec.instance`.
fn ids_of(spec: &ProcessSpec, selection: Option<&[u32]>) -> Vec<InstanceId> {
    let id = |index| InstanceId { namespace: spec.metadata.namespace.clone(), name: spec.metadata.name.clone(), index };
    match selection {
        Some(s) => s.iter().copied().map(id).collect(),
        None => (0..spec.spec.instance).map(id).collect(),
    }
}

/// Whether two specs differ at most in `spec.instance`.
fn same_but_count(a: &ProcessSpec, b: &ProcessSpec) -> bool {
    let mut b = b.clone();
    b.spec.instance = a.spec.instance;
    *a == b
}

/// Creates the work and run roots if needed and makes sure every directory on the way lets
/// anyone through (x for others): workloads run as other users and must reach their own
/// directories below the roots. A root-only parent is reported, not silently changed.
fn ensure_reachable(roots: &[&PathBuf]) -> Result<(), SupervisorError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    for root in roots {
        // An io error names its path: which root, or which of its parents.
        let at =
            |dir: &std::path::Path, e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(root).map_err(|e| at(root, e))?;
        for dir in root.ancestors() {
            let mode = std::fs::metadata(dir).map_err(|e| at(dir, e))?.permissions().mode();
            if mode & 0o001 == 0 {
                tracing::warn!(
                    "{} (mode {:o}) is not searchable by others: instances running as other users cannot reach {}",
                    dir.display(),
                    mode & 0o7777,
                    root.display()
                );
            }
        }
    }
    Ok(())
}

/// Rotates every instance's logs (`<run_base_dir>/<instance>/*.log`) that outgrew the limit.
/// A size check every few seconds: the files are written by the workloads directly, so there
/// is no write the daemon could hook.
async fn rotate_logs(run_base_dir: PathBuf, rotation: LogRotation) {
    loop {
        tokio::time::sleep(rotation.every).await;
        let dir = run_base_dir.clone();
        let result = tokio::task::spawn_blocking(move || rotate_all(&dir, rotation)).await;
        if let Err(e) = result {
            tracing::warn!("log rotation task: {e}");
        }
    }
}

/// One round of [`rotate_logs`]. Only run directories root owns are entered (a directory below
/// the run root that a workload owns, e.g. its workPath, holds nothing of the daemon's), and
/// every step goes through directory descriptors (see [`crate::runtime::process::rotate_log_at`]).
pub fn rotate_all(run_base_dir: &std::path::Path, rotation: LogRotation) {
    use crate::fetch::sys;
    use std::os::fd::AsFd;
    let base = match std::fs::File::open(run_base_dir) {
        Ok(f) => std::os::fd::OwnedFd::from(f),
        Err(e) => return tracing::warn!("log rotation: {}: {e}", run_base_dir.display()),
    };
    for instance in sys::list(base.as_fd()).unwrap_or_default() {
        let dir_path = run_base_dir.join(sys::os_str(&instance));
        let dir = match crate::safefs::open_daemon_dir_at(base.as_fd(), &instance, &dir_path) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("log rotation skips {e}");
                continue;
            }
        };
        for file in sys::list(dir.as_fd()).unwrap_or_default() {
            let name = sys::os_str(&file);
            if std::path::Path::new(name).extension().is_some_and(|e| e == "log") {
                let rotated = crate::runtime::process::rotate_log_at(
                    dir.as_fd(),
                    &dir_path,
                    name,
                    rotation.max_bytes,
                    rotation.keep,
                );
                if let Err(e) = rotated {
                    tracing::warn!("log rotation: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod footprint {
    use super::instance::{Actor, Pod, Processes, Workload};

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
        let e = super::ensure_reachable(&[&root]).unwrap_err().to_string();
        assert!(e.contains(&root.display().to_string()), "{e}");
    }
}
