//! Hooks on scaling (issue 47; seed 004: hooks serve "扩缩容和发布更新", GameDeployment's
//! PreDeleteHook): an app whose `strategy.scaleIn` names a hook removes an instance a scale-in
//! no longer counts only when a HookRun for that instance says so.
//!
//! The apply that no longer counts an instance records it in the app's spec entry
//! (`scale_in`, phase Waiting) in the same commit as the spec, so after a kill -9 the instance
//! is neither removed without its verdict (the load keeps it) nor forgotten (the driver goes
//! on). The run is named after the app, the ordinal and the apply's generation: found again
//! after a restart, never made twice. Its verdict: Successful removes the instance (the
//! delete first, then the record: a kill -9 between them finds the instance gone and drops
//! the record), Failed or Error keeps it (phase Kept), Inconclusive holds it for an operator
//! (phase Held: `rollout resume` removes it, and runs the hook again for a kept one). The
//! time limit (`timeoutSeconds`) does what `onTimeout` says. Scaling back over the ordinal
//! cancels its removal and ends its run.

use super::*;
use crate::protocol::{ScaleIn, ScaleInPhase};
use crate::spec::model::{OnTimeout, ScaleInHook};
use crate::spec::pod::DeleteCause;
use driver::{Drive, Next};

/// The label a scale-in's hook runs carry: the ordinal they decide.
const SCALE_IN_LABEL: &str = "steward/scale-in";

/// How an app's recorded delete goes on (see [`Supervisor::record_app_delete`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppDelete {
    /// Each instance waits on the app's `scaleIn` hook: the scale-in driver carries it out.
    AtHooksWord,
    /// At once, by [`Supervisor::delete_app`].
    Now,
}

/// The app's scale-in list after an apply that counts `ids` (spares aside) where `here` are
/// the app's instances on this host: ordinals counted again leave it (returned, to cancel),
/// instances no longer counted join it as Waiting — when the spec has a `scaleIn` hook. Without
/// one the list empties: every instance not counted is deleted as any scale-in deletes.
pub(super) fn after_apply(
    previous: &[ScaleIn],
    hook: Option<&ScaleInHook>,
    here: &[u32],
    counted: &[u32],
    spares: &[u32],
    apply: Apply<'_>,
) -> (Vec<ScaleIn>, Vec<ScaleIn>) {
    let Apply { name, generation, now_ms, tag } = apply;
    let (mut kept, cancelled): (Vec<ScaleIn>, Vec<ScaleIn>) =
        previous.iter().cloned().partition(|s| hook.is_some() && !counted.contains(&s.ordinal));
    if hook.is_some() {
        for &ordinal in here {
            if counted.contains(&ordinal) || spares.contains(&ordinal) || kept.iter().any(|s| s.ordinal == ordinal) {
                continue;
            }
            kept.push(ScaleIn {
                ordinal,
                since_ms: now_ms,
                run: format!("{}{tag}", run_name(name, ordinal, generation)),
                phase: ScaleInPhase::Waiting,
                reason: String::new(),
            });
        }
    }
    kept.sort_by_key(|s| s.ordinal);
    (kept, cancelled)
}

/// The apply a scale-in list is made by: the app's name, its generation, when.
#[derive(Clone, Copy)]
pub(super) struct Apply<'a> {
    pub name: &'a str,
    pub generation: u64,
    pub now_ms: u64,
    /// Told apart in the runs' names: `""` for an apply, `"-delete"` for the app's delete.
    pub tag: &'a str,
}

/// The HookRun deciding ordinal `ordinal`'s removal asked by the apply of `generation`.
fn run_name(app: &str, ordinal: u32, generation: u64) -> String {
    format!("{app}-scale-in-{ordinal}-g{generation}")
}

/// A rollout's surge instance `ordinal` the rollout is done with, waiting on the hook (its run
/// named by when: a later spare of the same id in the same rollout asks again).
pub(super) fn spare_removal(entry: &SpecEntry, ordinal: u32, now_ms: u64) -> ScaleIn {
    ScaleIn {
        ordinal,
        since_ms: now_ms,
        run: format!("{}-spare-{now_ms}", run_name(&entry.spec.metadata.name, ordinal, entry.generation)),
        phase: ScaleInPhase::Waiting,
        reason: String::new(),
    }
}

