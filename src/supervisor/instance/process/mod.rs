//! The process workload (seed 000): an instance's processes, spawned as their users into the
//! instance's own cgroup, their main processes watched by pidfd and the reaper. The cgroup is
//! what "every process of the instance" means: a stop, a kill and a delete end all of it.

use super::workload::{BoxFuture, Cancel, Cx, InPlace, Launched, Probe, Readopted, RunEnd, Workload};
use crate::cgroups::Cgroup;
use crate::runtime::process::{self, Pidfd, ResolvedUser};
use crate::runtime::procinfo::{self, ProcessIdentity};
use crate::runtime::reaper::ExitWatch;
use crate::spec::RenderedInstance;
use crate::supervisor::record::InstanceRecord;
use crate::supervisor::state::ExitStatus;
use crate::supervisor::Shared;
use nix::sys::signal::Signal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

mod copy;
mod launch;
mod probe;
mod setup;

pub(super) use setup::run_dir_access;

/// How often a stop looks at the cgroup while waiting for the instance's processes to go.
const STOP_POLL: Duration = Duration::from_millis(20);
/// After SIGKILL, how long processes may take to disappear before the stop is declared stuck.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// reloadCmd / restartCmd may run at most this long.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A main process being watched.
struct Main {
    identity: ProcessIdentity,
    /// Held for a process that is not this daemon's own child (a pidfile's, a re-adopted one):
    /// its end is seen by it. Our own child's end comes from the reaper, which holds the pidfd
    /// of its clone for it (registered for the exit: one descriptor is not registered twice),
    /// so a pidfd is opened here only to signal it.
    pidfd: Option<Arc<Pidfd>>,
    /// Spawned by this daemon as the start command itself: its exit watch comes from the spawn
    /// and cannot miss the exit.
    spawned: bool,
}

pub(crate) struct Processes {
    /// For logs.
    id: crate::spec::InstanceId,
    cgroup: Arc<dyn Cgroup>,
    /// The current run's main processes, by process index (None: not known).
    mains: Vec<Option<Main>>,
    /// The exit watches the launch got from its spawns, taken by `watch`.
    launched_watches: Vec<Option<ExitWatch>>,
    /// Each process's user, resolved at the last staging.
    users: Vec<ResolvedUser>,
    /// The processes' directories the last staging made or found (see `MadeDir`).
    made_dirs: Vec<setup::MadeDir>,
    /// Env vars from secrets and configmaps, per process, resolved at the last staging.
    injected_env: Vec<Vec<(String, String)>>,
    /// The limits the cgroup was last created with (None: not made by this actor yet).
    cgroup_limits: Option<crate::cgroups::Limits>,
    /// The cgroup's OOM-kill count when the current processes started, to tell an OOM kill
    /// from any other SIGKILL (None: read it at the next start).
    oom_kills_at_start: Option<u64>,
    /// The cgroup was seen empty and nothing was spawned into it since: a start need not look
    /// again. False when the actor begins, so its first start clears whatever an earlier daemon
    /// left there (a spawn whose commit a crash cut short, see `launch`).
    cgroup_clear: AtomicBool,
}

impl Workload for Processes {
    fn new(shared: &Shared, rec: &InstanceRecord) -> Processes {
        Processes {
            id: rec.id.clone(),
            cgroup: Arc::from(shared.cgroups.instance(&super::cgroup_key(rec))),
            mains: Vec::new(),
            launched_watches: Vec::new(),
            users: Vec::new(),
            made_dirs: Vec::new(),
            injected_env: Vec::new(),
            cgroup_limits: None,
            oom_kills_at_start: None,
            cgroup_clear: AtomicBool::new(false),
        }
    }

    fn prepare(
        &mut self,
        cx: &mut Cx<'_>,
        rendered: &RenderedInstance,
        run_dir: std::os::fd::OwnedFd,
    ) -> Result<(), String> {
        self.set_up(cx, rendered, &run_dir)
    }

    async fn clear(&mut self, _cx: &mut Cx<'_>) -> bool {
        // Exactly one process tree: never spawn beside processes of an earlier run.
        self.cgroup_clear.load(Ordering::Relaxed) || self.kill_all().await
    }

