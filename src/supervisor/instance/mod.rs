//! One instance's actor: a task that owns the instance's record, carries out what the state
//! machine decides, and makes every transition durable before acting on it. What runs the
//! instance (processes, a pod's containers) is its [`Workload`]; the actor never asks which.
//!
//! The rooms: [`messages`] (what the actor is told), [`flows`] (start, stop, end, resume,
//! delete), [`staging`] (render, directories, downloads), [`transition`] (the state machine's
//! steps on the record), [`journal`] (commits and the status watch), [`health`] (checks and
//! their verdicts), [`workload`] (the interface) with [`process`], [`pod`] and [`hollow`]
//! behind it.

use super::record::{now_ms, InstanceRecord};
use super::state::{self, Event, State, StopGoal};
use super::Shared;
use crate::spec::RenderedInstance;
use messages::{answer, Inbox};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
pub(crate) use workload::Workload;

mod flows;
mod health;
pub(super) mod hollow;
mod hooks;
mod journal;
pub(super) mod messages;
mod pod;
mod process;
mod staging;
mod transition;
mod workload;

pub(crate) use hollow::Hollow;
pub use messages::{Command, Fenced, FileCopy, Mailbox, Msg, Reply, SpecEntry, MAX_COPY_BYTES};
pub(crate) use pod::Pod;
pub(crate) use process::Processes;

/// Why a crash (`POST …/crash`) is refused where the instance is not hollow.
pub const CRASH_NEEDS_HOLLOW: &str = "only a hollow host's instances can be told to crash (runtime = \"hollow\")";

/// The parts of the actor a workload may use while it works (see [`workload::Cx`]), borrowed
/// field by field so that the workload itself stays free to borrow.
macro_rules! cx {
    ($actor:ident) => {
        $crate::supervisor::instance::workload::Cx {
            shared: &$actor.shared,
            rec: &mut $actor.rec,
            journal: &mut $actor.journal,
            spec: &$actor.spec,
            rendered: $actor.rendered.as_ref(),
            tx: &$actor.tx,
            launch_place: &mut $actor.launch_permit,
            generation: $actor.generation,
        }
    };
}
pub(super) use cx;

pub(crate) struct Actor<W: Workload> {
    shared: Arc<Shared>,
    rec: InstanceRecord,
    spec: Arc<SpecEntry>,
    /// What runs the instance.
    workload: W,
    /// Bumped whenever the set of main processes changes, so stale exit messages are ignored.
    generation: u64,
    tx: Mailbox,
    rx: Inbox,
    /// The record's commits and the status watch.
    journal: journal::Journal,
    /// Replies owed when the current operation ends.
    waiting: Vec<Reply>,
    /// Set once the instance is deleted: the actor ends.
    deleted: bool,
    /// Health probing of the current processes, and the verdicts so far (by process).
    health_tasks: Vec<tokio::task::JoinHandle<()>>,
    probes: Vec<health::ActiveProbe>,
    /// The instance as its current (or last) run was rendered: what stops, restarts, reloads,
    /// health checks and the delete read, so they act on what runs (its stopCmd, its users, its
    /// grace) even after the spec changed. Rendered once per start; after a daemon restart,
    /// once from the stored spec when first needed.
    rendered: Option<Arc<RenderedInstance>>,
    /// What `rendered` was rendered from: the spec entry (held, so that its address names it)
    /// and the ports. A start with both unchanged (a respawn) takes `rendered` as it is.
    rendered_from: Option<(Arc<SpecEntry>, std::collections::BTreeMap<String, u16>)>,
    /// Told once the instance is resumed after a daemon start (see `mark_resumed`).
    resumed: Option<oneshot::Sender<()>>,
    /// Why the current processes ended, beyond their exit status (an OOM kill, which container):
    /// put in front of the next transition's message.
    end_note: Option<String>,
    /// What the state machine's last steps said to do, in order (see `run`).
    actions: Vec<state::Action>,
    /// The workload could not restart in place just now: the restart stops and starts.
    in_place_refused: bool,
    /// The run was just launched: its postStart hook runs once it is watched.
    post_start_due: bool,
    /// Requests that came during a stop, served after it (and the waits for them to be durable).
    deferred: Vec<Msg>,
    /// Who waits for the journal's commits (the journal's own, reachable while it is lent out).
    marks: Arc<journal::DurableMarks>,
    /// A place among the launches in progress (see `Shared::launches`), held from staging to
    /// the first spawn.
    launch_permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The cgroup's name: `namespace.name.index`, like the instance's directories.
pub fn cgroup_key(rec: &InstanceRecord) -> String {
    format!("{}.{}.{}", rec.id.namespace, rec.id.name, rec.id.index)
}

impl<W: Workload> Actor<W> {
    pub fn new(
        shared: Arc<Shared>,
        rec: InstanceRecord,
        spec: Arc<SpecEntry>,
    ) -> (Self, Mailbox, watch::Receiver<InstanceRecord>) {
        let (tx, rx) = messages::mailbox();
        let (status, status_rx) = watch::channel(rec.clone());
        let workload = W::new(&shared, &rec);
        // Every change shown wakes the app's driver (a rollout, a job) that waits for it.
        let waker = shared.wakers.of(&crate::supervisor::app_key(&rec.id.namespace, &rec.id.name));
        let journal = journal::Journal::new(status, waker);
        let actor = Actor {
            marks: journal.marks(),
            shared,
            rec,
            spec,
            workload,
            generation: 0,
            tx: tx.clone(),
            rx,
            journal,
            waiting: Vec::new(),
            deleted: false,
            health_tasks: Vec::new(),
            probes: Vec::new(),
            resumed: None,
            rendered: None,
            rendered_from: None,
            end_note: None,
            actions: Vec::new(),
            in_place_refused: false,
            post_start_due: false,
            deferred: Vec::new(),
            launch_permit: None,
        };
        (actor, tx, status_rx)
    }

