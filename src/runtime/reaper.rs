//! The one place in the daemon that calls `waitpid`. Two reapers would steal each other's exit
//! statuses, so every child — startCmd, stopCmd, check commands, and daemonized grandchildren
//! reparented to us as child subreaper — is reaped here and its status handed to whoever
//! watches that pid.
//!
//! Exits are subscribed to *before* a spawn (as containerd does): while a spawn is in flight
//! every reaped status is also collected, so a child that exits before its pid is even known
//! to the caller is never missed.
//!
//! Two ways reap. A child spawned with a pidfd (see `spawn::modern_clone`) is reaped by its
//! own pidfd (`waitid(P_PIDFD)`) as soon as it is readable: one child looked at, and so is a
//! daemonizing start's main found reparented to the daemon ([`Reaper::reap_adopted`]).
//! Everything else (children started by `std::process::Command`, other daemonized
//! grandchildren, a kernel without pidfds) is reaped on SIGCHLD by `waitpid(-1)`, which walks
//! every child of the daemon per call: 6 µs at 500 children, 106 µs at 2,000, 302 µs at
//! 5,000 (measured), for every exit. So the scan runs only when a SIGCHLD may be about a
//! child no pidfd reaps: the signal's own `si_pid` is noted by a handler ([`Told`]), and a
//! signal that named only children of the pidfds is no reason to scan. Signals coalesce (one
//! pending SIGCHLD stands for any number of exits), so a skipped scan is made up within
//! [`CATCH_UP`]: an exit the coalescing hid (a daemonized grandchild nobody watches) is reaped
//! that late at worst. While any watched child has no pidfd, every signal scans at once (its
//! reader waits for the scan); otherwise the scan waits a moment, so the pidfds reap their own
//! first and a burst of exits is one scan.

use super::exit::ExitStatus;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Receives the exit status of one pid.
pub type ExitWatch = oneshot::Receiver<ExitStatus>;

/// Who gets a watched pid's status: a watch to await, or a call made by whoever reaps it (see
/// [`Reaper::on_exit`]: no task waits per process).
enum Watcher {
    Watch(oneshot::Sender<ExitStatus>),
    Call(Box<dyn FnOnce(ExitStatus) + Send>),
}

impl Watcher {
    fn tell(self, status: ExitStatus) {
        match self {
            Watcher::Watch(tx) => {
                let _ = tx.send(status);
            }
            Watcher::Call(deliver) => deliver(status),
        }
    }
}

#[derive(Clone, Default)]
pub struct Reaper {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    watchers: HashMap<i32, Watcher>,
    /// The watched pids no pidfd reaps (their status comes from the scan alone): while any is
    /// watched, the scan runs at once on SIGCHLD.
    scanned_only: std::collections::HashSet<i32>,
    /// Exits reaped while spawns are in flight, by spawn ticket.
    collecting: HashMap<u64, Vec<(i32, ExitStatus)>>,
    next_ticket: u64,
    /// The last children their pidfds reaped (a SIGCHLD about one comes as or after its pidfd
    /// reaped it; one not reaped yet is a watched child not in `scanned_only`).
    reaped_by_pidfd: std::collections::VecDeque<i32>,
}

/// How many pids reaped by their pidfds are remembered for the SIGCHLDs about them.
const REMEMBERED_REAPS: usize = 1024;

impl Inner {
    /// Whether the children SIGCHLD named are all the pidfds' to reap (then no scan is needed
    /// for them). Unknown (`None`: the handler lost count) is no.
    fn all_reaped_by_pidfds(&self, told: Option<Vec<i32>>) -> bool {
        let Some(pids) = told.filter(|pids| !pids.is_empty()) else { return false };
        let pidfds = |p: &i32| self.watchers.contains_key(p) && !self.scanned_only.contains(p);
        pids.iter().all(|p| pidfds(p) || self.reaped_by_pidfd.contains(p))
    }
}