/// The event of one scale-in step.
pub(super) fn event(app: &str, s: &ScaleIn, step: &str, reason: &str) -> DaemonEvent {
    DaemonEvent::ScaleIn {
        app: app.to_string(),
        ordinal: s.ordinal,
        run: s.run.clone(),
        step: step.to_string(),
        reason: reason.to_string(),
    }
}

/// What one look at a waiting removal found.
enum Verdict {
    /// Its run goes on; look again by then (ms) at the latest.
    Pending(u64),
    /// Remove the instance (the run said so, or the time limit with onTimeout Delete).
    Remove(String),
    Keep(String),
    Hold(String),
    /// A step failed for a reason that may pass (the store): try again soon.
    Retry,
}

impl Supervisor {
    /// Starts `app`'s scale-in driver (one driver per app at a time: it follows a rollout's).
    pub(super) fn spawn_scale_in(&self, app: String) {
        self.spawn_driver(app, Drive::ScaleIn);
    }

    /// One look at `app`'s waiting removals: each run created, or its verdict carried out.
    pub(super) async fn scale_in_pass(&self, app: &str) -> Next {
        let Some(entry) = self.specs.lock().expect("specs lock").get(app).cloned() else { return Next::Done };
        if entry.deleting && entry.scale_in.is_empty() {
            // Deleted at its hooks' word: the last instance went, the spec goes (with whatever
            // instance a forced delete cut short left).
            let (ns, name) = (&entry.spec.metadata.namespace, &entry.spec.metadata.name);
            return match self.delete_app(ns, name).await {
                Ok(_) | Err(SupervisorError::NotFound(_)) => Next::Done,
                Err(e) => {
                    tracing::warn!(app = %app, "removing the deleted app's spec: {e}");
                    Next::retry()
                }
            };
        }
        let Some(hook) = entry.spec.strategy.scale_in.clone() else { return Next::Done };
        let waiting: Vec<ScaleIn> =
            entry.scale_in.iter().filter(|s| s.phase == ScaleInPhase::Waiting).cloned().collect();
        if waiting.is_empty() {
            return Next::Done;
        }
        let mut until: Option<u64> = None;
        for s in waiting {
            let id = InstanceId {
                namespace: entry.spec.metadata.namespace.clone(),
                name: entry.spec.metadata.name.clone(),
                index: s.ordinal,
            };
            let here = self.instances.lock().expect("instances lock").contains_key(&id);
            let verdict = match here {
                true => self.scale_in_verdict(&entry, &hook, &s).await,
                // Deleted meanwhile (by an operator, or before a kill -9 cut the record's removal).
                false => Verdict::Remove("the instance is gone".into()),
            };
            let outcome = match verdict {
                Verdict::Pending(due) => {
                    until = Some(until.map_or(due, |u| u.min(due)));
                    continue;
                }
                Verdict::Retry => return Next::retry(),
                Verdict::Remove(reason) => self.remove_scaled_in(app, &id, &s, &reason).await,
                Verdict::Keep(reason) => self.mark_scale_in(app, &s, ScaleInPhase::Kept, "kept", &reason).await,
                Verdict::Hold(reason) => self.mark_scale_in(app, &s, ScaleInPhase::Held, "held", &reason).await,
            };
            if let Err(e) = outcome {
                tracing::warn!(app = %app, ordinal = s.ordinal, "scale-in: {e}");
                return Next::retry();
            }
        }
        Next::Wait { until_ms: until, hooks: true }
    }

