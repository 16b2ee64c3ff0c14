//! A job on this host (issue 20, seed 003 Job): a task per running job that starts runs —
//! instances of the app with ids of their own, one per run — up to `parallelism` at once until
//! `completions` succeeded, stops a run past its `active` seconds, retries failed runs after a
//! growing delay until `backoffLimit`, and fails the job past its `jobDeadline`.
//!
//! The job's status (counts, every run with its start, end, exit and reason, the next id, the
//! backoff) is kept beside the app's spec and written in the same commit as what it records: a
//! run's instance record and its place in the status are one commit, so after a kill -9 a run
//! is found either not started (and started once) or started (and re-adopted by its actor,
//! never started again). A run that ended while the daemon was away is known by the exit code
//! its wrapper wrote in its workPath (spec/render: `job_exit_file`).

use super::apply::new_records;
use super::driver::{Drive, Next};
use super::record::now_ms;
use super::*;
use crate::protocol::{JobBody, JobPhase, JobRun, JobStatus, RunPhase};
use crate::runtime::exit::ExitStatus;
use crate::spec::model::JobSpec;

/// What one look at a job decided.
pub(super) struct JobStep {
    pub events: Vec<DaemonEvent>,
    pub stops: Vec<InstanceId>,
    pub starting: Vec<InstanceId>,
}

impl Supervisor {
    /// Starts the task that drives `app`'s job (one per app: a later one waits).
    pub(super) fn spawn_job(&self, app: String) {
        self.spawn_driver(app, Drive::Job);
    }

