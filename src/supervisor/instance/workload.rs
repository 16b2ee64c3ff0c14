//! What runs an instance: the one interface the actor drives, whatever the instance is. A
//! process instance runs processes in its own cgroup ([`super::process`]); a pod runs Docker
//! containers ([`super::pod`]); a job's runs and later kinds plug in the same way. The actor
//! owns the state machine, the journal and the requests; a workload owns what it launched and
//! never takes a state transition itself: it reports, and the actor decides.

use super::journal::Journal;
use super::messages::{Mailbox, SpecEntry};
use crate::health::Outcome;
use crate::spec::render::RenderedCheck;
use crate::spec::RenderedInstance;
use crate::supervisor::record::InstanceRecord;
use crate::supervisor::state::ExitStatus;
use crate::supervisor::Shared;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a workload may use of its actor while it works: the daemon's services, the record
/// (where it keeps what it launched: pids, containers), the journal (to note an event that is
/// no transition), and what its watchers and probes report through.
pub(crate) struct Cx<'a> {
    pub shared: &'a Arc<Shared>,
    pub rec: &'a mut InstanceRecord,
    pub journal: &'a mut Journal,
    pub spec: &'a Arc<SpecEntry>,
    /// The current run as rendered at its start (None: the spec no longer renders).
    pub rendered: Option<&'a Arc<RenderedInstance>>,
    pub tx: &'a Mailbox,
    /// A place among the launches in progress (see `Shared::launches`): a launch gives it up
    /// once it has spawned.
    pub launch_place: &'a mut Option<tokio::sync::OwnedSemaphorePermit>,
    /// The run whose watchers report now (see `Actor::new_generation`).
    pub generation: u64,
}

impl Cx<'_> {
    /// Journals an event that changes no state (a container that ended while others run on).
    pub async fn note(&mut self, change: crate::protocol::InstanceChange) {
        self.rec.updated_ms = crate::supervisor::record::now_ms();
        let body = crate::protocol::EventBody::instance(self.rec.key(), change);
        self.journal.commit(&self.shared.store, self.rec, vec![body]).await;
    }
}

/// How a launch ended.
pub(crate) enum Launched {
    /// Everything runs; the record names it (`mains`, `containers`). Not yet watched: see
    /// [`Workload::watch`]. `since_ms`: when the run began (a process's spawn), which the
    /// restart policy's run lengths are timed from.
    Running {
        since_ms: u64,
    },
    Failed(String),
    /// A main process ended within its start grace period.
    Exited(ExitStatus),
    /// The launch was cancelled (a request came); what it made is either removed or left for
    /// the stop that follows to end.
    Cancelled,
}

/// What re-adoption found after a daemon restart, or once the runtime answered again.
pub(crate) enum Readopted {
    /// Everything recorded still runs; not yet watched.
    Running,
    /// Main `index` ended while nobody watched.
    Ended { index: usize, status: ExitStatus },
    /// The runtime does not answer.
    Lost(String),
}

/// A main process (container) ended: what the end of the run adds to its status.
pub(crate) struct RunEnd {
    /// The kernel's OOM killer ended it.
    pub oom: Option<String>,
    /// Which of several ended, when it matters (a pod's container).
    pub which: Option<String>,
}

/// How an in-place restart went.
pub(crate) enum InPlace {
    Restarted,
    /// The restart command could not run: the caller stops and starts instead.
    NotRun,
    /// Main `index` did not come back.
    Lost(usize),
}

/// A flag a launch looks at: set when a request must interrupt it.
#[derive(Default)]
pub(crate) struct Cancel {
    set: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Cancel {
    pub fn set(&self) {
        self.set.store(true, Ordering::Relaxed);
        self.notify.notify_waiters();
    }

    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Relaxed)
    }

    /// Returns once set.
    pub async fn wait(&self) {
        let notified = self.notify.notified();
        if self.is_set() {
            return;
        }
        notified.await;
    }
}

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs a probe or hook once.
pub(crate) type Runner = Box<dyn Fn() -> BoxFuture<Outcome> + Send + Sync>;

/// What a probe's results decide.
pub(crate) enum ProbeRole {
    /// A seed-000 local health check: its grace period and consecutive failures kill.
    Check(RenderedCheck),
    /// Seed 003 liveness: `failure` failures in a row kill.
    Liveness { success: u32, failure: u32 },
    /// Seed 003 readiness: the instance's Ready condition, nothing else.
    Readiness { success: u32, failure: u32 },
}

/// One probe of process (container) `index`, and how to run it once.
pub(crate) struct Probe {
    pub index: usize,
    pub role: ProbeRole,
    pub delay: Duration,
    pub period: Duration,
    pub run: Runner,
}

