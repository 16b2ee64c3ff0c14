//! The failed-instances controller: a daemon gave up on an instance (Failed after its own
//! restarts, or a failed exit under Never). The loop notes each such event for its app as it
//! arrives; the app's sync marks the instance Failed and, by its policy, places it elsewhere —
//! off the loop (a reschedule places, stores and applies), several apps at once.

use super::controller::Controller;
use super::run::{kept_volume_stays, sched_line, DAEMON_SET_STAYS, MAXTIMES_REACHED};
use super::{check_spec, Emit, Scheduler};
use crate::protocol::{
    DesiredChange, Event, EventBody, ExitStatus, InstanceChange, InstanceEvent, Kind, SchedEvent, State,
};
use crate::sched::store::{App, PlacementState};
use crate::spec::model::RestartPolicyKind;
use crate::spec::{AppId, InstanceId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A failure as its node told it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    node: String,
    /// It exited non-zero (not Failed): final only under Never.
    failed_exit: bool,
}

/// The failures noted and not yet acted on: per app, per instance, the last word of it.
#[derive(Default)]
pub(super) struct Failures {
    noted: Mutex<BTreeMap<AppId, BTreeMap<u32, Failure>>>,
}

impl Failures {
    /// Notes `event` if it says a daemon gave up on an instance: the app to queue.
    pub fn note(&self, node: &str, event: &Event) -> Option<AppId> {
        let (id, failed_exit) = gave_up(event)?;
        let failure = Failure { node: node.to_string(), failed_exit };
        let key = id.app();
        self.noted.lock().expect("failures lock").entry(key.clone()).or_default().insert(id.index, failure);
        Some(key)
    }

    /// Nothing is owed any more (the lead lost, maintenance begun).
    pub fn forget(&self) {
        self.noted.lock().expect("failures lock").clear();
    }
}

/// The instance a daemon gave up on, by `event`: Failed (after its own restarts), or an exit
/// other than 0 (final under Never; the daemon restarts it itself under the others).
fn gave_up(event: &Event) -> Option<(InstanceId, bool)> {
    let EventBody::Instance(InstanceEvent { instance, change: InstanceChange::Transition(t) }) = &event.body else {
        return None;
    };
    let clean_exit = matches!(t.state, Some(State::Exited { status: ExitStatus::Code(0) }));
    let failed_exit = t.to == Kind::Exited && !clean_exit;
    if !(t.to == Kind::Failed || failed_exit) {
        return None;
    }
    let id = crate::client::parse_instance_id(instance).ok()?;
    Some((id, failed_exit))
}

#[async_trait::async_trait]
impl Controller for Failures {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "failed instances"
    }

    fn wants(&self, app: &App, _live: &super::liveness::Liveness) -> bool {
        self.noted.lock().expect("failures lock").contains_key(&app.key)
    }

    async fn sync(&self, sched: &Arc<Scheduler>, key: &AppId, emit: &Emit) -> Option<Duration> {
        let noted = self.noted.lock().expect("failures lock").remove(key).unwrap_or_default();
        let lost = sched.live().lost().clone();
        for (index, f) in noted {
            let id = InstanceId { namespace: key.namespace.clone(), name: key.name.clone(), index };
            sched.instance_failed(&f.node, &id, f.failed_exit, &lost, "failed", emit).await;
        }
        None
    }
}

