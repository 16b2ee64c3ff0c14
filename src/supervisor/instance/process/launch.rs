//! Launching a process instance's processes and watching their main processes: the spawn into
//! the cgroup (committed while it runs), the start grace period or the pidfile, and the exit
//! watch by pidfd and reaper.

use super::{Main, Processes};
use crate::runtime::process::{self, Launch, Pidfd, ResolvedUser};
use crate::runtime::procinfo::{self, ProcessIdentity};
use crate::runtime::reaper::ExitWatch;
use crate::spec::render::probe::RenderedInitStep;
use crate::spec::RenderedInstance;
use crate::supervisor::instance::messages::{Mailbox, Msg};
use crate::supervisor::instance::workload::{Cancel, Cx};
use crate::supervisor::record::now_ms;
use crate::supervisor::state::ExitStatus;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often a start looks for the pidfile when its directory cannot be watched.
pub(super) const PIDFILE_POLL: Duration = Duration::from_millis(20);

/// How often it looks all the same when the directory is watched (a change inotify does not
/// report: another mount namespace's write, a network filesystem).
const PIDFILE_RECHECK: Duration = Duration::from_millis(250);

pub(super) enum Outcome {
    /// The main process, its exit's watch, and when its start command was spawned (unix ms).
    Ready(Main, Option<ExitWatch>, u64),
    Failed(String),
    Exited(ExitStatus),
    Cancelled,
}

/// A command spawned in the instance: its pid, its exit's watch, and when the spawn returned
/// (monotonic, for the waits timed from it; unix ms, for the record).
struct Spawned {
    pid: i32,
    exit: ExitWatch,
    at: Instant,
    at_ms: u64,
}

