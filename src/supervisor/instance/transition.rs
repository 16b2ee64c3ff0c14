//! The state machine's steps taken on the record: one event through the pure `state::step`,
//! the record updated as it says (message, counters, why the run ended), and the transition's
//! journal entry, committed before anything acts on it (or held for the next commit).

use super::workload::Workload;
use super::Actor;
use crate::protocol::{EventBody, InstanceChange, Transition};
use crate::supervisor::record::now_ms;
use crate::supervisor::state::{self, Event, ExitStatus, State, StopGoal};

impl<W: Workload> Actor<W> {
    /// Runs one event through the state machine and, if legal, makes the result durable, and
    /// queues what it says to do (see `run`). A restart due at once (Backoff with no delay) is
    /// taken in the same commit: Backoff and Staging are both durable before staging acts.
    pub(super) async fn feed(&mut self, event: Event) {
        self.feed_noting(event, Vec::new()).await;
    }

    /// [`Self::feed`] with more events journaled in the same commit, after the transition's.
    /// Returns whether the event was legal.
    pub(super) async fn feed_noting(&mut self, event: Event, noted: Vec<EventBody>) -> bool {
        let Some((mut action, first)) = self.transition(&event) else {
            self.end_note = None;
            return false;
        };
        let mut events: Vec<_> = first.into_iter().collect();
        if !events.is_empty() {
            events.extend(noted);
        }
        if matches!(self.rec.state, State::Backoff { until_ms } if until_ms <= self.rec.updated_ms) {
            if let Some((due, body)) = self.transition(&Event::RestartDue) {
                events.extend(body);
                action = due;
            }
        }
        self.queue(action);
        if events.is_empty() {
            return true;
        }
        if self.rec.state == State::Staging && !self.needs_fetch() {
            // Staging without a fetch only prepares (directories, cgroup, secret files), all of
            // it redone by any resume: it may go first, and its commit rides with Starting's.
            self.journal.hold(events);
            return true;
        }
        self.persist(events).await;
        true
    }

    /// The state machine's step taken in memory only, to be committed with the next commit
    /// (see the workloads' `launch`). Returns whether the transition happened.
    pub(super) fn hold_transition(&mut self, event: Event) -> bool {
        match self.transition(&event) {
            Some((action, body)) => {
                self.journal.hold(body);
                self.queue(action);
                true
            }
            None => {
                self.end_note = None;
                false
            }
        }
    }

    /// Commits transitions held back for the next commit (see `journal`) now.
    pub(super) async fn flush_unjournaled(&mut self) {
        if self.journal.has_held() {
            self.persist(Vec::new()).await;
        }
    }

