//! An instance's probes: running each of the current run's probes (a seed-000 health check, a
//! seed-003 liveness or readiness probe), as its workload says how, and acting on the results:
//! a health check's or liveness probe's kill verdict stops the instance with its reason (the
//! restart policy decides), readiness sets only the instance's Ready condition. Changes are
//! journaled.

use super::messages::Msg;
use super::workload::{ProbeRole, Workload};
use super::Actor;
use crate::health::{Outcome, ThresholdTracker, Tracker, Verdict};
use crate::protocol::{HealthChanged, InstanceChange, ReadyChanged};
use crate::supervisor::record::now_ms;
use crate::supervisor::state::{Event, State, StopGoal};

/// A probe of the current run and what its results have said so far.
pub(super) struct ActiveProbe {
    /// The process (container) probed.
    index: usize,
    verdicts: Verdicts,
}

enum Verdicts {
    Check(Tracker),
    Liveness(ThresholdTracker),
    Readiness(ThresholdTracker),
}

impl<W: Workload> Actor<W> {
    /// Starts the current run's probes.
    pub(super) fn start_health_checks(&mut self) {
        self.ensure_rendered();
        let probes = self.workload.probes(&super::cx!(self));
        let started = self.rec.last_start_ms.unwrap_or_else(now_ms);
        // A readiness found before a daemon restart holds until its probe says otherwise.
        let was_ready = self.rec.ready.then_some(true);
        let processes = self
            .rendered
            .as_ref()
            .map_or(0, |r| r.processes.len().max(r.pod.as_ref().map_or(0, |p| p.containers.len())));
        self.rec.health = vec![None; processes];
        self.probes = Vec::with_capacity(probes.len());
        for (number, probe) in probes.into_iter().enumerate() {
            let verdicts = match &probe.role {
                ProbeRole::Check(check) => Verdicts::Check(Tracker::new(check, started)),
                ProbeRole::Liveness { success, failure } => {
                    Verdicts::Liveness(ThresholdTracker::new(*success, *failure, Some(true)))
                }
                ProbeRole::Readiness { success, failure } => {
                    Verdicts::Readiness(ThresholdTracker::new(*success, *failure, was_ready))
                }
            };
            if let Verdicts::Check(t) = &verdicts {
                if let Some(slot) = self.rec.health.get_mut(probe.index) {
                    *slot = Some(t.health.clone());
                }
            }
            self.probes.push(ActiveProbe { index: probe.index, verdicts });
            let (tx, generation) = (self.tx.clone(), self.generation);
            self.health_tasks.push(tokio::spawn(async move {
                tokio::time::sleep(probe.delay).await;
                loop {
                    let outcome = (probe.run)().await;
                    if tx.send(Msg::Checked { generation, index: number, outcome }).is_err() {
                        return;
                    }
                    tokio::time::sleep(probe.period).await;
                }
            }));
        }
        self.rec.health.truncate(self.rec.health.iter().rposition(Option::is_some).map_or(0, |i| i + 1));
        self.rec.ready = self.all_ready();
    }

    /// Running, and every readiness probe passing (no readiness probe: ready once Running).
    fn all_ready(&self) -> bool {
        self.rec.state == State::Running
            && self.probes.iter().all(|p| match &p.verdicts {
                Verdicts::Readiness(t) => t.passing == Some(true),
                _ => true,
            })
    }

    /// One result of probe `number` of the current run.
    pub(super) async fn on_checked(&mut self, number: usize, outcome: Outcome) {
        if matches!(outcome, Outcome::Fail(_)) {
            self.shared.counters.check_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let Some(probe) = self.probes.get_mut(number) else { return };
        let index = probe.index;
        let kill = match &mut probe.verdicts {
            Verdicts::Check(tracker) => {
                let was = tracker.health.healthy;
                let verdict = tracker.record(outcome, now_ms());
                let health = tracker.health.clone();
                if let Some(slot) = self.rec.health.get_mut(index) {
                    *slot = Some(health.clone());
                }
                if was != health.healthy {
                    let detail =
                        HealthChanged { process: index, healthy: health.healthy, last_failure: health.last_failure };
                    self.commit_event(InstanceChange::HealthChanged { detail }).await;
                } else {
                    self.journal.show(&self.rec);
                }
                match verdict {
                    Verdict::Kill { reason } => Some(reason),
                    _ => None,
                }
            }
            Verdicts::Liveness(tracker) => match tracker.record(outcome) {
                Some(false) => {
                    let (why, times) = (tracker.last_failure.clone().unwrap_or_default(), tracker.failures());
                    Some(format!("liveness probe of {} failed {times} times in a row: {why}", self.probed(index)))
                }
                _ => None,
            },
            Verdicts::Readiness(tracker) => {
                if tracker.record(outcome).is_some() {
                    let last_failure = tracker.last_failure.clone();
                    self.note_readiness(index, last_failure).await;
                }
                None
            }
        };
        if let Some(reason) = kill {
            tracing::warn!(instance = %self.rec.id, "{reason}; killing it");
            self.feed(Event::StopRequested { goal: StopGoal::Fail { reason } }).await;
        }
    }

    /// A readiness verdict changed: the instance's Ready condition follows, journaled when it
    /// changes.
    async fn note_readiness(&mut self, index: usize, last_failure: Option<String>) {
        let ready = self.all_ready();
        if ready == self.rec.ready {
            return self.journal.show(&self.rec);
        }
        self.rec.ready = ready;
        let reason = if ready { None } else { last_failure };
        tracing::info!(instance = %self.rec.id, "ready: {ready} ({})", self.probed(index));
        self.commit_event(InstanceChange::ReadyChanged { detail: ReadyChanged { ready, process: index, reason } })
            .await;
    }

    /// What probe results of main `index` are about: `process N`, or a pod's `container NAME`.
    fn probed(&self, index: usize) -> String {
        let container = self.rendered.as_ref().and_then(|r| r.pod.as_ref()?.containers.get(index));
        match container {
            Some(c) => format!("container {}", c.name),
            None => format!("process {index}"),
        }
    }
}
