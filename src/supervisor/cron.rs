//! A cron job on this host (issue 20, seed 003 CronJob): a task per cron app that, at each tick
//! of its rule (src/cron.rs), starts an execution — a job's runs, by `job`'s parameters, driven
//! by the same step as a plain job (job.rs) — by its policy: Allow runs it beside the ones
//! going, Forbid skips the tick while one goes, Replace stops them first. `steward cron trigger`
//! is a tick at once, by the same policy (Forbid refuses it), unless forced.
//!
//! Durable like a job: the status (the ticks dealt with, every execution with its runs, the
//! counts, the next run id) is written with the records of the runs it starts, in one commit.
//! A Forbid lock is simply an execution still Running in that status: it holds across a kill -9.
//! Ticks missed while the daemon was down: the latest starts once on its return (within the
//! starting deadline), the earlier are counted missed — never a burst. Finished executions past
//! the history limits are removed, with their runs' instances and run directories.

use super::driver::{Drive, Next};
use super::job::JobStep;
use super::record::now_ms;
use super::*;
use crate::cron::{Decision, Schedule};
use crate::protocol::{CronBody, CronExecution, CronStatus, JobPhase, JobStatus, RunPhase};
use crate::spec::model::ConcurrencyPolicy;

/// Seed 003: a tick missed past its starting deadline adds to the failed count (beside
/// `missed`, which counts every tick that started nothing).
fn missed_late(status: &mut CronStatus, late: u32, deadline_secs: u64, now: u64) {
    if late == 0 {
        return;
    }
    status.failed += late;
    status.last_failure_ms = Some(now);
    status.last_failure = format!("{late} tick(s) missed the {deadline_secs} s starting deadline");
}

impl Supervisor {
    pub(super) fn spawn_cron(&self, app: String) {
        self.spawn_driver(app, Drive::Cron);
    }