impl Reaper {
    /// Makes this process a child subreaper and starts reaping on SIGCHLD.
    /// Must be called inside a tokio runtime, once per daemon.
    pub fn start() -> std::io::Result<Reaper> {
        set_child_subreaper()?;
        let reaper = Reaper::default();
        // Before tokio's own handler (the registry runs actions in the order registered): by
        // the time the stream below wakes, the signal's pid is noted.
        // SAFETY: the action only does atomic loads and stores (async-signal-safe).
        unsafe { signal_hook_registry::register_sigaction(libc::SIGCHLD, |info| TOLD.note(info)) }?;
        let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        let r = reaper.clone();
        tokio::spawn(async move {
            loop {
                r.reap_all();
                // When a skipped scan is to be made up.
                let mut catch_up: Option<tokio::time::Instant> = None;
                loop {
                    let due = catch_up.unwrap_or_else(|| tokio::time::Instant::now() + CATCH_UP);
                    tokio::select! {
                        got = sigchld.recv() => if got.is_none() { return },
                        _ = tokio::time::sleep_until(due), if catch_up.is_some() => break,
                    }
                    let told = TOLD.take();
                    let (scanned_only, skip) = {
                        let inner = r.inner.lock().expect("reaper lock");
                        (!inner.scanned_only.is_empty(), inner.all_reaped_by_pidfds(told))
                    };
                    if scanned_only {
                        break;
                    }
                    if !skip {
                        tokio::time::sleep(SCAN_DELAY).await;
                        break;
                    }
                    catch_up.get_or_insert(due);
                }
            }
        });
        Ok(reaper)
    }

    /// Reaps `pid` by its pidfd once it ends, unless the SIGCHLD scan reaps it first (then the
    /// pidfd finds no such child, and the scan delivered it).
    fn reap_by_pidfd(&self, runtime: &tokio::runtime::Handle, pid: i32, pidfd: super::process::Pidfd) {
        let reaper = self.clone();
        runtime.spawn(async move {
            pidfd.exited().await;
            if let Some(status) = pidfd.reap() {
                {
                    let mut inner = reaper.inner.lock().expect("reaper lock");
                    if inner.reaped_by_pidfd.len() == REMEMBERED_REAPS {
                        inner.reaped_by_pidfd.pop_front();
                    }
                    inner.reaped_by_pidfd.push_back(pid);
                }
                reaper.deliver(pid, status);
            }
        });
    }