    /// One look at `app`'s job: its step committed, the runs it stops stopped; when to look
    /// again (a run's end wakes it; its clock: an active deadline, a backoff, the job deadline).
    pub(super) async fn job_pass(&self, app: &str) -> Next {
        let Some(entry) = self.specs.lock().expect("specs lock").get(app).cloned() else { return Next::Done };
        let (Some(spec), Some(status)) = (entry.spec.job.clone(), entry.job.clone()) else { return Next::Done };
        if status.phase != JobPhase::Running {
            return Next::Done;
        }
        let now = now_ms();
        let mut next = status.clone();
        let JobStep { events, stops, starting } = self.step_job(&entry, &spec, &mut next, now);
        for id in stops {
            let sup = self.clone();
            tokio::spawn(async move {
                if let Err(e) = sup.stop(&id).await {
                    tracing::warn!(instance = %id, "stopping a job's run: {e}");
                }
            });
        }
        if next == status {
            return Next::Wait { until_ms: job_due(&spec, &next, now), hooks: false };
        }
        match self.commit_job(&entry, next, &starting, events).await {
            Ok(Some(created)) => self.spawn_created(&created.0, created.1),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(app = %app, "recording the job: {e}");
                return Next::retry();
            }
        }
        Next::Now
    }

    /// One look at a job's runs: their ends recorded, deadlines enforced, the verdict, the runs
    /// to start (ids from `next.next_index`). Changes `next`; what to journal, stop and start.
    pub(super) fn step_job(&self, entry: &SpecEntry, spec: &JobSpec, next: &mut JobStatus, now: u64) -> JobStep {
        let app = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let app = app.as_str();
        let mut events = Vec::new();
        let mut stops = Vec::new();
        for run in next.runs.iter_mut().filter(|r| r.phase == RunPhase::Active) {
            let id = job_id(entry, run.index);
            let rec = self.instances.lock().expect("instances lock").get(&id).map(|h| h.status.borrow().clone());
            let Some(rec) = rec else {
                end_run(run, RunPhase::Failed, None, "its instance was deleted".into(), now);
                continue;
            };
            // Restarts under OnFailure: each counts toward backoffLimit.
            let restarts = rec.restarts as u32;
            if restarts > run.restarts {
                next.failed += restarts - run.restarts;
                run.restarts = restarts;
                next.not_before_ms = now + spec.backoff_ms(next.failed);
            }
            match &rec.state {
                state::State::Exited { status } => {
                    let code = match status {
                        ExitStatus::Code(c) => Some(*c),
                        ExitStatus::Unknown => self.recorded_exit(entry, run.index),
                        ExitStatus::Signal(_) | ExitStatus::Removed => None,
                    };
                    let (phase, reason) = match code {
                        Some(0) if run.reason.is_empty() => (RunPhase::Succeeded, "exited 0".to_string()),
                        Some(c) => (RunPhase::Failed, or(&run.reason, format!("exited {c}"))),
                        None if *status == ExitStatus::Unknown => {
                            (RunPhase::Failed, "ended while stewardd was away, its exit code not recorded".to_string())
                        }
                        None => (RunPhase::Failed, or(&run.reason, format!("ended by {status}"))),
                    };
                    end_run(run, phase, code, reason, now);
                }
                state::State::Failed { reason } => {
                    end_run(run, RunPhase::Failed, None, or(&run.reason, reason.clone()), now);
                }
                state::State::Stopped => {
                    end_run(run, RunPhase::Failed, None, or(&run.reason, "stopped by an operator".into()), now);
                }
                _ => {
                    let over = spec.active > 0 && now.saturating_sub(run.started_ms) > spec.active * 1000;
                    if over && run.reason.is_empty() {
                        // Recorded before the stop: the run's end is then this deadline's.
                        run.reason = format!("stopped at its active deadline ({} s)", spec.active);
                        stops.push(id);
                    }
                }
            }
            if run.phase != RunPhase::Active {
                match run.phase {
                    RunPhase::Succeeded => next.succeeded += 1,
                    _ => {
                        next.failed += 1;
                        next.not_before_ms = now + spec.backoff_ms(next.failed);
                    }
                }
                events.push(DaemonEvent::JobRunEnded {
                    app: app.to_string(),
                    index: run.index,
                    phase: run.phase,
                    exit_code: run.exit_code,
                    reason: run.reason.clone(),
                });
            }
        }
        // The verdict.
        let verdict = if next.succeeded >= spec.completions {
            Some(JobPhase::Complete)
        } else if next.failed > spec.backoff_limit {
            Some(JobPhase::Failed {
                reason: format!("{} failure(s), over its backoffLimit of {}", next.failed, spec.backoff_limit),
            })
        } else if spec.job_deadline > 0 && now.saturating_sub(next.started_ms) > spec.job_deadline * 1000 {
            Some(JobPhase::Failed { reason: format!("past its jobDeadline ({} s)", spec.job_deadline) })
        } else {
            None
        };
        if let Some(phase) = verdict {
            // Whatever still runs is not needed (complete) or not wanted (failed).
            for run in next.runs.iter_mut().filter(|r| r.phase == RunPhase::Active) {
                stops.push(job_id(entry, run.index));
                end_run(run, RunPhase::Failed, None, format!("stopped: the job is {}", phase.name()), now);
            }
            let reason = match &phase {
                JobPhase::Failed { reason } => reason.clone(),
                _ => String::new(),
            };
            events.push(DaemonEvent::JobEnded { app: app.to_string(), phase: phase.name().into(), reason });
            next.phase = phase;
            next.finished_ms = Some(now);
        }
        // New runs: up to parallelism, no more than completions still need, after any backoff.
        let mut starting = Vec::new();
        if next.phase == JobPhase::Running && now >= next.not_before_ms {
            let needed = spec.completions.saturating_sub(next.succeeded);
            let want = spec.parallelism.min(needed).saturating_sub(next.active());
            for _ in 0..want {
                let index = next.next_index;
                next.next_index += 1;
                next.runs.push(JobRun {
                    index,
                    phase: RunPhase::Active,
                    started_ms: now,
                    ended_ms: None,
                    exit_code: None,
                    reason: String::new(),
                    restarts: 0,
                });
                starting.push(job_id(entry, index));
            }
        }
        JobStep { events, stops, starting }
    }

    /// Writes the job's status (and the records of the runs it starts, with their ports) in one
    /// commit; the entry to spawn the new runs with, if any.
    async fn commit_job(
        &self,
        entry: &Arc<SpecEntry>,
        status: JobStatus,
        starting: &[InstanceId],
        events: Vec<DaemonEvent>,
    ) -> Result<Option<(Arc<SpecEntry>, Vec<InstanceRecord>)>, SupervisorError> {
        self.commit_runs(entry, |e| e.job = Some(status), starting, events).await
    }

    /// The commit of a job's or cron job's task: the app's entry changed by `change` (its
    /// status), the records of the runs it starts with their ports, and `events`, in one commit;
    /// the entry to spawn the new runs with, if any.
    pub(super) async fn commit_runs(
        &self,
        entry: &Arc<SpecEntry>,
        change: impl FnOnce(&mut SpecEntry),
        starting: &[InstanceId],
        events: Vec<DaemonEvent>,
    ) -> Result<Option<(Arc<SpecEntry>, Vec<InstanceRecord>)>, SupervisorError> {
        let _applying = self.applying.lock().await;
        let key = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let current = self.specs.lock().expect("specs lock").get(&key).cloned();
        // What this change was decided on must still be what is: a newer apply, or a delete
        // ending the job, wins over a task that looked before it.
        let current = current
            .filter(|c| c.generation == entry.generation && c.job == entry.job && c.cron == entry.cron)
            .ok_or_else(|| SupervisorError::Conflict(format!("{key}: the job changed meanwhile")))?;
        let mut next = (*current).clone();
        change(&mut next);
        let mut batch = Batch::new();
        let value = serde_json::to_value(&next).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        batch.push_put(Table::Specs, &key, &value);
        for e in events {
            batch.push_event(EventBody::Daemon(e).to_value());
        }
        let records = if starting.is_empty() {
            Vec::new()
        } else {
            self.allocate_ports(&next.spec, starting, &mut batch)?;
            new_records((next.generation, next.revision), starting, &mut batch)?
        };
        self.commit(batch).await?;
        let next = Arc::new(next);
        self.specs.lock().expect("specs lock").insert(key.clone(), next.clone());
        self.wake(&key);
        Ok((!records.is_empty()).then_some((next, records)))
    }

    /// The exit code a run's wrapper wrote, if it did (a run that ended while the daemon was
    /// away).
    fn recorded_exit(&self, entry: &SpecEntry, index: u32) -> Option<i32> {
        let ctx = crate::spec::RenderContext {
            roots: &self.shared.roots,
            host_ip: self.shared.host_ip.clone(),
            allocated_ports: &BTreeMap::new(),
        };
        let rendered = crate::spec::render(&entry.spec, index, &ctx).ok()?;
        recorded_job_exit(rendered.processes.first()?)
    }

    /// Ends a running job (no more runs start) with `reason`, as a delete of the app does first.
    pub(super) async fn end_job(&self, entry: &Arc<SpecEntry>, reason: &str) -> Result<(), SupervisorError> {
        let Some(mut status) = entry.job.clone().filter(|j| j.phase == JobPhase::Running) else { return Ok(()) };
        let app = app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        status.phase = JobPhase::Failed { reason: reason.to_string() };
        status.finished_ms = Some(now_ms());
        let event = DaemonEvent::JobEnded { app, phase: "failed".into(), reason: reason.to_string() };
        self.commit_job(entry, status, &[], vec![event]).await.map(|_| ())
    }

    /// Every job here, by app.
    pub fn jobs(&self) -> Vec<JobBody> {
        let entries: Vec<Arc<SpecEntry>> = self.specs.lock().expect("specs lock").values().cloned().collect();
        entries.iter().filter_map(|e| job_body(e)).collect()
    }

    pub fn job(&self, namespace: &str, name: &str) -> Result<JobBody, SupervisorError> {
        let app = app_key(namespace, name);
        let entry = self.specs.lock().expect("specs lock").get(&app).cloned();
        entry.as_deref().and_then(job_body).ok_or_else(|| SupervisorError::NotFound(format!("job {app}")))
    }
}