    /// One look at `app`'s cron job: the tick's decision, each execution's job step, the
    /// history pruned, all committed; when to look again (a run's end wakes it; its clock: the
    /// next tick, the executions' deadlines and backoffs).
    pub(super) async fn cron_pass(&self, app: &str) -> Next {
        {
            let Some(entry) = self.specs.lock().expect("specs lock").get(app).cloned() else { return Next::Done };
            let (Some(spec), Some(status)) = (entry.spec.cron_job.clone(), entry.cron.clone()) else {
                return Next::Done;
            };
            let Ok(schedule) = Schedule::parse(&spec.rule, &spec.time_zone) else {
                tracing::error!(app = %app, "its cron rule no longer parses; nothing is started");
                return Next::Done;
            };
            let now = now_ms();
            let mut next = status.clone();
            let (mut events, mut stops, mut starting) = (Vec::new(), Vec::new(), Vec::new());
            // The tick's decision first: a Replace stops what goes before the step below sees it.
            let suspended = spec.suspend || next.suspended;
            match schedule.decide(next.handled_ms, now, spec.deadline) {
                Decision::Wait { next_ms } => next.next_tick_ms = Some(next_ms),
                Decision::Never => next.next_tick_ms = None,
                Decision::Missed { tick_ms, missed } => {
                    next.missed += missed;
                    missed_late(&mut next, missed, spec.deadline, now);
                    next.handled_ms = tick_ms;
                    events.push(DaemonEvent::CronTick { app: app.into(), tick_ms, outcome: "missed".into(), missed });
                }
                Decision::Start { tick_ms, missed, late } => {
                    next.missed += missed;
                    missed_late(&mut next, late, spec.deadline, now);
                    next.handled_ms = tick_ms;
                    next.last_tick_ms = Some(tick_ms);
                    let going = next.active() > 0;
                    let outcome = if suspended {
                        next.skipped += 1;
                        "skipped: suspended"
                    } else if going && spec.policy == ConcurrencyPolicy::Forbid {
                        next.skipped += 1;
                        "skipped: an earlier tick's runs still go (Forbid)"
                    } else {
                        if going && spec.policy == ConcurrencyPolicy::Replace {
                            // Stopped before the new runs start: Replace never overlaps.
                            let old = replace_going(&entry, &mut next, now, "a newer tick");
                            self.stop_replaced(&old).await;
                        }
                        next.started += 1;
                        next.executions.push(CronExecution { tick_ms, triggered: false, job: JobStatus::new(now) });
                        "started"
                    };
                    events.push(DaemonEvent::CronTick { app: app.into(), tick_ms, outcome: outcome.into(), missed });
                }
            }
            // Each execution going: a job's step, run ids shared.
            let params = entry.spec.job_params();
            for ex in next.executions.iter_mut().filter(|e| e.job.phase == JobPhase::Running) {
                ex.job.next_index = next.next_index;
                let JobStep { events: e, stops: s, starting: st } = self.step_job(&entry, &params, &mut ex.job, now);
                next.next_index = ex.job.next_index;
                match &ex.job.phase {
                    JobPhase::Complete => {
                        next.succeeded += 1;
                        next.last_success_ms = Some(now);
                    }
                    JobPhase::Failed { reason } => {
                        next.failed += 1;
                        next.last_failure_ms = Some(now);
                        next.last_failure = reason.clone();
                    }
                    JobPhase::Running => {}
                }
                events.extend(e);
                stops.extend(s);
                starting.extend(st);
            }
            let removed = prune_history(&mut next, spec.history.success, spec.history.fail);
            let mut look = Next::Now;
            if next == status {
                let params = entry.spec.job_params();
                let runs = next.executions.iter().filter(|e| e.job.phase == JobPhase::Running);
                let due = runs.filter_map(|e| super::job::job_due(&params, &e.job, now)).chain(next.next_tick_ms).min();
                look = Next::Wait { until_ms: due, hooks: false };
            } else {
                match self.commit_cron(&entry, next, &starting, events).await {
                    Ok(Some((updated, records))) => self.spawn_created(&updated, records),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(app = %app, "recording the cron job: {e}");
                        look = Next::retry();
                    }
                }
            }
            for id in stops {
                let sup = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = sup.stop(&id).await {
                        tracing::warn!(instance = %id, "stopping a cron job's run: {e}");
                    }
                });
            }
            for index in removed {
                let (sup, id) = (self.clone(), job_run_id(&entry, index));
                tokio::spawn(async move {
                    if let Err(e) = sup.delete_instance(&id, crate::spec::pod::DeleteCause::Operator).await {
                        tracing::warn!(instance = %id, "removing a run past the history limits: {e}");
                    }
                });
            }
            look
        }
    }

    /// Writes the cron job's status and the records of the runs it starts, in one commit.
    async fn commit_cron(
        &self,
        entry: &Arc<SpecEntry>,
        status: CronStatus,
        starting: &[InstanceId],
        events: Vec<DaemonEvent>,
    ) -> Result<Option<(Arc<SpecEntry>, Vec<InstanceRecord>)>, SupervisorError> {
        self.commit_runs(entry, |e| e.cron = Some(status), starting, events).await
    }

    /// `steward cron suspend|resume|trigger`: changes the status with `change` (one commit),
    /// retried while the cron job's task writes in between. A trigger is a tick at once, by the
    /// cron job's concurrencyPolicy while an earlier tick's runs go (see [`trigger`]);
    /// `force` starts it whatever the policy.
    pub async fn cron_action(
        &self,
        namespace: &str,
        name: &str,
        action: &str,
        force: bool,
    ) -> Result<CronBody, SupervisorError> {
        let app = app_key(namespace, name);
        for _ in 0..50 {
            let entry = self.specs.lock().expect("specs lock").get(&app).cloned();
            let entry = entry
                .filter(|e| e.cron.is_some())
                .ok_or_else(|| SupervisorError::NotFound(format!("cron job {app}")))?;
            let mut status = entry.cron.clone().expect("filtered");
            let now = now_ms();
            let mut events = Vec::new();
            let mut replace_first = None;
            match action {
                "suspend" => status.suspended = true,
                "resume" => {
                    status.suspended = false;
                    // Ticks while suspended are not made up for: counting starts again now.
                    status.handled_ms = status.handled_ms.max(now);
                }
                "trigger" => match trigger(&entry, &mut status, now, force)? {
                    Trigger::Start => events.push(DaemonEvent::CronTick {
                        app: app.clone(),
                        tick_ms: now,
                        outcome: "triggered".into(),
                        missed: 0,
                    }),
                    Trigger::ReplaceFirst(old) => replace_first = Some(old),
                },
                other => return Err(SupervisorError::Invalid(format!("no cron action {other:?}"))),
            }
            match (self.commit_cron(&entry, status, &[], events).await, replace_first) {
                // Replace: the runs going are recorded as replaced (their job's step leaves them
                // be), stopped, and only then is the trigger's own execution added, next round.
                (Ok(_), Some(old)) => self.stop_replaced(&old).await,
                (Ok(_), None) => return self.cron(namespace, name),
                (Err(SupervisorError::Conflict(_)), _) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await
                }
                (Err(e), _) => return Err(e),
            }
        }
        Err(SupervisorError::Failed(format!("{app}: the cron job kept changing; try again")))
    }

    /// Stops the runs a Replace took the place of, all at once, waiting for each.
    async fn stop_replaced(&self, old: &[InstanceId]) {
        let stopping = old.iter().map(|id| self.stop(id));
        for (id, r) in old.iter().zip(futures_util::future::join_all(stopping).await) {
            if let Err(e) = r {
                tracing::warn!(instance = %id, "stopping a replaced run: {e}");
            }
        }
    }

    /// Stops a cron job from starting anything (its runs going are failed as `reason`), as a
    /// delete of the app does first.
    pub(super) async fn end_cron(&self, entry: &Arc<SpecEntry>, reason: &str) -> Result<(), SupervisorError> {
        let Some(mut status) = entry.cron.clone() else { return Ok(()) };
        let now = now_ms();
        status.suspended = true;
        for ex in status.executions.iter_mut().filter(|e| e.job.phase == JobPhase::Running) {
            ex.job.phase = JobPhase::Failed { reason: reason.to_string() };
            ex.job.finished_ms = Some(now);
        }
        self.commit_cron(entry, status, &[], Vec::new()).await.map(|_| ())
    }

    pub fn crons(&self) -> Vec<CronBody> {
        let entries: Vec<Arc<SpecEntry>> = self.specs.lock().expect("specs lock").values().cloned().collect();
        entries.iter().filter_map(|e| cron_body(e)).collect()
    }

    pub fn cron(&self, namespace: &str, name: &str) -> Result<CronBody, SupervisorError> {
        let app = app_key(namespace, name);
        let entry = self.specs.lock().expect("specs lock").get(&app).cloned();
        entry.as_deref().and_then(cron_body).ok_or_else(|| SupervisorError::NotFound(format!("cron job {app}")))
    }
}

