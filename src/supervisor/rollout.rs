//! An app's rollout on this host (issue 18): a task that drives the pure planner
//! ([`crate::rollout::plan`]) over the app's instances until every one runs the target revision,
//! one step at a time, each step durable before the next: an instance moves to a revision by
//! the actor's own commit (SpecUpdated), a spare is created with its record, the rollout's own
//! state (phase, serial hold, spares, steps) is kept beside the app's spec, and every change of
//! it is journaled in the same commit (rollout* events). After a kill -9 the daemon finds each
//! instance on the revision it was, the rollout where it was, and the planner, which only looks
//! at what is, goes on from there.

use super::apply::new_records;
use super::driver::{Drive, Next};
use super::instance::{Command, SpecEntry};
use super::record::{now_ms, InstanceRecord};
use super::*;
use crate::protocol::{Rollout, RolloutBody, RolloutPhase, RolloutProgress, RolloutSteps};
use crate::rollout::{self as planner, Health, Member, Plan, Rule, Step, View};
use crate::spec::model::Gate;

/// A hook gate whose run could not be created (the store refusing) tries again after this (ms).
const HOOK_RETRY_MS: u64 = 1000;

/// The label `steward rollout restart` sets (as `kubectl rollout restart` sets an annotation):
/// the spec then differs, so it is a new revision that rolls out like any other.
pub const RESTARTED_AT_LABEL: &str = "steward/restartedAt";

/// The label a rollout's hook runs carry: the app, `namespace/name`.
pub const HOOK_APP_LABEL: &str = "steward/app";

/// The partition gate `at` works under: its own, or the last one before it (none yet: 0). The
/// final gate, every instance, is no partition at all (instances added by a scale move too).
fn partition_at(gates: &[Gate], at: usize) -> Option<u32> {
    let last_partition = gates.iter().rposition(|g| matches!(g, Gate::Partition(_)))?;
    if at >= last_partition {
        return None;
    }
    let before = gates[..=at].iter().rev().find_map(|g| match g {
        Gate::Partition(n) => Some(*n),
        _ => None,
    });
    Some(before.unwrap_or(0))
}

/// A gate as events and `rollout status` tell it.
fn describe_gate(gate: &Gate) -> String {
    match gate {
        Gate::Partition(n) => format!("partition {n}"),
        Gate::Hook(h) => format!("hook {}", h.template),
        Gate::Pause(Some(s)) => format!("pause {s} s"),
        Gate::Pause(None) => "pause until resumed".into(),
    }
}