    /// Collects every exit that is waiting. Signals coalesce, so always loop until empty.
    pub fn reap_all(&self) {
        loop {
            let status = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid.as_raw(), ExitStatus::Code(code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid.as_raw(), ExitStatus::Signal(sig as i32)),
                Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => return,
                Ok(_) => continue, // stopped/continued: not an exit
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("waitpid: {e}");
                    return;
                }
            };
            self.deliver(status.0, status.1);
        }
    }

    fn deliver(&self, pid: i32, status: ExitStatus) {
        if let Some(call) = self.take_exit(pid, status) {
            call.tell(status);
        }
    }

    /// Notes `pid`'s exit under the lock, and tells its watch there too (a oneshot's send
    /// neither blocks nor re-enters the reaper): [`Reaper::on_exit`], under the same lock,
    /// then finds a watch either still waiting or told, never taken and not yet told (it
    /// would register a call nobody makes, and drop the watch the status then goes to). A
    /// call `on_exit` registered is returned, to be made outside the lock.
    fn take_exit(&self, pid: i32, status: ExitStatus) -> Option<Watcher> {
        let mut inner = self.inner.lock().expect("reaper lock");
        for collected in inner.collecting.values_mut() {
            collected.push((pid, status));
        }
        inner.scanned_only.remove(&pid);
        match inner.watchers.remove(&pid)? {
            watch @ Watcher::Watch(_) => {
                watch.tell(status);
                None
            }
            call @ Watcher::Call(_) => Some(call),
        }
    }

    /// Hands the exit of `pid`, watched by `watch` (from [`Reaper::spawn`]), to `deliver`,
    /// called by whatever reaps it (its pidfd's task, or the scan): the status goes straight
    /// to its reader, with no task per process awaiting the watch in between. At once if it
    /// has been reaped already. Err gives the watch back when a newer watch of the same pid
    /// replaced it (it will never fire).
    pub fn on_exit(
        &self,
        pid: i32,
        mut watch: ExitWatch,
        deliver: impl FnOnce(ExitStatus) + Send + 'static,
    ) -> Result<(), ExitWatch> {
        let mut inner = self.inner.lock().expect("reaper lock");
        // Under the lock nothing is delivered meanwhile: the watch's sender is either still
        // in `watchers` (nothing came yet), or it has sent, or it was dropped (replaced).
        match watch.try_recv() {
            Ok(status) => {
                drop(inner);
                deliver(status);
                Ok(())
            }
            Err(oneshot::error::TryRecvError::Empty) => {
                inner.watchers.insert(pid, Watcher::Call(Box::new(deliver)));
                Ok(())
            }
            Err(oneshot::error::TryRecvError::Closed) => Err(watch),
        }
    }

    /// Runs `spawn` (which returns the new child's pid, and its pidfd if it has one) with exits
    /// collected around it, and returns the pid with a watch on its exit that cannot miss an
    /// early one.
    pub fn spawn<E>(
        &self,
        spawn: impl FnOnce() -> Result<(i32, Option<std::os::fd::OwnedFd>), E>,
    ) -> Result<(i32, ExitWatch), E> {
        let ticket = {
            let mut inner = self.inner.lock().expect("reaper lock");
            inner.next_ticket += 1;
            let t = inner.next_ticket;
            inner.collecting.insert(t, Vec::new());
            t
        };
        let result = spawn();
        let mut inner = self.inner.lock().expect("reaper lock");
        let collected = inner.collecting.remove(&ticket).unwrap_or_default();
        let (pid, pidfd) = result?;
        let (tx, rx) = oneshot::channel();
        match collected.iter().find(|(p, _)| *p == pid) {
            Some((_, status)) => {
                let _ = tx.send(*status);
            }
            None => {
                inner.watchers.insert(pid, Watcher::Watch(tx));
                // Outside a runtime (a test's spawn) the scan alone.
                let by_pidfd = pidfd.zip(tokio::runtime::Handle::try_current().ok());
                if by_pidfd.is_none() {
                    inner.scanned_only.insert(pid);
                }
                drop(inner);
                if let Some((pidfd, runtime)) = by_pidfd {
                    self.reap_by_pidfd(&runtime, pid, super::process::Pidfd::from_owned(pidfd));
                }
            }
        }
        Ok((pid, rx))
    }

    /// Watches a pid this daemon did not spawn but may be the parent of (a daemonized
    /// grandchild reparented to the subreaper). If it is not our child, the watch never fires:
    /// callers learn of the exit from a pidfd and use this only for the status.
    pub fn watch(&self, pid: i32) -> ExitWatch {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.inner.lock().expect("reaper lock");
        inner.watchers.insert(pid, Watcher::Watch(tx));
        inner.scanned_only.insert(pid);
        rx
    }

    /// A watched pid (see [`Reaper::watch`]) found to be this daemon's child after all (a
    /// daemonizing start's process, reparented to the subreaper when its launcher ended):
    /// reaped by its pidfd from now on. Left to the scan, it made every SIGCHLD walk every
    /// child at once for as long as it ran. A scan that reaps it first delivers as before (the
    /// pidfd then finds no child to reap).
    pub fn reap_adopted(&self, pid: i32, pidfd: super::process::Pidfd) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        {
            let mut inner = self.inner.lock().expect("reaper lock");
            if !inner.watchers.contains_key(&pid) {
                return;
            }
            inner.scanned_only.remove(&pid);
        }
        self.reap_by_pidfd(&runtime, pid, pidfd);
    }

    /// Drops a watch that is no longer wanted (the process is known to be gone).
    pub fn forget(&self, pid: i32) {
        let mut inner = self.inner.lock().expect("reaper lock");
        inner.watchers.remove(&pid);
        inner.scanned_only.remove(&pid);
    }
}

