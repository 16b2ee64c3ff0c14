//! The one place in the daemon that calls `waitpid`. Two reapers would steal each other's exit
//! statuses, so every child — startCmd, stopCmd, check commands, and daemonized grandchildren
//! reparented to us as child subreaper — is reaped here and its status handed to whoever
//! watches that pid.
//!
//! Exits are subscribed to *before* a spawn (as containerd does): while a spawn is in flight
//! every reaped status is also collected, so a child that exits before its pid is even known
//! to the caller is never missed.

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
            }
        });
        Ok(reaper)
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
        if let Some(tx) = inner.watchers.remove(&pid) {
            let _ = tx.send(status);
        }
    }

    /// Runs `spawn` (which returns the new child's pid) with exits collected around it, and
    /// returns the pid with a watch on its exit that cannot miss an early one.
    pub fn spawn<E>(&self, spawn: impl FnOnce() -> Result<i32, E>) -> Result<(i32, ExitWatch), E> {
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
        let pid = result?;
        let (tx, rx) = oneshot::channel();
        match collected.iter().find(|(p, _)| *p == pid) {
            Some((_, status)) => {
                let _ = tx.send(*status);
            }
            None => {
                inner.watchers.insert(pid, tx);
            }
        }
        Ok((pid, rx))
    }

    /// Watches a pid this daemon did not spawn but may be the parent of (a daemonized
    /// grandchild reparented to the subreaper). If it is not our child, the watch never fires:
    /// callers learn of the exit from a pidfd and use this only for the status.
    pub fn watch(&self, pid: i32) -> ExitWatch {
        let (tx, rx) = oneshot::channel();
        self.inner.lock().expect("reaper lock").watchers.insert(pid, tx);
        rx
    }

    /// Drops a watch that is no longer wanted (the process is known to be gone).
    pub fn forget(&self, pid: i32) {
        self.inner.lock().expect("reaper lock").watchers.remove(&pid);
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
