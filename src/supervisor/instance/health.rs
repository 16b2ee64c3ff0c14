//! An instance's probes: running each of the current run's probes (a seed-000 health check, a
//! seed-003 liveness or readiness probe), as its workload says how, and acting on the results:
//! a health check's or liveness probe's kill verdict stops the instance with its reason (the
//! restart policy decides), readiness sets only the instance's Ready condition. Changes are
//! journaled.

use super::messages::{Msg, ProbeReport};
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
    /// The verdicts so far (the thresholds are counted in the probe's task).
    Liveness,
    Readiness {
        passing: Option<bool>,
    },
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
            let (verdicts, tracker) = match &probe.role {
                ProbeRole::Check(check) => (Verdicts::Check(Tracker::new(check, started)), None),
                ProbeRole::Liveness { success, failure } => {
                    (Verdicts::Liveness, Some(ThresholdTracker::new(*success, *failure, Some(true))))
                }
                ProbeRole::Readiness { success, failure } => (
                    Verdicts::Readiness { passing: was_ready },
                    Some(ThresholdTracker::new(*success, *failure, was_ready)),
                ),
            };
            if let Verdicts::Check(t) = &verdicts {
                if let Some(slot) = self.rec.health.get_mut(probe.index) {
                    *slot = Some(t.health.clone());
                }
            }
            self.probes.push(ActiveProbe { index: probe.index, verdicts });
            let (tx, generation, shared) = (self.tx.clone(), self.generation, self.shared.clone());
            self.health_tasks.push(tokio::spawn(async move {
                let mut tracker = tracker;
                tokio::time::sleep(probe.delay).await;
                loop {
                    let outcome = (probe.run)().await;
                    if matches!(outcome, Outcome::Fail(_)) {
                        shared.counters.check_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    let report = match tracker.as_mut() {
                        None => Some(ProbeReport::Outcome(outcome)),
                        Some(t) => t.record(outcome).map(|passing| ProbeReport::Verdict {
                            passing,
                            failures: t.failures(),
                            last_failure: t.last_failure.clone(),
                        }),
                    };
                    if let Some(report) = report {
                        if tx.send(Msg::Checked { generation, index: number, report }).is_err() {
                            return;
                        }
                    }
                    tokio::time::sleep_until(on_grid(tokio::time::Instant::now() + probe.period)).await;
                }
            }));
        }
        self.rec.health.truncate(self.rec.health.iter().rposition(Option::is_some).map_or(0, |i| i + 1));
        self.set_ready(self.all_ready());
    }

    /// Running, and every readiness probe passing (no readiness probe: ready once Running).
    fn all_ready(&self) -> bool {
        self.rec.state == State::Running
            && self.probes.iter().all(|p| match &p.verdicts {
                Verdicts::Readiness { passing } => *passing == Some(true),
                _ => true,
            })
    }

    /// What probe `number` of the current run reports.
    pub(super) async fn on_checked(&mut self, number: usize, report: ProbeReport) {
        let Some(probe) = self.probes.get_mut(number) else { return };
        let index = probe.index;
        let kill = match (&mut probe.verdicts, report) {
            (Verdicts::Check(tracker), ProbeReport::Outcome(outcome)) => {
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
            (Verdicts::Liveness, ProbeReport::Verdict { passing: false, failures, last_failure }) => {
                let why = last_failure.unwrap_or_default();
                let failed = crate::wording::in_a_row(failures);
                Some(format!("liveness probe of {} failed {failed}: {why}", self.probed(index)))
            }
            (Verdicts::Readiness { passing: was }, ProbeReport::Verdict { passing, last_failure, .. }) => {
                *was = Some(passing);
                self.note_readiness(index, last_failure).await;
                None
            }
            _ => None,
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
            // Nothing to show: a probe's result changes the status only with the condition
            // (showing clones the record, at every result of every probe of every instance).
            return;
        }
        self.set_ready(ready);
        let reason = if ready { None } else { last_failure };
        tracing::info!(instance = %self.rec.id, "ready: {ready} ({})", self.probed(index));
        self.commit_event(InstanceChange::ReadyChanged { detail: ReadyChanged { ready, process: index, reason } })
            .await;
    }

    /// The Ready condition, and since when it holds.
    pub(super) fn set_ready(&mut self, ready: bool) {
        if ready && !self.rec.ready {
            self.rec.ready_since_ms = Some(now_ms());
        } else if !ready {
            self.rec.ready_since_ms = None;
        }
        self.rec.ready = ready;
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

/// Probe timers wake on a 50 ms grid (the nearest point, so that a period stays its length on
/// average): a thousand probes a second then wake the runtime twenty times, each for a batch,
/// rather than a thousand times for one each (bench/probe_cost.py: 4.8% of a core on a 10 ms
/// grid, 4.2% on this one, at 1,000 instances with two probes each).
fn on_grid(at: tokio::time::Instant) -> tokio::time::Instant {
    const GRID_MS: u128 = 50;
    let base = *PROBE_EPOCH.get_or_init(tokio::time::Instant::now);
    let ms = at.saturating_duration_since(base).as_millis();
    base + std::time::Duration::from_millis(((ms + GRID_MS / 2) / GRID_MS * GRID_MS) as u64)
}

static PROBE_EPOCH: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