/// The work that differs by kind of instance. Every step reports; the actor journals and
/// decides. Methods return `Send` futures so that one generic actor runs on tokio's pool.
pub(crate) trait Workload: Send + Sync + Sized + 'static {
    /// Whether staging fetches the spec's packages (`uris`) for it.
    const FETCHES_PACKAGES: bool = true;

    fn new(shared: &Shared, rec: &InstanceRecord) -> Self;

    /// Staging's kind-specific part, after the run directory (`run_dir`, opened and checked)
    /// exists: users, working directories, secrets and configmaps, the cgroup. Its descriptor
    /// is not kept: a descriptor held per start in flight would push the spawns' own above the
    /// smallest table a child can copy (tests/daemon_process.rs).
    fn prepare(
        &mut self,
        cx: &mut Cx<'_>,
        rendered: &RenderedInstance,
        run_dir: std::os::fd::OwnedFd,
    ) -> Result<(), String>;

    /// Ends whatever an earlier run left, so that exactly one runs; false when it would not go.
    fn clear(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = bool> + Send;

    /// A record without processes whose runtime may still hold some (a start the daemon did not
    /// live to record): nothing may run unsupervised.
    fn clear_unrecorded(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = ()> + Send;

    /// Launches the run: Running once every main process (container) runs. Held transitions
    /// are committed before anything launched can be seen. Ends soon once `cancel` is set.
    fn launch(
        &mut self,
        cx: &mut Cx<'_>,
        rendered: &RenderedInstance,
        cancel: &Cancel,
    ) -> impl Future<Output = Launched> + Send;

    /// Watches what the last launch or re-adoption found: every end is reported to the actor
    /// as `Msg::MainExited` of `cx.generation`.
    fn watch(&mut self, cx: &mut Cx<'_>);

    /// After a daemon restart, for a record that says Starting (its main processes not yet
    /// recorded): what of that start can be taken up as it is — a job run whose command began
    /// is never started again. None: nothing of it began, or nothing tells (it is cleared and
    /// started anew).
    fn take_up_start(&mut self, _cx: &mut Cx<'_>) -> impl Future<Output = Option<Readopted>> + Send {
        std::future::ready(None)
    }

    /// How main `index` ended, as the run itself recorded it, for an end whose status the
    /// kernel told another parent (the daemon was away): a job run's wrapper's code.
    fn recorded_end(&self, _cx: &Cx<'_>, _index: usize) -> Option<ExitStatus> {
        None
    }

    /// After a daemon restart: takes up what the record names, if it still runs.
    fn readopt(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = Readopted> + Send;

    /// A Lost instance: whether its runtime answers again, and what still runs (None: not yet).
    fn recover(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = Option<Readopted>> + Send;

    /// Main `index` ended with `status`. None: the run goes on (a pod's container that exited
    /// cleanly while others run). Else the run is over, and everything of it has been killed.
    fn on_end(
        &mut self,
        cx: &mut Cx<'_>,
        index: usize,
        status: ExitStatus,
    ) -> impl Future<Output = Option<RunEnd>> + Send;

    /// Asks the run to stop (stopCmd or SIGTERM, `polite`: stopCmd where there is one) and
    /// returns a wait that ends when all of it has gone or `grace` is over. The wait borrows
    /// nothing: the actor serves requests meanwhile.
    fn stop(&mut self, cx: &mut Cx<'_>, polite: bool, grace: Duration) -> BoxFuture<Result<(), String>>;

    /// After the stop's wait: kills what remains. Err: something survived.
    fn finish_stop(
        &mut self,
        cx: &mut Cx<'_>,
        waited: Result<(), String>,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// SIGKILL to everything of the instance; true when nothing remains.
    fn kill(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = bool> + Send;

    /// reloadCmd or SIGHUP.
    fn reload(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = Result<(), String>> + Send;

    /// Writes a file into what runs (`steward cp`): a process's workPath, or a container.
    fn copy_in(
        &mut self,
        cx: &mut Cx<'_>,
        file: &super::messages::FileCopy,
    ) -> impl Future<Output = Result<crate::protocol::FileCopied, String>> + Send;

    /// Whether a restart can be done in place (a forking daemon's restartCmd) rather than by a
    /// stop and a start.
    fn restarts_in_place(&self, cx: &Cx<'_>) -> bool;

    /// The in-place restart.
    fn restart_in_place(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = InPlace> + Send;

    /// Every probe of the run: each process's (container's) local health check, liveness and
    /// readiness probes, ready to run.
    fn probes(&self, cx: &Cx<'_>) -> Vec<Probe>;

    /// The run's postStart hooks, once, as a wait that borrows nothing: Err names the process
    /// and why (seed 003: a failure restarts by policy). None: it has none.
    fn post_start(&self, _cx: &Cx<'_>) -> Option<BoxFuture<Result<(), String>>> {
        None
    }

    /// The run's preStop hooks, before the stop signal, ending by `deadline` whatever they do
    /// (seed 003: the stop goes on whether they succeed or not). None: it has none.
    fn pre_stop(&self, _cx: &Cx<'_>, _deadline: tokio::time::Instant) -> Option<BoxFuture<()>> {
        None
    }

    /// Before the record goes: everything of the instance must have ended.
    fn before_delete(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = Result<(), String>> + Send;

    /// After the record went: the runtime's leftovers (cgroup, stopped containers).
    fn remove(&mut self, cx: &mut Cx<'_>) -> impl Future<Output = ()> + Send;

    /// Ends the run as if main 0 exited with `status` (`POST …/crash`): only a hollow
    /// instance, which has no process to kill, can be told to.
    fn crash(&mut self, _cx: &mut Cx<'_>, _status: ExitStatus) -> Result<(), String> {
        Err(super::CRASH_NEEDS_HOLLOW.into())
    }
}
