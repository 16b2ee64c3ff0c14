//! The instance state machine: a pure function from (state, event) to the next state, checked
//! against one transition table. No I/O here; the supervisor acts on what this returns.

use super::policy::{decide, Decision, RestartCounter};
use crate::spec::model::RestartPolicy;

/// How a main process ended: the reaper's (runtime's) word, re-exported where the state
/// machine and its callers have always found it.
pub use crate::runtime::exit::ExitStatus;

/// The states and stop goals are wire types (statuses and events carry them): they live with
/// the protocol; the machine that moves between them lives here.
pub use crate::protocol::state::{Kind, State, StopGoal};

/// Every legal edge. Anything else is rejected (and logged by the caller).
pub const TRANSITIONS: &[(Kind, Kind)] = {
    use Kind::*;
    &[
        // start
        (Stopped, Staging),
        (Exited, Staging),
        (Failed, Staging),
        (Backoff, Staging),
        // staging
        (Staging, Starting),
        (Staging, Backoff),
        (Staging, Failed),
        (Staging, Stopped),
        // starting
        (Starting, Running),
        (Starting, Backoff),
        (Starting, Exited),
        (Starting, Failed),
        (Starting, Stopping),
        (Starting, Staging), // resumed after a daemon restart, once the cgroup is emptied
        // running
        (Running, Backoff),
        (Running, Exited),
        (Running, Failed),
        (Running, Stopping),
        (Running, Lost),
        // lost (the runtime does not answer)
        (Lost, Running),
        (Lost, Stopping),
        (Lost, Backoff),
        (Lost, Exited),
        (Lost, Failed),
        // stopping
        (Stopping, Stopped),
        (Stopping, Staging),
        (Stopping, Backoff),
        (Stopping, Exited),
        (Stopping, Failed),
        // backoff
        (Backoff, Stopped),
        (Backoff, Failed),
        // a delete from rest is recorded as one before the record goes
        (Staging, Stopping),
        (Backoff, Stopping),
        (Stopped, Stopping),
        (Exited, Stopping),
        (Failed, Stopping),
    ]
};

pub fn is_legal(from: Kind, to: Kind) -> bool {
    TRANSITIONS.contains(&(from, to))
}

/// Inputs to the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Operator start (or apply of a new instance).
    Start,
    /// Directories ready and packages fetched.
    Staged,
    StageFailed {
        reason: String,
    },
    /// The main process is known and alive.
    MainReady,
    /// The start did not produce a valid main process.
    StartFailed {
        reason: String,
    },
    /// The main process ended on its own (or was killed by someone else).
    MainExited {
        status: ExitStatus,
    },
    /// An operator asks to stop / restart / delete, or a health check kills.
    StopRequested {
        goal: StopGoal,
    },
    /// Every process of the instance is gone.
    StopCompleted,
    /// Processes survived SIGKILL (stuck in the kernel): the stop cannot complete.
    StopFailed {
        reason: String,
    },
    /// A backoff delay is over.
    RestartDue,
    /// The daemon restarted during a start and cleared what it had launched: start over.
    Resume,
    /// The runtime (dockerd) stopped answering about a running pod.
    RuntimeLost {
        reason: String,
    },
    /// The runtime answers again and the pod's containers still run.
    RuntimeBack,
    /// The spec changed (not only its instance count).
    SpecChanged,
}

