//! Directories watched with inotify, shared by the whole daemon: a start that waits for its
//! pidfile is woken when something is written, moved or removed in the pidfile's directory,
//! instead of looking every 20 ms (a thousand forking starts polled 50 times a second each).
//! One inotify instance serves every watch (the kernel allows 128 instances per user by
//! default); a directory is watched once however many starts wait in it, and no longer once the
//! last of them is done. Where inotify is unavailable (or a watch cannot be added) the caller
//! polls as before.

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

/// The daemon's watches. Cheap to clone.
#[derive(Clone, Default)]
pub struct DirWatch {
    inner: Option<Arc<Inner>>,
}

/// The inotify instance as tokio polls it (its descriptor, owned, never changes).
struct InotifyFd(Inotify);

impl std::os::fd::AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsFd::as_fd(&self.0).as_raw_fd()
    }
}

struct Inner {
    inotify: AsyncFd<InotifyFd>,
    watches: Mutex<Watches>,
}

#[derive(Default)]
struct Watches {
    /// Directory → its watch, how many wait on it, and whom to wake.
    by_dir: HashMap<PathBuf, (WatchDescriptor, usize, Arc<Notify>)>,
    by_wd: HashMap<WatchDescriptor, Arc<Notify>>,
}

/// One waiter's hold on a watched directory; the watch goes with the last hold.
pub struct DirGuard {
    inner: Arc<Inner>,
    dir: PathBuf,
    notify: Arc<Notify>,
}

impl DirWatch {
    /// The shared inotify instance and its reader (inside a tokio runtime); without inotify,
    /// a watch that gives no guards (callers poll).
    /// No watch: pidfiles are polled for (a hollow host has none).
    pub fn off() -> DirWatch {
        DirWatch { inner: None }
    }

    pub fn start() -> DirWatch {
        let made =
            Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(|e| e.to_string()).and_then(|i| {
                // SAFETY: the AsyncFd owns the Inotify, whose descriptor stays open and the same
                // until both are dropped.
                let registered =
                    unsafe { AsyncFd::register_with_interest(InotifyFd(i), tokio::io::Interest::READABLE) };
                registered.map_err(|e| e.into_parts().1.to_string())
            });
        let inotify = match made {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!("inotify is unavailable ({e}): pidfiles are polled for");
                return DirWatch { inner: None };
            }
        };
        let inner = Arc::new(Inner { inotify, watches: Mutex::new(Watches::default()) });
        let reader = Arc::downgrade(&inner);
        tokio::spawn(async move {
            loop {
                let Some(inner) = reader.upgrade() else { return };
                let Ok(mut ready) = inner.inotify.readable().await else { return };
                match inner.inotify.get_ref().0.read_events() {
                    Ok(events) => {
                        let watches = inner.watches.lock().expect("dirwatch lock");
                        for e in events {
                            match watches.by_wd.get(&e.wd) {
                                Some(n) => n.notify_waiters(),
                                // The queue overflowed (or a watch is gone): wake everyone.
                                None => watches.by_wd.values().for_each(|n| n.notify_waiters()),
                            }
                        }
                    }
                    Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                    Err(e) => {
                        tracing::warn!("reading inotify events: {e}");
                        ready.clear_ready();
                    }
                }
            }
        });
        DirWatch { inner: Some(inner) }
    }

    /// Watches `dir` for as long as the guard lives; None when it cannot be watched.
    pub fn watch(&self, dir: &Path) -> Option<DirGuard> {
        let inner = self.inner.as_ref()?;
        let mut watches = inner.watches.lock().expect("dirwatch lock");
        if let Some((_, holds, notify)) = watches.by_dir.get_mut(dir) {
            *holds += 1;
            let notify = notify.clone();
            return Some(DirGuard { inner: inner.clone(), dir: dir.to_path_buf(), notify });
        }
        let flags = AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_ONLYDIR;
        let wd = inner.inotify.get_ref().0.add_watch(dir, flags).ok()?;
        // Two paths of one directory share its descriptor (and its Notify).
        let notify = watches.by_wd.entry(wd).or_insert_with(|| Arc::new(Notify::new())).clone();
        watches.by_dir.insert(dir.to_path_buf(), (wd, 1, notify.clone()));
        Some(DirGuard { inner: inner.clone(), dir: dir.to_path_buf(), notify })
    }
}

impl DirGuard {
    /// Woken at every change in the directory: take (and enable) a `notified()` before looking
    /// at the directory, await it after, and a change in between still wakes it.
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for DirGuard {
    fn drop(&mut self) {
        let mut watches = self.inner.watches.lock().expect("dirwatch lock");
        let Some((wd, holds, _)) = watches.by_dir.get_mut(&self.dir) else { return };
        *holds -= 1;
        if *holds > 0 {
            return;
        }
        let wd = *wd;
        watches.by_dir.remove(&self.dir);
        if !watches.by_dir.values().any(|(w, _, _)| *w == wd) {
            watches.by_wd.remove(&wd);
            let _ = self.inner.inotify.get_ref().0.rm_watch(wd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_write_wakes_every_waiter_of_the_directory_and_the_last_guard_ends_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let watch = DirWatch::start();
        let (a, b) = (watch.watch(dir.path()).unwrap(), watch.watch(dir.path()).unwrap());
        let inner = watch.inner.clone().unwrap();
        assert_eq!(inner.watches.lock().unwrap().by_dir.len(), 1, "one watch for both");
        {
            let (na, nb) = (a.notify().notified(), b.notify().notified());
            tokio::pin!(na, nb);
            na.as_mut().enable();
            nb.as_mut().enable();
            // Written before anyone awaits: the enabled waiters are woken all the same.
            std::fs::write(dir.path().join("app.pid"), "123\n").unwrap();
            tokio::time::timeout(Duration::from_secs(2), na).await.expect("a woken");
            tokio::time::timeout(Duration::from_secs(2), nb).await.expect("b woken");
        }
        drop(a);
        assert_eq!(inner.watches.lock().unwrap().by_dir.len(), 1);
        drop(b);
        assert!(inner.watches.lock().unwrap().by_dir.is_empty());
        assert!(inner.watches.lock().unwrap().by_wd.is_empty());
        assert!(watch.watch(&dir.path().join("missing")).is_none(), "a missing directory is polled");
    }
}
