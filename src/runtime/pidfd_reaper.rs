//! One thread that waits on every spawned child's pidfd and reaps each child as it ends
//! (`waitid(P_PIDFD)`: that one child looked at), for the [`super::reaper::Reaper`].
//!
//! A task per child awaiting its pidfd cost each running instance ~640 bytes for its life (the
//! task, its future and tokio's I/O registration; heaptrack at 2,000 instances, issue 48). Here
//! a child costs an entry in a map and one epoll registration in the kernel; the thread sleeps
//! in `epoll_wait` and wakes only for exits.

use super::exit::ExitStatus;
use super::process::Pidfd;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// Where a reaped child's status goes; called on the reaping thread.
pub type Deliver = Box<dyn Fn(i32, ExitStatus) + Send + Sync>;

pub struct PidfdReaper {
    epoll: OwnedFd,
    /// The children waited for, by the token their epoll registration carries: a token is never
    /// reused, so an event about a child reaped otherwise (and its pid reused) finds nothing.
    children: Mutex<Children>,
}

#[derive(Default)]
struct Children {
    by_token: HashMap<u64, (i32, Pidfd)>,
    next_token: u64,
}

impl PidfdReaper {
    /// Starts the reaping thread; `deliver` gets each status. The thread runs as long as the
    /// returned value (or a child it waits for) lives.
    pub fn start(deliver: Deliver) -> std::io::Result<Arc<PidfdReaper>> {
        // SAFETY: epoll_create1 takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just gave us this descriptor and nobody else owns it.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let reaper = Arc::new(PidfdReaper { epoll, children: Mutex::default() });
        let weak = Arc::downgrade(&reaper);
        std::thread::Builder::new().name("pidfd-reaper".into()).spawn(move || run(weak, deliver))?;
        Ok(reaper)
    }

    /// Reaps `pid`, our child, through `pidfd` once it ends, unless something else reaped it
    /// first (then the pidfd finds no such child, and that reaper delivered its status).
    pub fn add(&self, pid: i32, pidfd: Pidfd) -> std::io::Result<()> {
        let mut children = self.children.lock().expect("pidfd reaper lock");
        children.next_token += 1;
        let token = children.next_token;
        let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // Registered under the lock: the thread finds the child once its event comes.
        // SAFETY: both descriptors are open (the pidfd is moved into the map below, and is
        // removed from the epoll set when it is closed); `event` is a valid epoll_event.
        let r = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, pidfd.as_raw_fd(), &mut event) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        children.by_token.insert(token, (pid, pidfd));
        Ok(())
    }

    /// Children waited for.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.children.lock().expect("pidfd reaper lock").by_token.len()
    }
}

/// The thread: waits for pidfds to become readable (their child ended) and reaps each. It
/// ends when the reaper is gone and an event wakes it.
fn run(reaper: std::sync::Weak<PidfdReaper>, deliver: Deliver) {
    let epoll = match reaper.upgrade() {
        // Its own descriptor: the reaper's closes with it.
        Some(r) => match r.epoll.try_clone() {
            Ok(fd) => fd,
            Err(e) => {
                tracing::error!("pidfd reaper: duplicating its epoll descriptor: {e}");
                return;
            }
        },
        None => return,
    };
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    loop {
        // SAFETY: `events` is a writable array of that many epoll_events.
        let n = unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            tracing::error!("pidfd reaper: epoll_wait: {e}");
            return;
        }
        let Some(reaper) = reaper.upgrade() else { return };
        for event in &events[..n as usize] {
            let token = event.u64;
            let child = reaper.children.lock().expect("pidfd reaper lock").by_token.remove(&token);
            // Closing the pidfd (dropped here) takes it out of the epoll set.
            if let Some((pid, pidfd)) = child {
                if let Some(status) = pidfd.reap() {
                    deliver(pid, status);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn spawn_with_pidfd(script: &str) -> (i32, Pidfd) {
        // Reaped by the reaper under test (or the test itself), not by a `Child`.
        let pid = std::process::Command::new("/bin/sh").args(["-c", script]).spawn().unwrap().id() as i32;
        (pid, Pidfd::open(pid).unwrap())
    }

    /// Every child handed over is reaped once it ends, each status to its pid, from one thread,
    /// and nothing is kept for it after.
    #[test]
    fn every_child_is_reaped_by_its_pidfd_as_it_ends() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let reaper =
            PidfdReaper::start(Box::new(move |pid, status| tx.lock().unwrap().send((pid, status)).unwrap())).unwrap();
        let mut expected = HashMap::new();
        for code in 0..5 {
            let (pid, pidfd) = spawn_with_pidfd(&format!("sleep 0.{code}; exit {code}"));
            reaper.add(pid, pidfd).unwrap();
            expected.insert(pid, ExitStatus::Code(code));
        }
        let (pid, pidfd) = spawn_with_pidfd("kill -9 $$");
        reaper.add(pid, pidfd).unwrap();
        expected.insert(pid, ExitStatus::Signal(libc::SIGKILL));
        let mut got = HashMap::new();
        while got.len() < expected.len() {
            let (pid, status) = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("an exit");
            assert!(got.insert(pid, status).is_none(), "pid {pid} delivered twice");
        }
        assert_eq!(got, expected);
        assert_eq!(reaper.waiting(), 0, "nothing is kept for a reaped child");
    }

    /// A child reaped by someone else first (the SIGCHLD scan) is not delivered again: its
    /// pidfd finds no child, and is let go.
    #[test]
    fn a_child_reaped_elsewhere_is_let_go() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let reaper =
            PidfdReaper::start(Box::new(move |pid, status| tx.lock().unwrap().send((pid, status)).unwrap())).unwrap();
        let (pid, pidfd) = spawn_with_pidfd("exit 7");
        // Reaped here before the reaper sees it.
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        reaper.add(pid, pidfd).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while reaper.waiting() > 0 {
            assert!(std::time::Instant::now() < deadline, "the pidfd of a reaped child is let go");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(rx.try_recv().is_err(), "nothing delivered for a child reaped elsewhere");
    }
}