impl Event {
    /// Why a transition on this event happens, for people (journaled with it).
    pub fn reason(&self) -> String {
        match self {
            Event::Start => "start requested".into(),
            Event::Staged => "staged".into(),
            Event::MainReady => "main process running".into(),
            Event::MainExited { status } => format!("main process {status}"),
            Event::StopRequested { goal } => match goal {
                StopGoal::Stop => "operator stop".into(),
                StopGoal::Restart => "operator restart".into(),
                StopGoal::Delete => "operator delete".into(),
                StopGoal::Fail { reason } => reason.clone(),
                StopGoal::Fence => "fenced: no scheduler heard (disconnect.stopAfterSecs)".into(),
            },
            Event::StopCompleted => "every process gone".into(),
            Event::RestartDue => "backoff over".into(),
            Event::Resume => "start resumed after a daemon restart".into(),
            Event::RuntimeBack => "the container runtime answers again".into(),
            Event::SpecChanged => "spec updated".into(),
            Event::StageFailed { reason }
            | Event::StartFailed { reason }
            | Event::StopFailed { reason }
            | Event::RuntimeLost { reason } => reason.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition from {from} on {event}")]
pub struct Illegal {
    pub from: Kind,
    pub event: String,
}

/// What the supervisor knows besides the state: the policy and its counters, the clock, and
/// what the workload can do.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub policy: &'a RestartPolicy,
    pub counter: &'a RestartCounter,
    pub now_ms: u64,
    /// A restart can be done in place (a forking daemon's restartCmd), without a stop.
    pub restarts_in_place: bool,
}

/// What the actor does after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing now: a backoff waits out its delay, a stop under way goes on, a request for
    /// what already is (a start of a running instance) is answered.
    Nothing,
    /// Stage and launch a run.
    Start,
    /// Watch the run launched or found again (exits, health).
    Watch,
    /// Stop what runs: stopCmd or SIGTERM, the grace period, SIGKILL.
    Stop,
    /// Restart in place (restartCmd) and find the main processes again.
    RestartInPlace,
    /// Remove the instance: nothing of it runs.
    Delete,
}

/// The outcome of one event: the next state, what to do, and the restart counter's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub next: State,
    pub action: Action,
    /// This step schedules restart attempt number `counter.attempts + 1`.
    pub counts_restart: bool,
    /// An operator's start or a changed spec: the restart policy counts from zero again.
    pub resets_counter: bool,
}

impl Step {
    fn to(next: State, action: Action) -> Step {
        Step { next, action, counts_restart: false, resets_counter: false }
    }

    fn resetting(mut self) -> Step {
        self.resets_counter = true;
        self
    }
}