fn cron_body(entry: &SpecEntry) -> Option<CronBody> {
    let (spec, status) = (entry.spec.cron_job.as_ref()?, entry.cron.clone()?);
    Some(CronBody {
        app: app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name),
        rule: spec.rule.clone(),
        time_zone: spec.time_zone.clone(),
        policy: format!("{:?}", spec.policy),
        suspended: spec.suspend || status.suspended,
        status,
    })
}

fn job_run_id(entry: &SpecEntry, index: u32) -> InstanceId {
    InstanceId { namespace: entry.spec.metadata.namespace.clone(), name: entry.spec.metadata.name.clone(), index }
}

/// A trigger, by the concurrencyPolicy while an earlier tick's runs go (as a tick of the
/// rule): Allow starts it beside them; Forbid refuses it, naming them; Replace replaces them
/// first. `force` starts it whatever the policy.
fn trigger(entry: &SpecEntry, status: &mut CronStatus, now: u64, force: bool) -> Result<Trigger, SupervisorError> {
    let policy = entry.spec.cron_job.as_ref().map(|c| c.policy).unwrap_or_default();
    if status.active() > 0 && !force {
        match policy {
            ConcurrencyPolicy::Allow => {}
            ConcurrencyPolicy::Forbid => {
                let app = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
                return Err(SupervisorError::Invalid(format!(
                    "{app}: {} and its concurrencyPolicy is Forbid: not triggered (--force starts one anyway)",
                    going_text(entry, status)
                )));
            }
            ConcurrencyPolicy::Replace => {
                return Ok(Trigger::ReplaceFirst(replace_going(entry, status, now, "a triggered run")))
            }
        }
    }
    status.started += 1;
    status.executions.push(CronExecution { tick_ms: now, triggered: true, job: JobStatus::new(now) });
    Ok(Trigger::Start)
}

