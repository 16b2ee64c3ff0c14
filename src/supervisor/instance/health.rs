//! An instance's health checks: running each process's (container's) local check of the
//! current generation, as its workload says how (HTTP, TCP, COMMAND), and acting on the
//! verdicts (a change is journaled; a kill verdict stops the instance with the check's reason).

use super::messages::Msg;
use super::workload::Workload;
use super::Actor;
use crate::protocol::{HealthChanged, InstanceChange};
use crate::supervisor::record::now_ms;
use crate::supervisor::state::{Event, StopGoal};
use std::time::Duration;

impl<W: Workload> Actor<W> {
    /// Starts probing each process's (container's) local check of the current generation.
    pub(super) fn start_health_checks(&mut self) {
        self.ensure_rendered();
        let probes = self.workload.probes(&super::cx!(self));
        let started = self.rec.last_start_ms.unwrap_or_else(now_ms);
        self.trackers = Vec::with_capacity(probes.len());
        for (index, probe) in probes.into_iter().enumerate() {
            self.trackers.push(probe.as_ref().map(|p| crate::health::Tracker::new(&p.check, started)));
            let Some(probe) = probe else { continue };
            let (tx, generation) = (self.tx.clone(), self.generation);
            self.health_tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(probe.check.delay_seconds)).await;
                loop {
                    let outcome = (probe.run)().await;
                    if tx.send(Msg::Checked { generation, index, outcome }).is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(probe.check.interval_seconds.max(1))).await;
                }
            }));
        }
        self.rec.health = self.trackers.iter().map(|t| t.as_ref().map(|t| t.health.clone())).collect();
    }

    pub(super) async fn on_checked(&mut self, index: usize, outcome: crate::health::Outcome) {
        use crate::health::Verdict;
        let Some(Some(tracker)) = self.trackers.get_mut(index) else { return };
        let was = tracker.health.healthy;
        if matches!(outcome, crate::health::Outcome::Fail(_)) {
            self.shared.counters.check_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let verdict = tracker.record(outcome, now_ms());
        let health = tracker.health.clone();
        if let Some(slot) = self.rec.health.get_mut(index) {
            *slot = Some(health.clone());
        }
        if was != health.healthy {
            let detail = HealthChanged { process: index, healthy: health.healthy, last_failure: health.last_failure };
            self.commit_event(InstanceChange::HealthChanged { detail }).await;
        } else {
            self.journal.show(&self.rec);
        }
        if let Verdict::Kill { reason } = verdict {
            tracing::warn!(instance = %self.rec.id, "{reason}; killing it");
            self.feed(Event::StopRequested { goal: StopGoal::Fail { reason } }).await;
        }
    }
}