/// The state machine. Pure: same inputs, same output. Requests for what already is (a stop
/// of a stopped instance) are steps to the same state with nothing to do.
pub fn step(state: &State, event: &Event, ctx: &Context) -> Result<Step, Illegal> {
    use Action::*;
    let illegal = || Illegal { from: state.kind(), event: format!("{event:?}") };
    let to = Step::to;
    let same = |action| Step::to(state.clone(), action);
    let after_failure = |reason: String| on_end(ctx, false, reason, None);
    let result = match (state, event) {
        (State::Stopped | State::Exited { .. } | State::Failed { .. } | State::Backoff { .. }, Event::Start) => {
            to(State::Staging, Start).resetting()
        }
        (State::Staging | State::Starting | State::Running | State::Lost { .. }, Event::Start) => same(Nothing),
        (State::Backoff { .. }, Event::RestartDue) => to(State::Staging, Start),
        (State::Starting, Event::Resume) => to(State::Staging, Start),
        (State::Staging, Event::Staged) => to(State::Starting, Nothing),
        (State::Staging, Event::StageFailed { reason }) => after_failure(reason.clone()),
        (State::Starting, Event::MainReady) => to(State::Running, Watch),
        (State::Starting, Event::StartFailed { reason }) => after_failure(reason.clone()),
        (State::Running, Event::RuntimeLost { reason }) => to(State::Lost { reason: reason.clone() }, Nothing),
        (State::Lost { .. }, Event::RuntimeLost { reason }) => to(State::Lost { reason: reason.clone() }, Nothing),
        (State::Lost { .. }, Event::RuntimeBack) => to(State::Running, Watch),
        (State::Starting | State::Running | State::Lost { .. }, Event::MainExited { status }) => {
            on_end(ctx, status.is_success(), status.to_string(), Some(*status))
        }
        (State::Running, Event::StopRequested { goal: StopGoal::Restart }) if ctx.restarts_in_place => {
            same(RestartInPlace)
        }
        (State::Starting | State::Running | State::Lost { .. }, Event::StopRequested { goal }) => {
            to(State::Stopping { goal: goal.clone() }, Stop)
        }
        // A stop before anything runs needs no process work.
        (State::Staging | State::Backoff { .. }, Event::StopRequested { goal: StopGoal::Stop | StopGoal::Fence }) => {
            to(State::Stopped, Nothing)
        }
        // A delete is recorded (Stopping with its goal) before the record goes, and stays so
        // until it has: a daemon that dies in between takes the delete up again.
        (State::Staging | State::Backoff { .. }, Event::StopRequested { goal: StopGoal::Delete }) => {
            to(State::Stopping { goal: StopGoal::Delete }, Delete)
        }
        (State::Stopped | State::Exited { .. } | State::Failed { .. }, Event::StopRequested { goal }) => match goal {
            StopGoal::Stop | StopGoal::Fence | StopGoal::Fail { .. } => same(Nothing),
            StopGoal::Delete => to(State::Stopping { goal: StopGoal::Delete }, Delete),
            StopGoal::Restart => to(State::Staging, Start),
        },
        (State::Backoff { .. }, Event::StopRequested { goal: StopGoal::Restart }) => to(State::Staging, Start),
        // A start under way (a download) begins again.
        (State::Staging, Event::StopRequested { goal: StopGoal::Restart }) => same(Start),
        // A stop already under way keeps going; a stronger goal (delete) replaces a weaker one.
        (State::Stopping { goal: current }, Event::StopRequested { goal }) => {
            let goal = if *goal == StopGoal::Delete { goal.clone() } else { current.clone() };
            to(State::Stopping { goal }, Nothing)
        }
        // The main process ending while we stop it is the stop working.
        (State::Stopping { .. }, Event::MainExited { .. }) => same(Nothing),
        (State::Stopping { goal }, Event::StopCompleted) => match goal {
            StopGoal::Stop | StopGoal::Fence => to(State::Stopped, Nothing),
            StopGoal::Delete => same(Delete),
            StopGoal::Restart => to(State::Staging, Start),
            StopGoal::Fail { reason } => after_failure(reason.clone()),
        },
        (State::Stopping { .. }, Event::StopFailed { reason }) => to(State::Failed { reason: reason.clone() }, Nothing),
        // A changed spec restarts what runs on it, and is the operator's fix for what ended:
        // it starts now rather than at the end of a backoff, or never (Exited, Failed). An
        // operator's stop holds.
        (State::Starting | State::Running | State::Lost { .. }, Event::SpecChanged) => {
            to(State::Stopping { goal: StopGoal::Restart }, Stop)
        }
        (State::Backoff { .. } | State::Exited { .. } | State::Failed { .. }, Event::SpecChanged) => {
            to(State::Staging, Start).resetting()
        }
        // A start (a download) the new spec interrupted: start over on it.
        (State::Staging, Event::SpecChanged) => same(Start),
        (State::Stopped | State::Stopping { .. }, Event::SpecChanged) => same(Nothing),
        _ => return Err(illegal()),
    };
    if is_legal(state.kind(), result.next.kind()) || state.kind() == result.next.kind() {
        Ok(result)
    } else {
        Err(illegal())
    }
}