    async fn clear_unrecorded(&mut self, cx: &mut Cx<'_>) {
        if !cgroup_empty(&*self.cgroup) {
            tracing::warn!(instance = %cx.rec.id, "killing processes in the cgroup of an instance recorded {}", cx.rec.state.kind());
            self.kill_all().await;
        }
    }

    async fn launch(&mut self, cx: &mut Cx<'_>, rendered: &RenderedInstance, cancel: &Cancel) -> Launched {
        // Sized exactly: thousands of instances keep this for as long as they run.
        self.mains = Vec::with_capacity(rendered.processes.len());
        self.launched_watches = Vec::with_capacity(rendered.processes.len());
        // The run began with the first process's start command.
        let mut since_ms = None;
        for i in 0..rendered.processes.len() {
            let failed = match self.launch_one(cx, rendered, i, cancel).await {
                launch::Outcome::Ready(main, watch, spawned_ms) => {
                    since_ms.get_or_insert(spawned_ms);
                    self.mains.push(Some(main));
                    self.launched_watches.push(watch);
                    continue;
                }
                launch::Outcome::Cancelled => return Launched::Cancelled,
                launch::Outcome::Failed(reason) => {
                    // Re-create the cgroup next time, in case it is what failed.
                    self.cgroup_limits = None;
                    Launched::Failed(reason)
                }
                launch::Outcome::Exited(status) => Launched::Exited(status),
            };
            self.kill_all().await;
            return failed;
        }
        cx.rec.mains = self.mains.iter().map(|m| m.as_ref().map(|m| m.identity.clone())).collect();
        Launched::Running { since_ms: since_ms.unwrap_or_else(crate::supervisor::record::now_ms) }
    }

    fn watch(&mut self, cx: &mut Cx<'_>) {
        let mut watches = std::mem::take(&mut self.launched_watches).into_iter();
        for (i, main) in self.mains.iter().enumerate() {
            let watch = watches.next().flatten();
            if let Some(main) = main {
                launch::watch_main(cx, i, main, watch);
            }
        }
    }

    /// A job run (one foreground process, its startCmd wrapped: spec/render `job_wrapper`) whose
    /// exit record exists began its command: the daemon removed the record before the start's
    /// Starting was durable, and the wrapper writes it first thing. Its cgroup, emptied before
    /// the spawn, holds that attempt alone: the oldest live process there is the wrapper (all
    /// else of the run descends from it), taken up as the main process; none left means the
    /// run ended while the daemon was away (the job reads its code from the record).
    async fn take_up_start(&mut self, cx: &mut Cx<'_>) -> Option<Readopted> {
        let rendered = cx.rendered?.clone();
        let [p] = rendered.processes.as_slice() else { return None };
        if !cx.spec.spec.runs_to_completion() || p.pid_file.is_some() {
            return None;
        }
        let record = crate::spec::render::job_exit_file(&p.work_path, &p.proc_name);
        if std::fs::symlink_metadata(&record).is_err() {
            return None;
        }
        let oldest = self.cgroup.pids().unwrap_or_default().into_iter().filter_map(ProcessIdentity::of);
        let main = oldest.min_by_key(|id| id.start_time).and_then(|id| self.adopt(cx, &id));
        self.launched_watches.clear();
        let Some(main) = main else {
            tracing::info!(instance = %cx.rec.id, "its run began and ended while the daemon was away");
            self.mains.clear();
            return Some(Readopted::Ended { index: 0, status: ExitStatus::Unknown });
        };
        tracing::info!(instance = %cx.rec.id, pid = main.identity.pid, "took up the run that began while the daemon was away");
        cx.rec.mains = vec![Some(main.identity.clone())];
        self.mains = vec![Some(main)];
        Some(Readopted::Running)
    }

    fn recorded_end(&self, cx: &Cx<'_>, index: usize) -> Option<ExitStatus> {
        let p = cx.rendered?.processes.get(index)?;
        if !cx.spec.spec.runs_to_completion() || p.pid_file.is_some() {
            return None;
        }
        crate::supervisor::job::recorded_job_exit(p).map(ExitStatus::Code)
    }