    /// A receiver told when the instance has been resumed (see `mark_resumed`).
    pub fn on_resumed(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.resumed = Some(tx);
        rx
    }

    /// Runs the instance until it is deleted or the supervisor goes away: each message becomes
    /// an event for the state machine, and what its steps say to do is done before the next
    /// message is taken; then the requests waiting are answered. The actor is boxed: an async
    /// fn keeps its argument twice in its future (before and after the first await), and this
    /// future lives as long as the instance.
    pub async fn run(mut self: Box<Self>) {
        Box::pin(self.resume()).await;
        loop {
            Box::pin(self.act_on_steps()).await;
            self.settle();
            if self.deleted {
                return;
            }
            let msg = match self.rec.state {
                State::Backoff { until_ms } => {
                    let wait = Duration::from_millis(until_ms.saturating_sub(now_ms()));
                    match Box::pin(self.recv_within(wait)).await {
                        Some(m) => m,
                        None => {
                            Box::pin(self.feed(Event::RestartDue)).await;
                            continue;
                        }
                    }
                }
                // An instance whose runtime (dockerd) is away: ask again now and then.
                State::Lost { .. } => match Box::pin(self.recv_within(pod::LOST_POLL)).await {
                    Some(m) => m,
                    None => {
                        Box::pin(self.try_recover()).await;
                        continue;
                    }
                },
                _ => self.rx.recv().await,
            };
            let Some(msg) = msg else { return };
            match msg {
                Msg::Request(cmd, reply) => Box::pin(self.handle(cmd, reply)).await,
                Msg::Recorded(tx) => {
                    // At rest nothing should be held; if something is, it is made durable now.
                    Box::pin(self.flush_unjournaled()).await;
                    self.marks.when_durable(tx);
                }
                Msg::MainExited { generation, index, status } if generation == self.generation => {
                    Box::pin(self.on_exit(index, status)).await;
                }
                Msg::RuntimeLost { generation, reason } if generation == self.generation => {
                    Box::pin(self.lose(reason)).await;
                }
                Msg::Checked { generation, index, report } if generation == self.generation => {
                    Box::pin(self.on_checked(index, report)).await;
                }
                Msg::HookFailed { generation, reason } if generation == self.generation => {
                    tracing::warn!(instance = %self.rec.id, "{reason}; killing it");
                    Box::pin(self.feed(Event::StopRequested { goal: StopGoal::Fail { reason } })).await;
                }
                // About an earlier run.
                Msg::MainExited { .. } | Msg::RuntimeLost { .. } | Msg::Checked { .. } | Msg::HookFailed { .. } => {}
            }
        }
    }

    /// Queues what a step said to do.
    fn queue(&mut self, action: state::Action) {
        if action != state::Action::Nothing {
            self.actions.push(action);
        }
    }

