//! The supervisor's start: the store opened (waiting out a just-killed daemon's hold on it), the
//! roots checked, and every instance the store holds resumed: secrets and configmaps first, then
//! specs and records, an apply a crash cut short carried out, orphaned containers removed.

use super::apply::ids_of;
use super::instance::SpecEntry;
use super::record::InstanceRecord;
use super::*;

impl Supervisor {
    pub(super) async fn load(&self, port_range: (u16, u16)) -> Result<(), SupervisorError> {
        let snapshot = self.shared.store.snapshot()?;
        *self.shared.ports.lock().expect("ports lock") =
            crate::ports::Allocator::load(port_range.0, port_range.1, &snapshot);
        let mut specs = BTreeMap::new();
        *self.history.lock().expect("history lock") = super::revisions::History::load(&snapshot);
        // Specs stored before revisions were kept become revision 1 (durably, before anything).
        let mut first_revisions = Batch::new();
        let mut histories = Vec::new();
        // Stored by a version before revisions: the generation of its last change that
        // restarted instances (below it, an instance had not yet taken the spec).
        let mut restarted_from: BTreeMap<String, u64> = BTreeMap::new();
        for (key, value) in snapshot.table(Table::Specs) {
            match serde_json::from_value::<SpecEntry>(value.clone()) {
                Ok(mut s) => {
                    if s.revision == 0 {
                        s.revision = 1;
                        let from = value.get("restart_from").and_then(|v| v.as_u64()).filter(|g| *g != 0);
                        restarted_from.insert(key.to_string(), from.unwrap_or(s.generation));
                        let by = "an apply before this stewardd kept revisions";
                        histories
                            .push((key.to_string(), self.add_revision(key, 1, &s.spec, by, &mut first_revisions)?));
                        let value = serde_json::to_value(&s).map_err(|e| SupervisorError::Failed(e.to_string()))?;
                        first_revisions.push_put(Table::Specs, key, &value);
                    }
                    specs.insert(key.to_string(), Arc::new(s));
                }
                Err(e) => tracing::error!("stored spec {key} is unreadable: {e}"),
            }
        }
        if !first_revisions.is_empty() {
            self.commit(first_revisions).await?;
            for (app, list) in histories {
                self.keep_revisions(&app, list);
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
        // Before any instance mounts its kept volumes: a removal cut short is finished or undone.
        self.settle_kept_removals(&snapshot).await?;
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
        for mut rec in records {
            let Some(spec) = specs.get(&app_key(&rec.id.namespace, &rec.id.name)).cloned() else {
                tracing::error!("instance {} has no stored spec; left alone", rec.key());
                continue;
            };
            if rec.revision == 0 {
                // Recorded before revisions were kept: it is on the app's one revision, and runs
                // it unless it last started before the change that restarts.
                rec.revision = spec.revision;
                let restart_from = restarted_from.get(&app_key(&rec.id.namespace, &rec.id.name));
                if restart_from.is_none_or(|from| rec.run_generation >= *from) {
                    rec.run_revision = spec.revision;
                }
            }
            // Any rollout, whatever its phase: a paused one resumes later, a failed one leaves
            // the instances it did not move where they are, and its spares with them — and the
            // failed ones it keeps for their output (failed_rollout.rs).
            let rollout = spec.rollout.as_ref();
            if spec.scale_in.iter().any(|s| s.ordinal == rec.id.index) {
                // Removed only at its scaleIn hook's word (scale_in.rs), and until then it runs
                // what it ran: no apply since its scale-in is its.
                let own = self.revision_entry(&spec, rec.revision);
                resumed.push(self.spawn_actor(rec, own));
                continue;
            }
            let spare = rollout.is_some_and(|r| r.spares.contains(&rec.id.index) || r.kept.contains(&rec.id.index));
            if rollout.is_some() && rec.revision != spec.revision {
                // Not (yet) moved by the rollout: it runs its own revision until the rollout's
                // task (started below, if it progresses) moves it.
                let own = self.revision_entry(&spec, rec.revision);
                resumed.push(self.spawn_actor(rec, own));
                continue;
            }
            // A job's runs are its own ids (job.rs), not the spec's count.
            let job = spec.spec.runs_to_completion();
            if !spare && !job && !ids_of(&spec.spec, spec.selection.as_deref()).contains(&rec.id) {
                unfinished.push((rec.id.clone(), Command::Delete(crate::spec::pod::DeleteCause::ScaledIn)));
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
        // Deleted at once (not at hooks' word) and cut short: finished below, and none of
        // their drivers starts again (a rollout or a cron would make instances meanwhile).
        let at_once = |e: &SpecEntry| e.deleting && e.scale_in.is_empty();
        let deleting_at_once: Vec<String> = specs.iter().filter(|(_, e)| at_once(e)).map(|(k, _)| k.clone()).collect();
        let rolling: Vec<String> = specs
            .iter()
            .filter(|(_, e)| !at_once(e))
            .filter(|(_, e)| e.rollout.as_ref().is_some_and(|r| r.phase == crate::protocol::RolloutPhase::Progressing))
            .map(|(k, _)| k.clone())
            .collect();
        let jobs: Vec<String> = specs
            .iter()
            .filter(|(_, e)| !at_once(e))
            .filter(|(_, e)| e.job.as_ref().is_some_and(|j| j.phase == crate::protocol::JobPhase::Running))
            .map(|(k, _)| k.clone())
            .collect();
        *self.specs.lock().expect("specs lock") = specs;
        for app in jobs {
            tracing::info!(app = %app, "resuming its job");
            self.spawn_job(app);
        }
        let crons: Vec<String> = self
            .specs
            .lock()
            .expect("specs lock")
            .iter()
            .filter(|(_, e)| e.cron.is_some() && !at_once(e))
            .map(|(k, _)| k.clone())
            .collect();
        for app in crons {
            self.spawn_cron(app);
        }
        for app in rolling {
            tracing::info!(app = %app, "resuming its rollout");
            self.spawn_rollout(app);
        }
        let scaling_in: Vec<String> = self
            .specs
            .lock()
            .expect("specs lock")
            .iter()
            .filter(|(_, e)| e.scale_in.iter().any(|s| s.phase == crate::protocol::ScaleInPhase::Waiting))
            .map(|(k, _)| k.clone())
            .collect();
        for app in scaling_in {
            tracing::info!(app = %app, "resuming its scale-in");
            self.spawn_scale_in(app);
        }
        for app in deleting_at_once {
            tracing::info!(app = %app, "finishing its delete, cut short by the daemon's end");
            let sup = self.clone();
            tokio::spawn(async move { sup.finish_app_delete(&app).await });
        }
        // A failed rollout whose autoRollback the daemon's end cut short (roll_back changes
        // nothing where it went back already: the app's current rollout is then the rollback).
        let failed: Vec<Arc<SpecEntry>> = self
            .specs
            .lock()
            .expect("specs lock")
            .values()
            .filter(|e| {
                !at_once(e)
                    && e.rollout
                        .as_ref()
                        .is_some_and(|r| matches!(r.phase, crate::protocol::RolloutPhase::Failed { .. }))
            })
            .cloned()
            .collect();
        for entry in failed {
            let sup = self.clone();
            tokio::spawn(async move { sup.roll_back(&entry).await });
        }
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
    pub(super) async fn remove_orphan_containers(&self, records: &[InstanceRecord]) {
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
}

/// Whether instance `rec`, found at the daemon's start on its app's current revision, has yet to
/// take the stored spec's last apply: Some(false) when it must restart onto it (what it runs is
/// another revision, and it runs or waits to run again), Some(true) when it only takes the
/// generation (a count change). One whose run is on the revision never restarts: the record says
/// what it runs, whatever generation started it (an undo's instances took it without a restart).
/// A start still to come (Staging, Starting, a Stopping that restarts) runs the stored spec
/// anyway, and an operator's stop holds.
pub(super) fn unfinished_replace(rec: &InstanceRecord, spec: &SpecEntry) -> Option<bool> {
    use state::Kind;
    let may_restart =
        matches!(rec.state.kind(), Kind::Running | Kind::Lost | Kind::Backoff | Kind::Exited | Kind::Failed);
    if may_restart && rec.run_revision != spec.revision {
        Some(false)
    } else if rec.spec_generation < spec.generation || rec.revision != spec.revision {
        Some(true)
    } else {
        None
    }
}

/// How long a start waits for the store's lock: a daemon killed a moment ago may have left a
/// start's child that has not yet closed its copy of the store's descriptor (see runtime/spawn.rs);
/// another stewardd still running holds it for good, and is reported after this.
const STORE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub(super) async fn open_store(dir: &std::path::Path) -> Result<Store, SupervisorError> {
    let dir = dir.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || Store::open_waiting(&dir, STORE_LOCK_WAIT)).await;
    opened.map_err(|e| SupervisorError::Failed(e.to_string()))?.map_err(SupervisorError::from)
}

/// Creates the work and run roots if needed and makes sure every directory on the way lets
/// anyone through (x for others): workloads run as other users and must reach their own
/// directories below the roots. A root-only parent is reported, not silently changed.
pub(super) fn ensure_reachable(roots: &[&PathBuf]) -> Result<(), SupervisorError> {
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

impl Supervisor {
    /// CNI attachments at start-up, before any actor may ADD: one a record keeps for an
    /// instance that no longer runs (a kill -9 between the pod's end and its DEL) is given back
    /// and leaves the record; then every lease of this daemon's that no record names is given
    /// back (a kill -9 between an ADD and its record, a network container killed by hand).
    pub(super) async fn settle_pod_networks(&self) -> Result<(), SupervisorError> {
        let networks = self.shared.networks.clone();
        let mut known = std::collections::BTreeSet::new();
        for (key, value) in self.shared.store.records(Table::Instances)? {
            // Most records are processes' or CNM pods': not worth decoding whole.
            if value.get("network").is_none() {
                continue;
            }
            let Ok(mut rec) = serde_json::from_value::<InstanceRecord>(value) else { continue };
            let Some(at) = rec.network.take() else { continue };
            if rec.state.has_processes() {
                known.insert(at.container_id);
                continue;
            }
            // Owed, given back once its network container is known gone.
            networks.release(&at, crate::cni::pods::HolderState::Unknown).await.map_err(SupervisorError::Failed)?;
            let value = serde_json::to_value(&rec).map_err(|e| SupervisorError::Failed(e.to_string()))?;
            self.commit(Batch::new().put(Table::Instances, &key, &value)).await?;
        }
        networks.release_unknown(&known).await;
        Ok(())
    }
}