    /// Re-adopts the recorded main processes: same pid, same start time, same boot, still in
    /// our cgroup. Anything else means the process ended while we were away. Nothing here
    /// depends on the spec rendering again: a live process is never killed for a spec's sake.
    async fn readopt(&mut self, cx: &mut Cx<'_>) -> Readopted {
        self.mains.clear();
        self.launched_watches.clear();
        for (i, identity) in cx.rec.mains.clone().iter().enumerate() {
            match identity.as_ref().and_then(|id| self.adopt(cx, id)) {
                Some(main) => self.mains.push(Some(main)),
                None => {
                    tracing::info!(instance = %cx.rec.id, "main process {i} ended while the daemon was away");
                    return Readopted::Ended { index: i, status: ExitStatus::Unknown };
                }
            }
        }
        tracing::info!(instance = %cx.rec.id, "re-adopted {} process(es)", self.mains.len());
        Readopted::Running
    }

    async fn recover(&mut self, _cx: &mut Cx<'_>) -> Option<Readopted> {
        // The kernel does not go away: a process instance is never Lost.
        Some(Readopted::Running)
    }

    async fn on_end(&mut self, cx: &mut Cx<'_>, _index: usize, _status: ExitStatus) -> Option<RunEnd> {
        self.mains.clear();
        let oom = self.oom_killed(cx);
        // As systemd does when a service's main process ends: the rest of its processes go too.
        self.kill_all().await;
        Some(RunEnd { oom, which: None })
    }

    fn stop(&mut self, cx: &mut Cx<'_>, polite: bool, grace: Duration) -> BoxFuture<Result<(), String>> {
        let deadline = crate::clock::deadline_after(grace);
        if polite {
            self.polite_stop(cx);
        } else if let Err(e) = self.cgroup.signal_all(Signal::SIGTERM) {
            tracing::warn!(instance = %cx.rec.id, "SIGTERM: {e}");
        }
        let cgroup = self.cgroup.clone();
        Box::pin(async move {
            while Instant::now() < deadline && !cgroup_empty(&*cgroup) {
                tokio::time::sleep(STOP_POLL).await;
            }
            Ok(())
        })
    }

    async fn finish_stop(&mut self, _cx: &mut Cx<'_>, _waited: Result<(), String>) -> Result<(), String> {
        self.mains.clear();
        if self.kill_all().await {
            Ok(())
        } else {
            let pids = self.cgroup.pids().unwrap_or_default();
            Err(format!("processes {pids:?} survived SIGKILL"))
        }
    }

    async fn kill(&mut self, _cx: &mut Cx<'_>) -> bool {
        self.kill_all().await
    }

    /// reloadCmd, else SIGHUP to the main processes.
    async fn reload(&mut self, cx: &mut Cx<'_>) -> Result<(), String> {
        let rendered = cx.rendered.cloned().ok_or("cannot reload: the spec does not render")?;
        for (i, p) in rendered.processes.iter().enumerate() {
            match &p.reload_cmd {
                Some(cmd) => {
                    let user = ResolvedUser::lookup(&p.user)?;
                    let (_, exit) = self
                        .spawn_in_instance(cx, &rendered, i, cmd, &user, "reload")
                        .map_err(|e| format!("cannot run reloadCmd: {e}"))?;
                    match tokio::time::timeout(COMMAND_TIMEOUT, exit).await {
                        Ok(Ok(s)) if s.is_success() => {}
                        Ok(Ok(s)) => return Err(format!("reloadCmd {s}")),
                        _ => return Err("reloadCmd did not finish".into()),
                    }
                }
                None => {
                    if let Some(Some(m)) = self.mains.get(i) {
                        m.signal(Signal::SIGHUP).map_err(|e| format!("SIGHUP: {e}"))?;
                    }
                }
            }
        }
        Ok(())
    }