    /// Where ordinal `s`'s run stands: created on first sight, then its verdict or the time
    /// limit's.
    async fn scale_in_verdict(&self, entry: &Arc<SpecEntry>, hook: &ScaleInHook, s: &ScaleIn) -> Verdict {
        let ns = &entry.spec.metadata.namespace;
        let hooks = self.hooks();
        let deadline = s.since_ms + hook.timeout_secs() * 1000;
        let Some(run) = hooks.run(ns, &s.run) else {
            let args = match self.instance_hook_args(entry, s.ordinal, &hook.hook) {
                Ok(args) => args,
                Err(e) => return Verdict::Keep(format!("its hook cannot run: {e}")),
            };
            let labels = BTreeMap::from([
                (rollout::HOOK_APP_LABEL.to_string(), app_key(ns, &entry.spec.metadata.name)),
                (SCALE_IN_LABEL.to_string(), s.ordinal.to_string()),
            ]);
            let req = crate::hooks::CreateHookRun {
                template: hook.hook.template.clone(),
                namespace: ns.clone(),
                name: Some(s.run.clone()),
                args,
                labels,
            };
            return match hooks.create_run(req).await {
                Ok(_) => Verdict::Pending(deadline),
                Err(crate::hooks::HookError::Store(e)) => {
                    tracing::warn!("creating hook run {ns}/{}: {e}", s.run);
                    Verdict::Retry
                }
                Err(e) => Verdict::Keep(format!("its hook {} cannot run: {e}", hook.hook.template)),
            };
        };
        if run.is_done() {
            let said = format!("hook run {ns}/{} is {:?}: {}", s.run, run.status.phase, run.status.message);
            return match run.status.phase {
                crate::hooks::MetricPhase::Successful => Verdict::Remove(said),
                crate::hooks::MetricPhase::Inconclusive => Verdict::Hold(said),
                _ => Verdict::Keep(said),
            };
        }
        if crate::clock::now_ms() < deadline {
            return Verdict::Pending(deadline);
        }
        if let Err(e) = hooks.terminate(ns, &s.run).await {
            tracing::warn!("ending hook run {ns}/{} at its time limit: {e}", s.run);
        }
        let why = format!("hook run {ns}/{} gave no verdict in {} s", s.run, hook.timeout_secs());
        match hook.on_timeout {
            OnTimeout::Delete => Verdict::Remove(format!("{why} (onTimeout Delete)")),
            OnTimeout::Keep => Verdict::Keep(format!("{why} (onTimeout Keep)")),
        }
    }

