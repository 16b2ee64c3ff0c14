//! One instance's actor: a task that owns the instance's record, carries out what the state
//! machine decides, and makes every transition durable before acting on it.

use super::record::{now_ms, InstanceRecord};
use super::state::{self, Event, ExitStatus, State, StopGoal};
use super::Shared;
use crate::cgroups::Cgroup;
use crate::runtime::process::{self, Launch, Pidfd, ResolvedUser};
use crate::runtime::procinfo::{self, ProcessIdentity};
use crate::runtime::reaper::ExitWatch;
use crate::spec::{self, ProcessSpec, RenderContext, RenderedInstance};
use crate::store::{Batch, Table};
use nix::sys::signal::Signal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

mod health;
mod journal;
mod pod;

/// How often a stop looks at the cgroup while waiting for the instance's processes to go.
const STOP_POLL: Duration = Duration::from_millis(20);
/// How often a start looks for the pidfile.
const PIDFILE_POLL: Duration = Duration::from_millis(20);
/// After SIGKILL, how long processes may take to disappear before the stop is declared stuck.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// reloadCmd / restartCmd may run at most this long.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A spec as applied, with the generation that tells instances whether they run the latest.
#[derive(Debug)]
pub struct SpecEntry {
    pub spec: ProcessSpec,
    pub generation: u64,
    /// See `StoredSpec::restart_from`.
    pub restart_from: u64,
    /// The instance ids this host runs, when a scheduler spreads the app over hosts; `None`
    /// means all of `spec.instance`.
    pub selection: Option<Vec<u32>>,
}

#[derive(Debug)]
pub enum Command {
    Start,
    Stop,
    Restart,
    Reload,
    Delete,
    /// A newer spec: restart with it if running (unless only the instance count changed, the
    /// `bool`), else keep it for the next start.
    Replace(Arc<SpecEntry>, bool),
}

impl Command {
    /// For logs.
    pub fn word(&self) -> &'static str {
        match self {
            Command::Start => "start",
            Command::Stop => "stop",
            Command::Restart => "restart",
            Command::Reload => "reload",
            Command::Delete => "delete",
            Command::Replace(..) => "replace",
        }
    }
}

pub type Reply = oneshot::Sender<Result<(), String>>;

/// The sending side of an actor's queue. A linked-list queue (futures-channel) rather than
/// tokio's: an idle one costs about 100 bytes where tokio's, with its cache-padded counters
/// and a first block of 32 slots, costs about 1 KiB, and every instance has one.
#[derive(Clone)]
pub struct Mailbox(futures_channel::mpsc::UnboundedSender<Msg>);

impl Mailbox {
    pub fn send(&self, msg: Msg) -> Result<(), Msg> {
        self.0.unbounded_send(msg).map_err(|e| e.into_inner())
    }
}

/// The receiving side of an actor's queue.
pub struct Inbox(futures_channel::mpsc::UnboundedReceiver<Msg>);

impl Inbox {
    /// The next message; `None` once every sender is gone. Cancel-safe (a message is taken
    /// only when this returns it).
    async fn recv(&mut self) -> Option<Msg> {
        futures_util::StreamExt::next(&mut self.0).await
    }
}

pub enum Msg {
    Request(Command, Option<Reply>),
    MainExited {
        generation: u64,
        index: usize,
        status: ExitStatus,
    },
    /// A health check's result for process `index`.
    Checked {
        generation: u64,
        index: usize,
        outcome: crate::health::Outcome,
    },
    /// A pod's runtime (dockerd) stopped answering while its containers were watched.
    RuntimeLost {
        generation: u64,
        reason: String,
    },
}

/// A main process being watched.
struct Main {
    identity: ProcessIdentity,
    pidfd: Arc<Pidfd>,
    /// Spawned by this daemon as the start command itself: its exit watch comes from the spawn
    /// and cannot miss the exit.
    spawned: bool,
}

enum Launched {
    Ready(Main, Option<ExitWatch>),
    Failed(String),
    Exited(ExitStatus),
    Interrupted(Command, Option<Reply>),
}

pub struct Actor {
    shared: Arc<Shared>,
    rec: InstanceRecord,
    spec: Arc<SpecEntry>,
    cgroup: Box<dyn Cgroup>,
    mains: Vec<Option<Main>>,
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
    /// The cgroup's OOM-kill count when the current processes started, to tell an OOM kill
    /// from any other SIGKILL (None: read it at the next start).
    oom_kills_at_start: Option<u64>,
    /// Health probing of the current processes, and the verdicts so far (by process).
    health_tasks: Vec<tokio::task::JoinHandle<()>>,
    trackers: Vec<Option<crate::health::Tracker>>,
    /// Env vars from secrets and configmaps, per process, resolved at the last staging.
    injected_env: Vec<Vec<(String, String)>>,
    /// Each process's user, resolved at the last staging.
    users: Vec<ResolvedUser>,
    /// The instance as its current (or last) run was rendered: what stops, restarts, reloads,
    /// health checks and the delete read, so they act on what runs (its stopCmd, its users, its
    /// grace) even after the spec changed. Rendered once per start; after a daemon restart,
    /// once from the stored spec when first needed.
    rendered: Option<Arc<RenderedInstance>>,
    /// The limits the cgroup was last created with (None: not made by this actor yet).
    cgroup_limits: Option<crate::cgroups::Limits>,
    /// Told once the instance is resumed after a daemon start (see `mark_resumed`).
    resumed: Option<oneshot::Sender<()>>,
    /// Why the current processes ended, beyond their exit status (an OOM kill): put in front of
    /// the next transition's message.
    end_note: Option<String>,
    /// Why the next transition happens, when the event alone does not tell (a restart for a
    /// spec update looks like an operator's restart); journaled with it.
    reason: Option<String>,
    /// A place among the launches in progress (see `Shared::launches`), held from staging to
    /// the first spawn.
    launch_permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The cgroup was seen empty and nothing was spawned into it since: a start need not look
    /// again. False when the actor begins, so its first start clears whatever an earlier daemon
    /// left there (a spawn whose commit a crash cut short, see `launch`).
    cgroup_clear: AtomicBool,
    /// A pod's log followers (container output into the run dir's files).
    log_tasks: Vec<tokio::task::JoinHandle<()>>,
    /// A pod's containers that exited cleanly while others run on (seed 001: the pod ends when
    /// all have exited).
    exited: Vec<Option<i64>>,
}

impl Actor {
    pub fn new(
        shared: Arc<Shared>,
        rec: InstanceRecord,
        spec: Arc<SpecEntry>,
    ) -> (Actor, Mailbox, watch::Receiver<InstanceRecord>) {
        let (tx, rx) = futures_channel::mpsc::unbounded();
        let (tx, rx) = (Mailbox(tx), Inbox(rx));
        let (status, status_rx) = watch::channel(rec.clone());
        let cgroup = shared.cgroups.instance(&cgroup_key(&rec));
        let actor = Actor {
            shared,
            rec,
            spec,
            cgroup,
            mains: Vec::new(),
            generation: 0,
            tx: tx.clone(),
            rx,
            journal: journal::Journal::new(status),
            waiting: Vec::new(),
            deleted: false,
            oom_kills_at_start: None,
            health_tasks: Vec::new(),
            trackers: Vec::new(),
            injected_env: Vec::new(),
            users: Vec::new(),
            cgroup_limits: None,
            resumed: None,
            rendered: None,
            end_note: None,
            reason: None,
            launch_permit: None,
            cgroup_clear: AtomicBool::new(false),
            log_tasks: Vec::new(),
            exited: Vec::new(),
        };
        (actor, tx, status_rx)
    }