fn job_body(entry: &SpecEntry) -> Option<JobBody> {
    let (spec, status) = (entry.spec.job.as_ref()?, entry.job.clone()?);
    Some(JobBody {
        app: app_key(&entry.spec.metadata.namespace, &entry.spec.metadata.name),
        completions: spec.completions,
        parallelism: spec.parallelism,
        active: status.active(),
        status,
    })
}

fn job_id(entry: &SpecEntry, index: u32) -> InstanceId {
    InstanceId { namespace: entry.spec.metadata.namespace.clone(), name: entry.spec.metadata.name.clone(), index }
}

fn end_run(run: &mut JobRun, phase: RunPhase, code: Option<i32>, reason: String, now: u64) {
    run.phase = phase;
    run.exit_code = code;
    run.reason = reason;
    run.ended_ms = Some(now);
}

/// `first` if it says something, else `otherwise`.
fn or(first: &str, otherwise: String) -> String {
    if first.is_empty() {
        otherwise
    } else {
        first.to_string()
    }
}

/// When a job's clock is next due after `now`, if ever: the first active deadline of a run
/// going, the end of a backoff, the job deadline. (One already past has been acted on.)
pub(super) fn job_due(spec: &JobSpec, status: &JobStatus, now: u64) -> Option<u64> {
    let mut due: Vec<u64> = Vec::new();
    if spec.active > 0 {
        let ends = status.runs.iter().filter(|r| r.phase == RunPhase::Active && r.reason.is_empty());
        due.extend(ends.map(|r| r.started_ms + spec.active * 1000 + 1));
    }
    if status.not_before_ms > 0 {
        due.push(status.not_before_ms);
    }
    if spec.job_deadline > 0 {
        due.push(status.started_ms + spec.job_deadline * 1000 + 1);
    }
    due.into_iter().filter(|t| *t > now).min()
}

/// The exit code job run process `p`'s wrapper recorded (spec/render `job_wrapper`), if it did:
/// `started` alone means it began and its end was not recorded. Read as the workload's own
/// file: a symlink or hard link it planted there to a file of root's gets nothing read.
pub(crate) fn recorded_job_exit(p: &crate::spec::render::RenderedProcess) -> Option<i32> {
    let file = crate::spec::render::job_exit_file(&p.work_path, &p.proc_name);
    let uid = crate::runtime::process::ResolvedUser::lookup(&p.user).ok()?.uid;
    let text = crate::safefs::read_workload_file(&file, uid, 64).ok()?;
    String::from_utf8_lossy(&text).trim().parse().ok()
}