impl Processes {
    /// Launches process `i` and finds its main process.
    pub(super) async fn launch_one(
        &mut self,
        cx: &mut Cx<'_>,
        rendered: &RenderedInstance,
        i: usize,
        cancel: &Cancel,
    ) -> Outcome {
        let p = &rendered.processes[i];
        let Some(user) = self.users.get(i).cloned() else {
            return Outcome::Failed("the process's user was not resolved".into());
        };
        if cx.spec.spec.runs_to_completion() && p.pid_file.is_none() {
            // A job run's exit record: an earlier attempt's goes before this start's record is
            // durable (`spawn_committed`), so after a crash it speaks of this attempt only.
            let file = crate::spec::render::job_exit_file(&p.work_path, &p.proc_name);
            if let Err(e) = crate::safefs::remove_workload_file(&file) {
                return Outcome::Failed(format!("cannot clear the run's exit record: {e}"));
            }
        }
        for (n, step) in p.init_steps.iter().enumerate() {
            if let Some(failed) = self.run_init_step(cx, rendered, i, (n, step), &user, cancel).await {
                return failed;
            }
        }
        // The run's output begins at its first command: the first init step, else startCmd.
        let what = if p.init_steps.is_empty() { "start" } else { "start after init" };
        let spawned = self.spawn_committed(cx, rendered, i, &p.start_cmd, &user, what).await;
        // Launched: waiting out the grace period or for the pidfile holds no place.
        *cx.launch_place = None;
        let Spawned { pid, mut exit, at, at_ms } = match spawned {
            Ok(x) => x,
            Err(e) => return Outcome::Failed(format!("cannot run startCmd: {e}")),
        };
        // Seed 000: the grace is waited "after startCmd is executed", so from the spawn, not
        // from when its commit was durable (a slow disk would lengthen every grace).
        let deadline = crate::clock::deadline_from(at, Duration::from_secs(p.start_grace_period_secs));
        let Some(pid_file) = &p.pid_file else {
            // Foreground: the start command is the main process if it is still alive after the grace.
            tokio::select! {
                biased;
                status = &mut exit => return Outcome::Exited(status.unwrap_or(ExitStatus::Unknown)),
                _ = cancel.wait() => return Outcome::Cancelled,
                _ = tokio::time::sleep_until(deadline) => {}
            }
            if let Ok(status) = exit.try_recv() {
                return Outcome::Exited(status);
            }
            // Our own child: not reaped (its watch has not fired), so its pid is still its own.
            return match ProcessIdentity::of(pid) {
                Some(identity) => Outcome::Ready(Main { identity, pidfd: None, spawned: true }, Some(exit), at_ms),
                None => Outcome::Exited(exit.await.unwrap_or(ExitStatus::Unknown)),
            };
        };
        // Forking (systemd Type=forking): the pid in the pidfile is the main process.
        let mut launcher_exit: Option<ExitWatch> = Some(exit);
        let mut launcher_status = None;
        let mut why = format!("pidfile {} did not appear", pid_file.display());
        let uid = user.uid;
        // Woken by a change in the pidfile's directory (see `DirWatch`), else polled.
        let watched = pid_file.parent().and_then(|d| cx.shared.dirs.watch(d));
        let poll = if watched.is_some() { PIDFILE_RECHECK } else { PIDFILE_POLL };
        // The launcher's status when it ended while this waited (taken from its watch then).
        let mut launcher_ended: Option<ExitStatus> = None;
        loop {
            let changed = watched.as_ref().map(|w| w.notify().notified());
            let mut changed = std::pin::pin!(changed);
            if let Some(n) = changed.as_mut().as_pin_mut() {
                n.enable();
            }
            match process::read_pidfile(pid_file, uid) {
                Err(e) if e.contains("No such file") => {}
                Err(e) => why = e,
                Ok(main_pid) => match self.check_main(main_pid, &p.proc_name) {
                    Ok(mut main) => {
                        main.spawned = main_pid == pid;
                        let watch =
                            if main.spawned { launcher_exit.take() } else { Some(cx.shared.reaper.watch(main_pid)) };
                        if !main.spawned && is_our_child(&main.identity) {
                            // Reparented to this daemon (its subreaper), not reaped yet: its exit
                            // comes from the reaper, watched from before that look, which reaps
                            // it by this pidfd (see `Main::pidfd`: the actor holds none).
                            main.spawned = true;
                            if let Some(pidfd) = main.pidfd.take().and_then(|p| Arc::try_unwrap(p).ok()) {
                                cx.shared.reaper.reap_adopted(main_pid, pidfd);
                            }
                        } else if let Some(launcher) = launcher_exit.take() {
                            // (None when the launcher is the main: its watch was taken above.)
                            adopt_when_launcher_ends(&cx.shared.reaper, pid, launcher, main.identity.clone());
                        }
                        return Outcome::Ready(main, watch, at_ms);
                    }
                    Err(e) => why = e,
                },
            }
            let ended = launcher_ended.take().or_else(|| launcher_exit.as_mut().and_then(|w| w.try_recv().ok()));
            if launcher_exit.is_some() {
                if let Some(status) = ended {
                    launcher_exit = None;
                    launcher_status = Some(status);
                    if !status.is_success() {
                        let said = start_output(rendered, i);
                        return Outcome::Failed(format!(
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
                reason.push_str(&start_output(rendered, i));
                return Outcome::Failed(reason);
            }
            let launcher_ends = async {
                match launcher_exit.as_mut() {
                    Some(w) => (&mut *w).await.unwrap_or(ExitStatus::Unknown),
                    None => std::future::pending().await,
                }
            };
            let dir_changed = async {
                match changed.as_mut().as_pin_mut() {
                    Some(n) => n.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = cancel.wait() => return Outcome::Cancelled,
                _ = dir_changed => {}
                status = launcher_ends => launcher_ended = Some(status),
                _ = tokio::time::sleep(poll.min(deadline.saturating_duration_since(Instant::now()))) => {}
            }
        }
    }

    /// Spawns as [`Self::spawn_in_instance`] does, the run's first spawn committing the
    /// held-back transitions (Exited, Backoff, Staging, Starting): they are durable before
    /// anything watches or reports the spawn. When this launch is the only one in progress (a
    /// respawn, as a rule), they go to the store right after the clone: handed over before it,
    /// their serializing and the store thread they woke (which took the worker's CPU) delayed
    /// the clone by 0.15 ms. When other launches are in progress (a burst), they go before the
    /// spawn, so the store works while this spawns and one group commit takes many: handed
    /// over after, 500 daemonizing starts took twice as long. A crash before the commit is
    /// durable leaves the previous record, and the next daemon's first start empties the
    /// cgroup first (`cgroup_clear`): one tree, never two.
    async fn spawn_committed(
        &self,
        cx: &mut Cx<'_>,
        rendered: &RenderedInstance,
        i: usize,
        command: &str,
        user: &ResolvedUser,
        what: &str,
    ) -> std::io::Result<Spawned> {
        // A job run's start is durable before its command can run: after a crash, a record that
        // says Starting then may mean the command began, and its exit record tells
        // (`take_up_start`); a run is never started twice.
        if cx.spec.spec.runs_to_completion() && cx.journal.has_held() {
            cx.journal.commit(&cx.shared.store, cx.rec, Vec::new()).await;
            crate::failpoint::hit("job-start-committed");
        }
        let alone = cx.shared.launches.available_permits() + 1 >= crate::supervisor::CONCURRENT_LAUNCHES;
        let before = (!alone && cx.journal.has_held()).then(|| cx.journal.begin(&cx.shared.store, cx.rec));
        let spawned = self.spawn_in_instance(cx, rendered, i, command, user, what);
        // The child has exec'd (the spawn returns once it has): what is timed from the start
        // is timed from here, however long the commit then takes.
        let (at, at_ms) = (Instant::now(), now_ms());
        crate::failpoint::hit("launch-spawned");
        let pending = before.or_else(|| cx.journal.has_held().then(|| cx.journal.begin(&cx.shared.store, cx.rec)));
        if let Some(pending) = pending {
            cx.journal.finish(&cx.shared.store, cx.rec, pending).await;
        }
        spawned.map(|(pid, exit)| Spawned { pid, exit, at, at_ms })
    }

    /// One init step of process `i` (seed 003 `initializers`): run as its user, in its workPath,
    /// with its env and output, in the instance's cgroup; it must exit 0 within its timeout.
    /// None when it did; else how the start ends (its output's tail in the reason).
    async fn run_init_step(
        &self,
        cx: &mut Cx<'_>,
        rendered: &RenderedInstance,
        i: usize,
        (n, step): (usize, &RenderedInitStep),
        user: &ResolvedUser,
        cancel: &Cancel,
    ) -> Option<Outcome> {
        let name = &step.name;
        let what = if n == 0 { "init" } else { "next init step" };
        let Spawned { pid, exit, at, .. } = match self.spawn_committed(cx, rendered, i, &step.command, user, what).await
        {
            Ok(x) => x,
            Err(e) => return Some(Outcome::Failed(format!("cannot run init step {name}: {e}"))),
        };
        let deadline = crate::clock::deadline_from(at, Duration::from_secs(step.timeout_secs));
        let status = tokio::select! {
            status = tokio::time::timeout_at(deadline, exit) => status,
            _ = cancel.wait() => return Some(Outcome::Cancelled),
        };
        let failed = match status {
            Ok(Ok(status)) if status.is_success() => return None,
            Ok(Ok(status)) => format!("init step {name} {status}"),
            Ok(Err(_)) => format!("init step {name}: its exit status was lost"),
            Err(_) => {
                // It leads its own session (setsid): end everything it started.
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                format!("init step {name} did not finish within {}s", step.timeout_secs)
            }
        };
        Some(Outcome::Failed(format!("{failed}{}", start_output(rendered, i))))
    }

    /// A pid from a pidfile is the main process only if it is alive, inside this instance's
    /// cgroup, and runs procName.
    pub(super) fn check_main(&self, pid: i32, proc_name: &str) -> Result<Main, String> {
        let pidfd = Pidfd::open(pid).map_err(|_| format!("pidfile names pid {pid}, which is not running"))?;
        let identity = ProcessIdentity::of(pid).ok_or_else(|| format!("pidfile names pid {pid}, which has exited"))?;
        if !self.cgroup.contains(pid) {
            return Err(format!("pidfile names pid {pid}, which is not a process of this instance"));
        }
        procinfo::check_name(pid, proc_name).map_err(|e| format!("pidfile names the wrong process: {e}"))?;
        Ok(Main { identity, pidfd: Some(Arc::new(pidfd)), spawned: false })
    }

    /// Runs a command of process `i` (start, stop, reload, restart) as `user`, in its work dir
    /// and in the instance's cgroup, with output to the instance's logs.
    pub(super) fn spawn_in_instance(
        &self,
        cx: &Cx<'_>,
        rendered: &RenderedInstance,
        i: usize,
        command: &str,
        user: &ResolvedUser,
        what: &str,
    ) -> std::io::Result<(i32, ExitWatch)> {
        let p = &rendered.processes[i];
        let log = |stream: &str| rendered.run_dir.join(format!("{}.{stream}.log", p.proc_name));
        let (out, err) = (log("stdout"), log("stderr"));
        let logs = [out.as_path(), err.as_path()];
        let [mut stdout, mut stderr] = process::open_logs(&rendered.run_dir, logs, user)?;
        if what == "start" || what == "init" {
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
        tracing::debug!(instance = %cx.rec.id, "running {what} command: {command}");
        process::launch(
            &cx.shared.reaper,
            Launch { command, work_dir: &p.work_path, user, env: &env, stdout, stderr, cgroup_join: join },
        )
    }
}

/// What process `i`'s current run printed last (a start that failed: why, in its own
/// words, even when it printed that after it detached), for a failure's message.
fn start_output(rendered: &RenderedInstance, i: usize) -> String {
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

/// Whether the process is this daemon's child now (a daemonizing start's process, reparented
/// to the subreaper when its launcher ended) and not yet reaped.
fn is_our_child(identity: &ProcessIdentity) -> bool {
    procinfo::Stat::read(identity.pid)
        .is_some_and(|s| s.ppid == std::process::id() as i32 && s.start_time == identity.start_time)
}

/// A pidfile's main read while its launcher still ran is the launcher's child (else a
/// grandchild's): when the launcher ends, a main it leaves to this daemon (the subreaper) is
/// handed to the reaper's pidfd. Left to the SIGCHLD scan for life, such mains made every exit
/// walk every child at once (2.2 wait4 calls per respawn at 2,000 daemonizing instances).
fn adopt_when_launcher_ends(
    reaper: &crate::runtime::reaper::Reaper,
    launcher: i32,
    launcher_exit: ExitWatch,
    main: ProcessIdentity,
) {
    let r = reaper.clone();
    let adopt = move |_| {
        // Opened before the look: a child of ours not yet reaped keeps its pid, so a pidfd
        // opened on the process the look then finds is that process's.
        if let Ok(pidfd) = Pidfd::open(main.pid) {
            if is_our_child(&main) {
                r.reap_adopted(main.pid, pidfd);
            }
        }
    };
    // Err: a newer watch of the launcher's pid replaced this one; the main stays scanned.
    let _ = reaper.on_exit(launcher, launcher_exit, adopt);
}

/// Reports main process `index`'s exit to the actor: from its pidfd (any process), with the
/// status from the reaper when the daemon is its parent.
pub(super) fn watch_main(cx: &Cx<'_>, index: usize, main: &Main, reaped: Option<ExitWatch>) {
    let (tx, generation) = (cx.tx.clone(), cx.generation);
    let reaper = cx.shared.reaper.clone();
    let pid = main.identity.pid;
    let reaped = match reaped {
        Some(reaped) if main.spawned => {
            watch_own_child(&reaper, tx, main.identity.clone(), generation, index, reaped);
            return;
        }
        other => other,
    };
    let pidfd = match main.pidfd.clone() {
        Some(pidfd) => pidfd,
        // Our child whose spawn's watch was taken: a pidfd now (the pid is its own while it
        // is not reaped, and the reaper's watch below has not fired).
        None => match Pidfd::open(pid) {
            Ok(pidfd) if main.identity.is_current() => Arc::new(pidfd),
            _ => {
                let _ = tx.send(Msg::MainExited { generation, index, status: ExitStatus::Unknown });
                return;
            }
        },
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

/// Our own child's exit goes to the actor from whatever reaps it (its pidfd's task): no task
/// of its own waits for it. A watch replaced by a newer one (a re-adopting actor's) never
/// fires: then a pidfd tells when it ends (opened on it while it is the same process; else it
/// has ended).
fn watch_own_child(
    reaper: &crate::runtime::reaper::Reaper,
    tx: Mailbox,
    identity: ProcessIdentity,
    generation: u64,
    index: usize,
    reaped: ExitWatch,
) {
    let deliver = {
        let tx = tx.clone();
        move |status| {
            let _ = tx.send(Msg::MainExited { generation, index, status });
        }
    };
    if reaper.on_exit(identity.pid, reaped, deliver).is_ok() {
        return;
    }
    tokio::spawn(async move {
        if let Ok(pidfd) = Pidfd::open(identity.pid) {
            if identity.is_current() {
                pidfd.exited().await;
            }
        }
        let _ = tx.send(Msg::MainExited { generation, index, status: ExitStatus::Unknown });
    });
}