/// How long the SIGCHLD scan waits after the signal when every watched child has a pidfd (see
/// the module docs): a daemonizing instance's main, a check command's child are scanned for at
/// once.
const SCAN_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// How late a scan skipped (every child its SIGCHLDs named was a pidfd's) is made up: the
/// exits coalescing may have hidden are reaped by then.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(1);

/// The pids SIGCHLD's handler was told (`si_pid`) since the reaper last looked. Written in the
/// handler, so atomics only: a slot is claimed by counting, then filled.
struct Told {
    count: AtomicUsize,
    pids: [AtomicI32; 64],
}

static TOLD: Told = Told { count: AtomicUsize::new(0), pids: [const { AtomicI32::new(0) }; 64] };

impl Told {
    fn note(&self, info: &libc::siginfo_t) {
        // SAFETY: SIGCHLD's siginfo carries the child's pid.
        let pid = unsafe { info.si_pid() };
        let slot = self.count.fetch_add(1, Ordering::SeqCst);
        if let Some(p) = self.pids.get(slot) {
            p.store(pid, Ordering::SeqCst);
        }
    }

    /// The pids told since the last take; None when some may be missing (more signals than
    /// slots, or a slot claimed and not filled yet).
    fn take(&self) -> Option<Vec<i32>> {
        let n = self.count.swap(0, Ordering::SeqCst);
        let mut pids = Vec::with_capacity(n.min(self.pids.len()));
        let mut whole = n <= self.pids.len();
        for p in &self.pids[..n.min(self.pids.len())] {
            match p.swap(0, Ordering::SeqCst) {
                0 => whole = false,
                pid => pids.push(pid),
            }
        }
        whole.then_some(pids)
    }
}