    /// Removes the instance at its verdict's word, then its record in the list.
    async fn remove_scaled_in(
        &self,
        app: &str,
        id: &InstanceId,
        s: &ScaleIn,
        reason: &str,
    ) -> Result<(), SupervisorError> {
        tracing::info!(app = %app, ordinal = s.ordinal, "scale-in removes the instance: {reason}");
        let deleting = self.specs.lock().expect("specs lock").get(app).is_some_and(|e| e.deleting);
        let cause = if deleting { DeleteCause::AppDeleted } else { DeleteCause::ScaledIn };
        match self.delete_instance(id, cause).await {
            Ok(()) | Err(SupervisorError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        crate::failpoint::hit("scale-in-deleted");
        let ordinal = s.ordinal;
        self.update_scale_in(app, |list| list.retain(|x| x.ordinal != ordinal), vec![event(app, s, "removed", reason)])
            .await
    }

    async fn mark_scale_in(
        &self,
        app: &str,
        s: &ScaleIn,
        phase: ScaleInPhase,
        step: &str,
        reason: &str,
    ) -> Result<(), SupervisorError> {
        tracing::warn!(app = %app, ordinal = s.ordinal, "scale-in {step} the instance: {reason}");
        let (ordinal, why) = (s.ordinal, reason.to_string());
        let change = |list: &mut Vec<ScaleIn>| {
            for x in list.iter_mut().filter(|x| x.ordinal == ordinal) {
                x.phase = phase;
                x.reason = why.clone();
            }
        };
        self.update_scale_in(app, change, vec![event(app, s, step, reason)]).await
    }

    /// Changes the app's scale-in list and journals `events`, under the apply lock (an apply
    /// between the read and the commit would be overwritten).
    async fn update_scale_in(
        &self,
        app: &str,
        change: impl FnOnce(&mut Vec<ScaleIn>),
        events: Vec<DaemonEvent>,
    ) -> Result<(), SupervisorError> {
        let _applying = self.applying.lock().await;
        let current = self.specs.lock().expect("specs lock").get(app).cloned();
        let current = current.ok_or_else(|| SupervisorError::NotFound(format!("app {app}")))?;
        let mut next = (*current).clone();
        change(&mut next.scale_in);
        let value = serde_json::to_value(&next).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        let mut batch = Batch::new().put(Table::Specs, app, &value);
        for e in events {
            batch.push_event(EventBody::Daemon(e).to_value());
        }
        self.commit(batch).await?;
        self.specs.lock().expect("specs lock").insert(app.to_string(), Arc::new(next));
        self.wake(app);
        Ok(())
    }

    /// `steward delete NS/APP`, recorded: the app's `deleting` is committed before this returns,
    /// so a delete answered after it survives a kill -9 (the restarted daemon finishes it, see
    /// [`Supervisor::finish_app_delete`]). Without `force`, an app with a `scaleIn` hook is
    /// deleted at its word: every instance waits on its own run as in a scale-in to 0, and the
    /// spec goes once the last has (the scale-in driver carries it out). Otherwise (no hook, a
    /// job, no instance here, or forced: waiting removals are dropped) the caller deletes it at
    /// once with [`Supervisor::delete_app`].
    pub async fn record_app_delete(
        &self,
        namespace: &str,
        name: &str,
        force: bool,
    ) -> Result<AppDelete, SupervisorError> {
        let app = app_key(namespace, name);
        crate::failpoint::pause("app-delete-record");
        let _applying = self.applying.lock().await;
        if !force && self.gate_delete(&app, "the app is being deleted").await? {
            return Ok(AppDelete::AtHooksWord);
        }
        let current = self.specs.lock().expect("specs lock").get(&app).cloned();
        let current = current.ok_or_else(|| SupervisorError::NotFound(format!("app {app}")))?;
        if !current.deleting || !current.scale_in.is_empty() {
            let next = SpecEntry { deleting: true, scale_in: Vec::new(), ..(*current).clone() };
            let value = serde_json::to_value(&next).map_err(|e| SupervisorError::Failed(e.to_string()))?;
            self.commit(Batch::new().put(Table::Specs, &app, &value)).await?;
            self.specs.lock().expect("specs lock").insert(app, Arc::new(next));
        }
        Ok(AppDelete::Now)
    }

    /// Finishes app `app`'s delete recorded at once (see [`Supervisor::record_app_delete`]) and
    /// cut short by the daemon's end: what is left of its instances stops, its spec goes. Tried
    /// again while an instance cannot be stopped; given up if the app was applied again.
    pub(super) async fn finish_app_delete(&self, app: &str) {
        loop {
            let Some(entry) = self.specs.lock().expect("specs lock").get(app).cloned() else { return };
            if !entry.deleting {
                return;
            }
            let (namespace, name) = (&entry.spec.metadata.namespace, &entry.spec.metadata.name);
            match self.delete_app(namespace, name).await {
                Ok(_) | Err(SupervisorError::NotFound(_)) => return,
                Err(e) => {
                    tracing::warn!(app = %app, "finishing its delete: {e} (tried again in 5 s)");
                    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                }
            }
        }
    }

    /// Records app `app`'s delete as waiting on its `scaleIn` hook's word for each instance here
    /// (`why` told in each one's `waiting` event), and starts the driver that carries it out.
    /// False: nothing to wait for (no hook, a job, no instance here): the caller deletes it at
    /// once. An app already so deleted stays as it is (true). The caller holds `applying`.
    pub(super) async fn gate_delete(&self, app: &str, why: &str) -> Result<bool, SupervisorError> {
        let current = self.specs.lock().expect("specs lock").get(app).cloned();
        let current = current.ok_or_else(|| SupervisorError::NotFound(format!("app {app}")))?;
        let hook = current.spec.strategy.scale_in.clone().filter(|_| !current.spec.runs_to_completion());
        let Some(hook) = hook else { return Ok(false) };
        if current.deleting {
            return Ok(true);
        }
        let (namespace, name) = (&current.spec.metadata.namespace, &current.spec.metadata.name);
        let here: Vec<u32> = {
            let instances = self.instances.lock().expect("instances lock");
            instances.keys().filter(|i| &i.namespace == namespace && &i.name == name).map(|i| i.index).collect()
        };
        if here.is_empty() {
            return Ok(false);
        }
        let apply = Apply { name, generation: current.generation, now_ms: crate::clock::now_ms(), tag: "-delete" };
        let (list, _) = after_apply(&current.scale_in, Some(&hook), &here, &[], &[], apply);
        let mut batch = Batch::new();
        for s in list.iter().filter(|s| !current.scale_in.iter().any(|c| c.ordinal == s.ordinal)) {
            batch.push_event(EventBody::Daemon(event(app, s, "waiting", why)).to_value());
        }
        let next = SpecEntry { scale_in: list, deleting: true, ..(*current).clone() };
        let value = serde_json::to_value(&next).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        batch.push_put(Table::Specs, app, &value);
        self.commit(batch).await?;
        self.specs.lock().expect("specs lock").insert(app.to_string(), Arc::new(next));
        self.spawn_scale_in(app.to_string());
        Ok(true)
    }

    /// An operator's `rollout resume` for the app's scale-in: a held removal (Inconclusive)
    /// goes on, a kept one's hook runs again (a new run). Whether there was one.
    pub(super) async fn resume_scale_in(&self, app: &str) -> Result<bool, SupervisorError> {
        let Some(entry) = self.specs.lock().expect("specs lock").get(app).cloned() else { return Ok(false) };
        let stuck: Vec<ScaleIn> = entry.scale_in.iter().filter(|s| s.phase != ScaleInPhase::Waiting).cloned().collect();
        if stuck.is_empty() {
            return Ok(false);
        }
        let name = entry.spec.metadata.name.clone();
        for s in stuck {
            let id =
                InstanceId { namespace: entry.spec.metadata.namespace.clone(), name: name.clone(), index: s.ordinal };
            match s.phase {
                ScaleInPhase::Held => self.remove_scaled_in(app, &id, &s, "resumed by an operator").await?,
                _ => {
                    let (ordinal, run) = (s.ordinal, format!("{}-r{}", s.run, crate::clock::now_ms()));
                    let again =
                        ScaleIn { run: run.clone(), phase: ScaleInPhase::Waiting, reason: String::new(), ..s.clone() };
                    let change = |list: &mut Vec<ScaleIn>| {
                        for x in list.iter_mut().filter(|x| x.ordinal == ordinal) {
                            *x = again.clone();
                        }
                    };
                    let ev = event(app, &again, "waiting", "resumed by an operator: its hook runs again");
                    self.update_scale_in(app, change, vec![ev]).await?;
                }
            }
        }
        self.spawn_scale_in(app.to_string());
        Ok(true)
    }

    /// Ends the runs of removals an apply cancelled (scaled back over their ordinals).
    pub(super) async fn end_cancelled_runs(&self, namespace: &str, cancelled: &[ScaleIn]) {
        let hooks = self.hooks();
        for s in cancelled {
            if hooks.run(namespace, &s.run).is_some_and(|r| !r.is_done()) {
                if let Err(e) = hooks.terminate(namespace, &s.run).await {
                    tracing::warn!("ending hook run {namespace}/{} of a cancelled scale-in: {e}", s.run);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> ScaleInHook {
        ScaleInHook {
            hook: crate::spec::model::HookStep { template: "players".into(), args: vec![] },
            ..Default::default()
        }
    }

    #[test]
    fn a_scale_in_lists_what_it_no_longer_counts_and_a_scale_out_cancels_it() {
        let h = hook();
        // 3 → 1: ordinals 1 and 2 wait on their runs; the spare is the rollout's.
        let (list, cancelled) = after_apply(
            &[],
            Some(&h),
            &[0, 1, 2, 5],
            &[0],
            &[5],
            Apply { name: "world", tag: "", generation: 4, now_ms: 1000 },
        );
        assert!(cancelled.is_empty());
        let runs: Vec<(u32, &str)> = list.iter().map(|s| (s.ordinal, s.run.as_str())).collect();
        assert_eq!(runs, [(1, "world-scale-in-1-g4"), (2, "world-scale-in-2-g4")]);
        assert!(list.iter().all(|s| s.phase == ScaleInPhase::Waiting && s.since_ms == 1000));
        // Another apply meanwhile (1 → 1): the same runs, not new ones.
        let (again, _) = after_apply(
            &list,
            Some(&h),
            &[0, 1, 2],
            &[0],
            &[],
            Apply { name: "world", tag: "", generation: 5, now_ms: 2000 },
        );
        assert_eq!(again, list);
        // Back to 2: ordinal 1 is counted again, its removal cancelled.
        let (rest, cancelled) = after_apply(
            &list,
            Some(&h),
            &[0, 1, 2],
            &[0, 1],
            &[],
            Apply { name: "world", tag: "", generation: 6, now_ms: 3000 },
        );
        assert_eq!((rest.len(), rest[0].ordinal, cancelled.len(), cancelled[0].ordinal), (1, 2, 1, 1));
        // The hook taken out of the spec: nothing waits (the instances go as any scale-in's).
        let (none, cancelled) = after_apply(
            &list,
            None,
            &[0, 1, 2],
            &[0],
            &[],
            Apply { name: "world", tag: "", generation: 7, now_ms: 4000 },
        );
        assert_eq!((none.len(), cancelled.len()), (0, 2));
    }
}