    /// Does what the state machine's steps said, in order, and what those doings' steps say in
    /// turn, until there is nothing left to do.
    async fn act_on_steps(&mut self) {
        use state::Action;
        while !self.actions.is_empty() {
            match self.actions.remove(0) {
                Action::Nothing => {}
                Action::Start => self.start_flow().await,
                Action::Watch => self.watch_run(),
                Action::Stop => self.stop_flow(true).await,
                Action::RestartInPlace => {
                    if !self.restart_in_place().await {
                        // Not possible after all: the restart stops and starts.
                        self.in_place_refused = true;
                        self.feed(Event::StopRequested { goal: StopGoal::Restart }).await;
                        self.in_place_refused = false;
                    }
                }
                Action::Delete => self.delete().await,
            }
        }
    }

    /// The next message if one comes within `wait` (`Some(None)`: the queue closed), else
    /// `None`. Boxed by its callers: the timer stays out of the actor's long-lived future.
    async fn recv_within(&mut self, wait: Duration) -> Option<Option<Msg>> {
        tokio::select! {
            m = self.rx.recv() => Some(m),
            _ = tokio::time::sleep(wait) => None,
        }
    }

    /// A new set of main processes (or none): exit and health messages about the old ones are
    /// now stale, and their probes stop.
    fn new_generation(&mut self) {
        self.generation += 1;
        for t in self.health_tasks.drain(..) {
            t.abort();
        }
        self.probes.clear();
        self.rec.health.clear();
    }

    /// Handles one request: the event it is for the state machine (a reload and a spec that
    /// only changes the instance count are none).
    async fn handle(&mut self, cmd: Command, reply: Option<Reply>) {
        let goal = match cmd {
            Command::Reload => {
                crate::failpoint::panic_for("reload-panic", &self.rec.key());
                let result = match self.rec.state.kind() {
                    state::Kind::Running => self.reload().await,
                    kind => Err(format!("cannot reload: instance is {kind}")),
                };
                return answer(reply, result);
            }
            Command::Crash(status) => {
                let result = self.workload.crash(&mut cx!(self), status);
                return answer(reply, result);
            }
            Command::CopyIn(file, done) => {
                let result = match self.rec.state.kind() {
                    state::Kind::Running => self.copy_in(&file).await,
                    kind => Err(format!("cannot copy a file in: instance is {kind} (a file goes into what runs)")),
                };
                let _ = done.send(result);
                return answer(reply, Ok(()));
            }
            Command::Replace(entry, count_only) => {
                // Without a restart the run goes on under the new entry: the same template (a
                // count change, or a revision that runs the same as the run's), so the run is on
                // the new revision too.
                if count_only && self.rec.run_revision == self.spec.revision {
                    self.rec.run_revision = entry.revision;
                }
                if self.rec.revision != entry.revision {
                    self.rec.revision_since_ms = Some(crate::supervisor::record::now_ms());
                }
                self.spec = entry;
                self.rec.spec_generation = self.spec.generation;
                self.rec.revision = self.spec.revision;
                let detail = crate::protocol::SpecUpdated { generation: self.spec.generation };
                self.commit_event(crate::protocol::InstanceChange::SpecUpdated { detail }).await;
                answer(reply, Ok(()));
                if !count_only {
                    self.feed(Event::SpecChanged).await;
                }
                return;
            }
            Command::Start => {
                crate::failpoint::pause("instance-request");
                self.waiting.extend(reply);
                return self.feed(Event::Start).await;
            }
            Command::Stop => StopGoal::Stop,
            Command::Fence => StopGoal::Fence,
            Command::Delete(cause) => {
                self.note_delete_cause(cause);
                StopGoal::Delete
            }
            Command::Restart => StopGoal::Restart,
            Command::Fail(reason) => {
                let kind = self.rec.state.kind();
                if matches!(kind, state::Kind::Staging | state::Kind::Backoff | state::Kind::Stopping) {
                    return answer(reply, Err(format!("nothing runs to fail: instance is {kind}")));
                }
                StopGoal::Fail { reason }
            }
        };
        // A test's window between a request's answer and its record (tests/daemon_restarts.rs).
        crate::failpoint::pause("instance-request");
        self.waiting.extend(reply);
        self.feed(Event::StopRequested { goal }).await;
    }

    /// Answers the replies owed once the instance has come to rest.
    fn settle(&mut self) {
        let result = match &self.rec.state {
            State::Failed { reason } => Err(reason.clone()),
            _ => Ok(()),
        };
        for r in self.waiting.drain(..) {
            let _ = r.send(result.clone());
        }
    }
}