fn set_child_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{FromRawFd, OwnedFd};

    /// `sh -c script` as a child reaped by its pidfd (no SIGCHLD scan in a test process: it
    /// would take other tests' children).
    fn spawn(reaper: &Reaper, script: &str) -> (i32, ExitWatch) {
        reaper
            .spawn(|| -> std::io::Result<(i32, Option<OwnedFd>)> {
                let child = std::process::Command::new("/bin/sh").args(["-c", script]).spawn()?;
                let pid = child.id() as i32;
                // SAFETY: pidfd_open returns a new descriptor we own, or -1.
                let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
                assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
                Ok((pid, Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })))
            })
            .unwrap()
    }

    /// A SIGCHLD is no reason to scan only when every child it named is one a pidfd reaps (or
    /// reaped); an unknown child, a lost count or no pid at all is.
    #[test]
    fn a_scan_is_skipped_only_for_signals_about_the_pidfds_children() {
        let mut inner = Inner::default();
        let (tx, _rx) = oneshot::channel();
        inner.watchers.insert(10, Watcher::Watch(tx));
        inner.reaped_by_pidfd.push_back(11);
        assert!(inner.all_reaped_by_pidfds(Some(vec![10, 11])));
        assert!(!inner.all_reaped_by_pidfds(Some(vec![10, 12])), "12 is nobody's: a daemonized grandchild");
        inner.scanned_only.insert(10);
        assert!(!inner.all_reaped_by_pidfds(Some(vec![10])), "10 is watched, and no pidfd reaps it");
        assert!(!inner.all_reaped_by_pidfds(Some(vec![])), "told nothing: the handler had not noted it yet");
        assert!(!inner.all_reaped_by_pidfds(None), "more signals than slots");
    }

    /// The handler's slots: what was noted is taken once; a slot claimed and not filled, or
    /// more signals than slots, make the take unknown.
    #[test]
    fn told_pids_are_taken_once_and_a_gap_makes_them_unknown() {
        let told = Told { count: AtomicUsize::new(0), pids: [const { AtomicI32::new(0) }; 64] };
        for pid in [5, 6] {
            let slot = told.count.fetch_add(1, Ordering::SeqCst);
            told.pids[slot].store(pid, Ordering::SeqCst);
        }
        assert_eq!(told.take(), Some(vec![5, 6]));
        assert_eq!(told.take(), Some(vec![]));
        told.count.fetch_add(1, Ordering::SeqCst);
        assert_eq!(told.take(), None, "claimed, not filled");
        told.count.store(65, Ordering::SeqCst);
        assert_eq!(told.take(), None, "more than the slots");
        assert_eq!(told.take(), Some(vec![]));
    }

    /// An exit being delivered while its watch is handed over to `on_exit` (the reaper took the
    /// pid's watcher; the actor hands over the watch before the reaper told it): the status
    /// still reaches the reader. It once was sent to the watch `on_exit` had just dropped, and a
    /// run's end was never seen (a job's run Active for ever).
    #[test]
    fn an_exit_delivered_while_its_watch_is_handed_over_is_not_lost() {
        let reaper = Reaper::default();
        let (tx, watch) = oneshot::channel();
        reaper.inner.lock().unwrap().watchers.insert(7, Watcher::Watch(tx));
        // The reaper has taken pid 7's exit under its lock and not finished delivering it...
        let rest = reaper.take_exit(7, ExitStatus::Code(3));
        // ...when the actor hands the watch over...
        let (told_tx, told) = std::sync::mpsc::channel();
        assert!(reaper.on_exit(7, watch, move |s| told_tx.send(s).unwrap()).is_ok());
        // ...and then the reaper finishes.
        if let Some(watcher) = rest {
            watcher.tell(ExitStatus::Code(3));
        }
        assert_eq!(told.try_recv(), Ok(ExitStatus::Code(3)), "the exit was lost");
    }

    /// A watched pid found to be our child is reaped by its pidfd, not left to the scan (none
    /// runs in a test: the status could come from the pidfd alone), and no longer makes every
    /// SIGCHLD scan.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_adopted_child_is_reaped_by_its_pidfd() {
        let reaper = Reaper::default();
        // Reaped by the pidfd, never by the handle: `wait` would find no child.
        let child = std::process::Command::new("/bin/sh").args(["-c", "sleep 0.2; exit 5"]).spawn().unwrap();
        let pid = child.id() as i32;
        std::mem::forget(child);
        let watch = reaper.watch(pid);
        assert!(reaper.inner.lock().unwrap().scanned_only.contains(&pid));
        reaper.reap_adopted(pid, crate::runtime::process::Pidfd::open(pid).unwrap());
        assert!(reaper.inner.lock().unwrap().scanned_only.is_empty(), "no scan for it");
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), watch).await.unwrap().unwrap();
        assert_eq!(status, ExitStatus::Code(5));
    }

    /// The status goes straight to its reader (no task per process waits on the watch): from
    /// the pidfd's task when handed over before the exit, at once when it came already, and
    /// not at all through a watch that a newer one replaced (the caller gets it back).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_exit_goes_to_its_reader_from_whatever_reaps_it() {
        let reaper = Reaper::default();

        let (pid, watch) = spawn(&reaper, "sleep 0.3; exit 3");
        let (tx, rx) = oneshot::channel();
        assert!(reaper.on_exit(pid, watch, move |s| tx.send(s).unwrap()).is_ok());
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), rx).await.unwrap().unwrap();
        assert_eq!(status, ExitStatus::Code(3));

        let (pid, watch) = spawn(&reaper, "exit 4");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(reaper.on_exit(pid, watch, move |s| tx.send(s).unwrap()).is_ok());
        assert_eq!(rx.try_recv(), Ok(ExitStatus::Code(4)), "reaped already: told at once");

        let (pid, watch) = spawn(&reaper, "exec sleep 30");
        let newer = reaper.watch(pid);
        assert!(reaper.on_exit(pid, watch, |_| panic!("a replaced watch is not called")).is_err());
        nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), newer).await.unwrap().unwrap();
        assert_eq!(status, ExitStatus::Signal(libc::SIGKILL));
    }
}