/// What a trigger does to the status.
enum Trigger {
    /// Its execution is added: the cron job's task starts its runs.
    Start,
    /// The executions going are recorded as replaced; their runs (these) are to be stopped
    /// before the trigger's own execution is added.
    ReplaceFirst(Vec<InstanceId>),
}

/// Replace: every execution going fails as replaced `by` ("a newer tick"); their active runs are
/// returned, to be stopped before the new runs start.
fn replace_going(entry: &SpecEntry, status: &mut CronStatus, now: u64, by: &str) -> Vec<InstanceId> {
    let mut stops = Vec::new();
    for ex in status.executions.iter_mut().filter(|e| e.job.phase == JobPhase::Running) {
        stops.extend(replace(entry, &mut ex.job, now, by));
        status.failed += 1;
        status.last_failure_ms = Some(now);
        status.last_failure = format!("replaced by {by} (Replace)");
    }
    stops
}

/// Replace: the execution fails as replaced `by`; its active runs are returned to be stopped.
fn replace(entry: &SpecEntry, job: &mut JobStatus, now: u64, by: &str) -> Vec<InstanceId> {
    let mut stops = Vec::new();
    for run in job.runs.iter_mut().filter(|r| r.phase == RunPhase::Active) {
        run.phase = RunPhase::Failed;
        run.reason = format!("stopped: {by} replaced it (Replace)");
        run.ended_ms = Some(now);
        stops.push(job_run_id(entry, run.index));
    }
    job.phase = JobPhase::Failed { reason: format!("replaced by {by} (Replace)") };
    job.finished_ms = Some(now);
    stops
}

/// The executions going, as a Forbid refusal names them: their active runs, else their ticks.
fn going_text(entry: &SpecEntry, status: &CronStatus) -> String {
    let going = status.executions.iter().filter(|e| e.job.phase == JobPhase::Running);
    let runs: Vec<String> = going
        .clone()
        .flat_map(|e| e.job.runs.iter().filter(|r| r.phase == RunPhase::Active))
        .map(|r| job_run_id(entry, r.index).to_string())
        .collect();
    match runs.as_slice() {
        [] => {
            let ticks: Vec<String> = going.map(|e| crate::clock::rfc3339_utc(e.tick_ms)).collect();
            format!("the tick of {} still goes", ticks.join(", "))
        }
        [one] => format!("its run {one} still goes"),
        many => format!("its runs {} still go", many.join(", ")),
    }
}

/// Drops finished executions beyond the newest `success` complete and `fail` failed ones;
/// returns their runs' ids, whose instances go too.
fn prune_history(status: &mut CronStatus, success: u32, fail: u32) -> Vec<u32> {
    let (mut kept_ok, mut kept_failed) = (0, 0);
    let mut keep = vec![true; status.executions.len()];
    for (i, ex) in status.executions.iter().enumerate().rev() {
        match ex.job.phase {
            JobPhase::Running => {}
            JobPhase::Complete => {
                kept_ok += 1;
                keep[i] = kept_ok <= success;
            }
            JobPhase::Failed { .. } => {
                kept_failed += 1;
                keep[i] = kept_failed <= fail;
            }
        }
    }
    let mut removed = Vec::new();
    let mut i = 0;
    status.executions.retain(|ex| {
        let k = keep[i];
        i += 1;
        if !k {
            removed.extend(ex.job.runs.iter().map(|r| r.index));
        }
        k
    });
    removed
}
