//! What an instance's actor is told: requests from the supervisor, and reports from the tasks
//! that watch its processes or containers and probe their health.

use crate::spec::ProcessSpec;
use crate::supervisor::state::ExitStatus;
use std::sync::Arc;
use tokio::sync::oneshot;

/// An app as applied: its one durable record (the store's `specs` table holds exactly this),
/// and what every task reads it from. The spec, the generation that tells instances whether they
/// run the latest, the revision, the rollout to it, and a job's or cron job's status.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SpecEntry {
    pub spec: ProcessSpec,
    pub generation: u64,
    /// The app's revision this spec is (see supervisor/revisions.rs). 0: stored by a version
    /// that kept none (made 1 at the daemon's start).
    #[serde(default)]
    pub revision: u64,
    /// The app's rollout to this revision, if one was asked for (see supervisor/rollout.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::protocol::Rollout>,
    /// The instance ids this host runs, when a scheduler spreads the app over hosts; `None`
    /// means all of `spec.instance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Vec<u32>>,
    /// A job's status (see supervisor/job.rs); None for an app that is kept running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<crate::protocol::JobStatus>,
    /// A cron job's status (see supervisor/cron.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<crate::protocol::CronStatus>,
    /// The host stopped the app's instances itself: no scheduler for its
    /// `disconnect.stopAfterSecs` (see supervisor/desired.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced: Option<Fenced>,
    /// Instances a scale-in removes at the `strategy.scaleIn` hook's word (supervisor/scale_in.rs):
    /// durable with the apply that no longer counts them, so a kill -9 never removes one
    /// without its verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scale_in: Vec<crate::protocol::ScaleIn>,
    /// The app is being deleted at its scale-in hook's word: its spec goes once the last
    /// instance has (an apply of it takes it back).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleting: bool,
}

/// A fence: since when, and the instances it stopped (started again when it is lifted).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fenced {
    pub since_ms: u64,
    pub instances: Vec<u32>,
}

impl SpecEntry {
    /// The id the next run of a job or cron job takes: run ids are never reused.
    pub fn next_run_index(&self) -> u32 {
        let job = self.job.as_ref().map_or(0, |j| j.next_index);
        job.max(self.cron.as_ref().map_or(0, |c| c.next_index))
    }
}

#[derive(Debug)]
pub enum Command {
    Start,
    Stop,
    /// Stop, as the host's own fence (see supervisor/desired.rs), not an operator's stop.
    Fence,
    Restart,
    /// Fail what runs (a REMOTE check the scheduler runs failed): its restart policy decides
    /// what follows, as for a failed local check.
    Fail(String),
    Reload,
    /// A hollow instance's run ends as if its main process exited so (see `Workload::crash`).
    Crash(crate::supervisor::state::ExitStatus),
    /// Stop and remove it; its kept volumes go as their policy says for the cause.
    Delete(crate::spec::pod::DeleteCause),
    /// A file into what runs (`steward cp`); answered on its own channel with where it went.
    CopyIn(Box<FileCopy>, oneshot::Sender<Result<crate::protocol::FileCopied, String>>),
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
            Command::Fence => "fence",
            Command::Restart => "restart",
            Command::Fail(_) => "fail",
            Command::Reload => "reload",
            Command::Crash(_) => "crash",
            Command::Delete(_) => "delete",
            Command::CopyIn(..) => "copy",
            Command::Replace(..) => "replace",
        }
    }
}

pub type Reply = oneshot::Sender<Result<(), String>>;

/// Largest file `steward cp` takes (the API refuses more with 413).
pub const MAX_COPY_BYTES: usize = 64 << 20;

/// A file for a running instance (seed 001's local file message).
pub struct FileCopy {
    /// A process's: absolute, or relative to the process's workPath, inside the instance's
    /// workPaths. A pod's: absolute in the container.
    pub path: String,
    pub data: Vec<u8>,
    /// `rw`: the owner may write it (0600); else read only (0400).
    pub writable: bool,
    /// Its owner: a user name, uid or uid:gid; None: the process's user (a container's root).
    pub user: Option<String>,
    /// The process (procName) or container (its name in the spec); None: the first.
    pub target: Option<String>,
}