    /// The state machine's step applied to the record in memory; returns what to do, and the
    /// event to journal when the state changed. None: the event is illegal in this state.
    fn transition(&mut self, event: &Event) -> Option<(state::Action, Option<EventBody>)> {
        // Only a restart asks whether it can be done in place (every step passes here).
        let restarts_in_place =
            matches!(event, Event::StopRequested { goal: StopGoal::Restart }) && !self.in_place_refused && {
                self.ensure_rendered();
                self.workload.restarts_in_place(&super::cx!(self))
            };
        let now = now_ms();
        let ctx = state::Context {
            policy: &self.spec.spec.restart_policy,
            counter: &self.rec.counter,
            now_ms: now,
            restarts_in_place,
        };
        let step = match state::step(&self.rec.state, event, &ctx) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(instance = %self.rec.id, "{e}; ignored");
                return None;
            }
        };
        if step.next == self.rec.state && !step.counts_restart {
            // A request for what already is: nothing to journal.
            return Some((step.action, None));
        }
        self.note_end(event);
        let reason = match event {
            // An end says what ended: a pod's names its container.
            Event::MainExited { .. } => self.rec.last_exit_reason.clone().unwrap_or_else(|| event.reason()),
            _ => event.reason(),
        };
        let from = self.rec.state.kind();
        if step.resets_counter {
            self.rec.counter = Default::default();
        }
        if step.counts_restart {
            self.rec.counter.count_restart(now);
            self.rec.restarts += 1;
        }
        self.rec.message = match (&step.next, &event) {
            (State::Failed { reason }, _) => reason.clone(),
            (State::Backoff { until_ms }, _) => {
                let why = end_reason(&self.rec.state, event, self.rec.last_exit);
                let again = match self.rec.same_ends {
                    n if n > 1 => format!(" (the same {n} times in a row)"),
                    _ => String::new(),
                };
                format!("{why}{again}; restart {} in {} ms", self.rec.counter.attempts, until_ms.saturating_sub(now))
            }
            // A restart taken at once keeps saying why it was needed until the start is done.
            (State::Staging, Event::RestartDue) => std::mem::take(&mut self.rec.message),
            (State::Exited { status }, _) => status.to_string(),
            _ => String::new(),
        };
        if let Some(note) = self.end_note.take() {
            self.rec.message = format!("{note}; {}", self.rec.message);
        }
        if !step.next.has_processes() {
            self.rec.mains.clear();
        }
        // Ready holds only while Running (a Lost pod's containers may run, but nobody knows).
        if step.next != State::Running {
            self.rec.ready = false;
            self.rec.ready_since_ms = None;
        }
        self.rec.state = step.next;
        self.rec.updated_ms = now;
        Some((step.action, Some(self.transition_body(from, &reason))))
    }

    /// The journal entry of the transition just made (a crash loop journals four of these per
    /// restart: `Transition::new` leaves out what says nothing).
    pub(super) fn transition_body(&self, from: state::Kind, reason: &str) -> EventBody {
        let pids = self.rec.mains.iter().map(|m| m.as_ref().map(|m| m.pid)).collect();
        let rec = &self.rec;
        let transition = Transition::new(from, &rec.state, reason, &rec.message, pids, &rec.containers);
        EventBody::instance(rec.key(), InstanceChange::Transition(transition))
    }

    /// Keeps why a run ended: its main process's (a pod: which container's) end, or the health
    /// check or start failure that ended it, rather than only the exit code a kill leaves.
    fn note_end(&mut self, event: &Event) {
        let why = match (&self.rec.state, event) {
            (State::Stopping { goal: StopGoal::Fail { reason } }, Event::StopCompleted) => reason.clone(),
            (_, Event::MainExited { status }) => match &self.end_note {
                Some(note) => format!("{note}: {status}"),
                None => status.to_string(),
            },
            (_, Event::StartFailed { reason } | Event::StageFailed { reason }) => reason.clone(),
            _ => return,
        };
        let same = self.rec.last_exit_reason.as_deref() == Some(why.as_str());
        self.rec.same_ends = if same { self.rec.same_ends.saturating_add(1) } else { 1 };
        self.rec.last_exit_reason = Some(why);
    }

    /// Journals an event that is no transition (a reload, a changed spec, a health change).
    pub(super) async fn commit_event(&mut self, change: InstanceChange) {
        self.rec.updated_ms = now_ms();
        let body = EventBody::instance(self.rec.key(), change);
        self.persist(vec![body]).await;
    }

    /// Writes the record (and events) durably before anything acts on it (see `journal`).
    pub(super) async fn persist(&mut self, events: Vec<EventBody>) {
        self.journal.commit(&self.shared.store, &self.rec, events).await;
    }
}

/// Why an instance ended (and a restart is scheduled): the failed start's reason, the exit,
/// or the reason a stop was forced (a failing health check).
fn end_reason(from: &State, event: &Event, last_exit: Option<ExitStatus>) -> String {
    match (from, event) {
        (_, Event::StageFailed { reason } | Event::StartFailed { reason }) => reason.clone(),
        (_, Event::MainExited { status }) => status.to_string(),
        (State::Stopping { goal: StopGoal::Fail { reason } }, _) => reason.clone(),
        _ => last_exit.map(|s| s.to_string()).unwrap_or_default(),
    }
}