impl Scheduler {
    /// The instance's node gave up on it (Failed; `failed_exit`: it exited non-zero under
    /// Never): marked Failed, and placed elsewhere unless its policy (or kind) keeps it.
    pub(super) async fn instance_failed(
        &self,
        node: &str,
        id: &crate::spec::InstanceId,
        failed_exit: bool,
        lost: &BTreeSet<String>,
        why: &str,
        emit: &Emit,
    ) {
        let key = id.app();
        let Ok(Some(mut app)) = self.store.app(&key).await else { return };
        let spec = check_spec(&app.spec).ok();
        // A job's runs end by design; its daemon retries them by its backoff. Nothing of an
        // app being deleted, or an instance the operator stopped, is placed again.
        if spec.as_ref().is_some_and(|s| s.runs_to_completion())
            || app.deleting.is_some()
            || app.stopped.contains(&id.index)
        {
            return;
        }
        let spec_read = app.spec.clone();
        let Some(p) = app.placements.get_mut(&id.index) else { return };
        if p.node != node {
            return;
        }
        // Seen Failed before (the node's events read again after a reconnect, a reconcile pass):
        // what stays as it is was journaled, and notified, the first time.
        let seen_before = p.state == PlacementState::Failed;
        let policy = spec.as_ref().map(|s| s.restart_policy.policy).unwrap_or_default();
        if failed_exit && policy != RestartPolicyKind::Never {
            return;
        }
        let failed = DesiredChange::Failed { instance: id.to_string(), node: node.to_string() };
        let marked = self.update_app(&key, &failed, |a| match a.placements.get_mut(&id.index) {
            Some(p) if p.node == node => {
                p.state = PlacementState::Failed;
                true
            }
            _ => false,
        });
        let Ok(Some(app)) = marked.await else { return };
        if seen_before && policy == RestartPolicyKind::Never {
            return;
        }
        if policy == RestartPolicyKind::Never {
            emit(&sched_line(SchedEvent::NotRescheduled {
                app: None,
                instance: Some(id.to_string()),
                node: node.to_string(),
                policy,
                reason: "restartPolicy Never".into(),
            }));
            return;
        }
        // As stored now (a deploy may have changed it meanwhile).
        let spec = if app.spec == spec_read { spec } else { check_spec(&app.spec).ok() };
        let maxtimes = spec.as_ref().map(|s| s.restart_policy.maxtimes).unwrap_or(0);
        let done = app.placements.get(&id.index).map_or(0, |p| p.reschedules);
        if maxtimes > 0 && done >= maxtimes {
            // Seed 000's maxtimes counts reschedules across hosts (DESIGN § 7): it stays Failed.
            if seen_before {
                return;
            }
            emit(&sched_line(SchedEvent::NotRescheduled {
                app: None,
                instance: Some(id.to_string()),
                node: node.to_string(),
                policy,
                reason: format!("{MAXTIMES_REACHED}: rescheduled {} already", crate::wording::times(done)),
            }));
            return;
        }
        if spec.as_ref().is_some_and(|s| s.daemon_set.is_some()) {
            emit(&sched_line(SchedEvent::NotRescheduled {
                app: None,
                instance: Some(id.to_string()),
                node: node.to_string(),
                policy,
                reason: DAEMON_SET_STAYS.into(),
            }));
            return;
        }
        if let Some(kept) = spec.as_ref().map(|s| s.kept_volumes()).filter(|k| !k.is_empty()) {
            emit(&sched_line(SchedEvent::NotRescheduled {
                app: None,
                instance: Some(id.to_string()),
                node: node.to_string(),
                policy,
                reason: kept_volume_stays(&kept),
            }));
            return;
        }
        self.reschedule(&app, &[(id.index, node.to_string())], lost, why, emit).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Transition;

    fn event(state: State) -> Event {
        let t = Transition::new(Kind::Running, &state, "", "", vec![], &[]);
        let body =
            EventBody::Instance(InstanceEvent { instance: "ns/web/3".into(), change: InstanceChange::Transition(t) });
        Event { seq: 1, at_ms: 0, body }
    }

    #[test]
    fn a_failure_is_noted_once_per_instance_with_its_last_word() {
        let failures = Failures::default();
        let clean = State::Exited { status: ExitStatus::Code(0) };
        assert_eq!(failures.note("a", &event(clean)), None, "a clean exit is no failure");
        assert_eq!(failures.note("a", &event(State::Running)), None);
        let key = failures.note("a", &event(State::Failed { reason: "gave up".into() })).unwrap();
        assert_eq!(key.to_string(), "ns/web");
        failures.note("b", &event(State::Exited { status: ExitStatus::Code(3) }));
        let noted = failures.noted.lock().unwrap().clone();
        assert_eq!(noted[&key], BTreeMap::from([(3, Failure { node: "b".into(), failed_exit: true })]));
    }
}