/// `text` with `${hostip}`, `${ports.NAME}`, `${instanceid}`, `${namespace}`, `${name}` filled
/// from `values`; any other `${...}` is an error naming it.
fn fill_instance_values(text: &str, values: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let len = rest[start..].find('}').ok_or_else(|| format!("{text:?}: an unclosed ${{"))?;
        let key = &rest[start + 2..start + len];
        let value = values.get(key).ok_or_else(|| {
            format!(
                "${{{key}}} is not an instance value (hostip, instanceid, namespace, name, ports.NAME of its ports)"
            )
        })?;
        out.push_str(&rest[..start]);
        out.push_str(value);
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Rollout {
    /// A rollout from revision `from` to `target`, taking over what an unfinished one left:
    /// its spares (removed, or kept if on the target) and the instance it holds stopped.
    /// `rollback_of`: the failed revision an autoRollback goes back from.
    pub(super) fn new(target: u64, from: u64, earlier: Option<&Rollout>, rollback_of: Option<u64>) -> Rollout {
        let now = now_ms();
        let unfinished = earlier.filter(|r| matches!(r.phase, RolloutPhase::Progressing | RolloutPhase::Paused));
        // The last good revision: the earlier rollout's target once it completed; else what it
        // knew as good; without an earlier rollout, what ran before (it started without one).
        let last_good = match earlier {
            None => from,
            Some(r) if r.phase == RolloutPhase::Complete => r.target,
            Some(r) if r.last_good != 0 => r.last_good,
            Some(r) => r.from,
        };
        Rollout {
            target,
            from,
            last_good,
            // An operator's pause holds over a newer apply, as a paused Deployment's does.
            phase: match unfinished {
                Some(r) if r.phase == RolloutPhase::Paused => RolloutPhase::Paused,
                _ => RolloutPhase::Progressing,
            },
            started_ms: now,
            updated_ms: now,
            held: unfinished.and_then(|r| r.held),
            spares: earlier.map(|r| r.spares.clone()).unwrap_or_default(),
            // A new rollout (or a retry) replaces what the failed one kept: see `apply`.
            kept: Vec::new(),
            steps: 0,
            rollback: rollback_of.is_some(),
            rollback_of,
            gate: 0,
            gate_started_ms: now,
            message: String::new(),
        }
    }

    /// Whether it still moves instances, or will once resumed.
    pub fn is_active(&self) -> bool {
        matches!(self.phase, RolloutPhase::Progressing | RolloutPhase::Paused)
    }
}

impl Supervisor {
    /// Starts the task that drives `app`'s rollout. One drives an app at a time (a later one
    /// waits for the earlier, which ends once the rollout is no longer progressing).
    pub(super) fn spawn_rollout(&self, app: String) {
        self.spawn_driver(app, Drive::Rollout);
    }

    /// One look at `app`'s rollout: the planner asked about what is, its steps taken, the gate
    /// passed when it is done; when to look again.
    pub(super) async fn rollout_pass(&self, app: &str, failing_since: &mut Option<u64>) -> Next {
        let Some(entry) = self.specs.lock().expect("specs lock").get(app).cloned() else { return Next::Done };
        let Some(rollout) = entry.rollout.clone().filter(|r| r.phase == RolloutPhase::Progressing) else {
            return Next::Done;
        };
        self.take_same_as_target(&entry).await;
        let members = self.members(&entry, &rollout);
        let now = now_ms();
        // Going back (autoRollback) is to what ran before: no step, no hook holds it up.
        let gates = if rollout.rollback {
            vec![Gate::Partition(entry.spec.spec.instance)]
        } else {
            entry.spec.strategy.gates(entry.spec.spec.instance)
        };
        let at = rollout.gate as usize;
        let last = at + 1 >= gates.len();
        let gate = gates.get(at).cloned().unwrap_or(Gate::Partition(entry.spec.spec.instance));
        let view = View {
            target: entry.revision,
            members: &members,
            rule: host_rule(&entry.spec),
            now_ms: now,
            held: rollout.held,
            first_spare_id: entry.spec.spec.instance,
            cap: partition_at(&gates, at),
        };
        if !matches!(gate, Gate::Partition(_)) {
            // A hook or a pause: nothing moves, but what moved must hold up meanwhile.
            if let Some((id, reason)) = planner::failure(&view) {
                let reason = format!("instance {id} of revision {}: {reason}", entry.revision);
                self.fail_rollout(&entry, &rollout, reason).await;
                return Next::Done;
            }
        }
        match gate {
            Gate::Partition(_) => match planner::plan(&view) {
                Plan::Act(steps) => {
                    let batch = RolloutSteps::of(&steps);
                    let n = steps.len() as u64;
                    let event =
                        DaemonEvent::RolloutBatch { app: app.to_string(), revision: entry.revision, steps: batch };
                    let mut failed = None;
                    if let Err(e) = self.update_rollout(&entry, |r| r.steps += n, Some(event)).await {
                        failed = Some(format!("recording the batch: {e}"));
                    }
                    crate::failpoint::hit("rollout-batch-recorded");
                    for step in steps {
                        if failed.is_some() {
                            break;
                        }
                        if let Err(e) = self.take_step(&entry, step.clone()).await {
                            failed = Some(format!("{step:?}: {e}"));
                        }
                        crate::failpoint::hit("rollout-step-taken");
                    }
                    let Some(why) = failed else {
                        *failing_since = None;
                        return Next::Now;
                    };
                    tracing::warn!(app = %app, "rollout step failed: {why}");
                    let since = *failing_since.get_or_insert(now);
                    if now.saturating_sub(since) > entry.spec.strategy.progress_deadline_secs() * 1000 {
                        let reason = format!("a step failed for longer than the progress deadline: {why}");
                        self.fail_rollout(&entry, &rollout, reason).await;
                        return Next::Done;
                    }
                    return Next::retry();
                }
                // Until an instance changes (its actor wakes the driver) or the planner's clock
                // is due (minReadySeconds, a serial pause, a progress deadline).
                Plan::Wait { until_ms } => return Next::Wait { until_ms, hooks: false },
                Plan::Done => {}
                Plan::Failed { id, reason } => {
                    let reason = format!("instance {id} of revision {}: {reason}", entry.revision);
                    self.fail_rollout(&entry, &rollout, reason).await;
                    return Next::Done;
                }
            },
            Gate::Pause(Some(secs)) => {
                let due = rollout.gate_started_ms.saturating_add(secs.saturating_mul(1000));
                if now < due {
                    return Next::Wait { until_ms: Some(due), hooks: false };
                }
            }
            Gate::Pause(None) => {
                // Until an operator resumes: paused, and past this gate once resumed.
                let message = format!("paused at step {at} until resumed");
                self.pause_at_gate(&entry, message).await;
                return Next::Done;
            }
            Gate::Hook(hook) => match self.hook_gate(&entry, &rollout, &members, &hook).await {
                Err(reason) => {
                    self.fail_rollout(&entry, &rollout, reason).await;
                    return Next::Done;
                }
                // Until the run has a verdict (the hook keeper tells every change of a run).
                Ok(HookGate::Running) => return Next::Wait { until_ms: None, hooks: true },
                Ok(HookGate::Retry) => return Next::Wait { until_ms: Some(now + HOOK_RETRY_MS), hooks: false },
                Ok(HookGate::Done(run)) => match run.status.phase {
                    crate::hooks::MetricPhase::Successful => {}
                    crate::hooks::MetricPhase::Inconclusive => {
                        let message = format!(
                            "hook run {}/{} is Inconclusive: resume to go on, undo to go back",
                            run.metadata.namespace, run.metadata.name
                        );
                        self.pause_at_gate(&entry, message).await;
                        return Next::Done;
                    }
                    phase => {
                        let reason = format!(
                            "hook run {}/{} is {phase:?}: {}",
                            run.metadata.namespace, run.metadata.name, run.status.message
                        );
                        self.fail_rollout(&entry, &rollout, reason).await;
                        return Next::Done;
                    }
                },
            },
        }
        if !last {
            let event = DaemonEvent::RolloutGate {
                app: app.to_string(),
                revision: entry.revision,
                gate: rollout.gate + 1,
                what: describe_gate(&gates[at + 1]),
            };
            let next = |r: &mut Rollout| {
                r.gate += 1;
                r.gate_started_ms = now_ms();
                r.message.clear();
            };
            if let Err(e) = self.update_rollout(&entry, next, Some(event)).await {
                tracing::warn!(app = %app, "recording the rollout's next step: {e}");
                return Next::retry();
            }
            return Next::Now;
        }
        tracing::info!(app = %app, "rollout to revision {} complete", entry.revision);
        let event = DaemonEvent::RolloutCompleted { app: app.to_string(), revision: entry.revision };
        if let Err(e) = self.update_rollout(&entry, |r| r.phase = RolloutPhase::Complete, Some(event)).await {
            tracing::warn!(app = %app, "recording the rollout's end: {e}");
            return Next::retry();
        }
        Next::Done
    }

    /// Pauses the rollout at its gate for an operator, past the gate once resumed.
    async fn pause_at_gate(&self, entry: &Arc<SpecEntry>, message: String) {
        let app = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        tracing::info!(app = %app, "rollout paused: {message}");
        let event = DaemonEvent::RolloutPaused { app: app.clone(), revision: entry.revision };
        let pause = |r: &mut Rollout| {
            r.phase = RolloutPhase::Paused;
            r.gate += 1;
            r.gate_started_ms = now_ms();
            r.message = message;
        };
        if let Err(e) = self.update_rollout(entry, pause, Some(event)).await {
            tracing::warn!(app = %app, "recording the rollout's pause: {e}");
        }
    }

    /// The gate's HookRun: created on first sight (its name is the rollout's and the gate's,
    /// so after a restart the same run is found), then Done once it has finished. Err: it
    /// cannot run (no such template, an arg without a value), which fails the rollout.
    async fn hook_gate(
        &self,
        entry: &Arc<SpecEntry>,
        rollout: &Rollout,
        members: &[Member],
        hook: &crate::spec::model::HookStep,
    ) -> Result<HookGate, String> {
        let (ns, name) = (&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let run_name = format!("{name}-{}-{}-{}", entry.revision, rollout.gate, hook.template);
        let hooks = self.hooks();
        if let Some(run) = hooks.run(ns, &run_name) {
            return Ok(if run.is_done() { HookGate::Done(Box::new(run)) } else { HookGate::Running });
        }
        let args = self.hook_args(entry, members, hook)?;
        let labels = BTreeMap::from([
            (HOOK_APP_LABEL.to_string(), app_key(ns, name)),
            ("steward/revision".to_string(), entry.revision.to_string()),
            ("steward/step".to_string(), rollout.gate.to_string()),
        ]);
        let req = crate::hooks::CreateHookRun {
            template: hook.template.clone(),
            namespace: ns.clone(),
            name: Some(run_name.clone()),
            args,
            labels,
        };
        match hooks.create_run(req).await {
            Ok(_) => {
                let message = format!("hook run {ns}/{run_name}");
                if let Err(e) = self.update_rollout(entry, |r| r.message = message, None).await {
                    tracing::warn!("recording the rollout's hook run: {e}");
                }
                Ok(HookGate::Running)
            }
            Err(crate::hooks::HookError::Store(e)) => {
                tracing::warn!("creating hook run {ns}/{run_name}: {e}");
                Ok(HookGate::Retry)
            }
            Err(e) => Err(format!("step {}: hook {}: {e}", rollout.gate, hook.template)),
        }
    }

    /// The hook's args: the step's values with the canary's `${...}` filled in, then the
    /// canary's facts for the template's args without a value ([`crate::hooks::steps::run_args`]).
    /// The canary is the lowest-numbered instance on the revision (before any moved, the
    /// lowest-numbered instance).
    fn hook_args(
        &self,
        entry: &SpecEntry,
        members: &[Member],
        hook: &crate::spec::model::HookStep,
    ) -> Result<BTreeMap<String, String>, String> {
        let canary = members
            .iter()
            .filter(|m| !m.spare && m.revision == entry.revision)
            .map(|m| m.id)
            .min()
            .or_else(|| members.iter().filter(|m| !m.spare).map(|m| m.id).min())
            .unwrap_or(0);
        self.instance_hook_args(entry, canary, hook)
    }

    /// A hook's args for instance `index` of the app: the hook's values with the instance's
    /// `${...}` filled in, then its facts for the template's args without a value.
    pub(super) fn instance_hook_args(
        &self,
        entry: &SpecEntry,
        canary: u32,
        hook: &crate::spec::model::HookStep,
    ) -> Result<BTreeMap<String, String>, String> {
        let facts = self.instance_facts(entry, canary);
        let mut values = BTreeMap::from([
            ("hostip".to_string(), facts.host_ip.clone()),
            ("instanceid".to_string(), canary.to_string()),
            ("namespace".to_string(), facts.id.namespace.clone()),
            ("name".to_string(), facts.id.name.clone()),
        ]);
        for (port, number) in &facts.ports {
            values.insert(format!("ports.{port}"), number.to_string());
        }
        let mut given = BTreeMap::new();
        for arg in &hook.args {
            given.insert(
                arg.name.clone(),
                fill_instance_values(&arg.value, &values)
                    .map_err(|e| format!("hook {} arg {}: {e}", hook.template, arg.name))?,
            );
        }
        // No template: creating the run says so.
        let Some(template) = self.hooks().template(&entry.spec.metadata.namespace, &hook.template) else {
            return Ok(given);
        };
        Ok(crate::hooks::steps::run_args(&template, given, &facts.args()))
    }

    /// Ends the rollout as Failed with `reason`: its spares deleted first (their ports given
    /// back; one that failed is kept stopped for its output instead, see `failed_rollout.rs`),
    /// then the phase, the revision's outcome and the event in one commit; with autoRollback,
    /// the last good revision applied again (see [`Supervisor::roll_back`]).
    async fn fail_rollout(&self, entry: &Arc<SpecEntry>, rollout: &Rollout, reason: String) {
        let app = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        tracing::warn!(app = %app, "rollout failed: {reason}");
        // The spares as recorded now: a step of this round may have added one.
        let current = self.specs.lock().expect("specs lock").get(&app).cloned();
        let spares = current.filter(|c| c.revision == entry.revision).and_then(|c| c.rollout.clone()).map(|r| r.spares);
        for spare in spares.unwrap_or_else(|| rollout.spares.clone()) {
            if self.spare_failed(entry, spare) {
                if let Err(e) = self.keep_failed_spare(entry, spare).await {
                    tracing::warn!(app = %app, "keeping the failed spare {spare} of the failed rollout: {e}");
                }
                continue;
            }
            if let Err(e) = self.take_step(entry, Step::RemoveSpare(spare)).await {
                tracing::warn!(app = %app, "removing spare {spare} of the failed rollout: {e}");
            }
        }
        let event = DaemonEvent::RolloutFailed { app: app.clone(), revision: entry.revision, reason: reason.clone() };
        if let Err(e) = self.update_rollout(entry, |r| r.phase = RolloutPhase::Failed { reason }, Some(event)).await {
            tracing::warn!(app = %app, "recording the rollout's failure: {e}");
            return;
        }
        crate::failpoint::hit("rollout-failed-recorded");
        self.roll_back(entry).await;
    }

    /// With autoRollback, applies `entry`'s failed rollout's last good revision again: a new
    /// revision, a rollback (which does not roll back again), rolled out by the same rules. A
    /// rollback already applied, or none to make, changes nothing; the daemon's start calls it
    /// again for a failure whose rollback a crash cut short.
    pub(super) async fn roll_back(&self, entry: &Arc<SpecEntry>) {
        let Some(rollout) = entry.rollout.as_ref() else { return };
        let to = if rollout.last_good != 0 { rollout.last_good } else { rollout.from };
        if !entry.spec.strategy.auto_rollback || rollout.rollback || to == 0 || to == entry.revision {
            return;
        }
        let app = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let by = format!("the failed rollout of revision {} (autoRollback)", entry.revision);
        let (ns, name) = (&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        if let Err(e) = self.go_back(ns, name, Some(to), &by, Some(entry.revision)).await {
            tracing::warn!(app = %app, "autoRollback to revision {to}: {e}");
        }
    }

    /// Instances on an older revision that runs the same as the target (an undo, an apply of
    /// what ran before) take the target without a restart.
    async fn take_same_as_target(&self, entry: &Arc<SpecEntry>) {
        for index in self.same_as_target(entry) {
            let id = entry_id(entry, index);
            if let Err(e) = self.request(&id, Command::Replace(entry.clone(), true)).await {
                tracing::warn!(instance = %id, "taking revision {}: {e}", entry.revision);
            }
        }
    }

    /// The instances (indexes) whose revision differs from the target but whose template does
    /// not.
    fn same_as_target(&self, entry: &SpecEntry) -> Vec<u32> {
        let app = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let hashes: BTreeMap<u64, String> = {
            let history = self.history.lock().expect("history lock");
            history.revisions_of(&app).iter().map(|r| (r.revision, r.hash.clone())).collect()
        };
        let Some(target) = hashes.get(&entry.revision) else { return Vec::new() };
        let (ns, name) = (&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let instances = self.instances.lock().expect("instances lock");
        instances
            .iter()
            .filter(|(id, _)| &id.namespace == ns && &id.name == name)
            .filter(|(_, h)| {
                let rec = h.status.borrow();
                // A failed one stays the old revision's: taking the target would fail the rollout.
                matches!(rec.state.kind(), state::Kind::Running | state::Kind::Stopped)
                    && rec.revision != entry.revision
                    && rec.run_revision == rec.revision
                    && hashes.get(&rec.revision) == Some(target)
            })
            .map(|(id, _)| id.index)
            .collect()
    }

    /// The app's instances here as the planner sees them.
    fn members(&self, entry: &SpecEntry, rollout: &Rollout) -> Vec<Member> {
        let (ns, name) = (&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let gate = ReadyGate::of(&entry.spec);
        let counted = |index: u32| super::apply::counts(&entry.spec, entry.selection.as_deref(), index);
        let instances = self.instances.lock().expect("instances lock");
        instances
            .iter()
            .filter(|(id, _)| &id.namespace == ns && &id.name == name)
            // Scaled in (the apply deletes it) or waiting on a scale-in's hook (scale_in.rs): no
            // longer the app's, neither moved nor covered for while it goes. A spare is the
            // rollout's own.
            .filter(|(id, _)| counted(id.index) || rollout.spares.contains(&id.index))
            .filter(|(id, _)| !entry.scale_in.iter().any(|s| s.ordinal == id.index))
            .map(|(id, h)| {
                let rec = h.status.borrow();
                Member {
                    id: id.index,
                    revision: rec.revision,
                    // The gate is the target's: an old instance serves while it is ready.
                    health: health_of(
                        &rec,
                        rollout,
                        if rec.revision == entry.revision { gate } else { ReadyGate::Running },
                    ),
                    spare: rollout.spares.contains(&id.index),
                }
            })
            .collect()
    }

    async fn take_step(&self, entry: &Arc<SpecEntry>, step: Step) -> Result<(), SupervisorError> {
        let id = |index| entry_id(entry, index);
        match step {
            Step::Replace(i) => self.request(&id(i), Command::Replace(entry.clone(), false)).await,
            Step::Hold(i) => {
                // Recorded before the stop: after a restart the stopped instance is the
                // rollout's, not an operator's.
                self.update_rollout(entry, |r| r.held = Some((i, now_ms())), None).await?;
                self.request(&id(i), Command::Stop).await?;
                // The pause runs from the end of the stop.
                self.update_rollout(entry, |r| r.held = Some((i, now_ms())), None).await
            }
            Step::StartHeld(i) => {
                self.request(&id(i), Command::Replace(entry.clone(), false)).await?;
                self.request(&id(i), Command::Start).await
            }
            Step::AddSpare(i) => self.add_spare(entry, id(i)).await,
            Step::RemoveSpare(i) => {
                // Only a spare of the current rollout goes: a newer apply may have taken this one
                // in (its count grew over the spare's id) while this step was planned on the
                // older entry. Checked and the delete handed over under the apply lock.
                let deleted = {
                    let _applying = self.applying.lock().await;
                    let key = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
                    let current = self.specs.lock().expect("specs lock").get(&key).cloned();
                    let still_spare = current.is_some_and(|c| {
                        c.revision == entry.revision
                            && i >= c.spec.spec.instance
                            && c.rollout.as_ref().is_some_and(|r| r.spares.contains(&i))
                    });
                    if !still_spare {
                        return Err(SupervisorError::Conflict(format!("{key}: a newer apply took over the rollout")));
                    }
                    // With a scaleIn hook, the spare goes at its word, as any instance the app
                    // no longer counts (scale_in.rs): handed over in the commit that ends it as
                    // a spare.
                    if entry.spec.strategy.scale_in.is_some()
                        && self.instances.lock().expect("instances lock").contains_key(&id(i))
                    {
                        let mut batch = Batch::new();
                        let mut updated = self.rollout_put(entry, |r| r.spares.retain(|s| *s != i), &mut batch)?;
                        let mut next = (*updated.entry).clone();
                        let waiting = super::scale_in::spare_removal(&next, i, now_ms());
                        batch.push_event(
                            EventBody::Daemon(super::scale_in::event(
                                &key,
                                &waiting,
                                "waiting",
                                "a surge instance the rollout is done with",
                            ))
                            .to_value(),
                        );
                        next.scale_in.push(waiting);
                        next.scale_in.sort_by_key(|s| s.ordinal);
                        let value = serde_json::to_value(&next).map_err(|e| SupervisorError::Failed(e.to_string()))?;
                        batch.push_put(Table::Specs, &key, &value);
                        updated.entry = Arc::new(next);
                        self.commit(batch).await?;
                        self.show_rollout(updated);
                        self.spawn_scale_in(key);
                        return Ok(());
                    }
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    match self.send(&id(i), Command::Delete(crate::spec::pod::DeleteCause::ScaledIn), Some(tx)) {
                        Ok(()) => Some(rx),
                        Err(SupervisorError::NotFound(_)) => None,
                        Err(e) => return Err(e),
                    }
                };
                if let Some(rx) = deleted {
                    match rx.await {
                        Ok(Ok(())) | Err(_) => {}
                        Ok(Err(reason)) => return Err(SupervisorError::Failed(reason)),
                    }
                }
                self.instances.lock().expect("instances lock").remove(&id(i));
                self.update_rollout(entry, |r| r.spares.retain(|s| *s != i), None).await
            }
        }
    }

    /// A surge instance on the target revision: its record (Staging: it starts as its actor
    /// resumes it) and its place in the rollout's spares, in one commit.
    async fn add_spare(&self, entry: &Arc<SpecEntry>, id: InstanceId) -> Result<(), SupervisorError> {
        let _applying = self.applying.lock().await;
        // Planned before an apply that scaled up over that id, or created meanwhile: not a
        // spare to create (the planner picks another next time).
        let count =
            self.specs.lock().expect("specs lock").get(&app_key(&id.namespace, &id.name)).map(|e| e.spec.spec.instance);
        if id.index < count.unwrap_or(0) || self.instances.lock().expect("instances lock").contains_key(&id) {
            return Err(SupervisorError::Conflict(format!("{id}: no longer free for a surge instance")));
        }
        // Its directories are those of any instance of its id: another's here stops it, as it
        // stops an apply (it would run in that instance's workPath).
        self.check_paths_of(&entry.spec, std::slice::from_ref(&id))?;
        let mut batch = Batch::new();
        self.allocate_ports(&entry.spec, std::slice::from_ref(&id), &mut batch)?;
        let records = new_records((entry.generation, entry.revision), std::slice::from_ref(&id), &mut batch)?;
        let index = id.index;
        let updated = self.rollout_put(entry, |r| r.spares.push(index), &mut batch)?;
        self.commit(batch).await?;
        let updated = self.show_rollout(updated);
        self.spawn_created(&updated, records);
        Ok(())
    }

    /// Changes the rollout of `entry`'s app durably (the spec's record is written again), with
    /// `event` in the same commit.
    async fn update_rollout(
        &self,
        entry: &Arc<SpecEntry>,
        change: impl FnOnce(&mut Rollout),
        event: Option<DaemonEvent>,
    ) -> Result<(), SupervisorError> {
        // Under the apply lock: an apply between reading the app's spec and committing it again
        // would be overwritten by the older spec in the store.
        let _applying = self.applying.lock().await;
        self.update_rollout_locked(entry, change, event).await
    }

    /// As [`Supervisor::update_rollout`], the apply lock held by the caller.
    async fn update_rollout_locked(
        &self,
        entry: &Arc<SpecEntry>,
        change: impl FnOnce(&mut Rollout),
        event: Option<DaemonEvent>,
    ) -> Result<(), SupervisorError> {
        let mut batch = Batch::new();
        let updated = self.rollout_put(entry, change, &mut batch)?;
        if let Some(event) = event {
            batch.push_event(EventBody::Daemon(event).to_value());
        }
        self.commit(batch).await?;
        self.show_rollout(updated);
        Ok(())
    }

    /// The app's current entry with its rollout changed, put in `batch` (not yet shown): the
    /// spec's record and, when the rollout ends by the change, its revision's outcome.
    pub(super) fn rollout_put(
        &self,
        entry: &Arc<SpecEntry>,
        change: impl FnOnce(&mut Rollout),
        batch: &mut Batch,
    ) -> Result<RolloutPut, SupervisorError> {
        let key = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let current = self.specs.lock().expect("specs lock").get(&key).cloned();
        let current = current
            .filter(|c| c.revision == entry.revision)
            .ok_or_else(|| SupervisorError::Conflict(format!("{key}: a newer apply took over the rollout")))?;
        let mut next = (*current).clone();
        let rollout = next.rollout.as_mut().ok_or_else(|| SupervisorError::Failed(format!("{key}: no rollout")))?;
        let was = rollout.phase.clone();
        change(rollout);
        rollout.updated_ms = now_ms();
        let ended = (rollout.phase.has_ended() && rollout.phase != was).then(|| rollout.phase.clone());
        let history = match ended {
            Some(outcome) => {
                self.revision_outcome(&key, next.revision, &outcome, batch)?.map(|list| (key.clone(), list))
            }
            None => None,
        };
        let value = serde_json::to_value(&next).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        batch.push_put(Table::Specs, &key, &value);
        Ok(RolloutPut { entry: Arc::new(next), history })
    }

    /// Shows a committed [`RolloutPut`]: the app's entry (unless a newer apply took its place)
    /// and its revisions.
    pub(super) fn show_rollout(&self, put: RolloutPut) -> Arc<SpecEntry> {
        let key = app_key(&put.entry.spec.metadata.namespace, &put.entry.spec.metadata.name);
        {
            let mut specs = self.specs.lock().expect("specs lock");
            if specs.get(&key).is_some_and(|c| c.revision == put.entry.revision) {
                specs.insert(key.clone(), put.entry.clone());
            }
        }
        self.wake(&key);
        if let Some((app, list)) = put.history {
            self.keep_revisions(&app, list);
        }
        put.entry
    }

    /// An app's rollout here, if it has had one, and where its instances stand.
    pub fn rollout(&self, namespace: &str, name: &str) -> Result<RolloutBody, SupervisorError> {
        let app = app_key(namespace, name);
        let entry = self.specs.lock().expect("specs lock").get(&app).cloned();
        let entry = entry.ok_or_else(|| SupervisorError::NotFound(format!("app {app}")))?;
        Ok(self.rollout_body(&entry))
    }

    /// Every app's rollout here (apps that never rolled out left out), by app.
    pub fn rollouts(&self) -> Vec<RolloutBody> {
        let entries: Vec<Arc<SpecEntry>> = self.specs.lock().expect("specs lock").values().cloned().collect();
        entries.iter().filter(|e| e.rollout.is_some()).map(|e| self.rollout_body(e)).collect()
    }

    fn rollout_body(&self, entry: &SpecEntry) -> RolloutBody {
        let spares = entry.rollout.as_ref().map(|r| r.spares.clone()).unwrap_or_default();
        let (ns, name) = (&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let mut progress = RolloutProgress::default();
        for (id, h) in self.instances.lock().expect("instances lock").iter() {
            if &id.namespace != ns || &id.name != name {
                continue;
            }
            if spares.contains(&id.index) {
                progress.spares += 1;
                continue;
            }
            // One a scale-in removes at its hook's word is no longer the app's (`scale_in` lists it).
            if entry.scale_in.iter().any(|s| s.ordinal == id.index) {
                continue;
            }
            let rec = h.status.borrow();
            progress.instances += 1;
            if rec.revision == entry.revision {
                progress.updated += 1;
                if rec.run_revision == entry.revision && rec.ready && rec.state.kind() == state::Kind::Running {
                    progress.ready += 1;
                }
            }
        }
        RolloutBody {
            app: app_key(ns, name),
            revision: entry.revision,
            rollout: entry.rollout.clone(),
            progress,
            scale_in: entry.scale_in.clone(),
        }
    }

    /// `steward rollout pause`: the rollout takes no further step (instances mid-step finish
    /// it) until resumed. Pausing a paused rollout changes nothing.
    pub async fn pause_rollout(&self, namespace: &str, name: &str) -> Result<RolloutBody, SupervisorError> {
        self.set_phase(namespace, name, RolloutPhase::Paused).await
    }

    /// `steward rollout resume`: a paused rollout goes on from where its instances are; a
    /// scale-in's held removals go on and its kept ones' hooks run again (scale_in.rs).
    pub async fn resume_rollout(&self, namespace: &str, name: &str) -> Result<RolloutBody, SupervisorError> {
        let app = app_key(namespace, name);
        let scaled_in = self.resume_scale_in(&app).await?;
        match self.set_phase(namespace, name, RolloutPhase::Progressing).await {
            // Nothing of a rollout to resume, but a scale-in was.
            Err(SupervisorError::Conflict(_)) if scaled_in => {
                let entry = self.specs.lock().expect("specs lock").get(&app).cloned();
                let entry = entry.ok_or_else(|| SupervisorError::NotFound(format!("app {app}")))?;
                Ok(self.rollout_body(&entry))
            }
            other => other,
        }
    }

    async fn set_phase(
        &self,
        namespace: &str,
        name: &str,
        phase: RolloutPhase,
    ) -> Result<RolloutBody, SupervisorError> {
        let app = app_key(namespace, name);
        let _applying = self.applying.lock().await;
        let entry = self.specs.lock().expect("specs lock").get(&app).cloned();
        let entry = entry.ok_or_else(|| SupervisorError::NotFound(format!("app {app}")))?;
        let current = entry.rollout.as_ref().map(|r| r.phase.clone());
        match current {
            Some(p) if p == phase => return Ok(self.rollout_body(&entry)),
            Some(RolloutPhase::Progressing | RolloutPhase::Paused) => {}
            Some(p) => {
                return Err(SupervisorError::Conflict(format!(
                    "{app}: its rollout to revision {} is {}; nothing to {}",
                    entry.revision,
                    p.name(),
                    if phase == RolloutPhase::Paused { "pause" } else { "resume" }
                )))
            }
            None => return Err(SupervisorError::Conflict(format!("{app} has no rollout (it never changed here)"))),
        }
        let revision = entry.revision;
        let event = match phase {
            RolloutPhase::Paused => DaemonEvent::RolloutPaused { app: app.clone(), revision },
            _ => DaemonEvent::RolloutResumed { app: app.clone(), revision },
        };
        let resumed = phase == RolloutPhase::Progressing;
        let change = |r: &mut Rollout| {
            if resumed {
                r.message.clear();
            }
            r.phase = phase;
        };
        self.update_rollout_locked(&entry, change, Some(event)).await?;
        if resumed {
            self.spawn_rollout(app.clone());
        }
        let entry = self.specs.lock().expect("specs lock").get(&app).cloned().unwrap_or(entry);
        Ok(self.rollout_body(&entry))
    }

    /// `steward rollout restart`: every instance re-created under the same spec, by the app's
    /// strategy. The spec gets the label [`RESTARTED_AT_LABEL`] (now), which makes it a new
    /// revision, rolled out like any other.
    pub async fn restart_app(&self, namespace: &str, name: &str, by: &str) -> Result<ApplyOutcome, SupervisorError> {
        let app = app_key(namespace, name);
        let entry = self.specs.lock().expect("specs lock").get(&app).cloned();
        let entry = entry.ok_or_else(|| SupervisorError::NotFound(format!("app {app}")))?;
        let mut spec = entry.spec.clone();
        spec.metadata.labels.insert(RESTARTED_AT_LABEL.to_string(), crate::clock::rfc3339_utc(now_ms()));
        self.apply_selected_by(spec, entry.selection.clone(), &format!("rollout restart by {by}")).await
    }
}

/// Where a hook gate's run stands.
enum HookGate {
    /// Created and measuring.
    Running,
    /// Not created: the store refused; tried again after [`HOOK_RETRY_MS`].
    Retry,
    Done(Box<crate::hooks::HookRun>),
}

/// A change of an app's rollout put into a batch, shown once the batch is committed.
pub(super) struct RolloutPut {
    entry: Arc<SpecEntry>,
    /// The app's revisions with the ended rollout's outcome.
    history: Option<(String, Vec<crate::protocol::RevisionInfo>)>,
}

impl RolloutSteps {
    fn of(steps: &[Step]) -> RolloutSteps {
        let mut out = RolloutSteps::default();
        for step in steps {
            match *step {
                Step::Replace(i) => out.replaced.push(i),
                Step::Hold(i) => out.held.push(i),
                Step::StartHeld(i) => out.started.push(i),
                Step::AddSpare(i) => out.spares_added.push(i),
                Step::RemoveSpare(i) => out.spares_removed.push(i),
            }
        }
        out
    }
}

fn entry_id(entry: &SpecEntry, index: u32) -> InstanceId {
    InstanceId { namespace: entry.spec.metadata.namespace.clone(), name: entry.spec.metadata.name.clone(), index }
}

/// The strategy as one host can carry it out: a spec with a fixed host port cannot run a
/// surge instance beside the one it covers for (both would bind the port), so there it
/// replaces without surge, one at a time at least (DESIGN § 7's DaemonSet-like update). Nor
/// can one with a kept volume (issue 47): the volume is its ordinal's data, and a surge
/// instance is another ordinal, which would take over on an empty one.
fn host_rule(spec: &ProcessSpec) -> Rule {
    let rule = planner::rule(&spec.strategy, spec.spec.instance);
    let fixed_port = spec.port_wants().iter().any(|w| w.port != 0);
    let in_place = fixed_port || !spec.kept_volumes().is_empty();
    match rule {
        Rule::Rolling { max_unavailable, max_surge, min_ready_ms, deadline_ms } if in_place && max_surge > 0 => {
            Rule::Rolling { max_unavailable: max_unavailable.max(1), max_surge: 0, min_ready_ms, deadline_ms }
        }
        rule => rule,
    }
}

/// What makes an instance ready for a rollout (issue 18): its readiness probes; where it has
/// none, its passing health checks (seed 000's healthChecks); with neither, Running.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadyGate {
    Probes,
    HealthChecks,
    Running,
}

impl ReadyGate {
    fn of(spec: &ProcessSpec) -> ReadyGate {
        let t = &spec.spec.template.spec;
        if t.processes.iter().any(|p| p.probe.readiness.is_some())
            || t.containers.iter().any(|c| c.probe.readiness.is_some())
        {
            ReadyGate::Probes
        } else if t.processes.iter().any(|p| !p.health_checks.is_empty())
            || t.containers.iter().any(|c| !c.health_checks.is_empty())
        {
            ReadyGate::HealthChecks
        } else {
            ReadyGate::Running
        }
    }

    fn passes(self, rec: &InstanceRecord) -> bool {
        match self {
            ReadyGate::Probes | ReadyGate::Running => rec.ready,
            // Every check has passed its latest run (none yet run: not yet).
            ReadyGate::HealthChecks => {
                rec.ready && !rec.health.is_empty() && rec.health.iter().flatten().all(|h| h.healthy == Some(true))
            }
        }
    }
}

/// What an instance is to the planner.
fn health_of(rec: &InstanceRecord, rollout: &Rollout, gate: ReadyGate) -> Health {
    use state::Kind;
    let on_revision = rec.run_revision == rec.revision;
    // Pending since the rollout asked it to move (a start under way still carries the old run's
    // start time); a record that does not say falls back to what it ran since.
    let since = rec
        .revision_since_ms
        .unwrap_or_else(|| rec.last_start_ms.filter(|_| on_revision).unwrap_or(rollout.updated_ms));
    match rec.state.kind() {
        Kind::Stopped => Health::Stopped,
        // Its run on this revision failed. A failure of an older run (the spec was just replaced
        // over a Failed instance, its start not yet under way) says nothing of the new revision.
        Kind::Failed | Kind::Exited if on_revision => Health::Failed { reason: rec.message.clone() },
        // It ended on this revision and waits to start again: the new revision does not run.
        Kind::Backoff if on_revision => Health::Failed { reason: format!("it exited: {}", rec.message) },
        Kind::Running if on_revision && gate.passes(rec) => {
            let since_ms = match gate {
                // The record keeps no "healthy since": minReadySeconds counts from the start.
                ReadyGate::HealthChecks => rec.last_start_ms,
                _ => rec.ready_since_ms,
            };
            Health::Ready { since_ms: since_ms.or(rec.last_start_ms).unwrap_or(since) }
        }
        _ => Health::Pending { since_ms: since },
    }
}
