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
//! own pidfd (`waitid(P_PIDFD)`) as soon as it is readable: one child looked at. Everything
//! else (children started by `std::process::Command`, daemonized grandchildren, a kernel
//! without pidfds) is reaped on SIGCHLD by `waitpid(-1)`, which walks every child of the
//! daemon per call, twice per exit at least: at 2,000 instances that walk was most of a
//! respawn. That scan waits a moment after the signal, so the pidfds reap their own first and
//! a burst of exits is one scan, unless a watched child has no pidfd (it waits for the scan).

use super::exit::ExitStatus;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Receives the exit status of one pid.
pub type ExitWatch = oneshot::Receiver<ExitStatus>;

#[derive(Clone, Default)]
pub struct Reaper {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    watchers: HashMap<i32, oneshot::Sender<ExitStatus>>,
    /// The watched pids no pidfd reaps (their status comes from the scan alone): while any is
    /// watched, the scan runs at once on SIGCHLD.
    scanned_only: std::collections::HashSet<i32>,
    /// Exits reaped while spawns are in flight, by spawn ticket.
    collecting: HashMap<u64, Vec<(i32, ExitStatus)>>,
    next_ticket: u64,
}

impl Reaper {
    /// Makes this process a child subreaper and starts reaping on SIGCHLD.
    /// Must be called inside a tokio runtime, once per daemon.
    pub fn start() -> std::io::Result<Reaper> {
        set_child_subreaper()?;
        let reaper = Reaper::default();
        let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        let r = reaper.clone();
        tokio::spawn(async move {
            loop {
                r.reap_all();
                if sigchld.recv().await.is_none() {
                    break;
                }
                if r.inner.lock().expect("reaper lock").scanned_only.is_empty() {
                    tokio::time::sleep(SCAN_DELAY).await;
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
        let mut inner = self.inner.lock().expect("reaper lock");
        for collected in inner.collecting.values_mut() {
            collected.push((pid, status));
        }
        inner.scanned_only.remove(&pid);
        if let Some(tx) = inner.watchers.remove(&pid) {
            let _ = tx.send(status);
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
                inner.watchers.insert(pid, tx);
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
        inner.watchers.insert(pid, tx);
        inner.scanned_only.insert(pid);
        rx
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

fn set_child_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