    async fn copy_in(
        &mut self,
        cx: &mut Cx<'_>,
        file: &crate::supervisor::instance::FileCopy,
    ) -> Result<crate::protocol::FileCopied, String> {
        let rendered = cx.rendered.ok_or("the spec does not render")?;
        copy::copy_in(rendered, file)
    }

    fn restarts_in_place(&self, cx: &Cx<'_>) -> bool {
        cx.rendered.is_some_and(|r| r.processes.iter().all(|p| p.restart_cmd.is_some() && p.pid_file.is_some()))
    }

    /// restartCmd of a forking (pidfile) instance: run it, then find the main process again.
    async fn restart_in_place(&mut self, cx: &mut Cx<'_>) -> InPlace {
        let Some(rendered) = cx.rendered.cloned() else { return InPlace::NotRun };
        for (i, p) in rendered.processes.iter().enumerate() {
            let Ok(user) = ResolvedUser::lookup(&p.user) else { return InPlace::NotRun };
            let cmd = p.restart_cmd.clone().unwrap_or_default();
            let Ok((_, exit)) = self.spawn_in_instance(cx, &rendered, i, &cmd, &user, "restart") else {
                return InPlace::NotRun;
            };
            let _ = tokio::time::timeout(COMMAND_TIMEOUT, exit).await;
            let deadline = crate::clock::deadline_after(Duration::from_secs(p.start_grace_period_secs.max(1)));
            let pid_file = p.pid_file.clone().unwrap_or_default();
            let mut found = None;
            while found.is_none() && Instant::now() < deadline {
                found = process::read_pidfile(&pid_file, user.uid)
                    .ok()
                    .and_then(|pid| self.check_main(pid, &p.proc_name).ok());
                if found.is_none() {
                    tokio::time::sleep(launch::PIDFILE_POLL).await;
                }
            }
            match (found, self.mains.get_mut(i)) {
                (Some(main), Some(slot)) => *slot = Some(main),
                _ => return InPlace::Lost(i),
            }
        }
        cx.rec.mains = self.mains.iter().map(|m| m.as_ref().map(|m| m.identity.clone())).collect();
        InPlace::Restarted
    }

    fn probes(&self, cx: &Cx<'_>) -> Vec<Probe> {
        self.local_probes(cx)
    }

    fn post_start(&self, cx: &Cx<'_>) -> Option<BoxFuture<Result<(), String>>> {
        self.post_start_hooks(cx)
    }

    fn pre_stop(&self, cx: &Cx<'_>, deadline: tokio::time::Instant) -> Option<BoxFuture<()>> {
        self.pre_stop_hooks(cx, deadline)
    }

    async fn before_delete(&mut self, _cx: &mut Cx<'_>) -> Result<(), String> {
        if kill_cgroup(&*self.cgroup, &self.id).await {
            Ok(())
        } else {
            Err("processes in the instance's cgroup would not end after SIGKILL; not deleted".into())
        }
    }

    async fn remove(&mut self, cx: &mut Cx<'_>) {
        self.cgroup_limits = None;
        if let Err(e) = self.cgroup.remove() {
            tracing::warn!(instance = %cx.rec.id, "cgroup removal: {e}");
        }
    }
}

impl Main {
    /// Signals exactly this process (never a later one with its pid); gone already is no error.
    fn signal(&self, sig: Signal) -> std::io::Result<()> {
        match &self.pidfd {
            Some(pidfd) => pidfd.signal(sig),
            None => match Pidfd::open(self.identity.pid) {
                // Once open the pidfd pins the process: the same start time proves it is ours.
                Ok(pidfd) if self.identity.is_current() => pidfd.signal(sig),
                Ok(_) => Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                Err(e) => Err(e),
            },
        }
    }
}