    /// A receiver told when the instance has been resumed (see `mark_resumed`).
    pub fn on_resumed(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.resumed = Some(tx);
        rx
    }

    /// Runs the instance until it is deleted or the supervisor goes away. The actor is boxed:
    /// an async fn keeps its argument twice in its future (before and after the first await),
    /// and this future lives as long as the instance.
    pub async fn run(mut self: Box<Self>) {
        Box::pin(self.resume()).await;
        while !self.deleted {
            let msg = match self.rec.state {
                State::Backoff { until_ms } => {
                    let wait = Duration::from_millis(until_ms.saturating_sub(now_ms()));
                    match Box::pin(self.recv_within(wait)).await {
                        Some(m) => m,
                        None => {
                            if Box::pin(self.apply(Event::RestartDue)).await {
                                Box::pin(self.start_flow()).await;
                            }
                            continue;
                        }
                    }
                }
                // A pod whose dockerd is away: ask again now and then.
                State::Lost { .. } => match Box::pin(self.recv_within(pod::LOST_POLL)).await {
                    Some(m) => m,
                    None => {
                        Box::pin(self.try_recover()).await;
                        continue;
                    }
                },
                // A restart taken at once (see apply) leaves the instance Staging: start it.
                State::Staging => {
                    Box::pin(self.start_flow()).await;
                    continue;
                }
                _ => self.rx.recv().await,
            };
            let Some(msg) = msg else { return };
            match msg {
                Msg::Request(cmd, reply) => Box::pin(self.handle(cmd, reply)).await,
                Msg::MainExited { generation, index, status } if generation == self.generation => {
                    if self.is_pod() {
                        Box::pin(self.on_container_exit(index, status)).await;
                    } else {
                        Box::pin(self.on_main_exit(index, status)).await;
                    }
                }
                Msg::RuntimeLost { generation, reason } if generation == self.generation => {
                    Box::pin(self.lose(reason)).await;
                }
                Msg::RuntimeLost { .. } => {}
                Msg::MainExited { .. } => {}
                Msg::Checked { generation, index, outcome } if generation == self.generation => {
                    Box::pin(self.on_checked(index, outcome)).await;
                }
                Msg::Checked { .. } => {}
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
        self.trackers.clear();
        self.rec.health.clear();
    }

    /// After a daemon restart (or a fresh apply): pick up where the record says we were.
    async fn resume(&mut self) {
        match self.rec.state.clone() {
            State::Running | State::Lost { .. } if self.is_pod() => {
                self.readopt_pod().await;
                self.flush_unjournaled().await;
                self.mark_resumed();
            }
            State::Running => {
                self.readopt().await;
                // A process that ended while we were away: its end must be durable (and so
                // shown) before the daemon answers for this instance.
                self.flush_unjournaled().await;
                self.mark_resumed();
            }
            State::Starting => {
                self.mark_resumed();
                // The start was interrupted before its main process was recorded. The cgroup
                // (or dockerd) holds whatever it launched: clear it so that exactly one runs.
                if self.is_pod() {
                    self.remove_pod().await;
                } else {
                    self.kill_all_processes().await;
                }
                if self.apply(Event::Resume).await {
                    self.start_flow().await;
                }
            }
            State::Staging => {
                self.mark_resumed();
                self.start_flow().await;
            }
            State::Stopping { .. } => {
                self.mark_resumed();
                self.stop_flow(false).await;
            }
            _ => {
                // Recorded without processes, yet the cgroup may hold some: a start whose spawn
                // the daemon did not live to record. Nothing runs unsupervised: they go.
                if !self.is_pod() && !self.cgroup_empty() {
                    tracing::warn!(instance = %self.rec.id, "killing processes in the cgroup of an instance recorded {}", self.rec.state.kind());
                    self.kill_all_processes().await;
                }
                self.mark_resumed();
            }
        }
    }

    /// After this instance's previous actor panicked (a bug in stewardd): nothing of it may run
    /// unsupervised, and the record must not lead this actor (or the next daemon start) into the
    /// same panic. Its processes are killed and it is recorded Failed with the panic's message;
    /// start, stop and delete then work as on any failed instance.
    pub async fn fail_after_panic(&mut self, what: &str) {
        self.kill_all_processes().await;
        let reason = format!("stewardd internal error, the instance's processes were killed: {what}");
        let from = self.rec.state.kind();
        self.rec.state = State::Failed { reason: reason.clone() };
        self.rec.mains.clear();
        self.rec.message = reason.clone();
        self.rec.last_exit_reason = Some(reason);
        self.rec.updated_ms = now_ms();
        // It failed on this spec: the next daemon start has no apply of it left to carry out.
        self.rec.run_generation = self.spec.generation;
        let body = self.transition_body(from, "internal error");
        self.persist(vec![body]).await;
    }

    /// The record is true again (processes re-adopted, or their end recorded): the daemon may
    /// answer for this instance. Long work that follows (a stop's grace period, a start) goes on.
    fn mark_resumed(&mut self) {
        if let Some(tx) = self.resumed.take() {
            let _ = tx.send(());
        }
    }

    /// Re-adopts the recorded main processes: same pid, same start time, same boot, still in
    /// our cgroup. Anything else means the process ended while we were away. Nothing here
    /// depends on the spec rendering again: a live process is never killed for a spec's sake.
    async fn readopt(&mut self) {
        self.new_generation();
        self.mains.clear();
        for (i, identity) in self.rec.mains.clone().iter().enumerate() {
            let adopted = identity.as_ref().and_then(|id| self.adopt(id));
            match adopted {
                Some(main) => {
                    self.watch_main(i, &main, None);
                    self.mains.push(Some(main));
                }
                None => {
                    tracing::info!(instance = %self.rec.id, "main process {i} ended while the daemon was away");
                    return self.on_main_exit(i, ExitStatus::Unknown).await;
                }
            }
        }
        tracing::info!(instance = %self.rec.id, "re-adopted {} process(es)", self.mains.len());
        self.start_health_checks();
    }

    /// The process recorded at start, if it still runs: the same pid, start time and boot, in
    /// the instance's cgroup. Its name is not asked again: a foreground start command may exec
    /// another program (`exec sleep`), and a pidfile's process had its name checked at start;
    /// pid + start time + boot id already name exactly one process.
    fn adopt(&self, identity: &ProcessIdentity) -> Option<Main> {
        // Open the pidfd first, then check identity: once open, the pidfd pins the process, so a
        // matching start time afterwards proves it is the same one.
        let pidfd = Pidfd::open(identity.pid).ok()?;
        if !identity.is_current() {
            tracing::warn!(instance = %self.rec.id, pid = identity.pid, "pid was reused by another process; not adopted");
            return None;
        }
        if !self.cgroup.contains(identity.pid) {
            tracing::warn!(instance = %self.rec.id, pid = identity.pid, "not in the instance's cgroup; not adopted");
            return None;
        }
        Some(Main { identity: identity.clone(), pidfd: Arc::new(pidfd), spawned: false })
    }

    /// Handles one request.
    async fn handle(&mut self, cmd: Command, reply: Option<Reply>) {
        let kind = self.rec.state.kind();
        use state::Kind;
        match cmd {
            Command::Start => match kind {
                Kind::Running | Kind::Starting | Kind::Staging | Kind::Lost => answer(reply, Ok(())),
                _ => {
                    self.rec.counter = Default::default();
                    self.waiting.extend(reply);
                    self.start_again().await;
                    self.settle();
                }
            },
            Command::Stop | Command::Delete | Command::Restart => {
                let goal = match cmd {
                    Command::Stop => StopGoal::Stop,
                    Command::Delete => StopGoal::Delete,
                    _ => StopGoal::Restart,
                };
                if goal == StopGoal::Restart && self.try_restart_cmd().await {
                    answer(reply, Ok(()));
                    return;
                }
                self.waiting.extend(reply);
                match kind {
                    Kind::Running | Kind::Starting | Kind::Lost => self.stop_with(goal.clone()).await,
                    Kind::Backoff | Kind::Stopped | Kind::Exited | Kind::Failed if goal == StopGoal::Restart => {
                        self.start_again().await
                    }
                    Kind::Staging | Kind::Backoff => {
                        self.apply(Event::StopRequested { goal: goal.clone() }).await;
                    }
                    _ => {}
                }
                if goal == StopGoal::Delete && !self.deleted && !self.rec.state.has_processes() {
                    self.delete().await;
                }
                self.settle();
            }
            Command::Reload => {
                crate::failpoint::panic_for("reload-panic", &self.rec.key());
                let result =
                    if self.is_pod() && kind == Kind::Running { self.reload_pod().await } else { self.reload().await };
                answer(reply, result);
            }
            Command::Replace(entry, count_only) => {
                self.spec = entry;
                self.rec.spec_generation = self.spec.generation;
                self.commit_event("specUpdated", serde_json::json!({"generation": self.spec.generation})).await;
                answer(reply, Ok(()));
                if count_only {
                    return;
                }
                match kind {
                    Kind::Running | Kind::Starting | Kind::Lost => {
                        self.reason = Some("spec updated".into());
                        self.stop_with(StopGoal::Restart).await;
                    }
                    // A changed spec is the operator's fix: start it now rather than at the end
                    // of a backoff, or never (Exited, Failed). An operator's stop holds.
                    Kind::Backoff | Kind::Exited | Kind::Failed => {
                        self.rec.counter = Default::default();
                        self.reason = Some("spec updated".into());
                        self.start_again().await;
                        self.settle();
                    }
                    // A start (a download) this replace interrupted: start over on the new spec.
                    Kind::Staging => {
                        self.start_flow().await;
                        self.settle();
                    }
                    _ => {}
                }
            }
        }
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

    async fn start_again(&mut self) {
        if self.apply(Event::Start).await {
            self.start_flow().await;
        }
    }

    async fn stop_with(&mut self, goal: StopGoal) {
        if self.apply(Event::StopRequested { goal }).await {
            self.stop_flow(true).await;
        }
    }

    /// Staging → Starting → Running, or a failure handed to the restart policy.
    async fn start_flow(&mut self) {
        let interrupted = self.try_start().await;
        self.launch_permit = None;
        if let Some((cmd, reply)) = interrupted {
            // A request interrupted the start: handle it, it may start again itself.
            Box::pin(self.handle(cmd, reply)).await;
        }
    }

    /// One attempt; returns a request that interrupted it, to be handled by the caller.
    async fn try_start(&mut self) -> Option<(Command, Option<Reply>)> {
        crate::failpoint::panic_for("actor-panic", &self.rec.key());
        self.take_launch_place().await;
        let rendered = match self.stage() {
            Ok(p) => p,
            Err(reason) => {
                self.apply(Event::StageFailed { reason }).await;
                return None;
            }
        };
        if self.needs_fetch() {
            // A download can take minutes: it holds no place among the launches.
            self.launch_permit = None;
        }
        match self.fetch_packages(&rendered).await {
            Ok(None) => {}
            Ok(Some(interrupt)) => return Some(interrupt),
            Err(reason) => {
                self.apply(Event::StageFailed { reason }).await;
                return None;
            }
        }
        self.take_launch_place().await;
        if self.is_pod() {
            if !self.apply(Event::Staged).await {
                return None;
            }
            self.new_generation();
            self.mains.clear();
            return self.start_pod(&rendered).await;
        }
        // Exactly one process tree: never spawn beside processes of an earlier run.
        if !self.cgroup_clear.load(Ordering::Relaxed) && !self.kill_all_processes().await {
            let reason = "processes of the previous run would not end after SIGKILL".to_string();
            self.apply(Event::StageFailed { reason }).await;
            return None;
        }
        // Starting is committed while the first spawn runs (see `launch`).
        if !self.hold_transition(Event::Staged) {
            return None;
        }
        self.new_generation();
        // Sized exactly: thousands of instances keep this for as long as they run.
        self.mains = Vec::with_capacity(rendered.processes.len());
        let mut watches = Vec::new();
        for i in 0..rendered.processes.len() {
            match self.launch(&rendered, i).await {
                Launched::Ready(main, watch) => {
                    self.mains.push(Some(main));
                    watches.push(watch);
                }
                Launched::Failed(reason) => {
                    // Re-create the cgroup next time, in case it is what failed.
                    self.cgroup_limits = None;
                    self.kill_all_processes().await;
                    self.apply(Event::StartFailed { reason }).await;
                    return None;
                }
                Launched::Exited(status) => {
                    self.kill_all_processes().await;
                    self.rec.last_exit = Some(status);
                    self.apply(Event::MainExited { status }).await;
                    return None;
                }
                Launched::Interrupted(cmd, reply) => return Some((cmd, reply)),
            }
        }
        let now = now_ms();
        self.rec.mains = self.mains.iter().map(|m| m.as_ref().map(|m| m.identity.clone())).collect();
        self.rec.counter.running_since_ms = Some(now);
        self.rec.last_start_ms = Some(now);
        if self.apply(Event::MainReady).await {
            for (i, watch) in watches.into_iter().enumerate() {
                if let Some(main) = &self.mains[i] {
                    self.watch_main(i, main, watch);
                }
            }
            self.start_health_checks();
        }
        None
    }

    /// Everything before launching: render, resolve the user, create directories, cgroup.
    fn stage(&mut self) -> Result<Arc<RenderedInstance>, String> {
        // This start runs the spec as it is now, whatever comes of it.
        self.rec.run_generation = self.spec.generation;
        self.rec.ports = self.shared.ports.lock().expect("ports lock").ports_of(&self.rec.key());
        let rendered = Arc::new(self.render()?);
        self.rendered = Some(rendered.clone());
        let roots = &self.shared.roots;
        let root_of = |p: &std::path::Path| {
            if p.starts_with(&roots.work_base_dir) {
                roots.work_base_dir.clone()
            } else {
                roots.run_base_dir.clone()
            }
        };
        // Each process's user, looked up once per start (passwd and group files are read).
        self.users = rendered.processes.iter().map(|p| ResolvedUser::lookup(&p.user)).collect::<Result<_, _>>()?;
        process::create_owned_dirs(&roots.run_base_dir, &rendered.run_dir, &ResolvedUser::root())
            .map_err(|e| format!("cannot create {}: {e}", rendered.run_dir.display()))?;
        // Logs and position files go there as root: it must be the daemon's (not, say, a
        // directory another instance's workload made and owns).
        let run_dir = crate::safefs::open_daemon_dir(&rendered.run_dir).map_err(|e| format!("run directory {e}"))?;
        run_dir_access(&run_dir, &rendered, &self.users).map_err(|e| format!("run directory {e}"))?;
        for (p, owner) in rendered.processes.iter().zip(&self.users) {
            process::create_owned_dirs(&root_of(&p.work_path), &p.work_path, owner)
                .map_err(|e| format!("cannot create workPath {}: {e}", p.work_path.display()))?;
            if let Some(parent) = p.pid_file.as_ref().and_then(|f| f.parent()) {
                process::create_owned_dirs(&root_of(parent), parent, owner)
                    .map_err(|e| format!("cannot create pidfile directory {}: {e}", parent.display()))?;
            }
        }
        // Secrets and configmaps as they are now: a change applies at the next (re)start.
        self.injected_env.clear();
        if let Some(pod) = &rendered.pod {
            // Files go below the run dir (mounted read-only into the container); dockerd
            // makes and limits the containers' cgroups.
            let root = ResolvedUser::root();
            for c in &pod.containers {
                if c.injections.iter().any(|i| matches!(i.target, crate::spec::render::InjectionTarget::File { .. })) {
                    let dir = rendered.run_dir.join("values").join(&c.name);
                    super::values::private_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                }
                let lookup = |kind, key: &str| {
                    self.shared.values.lock().expect("values lock").get(&(kind, key.to_string())).cloned()
                };
                let env =
                    super::values::inject(&c.injections, &self.rec.id.namespace, lookup, &rendered.run_dir, &root)?;
                self.injected_env.push(env);
            }
            return Ok(rendered);
        }
        for (p, user) in rendered.processes.iter().zip(&self.users) {
            let lookup = |kind, key: &str| {
                self.shared.values.lock().expect("values lock").get(&(kind, key.to_string())).cloned()
            };
            let env = super::values::inject(&p.injections, &self.rec.id.namespace, lookup, &p.work_path, user)?;
            self.injected_env.push(env);
        }
        // The cgroup is made and limited once; again only when the limits change.
        let limits = instance_limits(&rendered);
        if self.cgroup_limits.as_ref() != Some(&limits) {
            let fresh = self.cgroup.create().map_err(|e| format!("cannot create cgroup: {e}"))?;
            if fresh {
                // Nothing can be in a cgroup made just now.
                self.cgroup_clear.store(true, Ordering::Relaxed);
            }
            // A cgroup made just now has the kernel's defaults: unlimited, no OOM kill yet.
            if !fresh || limits != crate::cgroups::Limits::default() {
                self.cgroup.set_limits(&limits).map_err(|e| format!("cannot set resource limits: {e}"))?;
            }
            self.cgroup_limits = Some(limits);
            self.oom_kills_at_start = fresh.then_some(0);
        }
        // Known already when the last run's end was just examined (`oom_killed`).
        if self.oom_kills_at_start.is_none() {
            self.oom_kills_at_start = Some(self.cgroup.usage().map(|u| u.oom_kills).unwrap_or(0));
        }
        Ok(rendered)
    }

    /// Fetches every uri of every process into its outputDir (seed 000), reporting bytes so far
    /// in the status message. A stop or restart request interrupts it (dropping a fetch is safe).
    async fn fetch_packages(
        &mut self,
        rendered: &RenderedInstance,
    ) -> Result<Option<(Command, Option<Reply>)>, String> {
        for p in &rendered.processes {
            if p.uris.is_empty() {
                continue;
            }
            let user = ResolvedUser::lookup(&p.user)?;
            for uri in &p.uris {
                let counted = std::sync::atomic::AtomicU64::new(0);
                let (journal, counters) = (&self.journal, &self.shared.counters);
                let progress = |bytes: u64, total: Option<u64>| {
                    let before = counted.swap(bytes, std::sync::atomic::Ordering::Relaxed);
                    counters.fetch_bytes.fetch_add(bytes.saturating_sub(before), std::sync::atomic::Ordering::Relaxed);
                    let of = total.map(|t| format!(" of {t}")).unwrap_or_default();
                    journal.show_progress(format!("fetching {}: {bytes}{of} bytes", uri.value));
                };
                let fetch = self.shared.fetcher.fetch(uri, &user, &progress);
                let result = tokio::select! {
                    r = fetch => r,
                    interrupt = next_interrupt(&mut self.rx) => return Ok(Some(interrupt)),
                };
                match result {
                    Ok(f) => {
                        tracing::info!(instance = %self.rec.id, "fetched {} ({} bytes, sha256 {})", uri.value, f.bytes, f.sha256)
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Ok(None)
    }

    /// The rendering of the current run (see `rendered`), made now if there is none yet.
    fn rendered(&mut self) -> Result<Arc<RenderedInstance>, String> {
        if let Some(r) = &self.rendered {
            return Ok(r.clone());
        }
        let r = Arc::new(self.render()?);
        self.rendered = Some(r.clone());
        Ok(r)
    }

    /// The stop's grace period of what runs (its rendering; the spec's if it cannot render).
    fn kill_grace(&mut self) -> Duration {
        let secs = match self.rendered() {
            Ok(r) => r.kill_grace_period_secs,
            Err(_) => self.spec.spec.kill_policy.grace_period,
        };
        Duration::from_secs(secs)
    }

    /// Renders the spec as it is now, for this instance (a start does; see `rendered`).
    fn render(&self) -> Result<RenderedInstance, String> {
        let ctx = RenderContext {
            roots: &self.shared.roots,
            host_ip: self.shared.host_ip.clone(),
            allocated_ports: &self.rec.ports,
        };
        spec::render(&self.spec.spec, self.rec.id.index, &ctx).map_err(|e| e.to_string())
    }

    /// Launches process `i` and finds its main process.
    async fn launch(&mut self, rendered: &RenderedInstance, i: usize) -> Launched {
        let p = &rendered.processes[i];
        let Some(user) = self.users.get(i).cloned() else {
            return Launched::Failed("the process's user was not resolved".into());
        };
        // The held-back transitions (Exited, Backoff, Staging, Starting) go to the store before
        // the spawn and are durable before anything watches or reports the process: the spawn
        // overlaps the fsync. A crash in between leaves the previous record, and the next
        // daemon's first start empties the cgroup first (`cgroup_clear`): one tree, never two.
        let pending = self.journal.has_held().then(|| self.journal.begin(&self.shared.store, &self.rec));
        let spawned = self.spawn_in_instance(rendered, i, &p.start_cmd, &user, "start");
        crate::failpoint::hit("launch-spawned");
        if let Some(pending) = pending {
            self.journal.finish(&self.shared.store, &self.rec, pending).await;
        }
        // Launched: waiting out the grace period or for the pidfile holds no place.
        self.launch_permit = None;
        let (pid, mut exit) = match spawned {
            Ok(x) => x,
            Err(e) => return Launched::Failed(format!("cannot run startCmd: {e}")),
        };
        let grace = Duration::from_secs(p.start_grace_period_secs);
        let deadline = crate::clock::deadline_after(grace);
        let Some(pid_file) = &p.pid_file else {
            // Foreground: the start command is the main process if it is still alive after the grace.
            tokio::select! {
                biased;
                status = &mut exit => return Launched::Exited(status.unwrap_or(ExitStatus::Unknown)),
                m = next_interrupt(&mut self.rx) => return Launched::Interrupted(m.0, m.1),
                _ = tokio::time::sleep_until(deadline) => {}
            }
            if let Ok(status) = exit.try_recv() {
                return Launched::Exited(status);
            }
            return match (Pidfd::open(pid), ProcessIdentity::of(pid)) {
                (Ok(pidfd), Some(identity)) => {
                    Launched::Ready(Main { identity, pidfd: Arc::new(pidfd), spawned: true }, Some(exit))
                }
                _ => Launched::Exited(exit.await.unwrap_or(ExitStatus::Unknown)),
            };
        };
        // Forking (systemd Type=forking): the pid in the pidfile is the main process.
        let mut launcher_exit: Option<ExitWatch> = Some(exit);
        let mut launcher_status = None;
        let mut why = format!("pidfile {} did not appear", pid_file.display());
        let uid = user.uid;
        loop {
            match process::read_pidfile(pid_file, uid) {
                Err(e) if e.contains("No such file") => {}
                Err(e) => why = e,
                Ok(main_pid) => match self.check_main(main_pid, &p.proc_name) {
                    Ok(mut main) => {
                        main.spawned = main_pid == pid;
                        let watch =
                            if main.spawned { launcher_exit.take() } else { Some(self.shared.reaper.watch(main_pid)) };
                        return Launched::Ready(main, watch);
                    }
                    Err(e) => why = e,
                },
            }
            if let Some(w) = launcher_exit.as_mut() {
                if let Ok(status) = w.try_recv() {
                    launcher_exit = None;
                    launcher_status = Some(status);
                    if !status.is_success() {
                        let said = self.start_output(rendered, i);
                        return Launched::Failed(format!(
                            "startCmd {status} before the pidfile named a running process{said}"
                        ));
                    }
                }
            }
            if Instant::now() >= deadline {
                let grace = p.start_grace_period_secs;
                let mut reason = format!("{why} within startGracePeriod ({grace}s)");
                match launcher_status {
                    Some(status) => reason.push_str(&format!("; startCmd {status} (it detached)")),
                    None => reason.push_str("; startCmd still runs"),
                }
                if let Some(Err(e)) = pid_file.parent().map(|d| process::writable_by(d, &user)) {
                    reason.push_str(&format!("; {e}"));
                }
                reason.push_str(&self.start_output(rendered, i));
                return Launched::Failed(reason);
            }
            tokio::select! {
                m = next_interrupt(&mut self.rx) => return Launched::Interrupted(m.0, m.1),
                _ = tokio::time::sleep(PIDFILE_POLL) => {}
            }
        }
    }

    /// What process `i`'s current run printed last (a start that failed: why, in its own
    /// words, even when it printed that after it detached), for a failure's message.
    fn start_output(&self, rendered: &RenderedInstance, i: usize) -> String {
        let name = &rendered.processes[i].proc_name;
        let mut said: Vec<String> = Vec::new();
        for stream in ["stderr", "stdout"] {
            let lines = crate::logs::last_run_lines(&rendered.run_dir, name, stream, 3);
            said.extend(lines.into_iter().map(|l| format!("{stream}: {}", l.chars().take(300).collect::<String>())));
        }
        if said.is_empty() {
            String::new()
        } else {
            format!("; it printed: {}", said.join(" | "))
        }
    }

    /// A pid from a pidfile is the main process only if it is alive, inside this instance's
    /// cgroup, and runs procName.
    fn check_main(&self, pid: i32, proc_name: &str) -> Result<Main, String> {
        let pidfd = Pidfd::open(pid).map_err(|_| format!("pidfile names pid {pid}, which is not running"))?;
        let identity = ProcessIdentity::of(pid).ok_or_else(|| format!("pidfile names pid {pid}, which has exited"))?;
        if !self.cgroup.contains(pid) {
            return Err(format!("pidfile names pid {pid}, which is not a process of this instance"));
        }
        procinfo::check_name(pid, proc_name).map_err(|e| format!("pidfile names the wrong process: {e}"))?;
        Ok(Main { identity, pidfd: Arc::new(pidfd), spawned: false })
    }

    /// Runs a command of process `i` (start, stop, reload, restart) as its user, in its work dir
    /// and in the instance's cgroup, with output to the instance's logs.
    fn spawn_in_instance(
        &self,
        rendered: &RenderedInstance,
        i: usize,
        command: &str,
        user: &ResolvedUser,
        what: &str,
    ) -> std::io::Result<(i32, ExitWatch)> {
        let p = &rendered.processes[i];
        let log = |stream: &str| rendered.run_dir.join(format!("{}.{stream}.log", p.proc_name));
        let mut stdout = process::open_log(&log("stdout"), user)?;
        let mut stderr = process::open_log(&log("stderr"), user)?;
        if what == "start" {
            // Where each run's output begins, in both files (`steward logs` shows it).
            use std::io::Write;
            let marker = crate::logs::run_marker(now_ms());
            stdout.write_all(marker.as_bytes())?;
            stderr.write_all(marker.as_bytes())?;
        }
        let mut env: Vec<(String, String)> = p.env.iter().map(|e| (e.name.clone(), e.value.clone())).collect();
        env.extend(self.injected_env.get(i).into_iter().flatten().cloned());
        let join = self.cgroup.join_files().map_err(|e| std::io::Error::other(e.to_string()))?;
        self.cgroup_clear.store(false, Ordering::Relaxed);
        tracing::debug!(instance = %self.rec.id, "running {what} command: {command}");
        process::launch(
            &self.shared.reaper,
            Launch { command, work_dir: &p.work_path, user, env: &env, stdout, stderr, cgroup_join: join },
        )
    }

    /// Reports main process `i`'s exit to the actor: from its pidfd (any process), with the
    /// status from the reaper when the daemon is its parent.
    fn watch_main(&self, index: usize, main: &Main, reaped: Option<ExitWatch>) {
        let (tx, pidfd, generation) = (self.tx.clone(), main.pidfd.clone(), self.generation);
        let reaper = self.shared.reaper.clone();
        let pid = main.identity.pid;
        let reaped = match reaped {
            Some(reaped) if main.spawned => {
                Self::watch_own_child(tx, pidfd, generation, index, reaped);
                return;
            }
            other => other,
        };
        let mut reaped = reaped.unwrap_or_else(|| reaper.watch(pid));
        tokio::spawn(async move {
            tokio::select! {
                status = &mut reaped => {
                    // A dropped watch (replaced by a newer one) says nothing: wait on the pidfd.
                    if let Ok(status) = status {
                        let _ = tx.send(Msg::MainExited { generation, index, status });
                        return;
                    }
                    pidfd.exited().await;
                    let _ = tx.send(Msg::MainExited { generation, index, status: ExitStatus::Unknown });
                    return;
                }
                _ = pidfd.exited() => {}
            }
            // Not reaped yet: a child's status follows its SIGCHLD at once; a process that is
            // not our child (re-adopted) never gets one.
            let status = tokio::time::timeout(Duration::from_millis(200), reaped).await;
            let status = status.ok().and_then(Result::ok).unwrap_or(ExitStatus::Unknown);
            reaper.forget(pid);
            let _ = tx.send(Msg::MainExited { generation, index, status });
        });
    }

    /// Our own child: the reaper's status is all it takes (no pidfd in the event loop, a small
    /// task: thousands of instances each hold one).
    fn watch_own_child(tx: Mailbox, pidfd: Arc<Pidfd>, generation: u64, index: usize, reaped: ExitWatch) {
        tokio::spawn(async move {
            let status = match reaped.await {
                Ok(status) => status,
                // Replaced by a newer watch: the pidfd still tells when it ends.
                Err(_) => {
                    pidfd.exited().await;
                    ExitStatus::Unknown
                }
            };
            let _ = tx.send(Msg::MainExited { generation, index, status });
        });
    }

    async fn on_main_exit(&mut self, index: usize, status: ExitStatus) {
        // A pod's ends name their container.
        let which = match self.rec.containers.get(index).filter(|_| self.is_pod()) {
            Some(c) => format!("container {}", crate::spec::pod::short_container_name(&self.rec.id, &c.name)),
            None => format!("main process {index}"),
        };
        tracing::info!(instance = %self.rec.id, "{which} {status}");
        self.new_generation();
        self.mains.clear();
        self.rec.last_exit = Some(status);
        let oom = if self.is_pod() { None } else { self.oom_killed() };
        // As systemd does when a service's main process ends: the rest of its processes go too.
        self.kill_all_processes().await;
        let oom = oom.or_else(|| self.pod_oom());
        // The OOM kill is part of the end: the same commit says so, never a later one.
        let mut noted = Vec::new();
        if let Some(why) = &oom {
            noted.push(serde_json::json!({"instance": self.rec.key(), "type": "oomKilled", "detail": {"reason": why}}));
        }
        self.end_note = oom.or_else(|| self.is_pod().then_some(which));
        self.apply_noting(Event::MainExited { status }, noted).await;
    }

    /// Whether the kernel's OOM killer struck this instance since its processes started.
    /// The count read is the baseline of the next start.
    fn oom_killed(&mut self) -> Option<String> {
        let now = self.cgroup.usage().ok()?.oom_kills;
        let before = self.oom_kills_at_start.replace(now).unwrap_or(0);
        if now <= before {
            return None;
        }
        let limit = self.rendered().ok().and_then(|r| instance_limits(&r).memory_mb);
        Some(match limit {
            Some(mb) => format!("OOM-killed: over its memory limit of {mb} MiB"),
            None => "OOM-killed by the kernel".to_string(),
        })
    }

    /// Stopping → stopped: stopCmd or SIGTERM, up to gracePeriod for every process of the
    /// instance to end, then SIGKILL for all that remain.
    async fn stop_flow(&mut self, polite: bool) {
        crate::failpoint::hit("stop-recorded");
        if self.is_pod() {
            let stopped = self.stop_pod().await;
            let delete = matches!(&self.rec.state, State::Stopping { goal: StopGoal::Delete });
            self.new_generation();
            self.mains.clear();
            match stopped {
                Ok(()) => self.apply(Event::StopCompleted).await,
                Err(reason) => self.apply(Event::StopFailed { reason }).await,
            };
            if delete && self.rec.state == State::Stopped {
                self.delete().await;
            } else if self.rec.state == State::Staging {
                Box::pin(self.start_flow()).await;
            }
            return;
        }
        let grace = self.kill_grace();
        let deadline = crate::clock::deadline_after(grace);
        if polite {
            self.polite_stop();
        } else if let Err(e) = self.cgroup.signal_all(Signal::SIGTERM) {
            tracing::warn!(instance = %self.rec.id, "SIGTERM: {e}");
        }
        while Instant::now() < deadline && !self.cgroup_empty() {
            tokio::select! {
                Some(msg) = self.rx.recv() => self.during_stop(msg).await,
                _ = tokio::time::sleep(STOP_POLL) => {}
            }
        }
        let delete = matches!(&self.rec.state, State::Stopping { goal: StopGoal::Delete });
        let done = self.kill_all_processes().await;
        self.new_generation();
        self.mains.clear();
        if done {
            self.apply(Event::StopCompleted).await;
        } else {
            let pids = self.cgroup.pids().unwrap_or_default();
            self.apply(Event::StopFailed { reason: format!("processes {pids:?} survived SIGKILL") }).await;
        }
        if delete && self.rec.state == State::Stopped {
            self.delete().await;
        } else if self.rec.state == State::Staging {
            Box::pin(self.start_flow()).await;
        }
    }

    /// Requests while stopping: a delete upgrades the stop (durably); anything else waits its turn.
    async fn during_stop(&mut self, msg: Msg) {
        match msg {
            Msg::Request(Command::Delete, reply) => {
                self.apply(Event::StopRequested { goal: StopGoal::Delete }).await;
                self.waiting.extend(reply);
            }
            Msg::Request(cmd, reply) => {
                // Re-queue behind the stop.
                let _ = self.tx.send(Msg::Request(cmd, reply));
            }
            Msg::MainExited { .. } | Msg::Checked { .. } | Msg::RuntimeLost { .. } => {}
        }
    }

    /// stopCmd for each process that has one (run in the cgroup, so a hanging one is killed
    /// with the rest), SIGTERM to the main process of the others.
    fn polite_stop(&mut self) {
        let rendered = self.rendered().ok();
        let mut signalled_any = false;
        for (i, main) in self.mains.iter().enumerate() {
            let process = rendered.as_ref().and_then(|r| r.processes.get(i));
            let stop_cmd = process.and_then(|p| p.stop_cmd.clone());
            // Each process's stopCmd runs as that process's user.
            let user = process.and_then(|p| ResolvedUser::lookup(&p.user).ok());
            match (stop_cmd, &rendered, &user) {
                (Some(cmd), Some(r), Some(u)) => match self.spawn_in_instance(r, i, &cmd, u, "stop") {
                    Ok((_pid, _exit)) => signalled_any = true,
                    Err(e) => tracing::warn!(instance = %self.rec.id, "stopCmd failed to start: {e}"),
                },
                _ => {
                    if let Some(m) = main {
                        let _ = m.pidfd.signal(Signal::SIGTERM);
                        signalled_any = true;
                    }
                }
            }
        }
        if !signalled_any {
            // No main process known yet (stop during start): ask every process.
            let _ = self.cgroup.signal_all(Signal::SIGTERM);
        }
    }

    /// No live process left in the cgroup. Zombies do not count: after a daemon restart they
    /// belong to another parent (PID 1 on most hosts), which may reap them late.
    fn cgroup_empty(&self) -> bool {
        self.cgroup.pids().map(|p| p.iter().all(|pid| !procinfo::is_alive(*pid))).unwrap_or(true)
    }

    /// SIGKILL to every process of the instance; true when none remains.
    async fn kill_all_processes(&mut self) -> bool {
        if self.is_pod() {
            return self.kill_pod().await;
        }
        let emptied = self.kill_cgroup().await;
        self.cgroup_clear.store(emptied, Ordering::Relaxed);
        emptied
    }

    async fn kill_cgroup(&self) -> bool {
        if self.cgroup_empty() {
            return true;
        }
        if let Err(e) = self.cgroup.kill_all() {
            tracing::warn!(instance = %self.rec.id, "kill: {e}");
        }
        let deadline = Instant::now() + KILL_WAIT;
        while Instant::now() < deadline {
            if self.cgroup_empty() {
                return true;
            }
            tokio::time::sleep(STOP_POLL).await;
        }
        self.cgroup_empty()
    }

    /// reloadCmd, else SIGHUP to the main processes. No state change; journaled as an event.
    async fn reload(&mut self) -> Result<(), String> {
        if self.rec.state.kind() != state::Kind::Running {
            return Err(format!("cannot reload: instance is {}", self.rec.state.kind()));
        }
        let rendered = self.rendered()?;
        for (i, p) in rendered.processes.iter().enumerate() {
            match &p.reload_cmd {
                Some(cmd) => {
                    let user = ResolvedUser::lookup(&p.user)?;
                    let (_, exit) = self
                        .spawn_in_instance(&rendered, i, cmd, &user, "reload")
                        .map_err(|e| format!("cannot run reloadCmd: {e}"))?;
                    match tokio::time::timeout(COMMAND_TIMEOUT, exit).await {
                        Ok(Ok(s)) if s.is_success() => {}
                        Ok(Ok(s)) => return Err(format!("reloadCmd {s}")),
                        _ => return Err("reloadCmd did not finish".into()),
                    }
                }
                None => {
                    if let Some(Some(m)) = self.mains.get(i) {
                        m.pidfd.signal(Signal::SIGHUP).map_err(|e| format!("SIGHUP: {e}"))?;
                    }
                }
            }
        }
        self.commit_event("reloaded", serde_json::json!({})).await;
        Ok(())
    }

    /// restartCmd of a forking (pidfile) instance: run it, then find the main process again.
    /// Returns false when there is no restartCmd to use (the caller stops and starts instead).
    async fn try_restart_cmd(&mut self) -> bool {
        if self.is_pod() || self.rec.state.kind() != state::Kind::Running {
            return false;
        }
        let Ok(rendered) = self.rendered() else { return false };
        let usable = rendered.processes.iter().all(|p| p.restart_cmd.is_some() && p.pid_file.is_some());
        if !usable {
            return false;
        }
        // Exits of the old main processes during the restart are expected.
        self.new_generation();
        for (i, p) in rendered.processes.iter().enumerate() {
            let Ok(user) = ResolvedUser::lookup(&p.user) else { return false };
            let cmd = p.restart_cmd.clone().unwrap_or_default();
            let Ok((_, exit)) = self.spawn_in_instance(&rendered, i, &cmd, &user, "restart") else { return false };
            let _ = tokio::time::timeout(COMMAND_TIMEOUT, exit).await;
            let deadline = crate::clock::deadline_after(Duration::from_secs(p.start_grace_period_secs.max(1)));
            let pid_file = p.pid_file.clone().unwrap_or_default();
            let mut found = None;
            while found.is_none() && Instant::now() < deadline {
                found = process::read_pidfile(&pid_file, user.uid)
                    .ok()
                    .and_then(|pid| self.check_main(pid, &p.proc_name).ok());
                if found.is_none() {
                    tokio::time::sleep(PIDFILE_POLL).await;
                }
            }
            match found {
                Some(main) => {
                    if let Some(slot) = self.mains.get_mut(i) {
                        *slot = Some(main);
                    }
                }
                None => {
                    self.on_main_exit(i, ExitStatus::Unknown).await;
                    return true;
                }
            }
        }
        for (i, main) in self.mains.iter().enumerate() {
            if let Some(m) = main {
                self.watch_main(i, m, None);
            }
        }
        self.rec.mains = self.mains.iter().map(|m| m.as_ref().map(|m| m.identity.clone())).collect();
        self.rec.restarts += 1;
        self.rec.last_start_ms = Some(now_ms());
        self.commit_event("restarted", serde_json::json!({"by": "restartCmd"})).await;
        true
    }

    /// Runs one event through the state machine and, if legal, makes the result durable.
    /// Returns whether the transition happened. A restart due at once (Backoff with no delay)
    /// is taken in the same commit: Backoff and Staging are both durable before staging acts.
    async fn apply(&mut self, event: Event) -> bool {
        self.apply_noting(event, Vec::new()).await
    }

    /// [`Self::apply`] with more events journaled in the same commit, after the transition's.
    async fn apply_noting(&mut self, event: Event, noted: Vec<serde_json::Value>) -> bool {
        let Some(first) = self.transition(&event) else {
            self.end_note = None;
            return false;
        };
        let mut events = vec![first];
        events.extend(noted);
        if matches!(self.rec.state, State::Backoff { until_ms } if until_ms <= self.rec.updated_ms) {
            events.extend(self.transition(&Event::RestartDue));
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
    /// (see `launch`). Returns whether the transition happened.
    fn hold_transition(&mut self, event: Event) -> bool {
        match self.transition(&event) {
            Some(body) => {
                self.journal.hold([body]);
                true
            }
            None => {
                self.end_note = None;
                false
            }
        }
    }

    /// Holds a place among the launches in progress (see `Shared::launches`) unless it has one.
    async fn take_launch_place(&mut self) {
        if self.launch_permit.is_some() {
            return;
        }
        self.launch_permit = match self.shared.launches.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                // Waiting our turn may take a while: what happened so far must show meanwhile.
                self.flush_unjournaled().await;
                self.shared.launches.clone().acquire_owned().await.ok()
            }
        };
    }

    /// Commits transitions held back for the next commit (see `journal`) now.
    async fn flush_unjournaled(&mut self) {
        if self.journal.has_held() {
            self.persist(Vec::new()).await;
        }
    }

    /// Whether staging downloads anything (then it is long, and Staging is committed first).
    fn needs_fetch(&self) -> bool {
        self.spec.spec.spec.template.spec.processes.iter().any(|p| !p.uris.is_empty())
    }

    /// The state machine's step applied to the record in memory; returns the event to journal.
    fn transition(&mut self, event: &Event) -> Option<serde_json::Value> {
        self.note_end(event);
        let reason = match (self.reason.take(), event) {
            (Some(why), _) => why,
            // An end says what ended: a pod's names its container.
            (None, Event::MainExited { .. }) => self.rec.last_exit_reason.clone().unwrap_or_else(|| event.reason()),
            (None, _) => event.reason(),
        };
        let now = now_ms();
        let ctx = state::Context { policy: &self.spec.spec.restart_policy, counter: &self.rec.counter, now_ms: now };
        let step = match state::step(&self.rec.state, event, &ctx) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(instance = %self.rec.id, "{e}; ignored");
                return None;
            }
        };
        let from = self.rec.state.kind();
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
        self.rec.state = step.next;
        self.rec.updated_ms = now;
        Some(self.transition_body(from, &reason))
    }

    /// The journal entry of the transition just made. A crash loop journals four of these per
    /// restart, so what says nothing is left out (issue 32: the journal is what fills the
    /// disk): `state` when it holds nothing beyond `to`, an empty `message`, no `pids`.
    fn transition_body(&self, from: state::Kind, reason: &str) -> serde_json::Value {
        let mut body = serde_json::json!({
            "instance": self.rec.key(),
            "type": "transition",
            "from": from,
            "to": self.rec.state.kind(),
            "reason": reason,
        });
        let state = serde_json::json!(self.rec.state);
        if state.as_object().is_some_and(|o| o.len() > 1) {
            body["state"] = state;
        }
        if !self.rec.message.is_empty() {
            body["message"] = serde_json::json!(self.rec.message);
        }
        if !self.rec.mains.is_empty() {
            body["pids"] =
                serde_json::json!(self.rec.mains.iter().map(|m| m.as_ref().map(|m| m.pid)).collect::<Vec<_>>());
        }
        if !self.rec.containers.is_empty() {
            body["containers"] = serde_json::json!(self.rec.containers);
        }
        body
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

    async fn commit_event(&mut self, kind: &str, detail: serde_json::Value) {
        self.rec.updated_ms = now_ms();
        let body = serde_json::json!({"instance": self.rec.key(), "type": kind, "detail": detail});
        self.persist(vec![body]).await;
    }

    /// Writes the record (and events) durably before anything acts on it (see `journal`).
    async fn persist(&mut self, events: Vec<serde_json::Value>) {
        self.journal.commit(&self.shared.store, &self.rec, events).await;
    }

    /// Removes the instance: its record, its cgroup, its run directory. Its work directory
    /// (the application's data) is kept.
    async fn delete(&mut self) {
        // What runs in the cgroup goes before the record: a record gone with a process left
        // would be a process nobody supervises (one recorded Stopped by a start cut short).
        if !self.is_pod() && !self.kill_cgroup().await {
            let reason = "processes in the instance's cgroup would not end after SIGKILL; not deleted".to_string();
            tracing::error!(instance = %self.rec.id, "{reason}");
            for r in self.waiting.drain(..) {
                let _ = r.send(Err(reason.clone()));
            }
            return;
        }
        crate::failpoint::hit("delete-record");
        let key = self.rec.key();
        let body = serde_json::json!({"instance": key, "type": "deleted"});
        let mut batch = Batch::new();
        for e in self.journal.take_held() {
            batch.push_event(e);
        }
        let mut batch = batch.delete(Table::Instances, &key).event(body);
        let released = self.shared.ports.lock().expect("ports lock").release(&key, &mut batch);
        if !released.is_empty() {
            tracing::info!(instance = %self.rec.id, "released ports {released:?}");
        }
        if let Err(e) = self.shared.store.commit(batch).await {
            tracing::error!(instance = %self.rec.id, "cannot delete record: {e}");
        }
        crate::failpoint::hit("delete-committed");
        self.cgroup_limits = None;
        if self.is_pod() {
            self.remove_pod().await;
            for t in self.log_tasks.drain(..) {
                t.abort();
            }
        } else if let Err(e) = self.cgroup.remove() {
            tracing::warn!(instance = %self.rec.id, "cgroup removal: {e}");
        }
        if let Ok(r) = self.rendered() {
            let _ = std::fs::remove_dir_all(&r.run_dir);
        }
        self.deleted = true;
        // Deleted is done, whatever state it was deleted from (a Failed one included).
        for r in self.waiting.drain(..) {
            let _ = r.send(Ok(()));
        }
    }
}

/// Who may write the run directory. It stays root's (the daemon's logs are there), but a
/// process whose pidfile lies directly in it (a forking daemon that drops to its own user
/// writes its pidfile itself) must be able to create that file: the directory then gets that
/// user's group and mode 1770, the sticky bit keeping the daemon's files from being removed or
/// renamed by it, and nobody else gets in. Otherwise it is root's own, 0755. A pidfile in a
/// subdirectory (the seed's `.../pid/app.pid`) needs none of this: the subdirectory is made the
/// user's.
fn run_dir_access(
    dir: &std::os::fd::OwnedFd,
    rendered: &RenderedInstance,
    users: &[ResolvedUser],
) -> Result<(), String> {
    use std::os::fd::{AsFd, AsRawFd};
    let shown = rendered.run_dir.display();
    let mut groups = std::collections::BTreeSet::new();
    for (p, user) in rendered.processes.iter().zip(users) {
        if user.uid != 0 && p.pid_file.as_ref().and_then(|f| f.parent()) == Some(rendered.run_dir.as_path()) {
            groups.insert(user.gid);
        }
    }
    let (gid, mode) = match groups.len() {
        0 => (0, 0o755),
        1 => (*groups.first().expect("one group"), 0o1770),
        _ => {
            return Err(format!(
                "{shown}: processes of users of different groups keep their pidfiles directly in it;                  give each its own subdirectory (…/pid/NAME.pid)"
            ))
        }
    };
    // Every start passes here (a respawn too): change nothing that is already so.
    let st = crate::fetch::sys::stat_fd(dir.as_fd()).map_err(|e| format!("{shown}: {e}"))?;
    if (st.st_uid, st.st_gid) != (0, gid) {
        nix::unistd::fchown(dir.as_fd().as_raw_fd(), Some(0.into()), Some(gid.into()))
            .map_err(|e| format!("{shown}: {e}"))?;
    }
    if st.st_mode & 0o7777 != mode {
        crate::fetch::sys::chmod_fd(dir.as_fd(), mode).map_err(|e| format!("{shown}: {e}"))?;
    }
    Ok(())
}

/// The instance's cgroup limits: the sum over its processes, unlimited if any is unlimited.
fn instance_limits(r: &RenderedInstance) -> crate::cgroups::Limits {
    let sum = |f: fn(&crate::spec::render::RenderedLimits) -> Option<f64>| {
        r.processes.iter().map(|p| f(&p.limits)).try_fold(0.0, |acc, v| v.map(|v| acc + v))
    };
    crate::cgroups::Limits { cpu_cores: sum(|l| l.cpu_cores), memory_mb: sum(|l| l.memory_mb) }
}

fn answer(reply: Option<Reply>, result: Result<(), String>) {
    if let Some(r) = reply {
        let _ = r.send(result);
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

/// The cgroup's name: `namespace.name.index`, like the instance's directories.
pub fn cgroup_key(rec: &InstanceRecord) -> String {
    format!("{}.{}.{}", rec.id.namespace, rec.id.name, rec.id.index)
}

/// The next request that must interrupt a start (stop, restart, delete, a new spec). A start
/// request is already being served and a reload has nothing to reload yet: both are answered
/// here. Exits are ignored: no main process is watched during a start.
async fn next_interrupt(rx: &mut Inbox) -> (Command, Option<Reply>) {
    loop {
        match rx.recv().await {
            Some(Msg::Request(Command::Start, reply)) => answer(reply, Ok(())),
            Some(Msg::Request(Command::Reload, reply)) => {
                answer(reply, Err("cannot reload: instance is starting".into()))
            }
            Some(Msg::Request(cmd, reply)) => return (cmd, reply),
            Some(Msg::MainExited { .. } | Msg::Checked { .. } | Msg::RuntimeLost { .. }) => continue,
            None => std::future::pending::<()>().await,
        }
    }
}