/// The main process ended (or the start failed): the restart policy picks what follows.
fn on_end(ctx: &Context, success: bool, reason: String, status: Option<ExitStatus>) -> Step {
    match decide(ctx.policy, ctx.counter, success, ctx.now_ms) {
        Decision::Restart { delay_ms } => {
            let next = State::Backoff { until_ms: ctx.now_ms.saturating_add(delay_ms) };
            Step { counts_restart: true, ..Step::to(next, Action::Nothing) }
        }
        Decision::GiveUp { why } => Step::to(State::Failed { reason: format!("{reason}; {why}") }, Action::Nothing),
        Decision::Stay => {
            let next = match status {
                Some(status) => State::Exited { status },
                None => State::Failed { reason },
            };
            Step::to(next, Action::Nothing)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::RestartPolicyKind;

    fn policy(kind: RestartPolicyKind) -> RestartPolicy {
        RestartPolicy { policy: kind, interval: 5, backoff: 10, maxtimes: 2 }
    }

    fn run(state: &State, event: Event, policy: &RestartPolicy, attempts: u32) -> Result<Step, Illegal> {
        let counter = RestartCounter { attempts, running_since_ms: Some(0), quick_ends: 0 };
        step(state, &event, &Context { policy, counter: &counter, now_ms: 1_000, restarts_in_place: false })
    }

    #[test]
    fn every_produced_edge_is_in_the_table() {
        for (from, to) in TRANSITIONS {
            assert_ne!(from, to, "self-edges are implicit");
        }
        let p = policy(RestartPolicyKind::Always);
        let states = [
            State::Staging,
            State::Starting,
            State::Running,
            State::Stopping { goal: StopGoal::Stop },
            State::Stopping { goal: StopGoal::Restart },
            State::Stopping { goal: StopGoal::Fail { reason: "x".into() } },
            State::Stopping { goal: StopGoal::Delete },
            State::Stopped,
            State::Exited { status: ExitStatus::Code(0) },
            State::Failed { reason: "x".into() },
            State::Backoff { until_ms: 5 },
            State::Lost { reason: "x".into() },
        ];
        let events = [
            Event::Start,
            Event::Staged,
            Event::StageFailed { reason: "x".into() },
            Event::MainReady,
            Event::StartFailed { reason: "x".into() },
            Event::MainExited { status: ExitStatus::Signal(9) },
            Event::StopRequested { goal: StopGoal::Stop },
            Event::StopRequested { goal: StopGoal::Delete },
            Event::StopCompleted,
            Event::StopFailed { reason: "x".into() },
            Event::RestartDue,
            Event::RuntimeLost { reason: "x".into() },
            Event::RuntimeBack,
            Event::SpecChanged,
            Event::Start,
            Event::StopRequested { goal: StopGoal::Restart },
        ];
        let mut legal = 0;
        for s in &states {
            for e in &events {
                for attempts in [0, 5] {
                    if let Ok(st) = run(s, e.clone(), &p, attempts) {
                        legal += 1;
                        let (from, to) = (s.kind(), st.next.kind());
                        assert!(from == to || is_legal(from, to), "{from} -> {to} on {e:?} is not in the table");
                    }
                }
            }
        }
        assert!(legal > 20);
    }

    #[test]
    fn illegal_events_are_rejected() {
        let p = policy(RestartPolicyKind::Always);
        assert!(run(&State::Stopped, Event::MainReady, &p, 0).is_err());
        assert!(run(&State::Running, Event::Staged, &p, 0).is_err());
        assert!(run(&State::Exited { status: ExitStatus::Code(0) }, Event::StopCompleted, &p, 0).is_err());
        let err = run(&State::Stopped, Event::RestartDue, &p, 0).unwrap_err();
        assert_eq!(err.from, Kind::Stopped);
    }

    #[test]
    fn exits_follow_the_policy() {
        use ExitStatus::*;
        use RestartPolicyKind::*;
        let cases = [
            (Never, Code(0), Kind::Exited),
            (Never, Code(1), Kind::Exited),
            (Never, Signal(9), Kind::Exited),
            (OnFailure, Code(0), Kind::Exited),
            (OnFailure, Code(1), Kind::Backoff),
            (OnFailure, Signal(9), Kind::Backoff),
            (OnFailure, Unknown, Kind::Backoff),
            (Always, Code(0), Kind::Backoff),
            (Always, Code(1), Kind::Backoff),
            (Always, Signal(15), Kind::Backoff),
        ];
        for (kind, status, want) in cases {
            let st = run(&State::Running, Event::MainExited { status }, &policy(kind), 0).unwrap();
            assert_eq!(st.next.kind(), want, "{kind:?} {status:?}");
            assert_eq!(st.counts_restart, want == Kind::Backoff);
        }
    }

    #[test]
    fn backoff_delay_and_maxtimes() {
        let p = policy(RestartPolicyKind::Always);
        // attempt 1: interval; attempt 2: interval + backoff.
        let first = run(&State::Running, Event::MainExited { status: ExitStatus::Code(1) }, &p, 0).unwrap();
        assert_eq!(first.next, State::Backoff { until_ms: 1_000 + 5_000 });
        let second = run(&State::Running, Event::MainExited { status: ExitStatus::Code(1) }, &p, 1).unwrap();
        assert_eq!(second.next, State::Backoff { until_ms: 1_000 + 15_000 });
        let third = run(&State::Running, Event::MainExited { status: ExitStatus::Code(1) }, &p, 2).unwrap();
        match third.next {
            State::Failed { reason } => assert!(reason.contains("maxtimes"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    /// A host's fence (disconnect.stopAfterSecs) stops as an operator's stop does, Always or
    /// not, and says why; an instance not running just stays down.
    #[test]
    fn a_fence_ends_stopped_whatever_the_policy() {
        let p = policy(RestartPolicyKind::Always);
        let fence = || Event::StopRequested { goal: StopGoal::Fence };
        assert!(fence().reason().contains("fenced: no scheduler heard"));
        let stopping = run(&State::Running, fence(), &p, 0).unwrap().next;
        assert_eq!(stopping, State::Stopping { goal: StopGoal::Fence });
        assert_eq!(run(&stopping, Event::StopCompleted, &p, 0).unwrap().next, State::Stopped);
        let backoff = State::Backoff { until_ms: 1 };
        assert_eq!(run(&backoff, fence(), &p, 0).unwrap().next, State::Stopped);
        assert_eq!(run(&State::Stopped, fence(), &p, 0).unwrap().next, State::Stopped);
    }

    #[test]
    fn operator_stop_is_not_a_failure() {
        let p = policy(RestartPolicyKind::Always);
        let stopping = run(&State::Running, Event::StopRequested { goal: StopGoal::Stop }, &p, 0).unwrap().next;
        let exit_during_stop = run(&stopping, Event::MainExited { status: ExitStatus::Signal(15) }, &p, 0).unwrap();
        assert_eq!(exit_during_stop.next, stopping);
        assert_eq!(run(&stopping, Event::StopCompleted, &p, 0).unwrap().next, State::Stopped);
    }

    #[test]
    fn failed_stop_goal_applies_policy_and_restart_goal_starts_again() {
        let p = policy(RestartPolicyKind::OnFailure);
        let unhealthy = State::Stopping { goal: StopGoal::Fail { reason: "health check failed 3 times".into() } };
        assert_eq!(run(&unhealthy, Event::StopCompleted, &p, 0).unwrap().next.kind(), Kind::Backoff);
        let restart = State::Stopping { goal: StopGoal::Restart };
        assert_eq!(run(&restart, Event::StopCompleted, &p, 0).unwrap().next, State::Staging);
    }

    #[test]
    fn a_lost_pod_comes_back_or_ends_by_policy() {
        let p = policy(RestartPolicyKind::OnFailure);
        let lost = run(&State::Running, Event::RuntimeLost { reason: "dockerd down".into() }, &p, 0).unwrap().next;
        assert_eq!(lost.kind(), Kind::Lost);
        assert!(lost.has_processes());
        assert_eq!(run(&lost, Event::RuntimeBack, &p, 0).unwrap().next, State::Running);
        let ended = run(&lost, Event::MainExited { status: ExitStatus::Code(137) }, &p, 0).unwrap().next;
        assert_eq!(ended.kind(), Kind::Backoff);
        assert_eq!(
            run(&lost, Event::StopRequested { goal: StopGoal::Stop }, &p, 0).unwrap().next.kind(),
            Kind::Stopping
        );
        assert!(run(&State::Stopped, Event::RuntimeLost { reason: "x".into() }, &p, 0).is_err());
    }

    fn act(state: &State, event: Event, in_place: bool) -> (Kind, Action) {
        let p = policy(RestartPolicyKind::Always);
        let counter = RestartCounter { attempts: 0, running_since_ms: Some(0), quick_ends: 0 };
        let ctx = Context { policy: &p, counter: &counter, now_ms: 1_000, restarts_in_place: in_place };
        let st = step(state, &event, &ctx).unwrap();
        (st.next.kind(), st.action)
    }

    #[test]
    fn each_step_says_what_to_do() {
        use Action::*;
        let stopped = State::Stopped;
        let restart = || Event::StopRequested { goal: StopGoal::Restart };
        let delete = || Event::StopRequested { goal: StopGoal::Delete };
        assert_eq!(act(&stopped, Event::Start, false), (Kind::Staging, Start));
        assert_eq!(act(&State::Starting, Event::MainReady, false), (Kind::Running, Watch));
        assert_eq!(act(&State::Running, restart(), false), (Kind::Stopping, Stop));
        assert_eq!(act(&State::Running, restart(), true), (Kind::Running, RestartInPlace));
        assert_eq!(act(&State::Starting, restart(), true), (Kind::Stopping, Stop), "in place only when running");
        assert_eq!(act(&stopped, delete(), false), (Kind::Stopping, Delete));
        assert_eq!(act(&State::Backoff { until_ms: 9 }, delete(), false), (Kind::Stopping, Delete));
        let deleting = State::Stopping { goal: StopGoal::Delete };
        assert_eq!(
            act(&deleting, Event::StopCompleted, false),
            (Kind::Stopping, Delete),
            "stays until the record goes"
        );
        let restarting = State::Stopping { goal: StopGoal::Restart };
        assert_eq!(act(&restarting, Event::StopCompleted, false), (Kind::Staging, Start));
        assert_eq!(act(&State::Running, Event::SpecChanged, false), (Kind::Stopping, Stop));
        assert_eq!(act(&stopped, Event::SpecChanged, false), (Kind::Stopped, Nothing), "an operator's stop holds");
        assert_eq!(act(&State::Lost { reason: "x".into() }, Event::RuntimeBack, false), (Kind::Running, Watch));
    }

    #[test]
    fn a_request_for_what_already_is_changes_nothing() {
        let p = policy(RestartPolicyKind::Always);
        let stop = || Event::StopRequested { goal: StopGoal::Stop };
        for (state, event) in [
            (State::Running, Event::Start),
            (State::Starting, Event::Start),
            (State::Stopped, stop()),
            (State::Failed { reason: "x".into() }, stop()),
            (State::Exited { status: ExitStatus::Code(0) }, stop()),
        ] {
            let st = run(&state, event.clone(), &p, 0).unwrap();
            assert_eq!((st.next, st.action), (state.clone(), Action::Nothing), "{state:?} on {event:?}");
        }
    }

    #[test]
    fn an_operators_start_and_a_new_spec_count_restarts_from_zero() {
        let p = policy(RestartPolicyKind::Always);
        let failed = State::Failed { reason: "x".into() };
        assert!(run(&failed, Event::Start, &p, 2).unwrap().resets_counter);
        assert!(run(&failed, Event::SpecChanged, &p, 2).unwrap().resets_counter);
        assert!(!run(&State::Backoff { until_ms: 1 }, Event::RestartDue, &p, 2).unwrap().resets_counter);
        assert!(!run(&failed, Event::StopRequested { goal: StopGoal::Restart }, &p, 2).unwrap().resets_counter);
    }

    #[test]
    fn delete_overrides_a_stop_in_progress() {
        let p = policy(RestartPolicyKind::Never);
        let stopping = State::Stopping { goal: StopGoal::Stop };
        let next = run(&stopping, Event::StopRequested { goal: StopGoal::Delete }, &p, 0).unwrap().next;
        assert_eq!(next, State::Stopping { goal: StopGoal::Delete });
    }
}
