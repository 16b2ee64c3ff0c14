//! An apply: the spec checked against the host's other instances (directories, ports), then
//! the spec and the records of the instances it creates committed in one transaction, then one
//! actor per new instance and a Replace to each existing one.

use super::instance::SpecEntry;
use super::record::{now_ms, InstanceRecord};
use super::*;

impl Supervisor {
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
        self.apply_selected_by(spec, selection, "stewardd").await
    }

    /// As [`Supervisor::apply_selected`]; `by` names who applied it, for the app's revisions.
    pub async fn apply_selected_by(
        &self,
        spec: ProcessSpec,
        selection: Option<Vec<u32>>,
        by: &str,
    ) -> Result<ApplyOutcome, SupervisorError> {
        self.apply_going_back(spec, selection, by, None, false).await
    }

    /// As [`Supervisor::apply_selected_by`]; `retry`: the spec a failed rollout left, applied
    /// again, retries that rollout (failed_rollout.rs) instead of changing nothing.
    pub async fn apply_retrying_by(
        &self,
        spec: ProcessSpec,
        selection: Option<Vec<u32>>,
        by: &str,
        retry: bool,
    ) -> Result<ApplyOutcome, SupervisorError> {
        self.apply_going_back(spec, selection, by, None, retry).await
    }

    /// As [`Supervisor::apply_selected_by`]; `rollback`: (the failed revision, the revision it
    /// goes back to) when an autoRollback applies it, which its rollout and the journal say in
    /// the same commit as the spec.
    pub(super) async fn apply_going_back(
        &self,
        spec: ProcessSpec,
        selection: Option<Vec<u32>>,
        by: &str,
        rollback: Option<(u64, u64)>,
        retry: bool,
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
        // A rollout's hooks run stored templates with every arg given: a template missing or an
        // arg nothing gives would only fail the rollout at its gate. A rollback runs no hooks.
        if rollback.is_none() {
            let stored = |name: &str| self.hooks.template(&spec.metadata.namespace, name);
            let errors = crate::hooks::steps::check(&spec, stored, "steward hook template apply");
            if !errors.is_empty() {
                return Err(SupervisorError::InvalidSpec(crate::spec::SpecErrors(errors)));
            }
        }
        let key = app_key(&spec.metadata.namespace, &spec.metadata.name);
        let applying = self.applying.lock().await;
        if selection.is_some() {
            // A scheduler's placement: a desired set read before now does not know of it.
            self.shared.applied_marks.set(&key, self.shared.marks.next());
        }
        let previous = self.specs.lock().expect("specs lock").get(&key).cloned();
        if let Some(p) = previous.as_ref().filter(|p| p.spec.is_pod() != spec.is_pod()) {
            // Its instances run one way or the other: changing how would orphan what runs.
            return Err(SupervisorError::Invalid(format!(
                "{key} is a {} spec; delete it before applying it as a {}",
                p.spec.kind, spec.kind
            )));
        }
        self.check_paths(&spec, selection.as_deref())?;
        check_pod_dns(&spec, self.shared.pod_dns.is_some())?;
        self.admit(&spec, selection.as_deref())?;
        // The spec a failed rollout left, applied again by whoever may retry it: the rollout is
        // tried again (failed_rollout.rs) rather than nothing done.
        let retry = retry
            && rollback.is_none()
            && previous.as_ref().is_some_and(|p| {
                p.spec == spec
                    && p.selection == selection
                    && p.rollout
                        .as_ref()
                        .is_some_and(|r| matches!(r.phase, crate::protocol::RolloutPhase::Failed { .. }))
            });
        if let Some(entry) = previous.as_ref().filter(|p| !retry && p.spec == spec && p.selection == selection) {
            // Unchanged: nothing restarts; instances deleted one by one come back.
            let ids = ids_of(&spec, selection.as_deref());
            let missing = self.missing(&ids);
            if !missing.is_empty() {
                let mut batch = Batch::new();
                self.allocate_ports(&spec, &missing, &mut batch)?;
                let created = new_records((entry.generation, entry.revision), &missing, &mut batch)?;
                self.commit(batch).await?;
                self.spawn_created(entry, created);
            }
            return Ok(ApplyOutcome {
                revision: entry.revision,
                generation: entry.generation,
                unchanged: missing.is_empty(),
                changed: missing.clone(),
                created: missing,
                instances: ids,
                rollout: false,
            });
        }
        // Only the count, the strategy or the restart policy changed: running instances keep
        // running (their rendering depends on none; the policy applies at their next exit).
        let count_only = previous.as_ref().is_some_and(|p| same_template(&p.spec, &spec));
        let generation = previous.as_ref().map_or(1, |p| p.generation + 1);
        // Anything but the count changed (or a new app): a new revision.
        let revision = match &previous {
            Some(p) if count_only => p.revision,
            Some(p) => p.revision + 1,
            None => 1,
        };
        // A changed spec rolls out over the instances it has here (rollout.rs), by its strategy
        // or seed 003's default (DESIGN § 7: unavailable 0, surge 1); a count change during a
        // rollout keeps it going.
        let has_instances =
            self.instances.lock().expect("instances lock").keys().any(|i| app_key(&i.namespace, &i.name) == key);
        let ongoing = previous.as_ref().and_then(|p| p.rollout.clone());
        // A job does not roll out: changed, it starts over (refused while it runs).
        if let Some(status) = previous.as_ref().and_then(|p| p.job.as_ref()) {
            if status.phase == crate::protocol::JobPhase::Running && status.active() > 0 {
                return Err(SupervisorError::Conflict(format!(
                    "{key}: its job is running ({} run(s) active); delete it to change it",
                    status.active()
                )));
            }
        }
        // Run ids go on from the job before, whose instances this apply deletes meanwhile.
        let job = spec.job.as_ref().filter(|_| spec.cron_job.is_none()).map(|_| {
            let mut status = crate::protocol::JobStatus::new(crate::clock::now_ms());
            status.next_index = previous.as_ref().map_or(0, |p| p.next_run_index());
            status
        });
        // A cron job changed starts over from now (its runs going are stopped with the old spec).
        let cron = spec.cron_job.as_ref().map(|_| {
            let mut status = crate::protocol::CronStatus::new(crate::clock::now_ms());
            status.next_index = previous.as_ref().map_or(0, |p| p.next_run_index());
            status
        });
        let rollout = match &previous {
            _ if spec.runs_to_completion() => None,
            Some(p) if retry => {
                p.rollout.as_ref().map(|r| crate::protocol::Rollout::new(revision, r.from, Some(r), r.rollback_of))
            }
            Some(p) if p.revision != revision && has_instances => {
                let mut r =
                    crate::protocol::Rollout::new(revision, p.revision, ongoing.as_ref(), rollback.map(|(f, _)| f));
                // A hold is taken over only while its instance is still stopped.
                r.held = r.held.filter(|(i, _)| {
                    let instances = self.instances.lock().expect("instances lock");
                    let id = InstanceId {
                        namespace: spec.metadata.namespace.clone(),
                        name: spec.metadata.name.clone(),
                        index: *i,
                    };
                    instances.get(&id).is_some_and(|h| h.status.borrow().state.kind() == state::Kind::Stopped)
                });
                Some(r)
            }
            Some(p) if p.revision == revision => ongoing,
            _ => None,
        };
        // Scaled to 0: no instance is left to cover for, so the spares go with the rest; scaled
        // up over a spare's id: it is one of the app's instances now, no longer a spare.
        let ids = ids_of(&spec, selection.as_deref());
        let rollout = rollout.map(|mut r| {
            if spec.spec.instance == 0 {
                r.spares.clear();
            }
            r.spares.retain(|s| !ids.iter().any(|i| i.index == *s));
            r
        });
        // The revision a rollout this apply starts comes from.
        let started: Option<u64> = rollout
            .as_ref()
            .filter(|_| retry || previous.as_ref().is_some_and(|p| p.revision != revision))
            .map(|r| r.from);
        let rolling = rollout.as_ref().is_some_and(|r| r.phase == crate::protocol::RolloutPhase::Progressing);
        let body = EventBody::Daemon(DaemonEvent::Applied {
            app: key.clone(),
            generation,
            instances: spec.spec.instance,
            selection: selection.clone(),
        })
        .to_value();
        let is_job = job.is_some();
        let is_cron = cron.is_some();
        // A fence holds across applies: only a scheduler's desired set lifts it.
        let fenced = previous.as_ref().and_then(|p| p.fenced.clone());
        // Instances no longer counted wait on the app's scaleIn hook, durably with this spec.
        let here: Vec<u32> = {
            let instances = self.instances.lock().expect("instances lock");
            let of_app =
                instances.keys().filter(|i| i.namespace == spec.metadata.namespace && i.name == spec.metadata.name);
            of_app.map(|i| i.index).collect()
        };
        let counted: Vec<u32> = ids.iter().map(|i| i.index).collect();
        let rollout_spares = rollout.as_ref().map(|r| r.spares.clone()).unwrap_or_default();
        let (scale_in, cancelled) = super::scale_in::after_apply(
            previous.as_ref().map_or(&[][..], |p| &p.scale_in),
            spec.strategy.scale_in.as_ref(),
            &here,
            &counted,
            &rollout_spares,
            super::scale_in::Apply { name: &spec.metadata.name, generation, now_ms: crate::clock::now_ms(), tag: "" },
        );
        let before: Vec<u32> =
            previous.as_ref().map(|p| p.scale_in.iter().map(|s| s.ordinal).collect()).unwrap_or_default();
        let mut scale_in_events: Vec<DaemonEvent> = scale_in
            .iter()
            .filter(|s| !before.contains(&s.ordinal))
            .map(|s| super::scale_in::event(&key, s, "waiting", "no longer counted by the app's spec"))
            .collect();
        scale_in_events.extend(
            cancelled.iter().map(|s| super::scale_in::event(&key, s, "cancelled", "counted again by the app's spec")),
        );
        let entry = Arc::new(SpecEntry {
            spec,
            generation,
            selection,
            revision,
            rollout,
            job,
            cron,
            fenced,
            scale_in,
            deleting: false,
        });
        let value = serde_json::to_value(&*entry).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        let mut batch = Batch::new().put(Table::Specs, &key, &value).event(body);
        for e in scale_in_events {
            batch.push_event(EventBody::Daemon(e).to_value());
        }
        if let Some((failed, to)) = rollback {
            let event =
                DaemonEvent::RolloutRolledBack { app: key.clone(), revision: failed, to, new_revision: revision };
            batch.push_event(EventBody::Daemon(event).to_value());
        }
        if let Some(from) = started {
            let event = DaemonEvent::RolloutStarted { app: key.clone(), revision, from };
            batch.push_event(EventBody::Daemon(event).to_value());
        }
        let history = match &previous {
            Some(p) if p.revision == revision => None,
            _ => Some(self.add_revision(&key, revision, &entry.spec, by, &mut batch)?),
        };
        // Ports for every instance and the records of new ones, committed with the spec: all or
        // nothing, and an instance the apply creates is durable with it (see `new_records`).
        self.allocate_ports(&entry.spec, &ids, &mut batch)?;
        let created = self.missing(&ids);
        let mut spares: Vec<u32> = entry.rollout.as_ref().map(|r| r.spares.clone()).unwrap_or_default();
        // Not deleted below: removed at their hook's word.
        spares.extend(entry.scale_in.iter().map(|s| s.ordinal));
        let records = new_records((generation, revision), &created, &mut batch)?;
        self.commit(batch).await?;
        crate::failpoint::hit("apply-spec-committed");
        if let Some(list) = history {
            self.keep_revisions(&key, list);
        }
        self.specs.lock().expect("specs lock").insert(key.clone(), entry.clone());
        self.wake(&key);

        let mut changed = Vec::new();
        for id in ids.iter().filter(|i| !created.contains(i)) {
            let instances = self.instances.lock().expect("instances lock");
            let Some(handle) = instances.get(id) else { continue };
            // A rollout moves the instances not on its revision, in its own time; one that failed
            // leaves them where they are.
            if entry.rollout.is_some() && handle.status.borrow().revision != revision {
                let rec = handle.status.borrow();
                if entry.rollout.as_ref().is_some_and(crate::protocol::Rollout::is_active)
                    && rec.state.kind() != state::Kind::Stopped
                {
                    changed.push(id.clone());
                }
                continue;
            }
            // An operator's stop holds: a stopped instance takes the new spec at its next start.
            if !count_only && handle.status.borrow().state.kind() != state::Kind::Stopped {
                changed.push(id.clone());
            }
            let _ = handle.tx.send(Msg::Request(Command::Replace(entry.clone(), count_only), None));
        }
        self.spawn_created(&entry, records);
        if retry {
            self.restart_failed(&entry);
        }
        // A retry rolls out once the failed rollout's kept instances are gone (below): a new
        // spare may take one's id.
        if rolling && started.is_some() && !retry {
            self.spawn_rollout(key.clone());
        }
        if is_job {
            self.spawn_job(key.clone());
        }
        if is_cron {
            self.spawn_cron(key.clone());
        }
        if entry.scale_in.iter().any(|s| s.phase == crate::protocol::ScaleInPhase::Waiting) {
            self.spawn_scale_in(key.clone());
        }
        drop(applying);
        self.end_cancelled_runs(&entry.spec.metadata.namespace, &cancelled).await;
        changed.extend(created.iter().cloned());
        changed.sort();
        // Scaled down or moved to another host: delete the instances not (or no longer) here.
        let extra: Vec<InstanceId> = self
            .instances
            .lock()
            .expect("instances lock")
            .keys()
            .filter(|i| i.namespace == entry.spec.metadata.namespace && i.name == entry.spec.metadata.name)
            .filter(|i| !ids.contains(i) && !spares.contains(&i.index))
            .cloned()
            .collect();
        // Deleted for good (stopped, then gone from the list and the store), concurrently. The
        // app stays, even scaled to 0: its spec and revisions are kept.
        let deletions = extra.iter().map(|id| self.delete_instance(id, crate::spec::pod::DeleteCause::ScaledIn));
        for (id, result) in extra.iter().zip(futures_util::future::join_all(deletions).await) {
            if let Err(e) = result {
                tracing::warn!(instance = %id, "deleting an instance the spec no longer has: {e}");
            }
        }
        if retry && rolling {
            self.spawn_rollout(key.clone());
        }
        let rollout = started.is_some();
        Ok(ApplyOutcome { instances: ids, generation, revision, changed, created, unchanged: false, rollout })
    }

    /// Each instance's directories are its own (issue 14): no workPath, pidFile or outputDir of
    /// `spec`'s instances may be, hold or lie in another instance's run or work directories (a
    /// workload owning them could plant links where the daemon works as root), nor Steward's
    /// own (Invalid); checked against every instance of other apps here (Conflict).
    pub(super) fn check_paths(&self, spec: &ProcessSpec, selection: Option<&[u32]>) -> Result<(), SupervisorError> {
        self.check_paths_of(spec, &ids_of(spec, selection))
    }

    /// As [`Supervisor::check_paths`], for instances `ids` of `spec` (a rollout's surge
    /// instance: its id is no selection's).
    pub(super) fn check_paths_of(&self, spec: &ProcessSpec, ids: &[InstanceId]) -> Result<(), SupervisorError> {
        let roots = &self.shared.roots;
        let mine: Vec<paths::InstancePaths> = ids
            .iter()
            .filter_map(|id| {
                let ports =
                    self.instances.lock().expect("instances lock").get(id).map(|h| h.status.borrow().ports.clone());
                paths::of(spec, id.index, roots, ports)
            })
            .collect();
        for x in &mine {
            if let Some(why) = paths::own_clash(x, &self.shared.own_paths, roots) {
                return Err(SupervisorError::Invalid(why));
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
        let others: Vec<paths::InstancePaths> = others
            .into_iter()
            .filter_map(|(entry, id, ports)| paths::of(&entry.spec, id.index, roots, Some(ports)))
            .collect();
        if let Some(why) = paths::first_clash(&mine, &others) {
            return Err(SupervisorError::Conflict(why));
        }
        Ok(())
    }

    /// The ids in `ids` that have no instance here.
    pub(super) fn missing(&self, ids: &[InstanceId]) -> Vec<InstanceId> {
        self.sweep();
        let instances = self.instances.lock().expect("instances lock");
        ids.iter().filter(|id| !instances.contains_key(id)).cloned().collect()
    }

    /// Ports of `spec` for instances `ids` (keeping those they hold), added to `batch`: all or
    /// nothing.
    pub(super) fn allocate_ports(
        &self,
        spec: &ProcessSpec,
        ids: &[InstanceId],
        batch: &mut Batch,
    ) -> Result<(), SupervisorError> {
        // A CNI pod takes no host port: nothing of it is published (staging gives it its
        // container ports).
        if spec.on_cni(self.shared.cni_mode) {
            return Ok(());
        }
        let wants = spec.port_wants();
        // /proc/net/tcp walks the whole connection table: only read it when ports are wanted.
        let host_ports = if wants.is_empty() { Default::default() } else { crate::host::ports_held() };
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
    pub(super) fn spawn_created(&self, entry: &Arc<SpecEntry>, records: Vec<InstanceRecord>) {
        crate::failpoint::hit("apply-created");
        for rec in records {
            let _resumed = self.spawn_actor(rec, entry.clone());
        }
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
    /// The app's revision now (a change of the count alone keeps it).
    pub revision: u64,
    /// The instances that (re)start on this generation: created ones, and ones restarted
    /// with the changed spec (not those an operator stopped).
    pub changed: Vec<InstanceId>,
    /// The instances this apply created (new, or deleted one by one before).
    pub created: Vec<InstanceId>,
    /// Nothing changed at all.
    pub unchanged: bool,
    /// The changed instances move by a rollout, in batches (see rollout.rs).
    pub rollout: bool,
}

/// Records of new instances `ids` of spec generation and revision `at`, put in `batch` with their
/// `created` events. They are created Staging, not Stopped: the record itself holds the apply's
/// intent to start the instance, so a daemon killed before the start resumes it (a Stopped one
/// would stay stopped).
pub(super) fn new_records(
    (generation, revision): (u64, u64),
    ids: &[InstanceId],
    batch: &mut Batch,
) -> Result<Vec<InstanceRecord>, SupervisorError> {
    let now = now_ms();
    let mut created = Vec::with_capacity(ids.len());
    for id in ids {
        let mut rec = InstanceRecord::new(id.clone(), generation, now);
        rec.revision = revision;
        rec.revision_since_ms = Some(now);
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

/// Whether `spec` counts instance `index` on this host: as [`ids_of`] lists them, without the
/// list (`selection` is kept sorted by the apply).
pub(super) fn counts(spec: &ProcessSpec, selection: Option<&[u32]>, index: u32) -> bool {
    match selection {
        _ if spec.runs_to_completion() => false,
        Some(selection) => selection.binary_search(&index).is_ok(),
        None => index < spec.spec.instance,
    }
}

/// The ids of `spec` this host runs: `selection`, else all of `spec.instance`.
pub(super) fn ids_of(spec: &ProcessSpec, selection: Option<&[u32]>) -> Vec<InstanceId> {
    let id = |index| InstanceId { namespace: spec.metadata.namespace.clone(), name: spec.metadata.name.clone(), index };
    if spec.runs_to_completion() {
        // A job's runs are made by its task (job.rs, cron.rs), not by the apply.
        return Vec::new();
    }
    match selection {
        Some(s) => s.iter().copied().map(id).collect(),
        None => (0..spec.spec.instance).map(id).collect(),
    }
}

/// Whether two specs run the same: they differ at most in `spec.instance`, `strategy` and
/// `restartPolicy` (see [`super::revisions::what_runs`]).
pub(super) fn same_template(a: &ProcessSpec, b: &ProcessSpec) -> bool {
    super::revisions::what_runs(a) == super::revisions::what_runs(b)
}

/// A ClusterFirst pod (seed 003 `dns`) needs the daemon's responder for pods: refused, naming
/// the field and the config key, where none is configured.
fn check_pod_dns(spec: &ProcessSpec, configured: bool) -> Result<(), SupervisorError> {
    if !spec.needs_pod_dns() || configured {
        return Ok(());
    }
    let why = format!("{:?} {}", spec.spec.template.spec.dns, crate::services::dns::no_pod_dns());
    Err(SupervisorError::InvalidSpec(crate::spec::SpecErrors(vec![crate::spec::SpecError::new(
        "spec.template.spec.dns",
        why,
    )])))
}