impl Processes {
    /// The process recorded at start, if it still runs: the same pid, start time and boot, in
    /// the instance's cgroup. Its name is not asked again: a foreground start command may exec
    /// another program (`exec sleep`), and a pidfile's process had its name checked at start;
    /// pid + start time + boot id already name exactly one process.
    fn adopt(&self, cx: &Cx<'_>, identity: &ProcessIdentity) -> Option<Main> {
        // Open the pidfd first, then check identity: once open, the pidfd pins the process, so a
        // matching start time afterwards proves it is the same one.
        let pidfd = Pidfd::open(identity.pid).ok()?;
        if !identity.is_current() {
            // The same process, ended and not reaped yet by its new parent, is no reuse: its
            // end is logged by the caller.
            let ended = procinfo::Stat::read(identity.pid).is_some_and(|s| s.start_time == identity.start_time);
            if !ended {
                tracing::warn!(instance = %cx.rec.id, pid = identity.pid, "pid was reused by another process; not adopted");
            }
            return None;
        }
        if !self.cgroup.contains(identity.pid) {
            tracing::warn!(instance = %cx.rec.id, pid = identity.pid, "not in the instance's cgroup; not adopted");
            return None;
        }
        Some(Main { identity: identity.clone(), pidfd: Some(Arc::new(pidfd)), spawned: false })
    }

    /// Whether the kernel's OOM killer struck this instance since its processes started.
    /// The count read is the baseline of the next start.
    fn oom_killed(&mut self, cx: &Cx<'_>) -> Option<String> {
        let now = self.cgroup.oom_kills()?;
        let before = self.oom_kills_at_start.replace(now).unwrap_or(0);
        if now <= before {
            return None;
        }
        let limit = cx.rendered.and_then(|r| setup::instance_limits(r, None).memory_mb);
        Some(match limit {
            Some(mb) => format!("OOM-killed: over its memory limit of {mb} MiB"),
            None => "OOM-killed by the kernel".to_string(),
        })
    }

    /// stopCmd for each process that has one (run in the cgroup, so a hanging one is killed
    /// with the rest), SIGTERM to the main process of the others.
    fn polite_stop(&mut self, cx: &Cx<'_>) {
        let rendered = cx.rendered.cloned();
        let mut signalled_any = false;
        for (i, main) in self.mains.iter().enumerate() {
            let process = rendered.as_ref().and_then(|r| r.processes.get(i));
            let stop_cmd = process.and_then(|p| p.stop_cmd.clone());
            // Each process's stopCmd runs as that process's user.
            let user = process.and_then(|p| ResolvedUser::lookup(&p.user).ok());
            match (stop_cmd, &rendered, &user) {
                (Some(cmd), Some(r), Some(u)) => match self.spawn_in_instance(cx, r, i, &cmd, u, "stop") {
                    Ok((_pid, _exit)) => signalled_any = true,
                    Err(e) => tracing::warn!(instance = %cx.rec.id, "stopCmd failed to start: {e}"),
                },
                _ => {
                    if let Some(m) = main {
                        let _ = m.signal(Signal::SIGTERM);
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

    /// SIGKILL to every process of the instance; true when none remains.
    async fn kill_all(&mut self) -> bool {
        let emptied = kill_cgroup(&*self.cgroup, &self.id).await;
        self.cgroup_clear.store(emptied, Ordering::Relaxed);
        emptied
    }
}

/// No live process left in the cgroup. Zombies do not count: after a daemon restart they
/// belong to another parent (PID 1 on most hosts), which may reap them late.
fn cgroup_empty(cgroup: &dyn Cgroup) -> bool {
    if cgroup.known_empty() {
        return true;
    }
    cgroup.pids().map(|p| p.iter().all(|pid| !procinfo::is_alive(*pid))).unwrap_or(true)
}

/// SIGKILL to every process in `cgroup`, then a wait for them to go; true when none remains.
async fn kill_cgroup(cgroup: &dyn Cgroup, instance: &crate::spec::InstanceId) -> bool {
    if cgroup_empty(cgroup) {
        return true;
    }
    if let Err(e) = cgroup.kill_all() {
        tracing::warn!(%instance, "kill: {e}");
    }
    let deadline = Instant::now() + KILL_WAIT;
    while Instant::now() < deadline {
        if cgroup_empty(cgroup) {
            return true;
        }
        tokio::time::sleep(STOP_POLL).await;
    }
    cgroup_empty(cgroup)
}