impl FileCopy {
    pub fn mode(&self) -> u32 {
        if self.writable {
            0o600
        } else {
            0o400
        }
    }
}

impl std::fmt::Debug for FileCopy {
    // Not the data: it may be a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCopy")
            .field("path", &self.path)
            .field("bytes", &self.data.len())
            .field("writable", &self.writable)
            .field("user", &self.user)
            .field("target", &self.target)
            .finish()
    }
}

/// The sending side of an actor's queue. A linked-list queue (futures-channel) rather than
/// tokio's: an idle one costs about 100 bytes where tokio's, with its cache-padded counters
/// and a first block of 32 slots, costs about 1 KiB, and every instance has one.
#[derive(Clone)]
pub struct Mailbox(pub(super) futures_channel::mpsc::UnboundedSender<Msg>);

impl Mailbox {
    pub fn send(&self, msg: Msg) -> Result<(), Msg> {
        self.0.unbounded_send(msg).map_err(|e| e.into_inner())
    }
}

/// The receiving side of an actor's queue.
pub struct Inbox(pub(super) futures_channel::mpsc::UnboundedReceiver<Msg>);

impl Inbox {
    /// The next message; `None` once every sender is gone. Cancel-safe (a message is taken
    /// only when this returns it).
    pub(super) async fn recv(&mut self) -> Option<Msg> {
        futures_util::StreamExt::next(&mut self.0).await
    }
}

/// A new queue.
pub(super) fn mailbox() -> (Mailbox, Inbox) {
    let (tx, rx) = futures_channel::mpsc::unbounded();
    (Mailbox(tx), Inbox(rx))
}

/// What a probe's task tells its actor.
pub enum ProbeReport {
    /// A seed-000 health check's every result (its grace period and status are the actor's).
    Outcome(crate::health::Outcome),
    /// A liveness or readiness probe's verdict, only when it changed: the thresholds are
    /// counted in the probe's own task, so a probe that keeps passing costs its actor nothing.
    Verdict { passing: bool, failures: u32, last_failure: Option<String> },
}

pub enum Msg {
    Request(Command, Option<Reply>),
    /// Told once every request sent before it is durable (its transition committed; for one
    /// served only after a stop, once it is served): what the API waits for before it answers
    /// a request it does not wait to see done.
    Recorded(oneshot::Sender<()>),
    /// Main process (a pod: container) `index` of the run `generation` ended.
    MainExited {
        generation: u64,
        index: usize,
        status: ExitStatus,
    },
    /// Probe `index` of the run `generation` (see `Workload::probes`) reports.
    Checked {
        generation: u64,
        index: usize,
        report: ProbeReport,
    },
    /// A pod's runtime (dockerd) stopped answering while its containers were watched.
    RuntimeLost {
        generation: u64,
        reason: String,
    },
    /// The run `generation`'s postStart hook failed (seed 003: the instance restarts by policy).
    HookFailed {
        generation: u64,
        reason: String,
    },
}

pub(super) fn answer(reply: Option<Reply>, result: Result<(), String>) {
    if let Some(r) = reply {
        let _ = r.send(result);
    }
}

/// The next request that must interrupt a start (stop, restart, delete, a new spec). A start
/// request is already being served and a reload has nothing to reload yet: both are answered
/// here, and a wait for them to be durable waits for the start's commit (`marks`). Exits are
/// ignored: no main process is watched during a start.
pub(super) async fn next_interrupt(rx: &mut Inbox, marks: &super::journal::DurableMarks) -> (Command, Option<Reply>) {
    loop {
        match rx.recv().await {
            Some(Msg::Recorded(tx)) => marks.when_durable(tx),
            Some(Msg::Request(Command::Start, reply)) => answer(reply, Ok(())),
            Some(Msg::Request(Command::Reload, reply)) => {
                answer(reply, Err("cannot reload: instance is starting".into()))
            }
            Some(Msg::Request(cmd, reply)) => return (cmd, reply),
            Some(Msg::MainExited { .. } | Msg::Checked { .. } | Msg::RuntimeLost { .. } | Msg::HookFailed { .. }) => {
                continue
            }
            None => std::future::pending::<()>().await,
        }
    }
}
