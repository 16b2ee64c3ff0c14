//! Size-based rotation of every instance's log files (see `LogRotation`). A process writes its
//! files itself, so there is no write the daemon could hook: each run directory is watched with
//! inotify instead, and a file that was written is looked at (one `fstatat`) and rotated as soon
//! as it passes the limit, so a burst cannot outgrow it by more than what is written while a
//! rotation runs. A full pass every `every` picks up new run directories and covers a host
//! where inotify is unavailable (or its watches are used up).

use super::LogRotation;
use crate::fetch::sys;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::{BTreeSet, HashMap};
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Runs the rotation for as long as the daemon does, on a thread of its own (the work is file
/// system calls, and a burst keeps it busy).
pub(super) async fn rotate_logs(run_base_dir: PathBuf, rotation: LogRotation) {
    let started = std::thread::Builder::new().name("log-rotation".into()).spawn(move || {
        let mut watched = Watched::new(run_base_dir, rotation);
        loop {
            watched.pass();
            watched.wait_for_writes();
        }
    });
    if let Err(e) = started {
        tracing::error!("log rotation: cannot start its thread: {e}");
    }
}

/// A run directory watched: opened again (through the run root, no symlink followed) when its
/// files were written, and used only if it is still the directory the watch is on.
struct RunDir {
    name: CString,
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl RunDir {
    /// Through the run root's descriptor while it is watched (`held`: every write of a log
    /// comes here, two at each start), else through its path.
    fn open(&self, held: Option<&OwnedFd>, run_base_dir: &Path) -> Option<OwnedFd> {
        let opened;
        let base = match held {
            Some(base) => base.as_fd(),
            None => {
                opened = OwnedFd::from(std::fs::File::open(run_base_dir).ok()?);
                opened.as_fd()
            }
        };
        let dir = crate::safefs::open_daemon_dir_at(base, &self.name, &self.path).ok()?;
        let st = sys::stat_fd(dir.as_fd()).ok()?;
        (st.st_dev == self.dev && st.st_ino == self.ino).then_some(dir)
    }
}

/// The run directories watched, by watch descriptor.
struct Watched {
    run_base_dir: PathBuf,
    rotation: LogRotation,
    inotify: Option<Inotify>,
    /// By name and inode, not by an open descriptor: a descriptor per instance would be copied
    /// into every spawn's child and closed at its exec (a cost that grew with the instances).
    dirs: HashMap<WatchDescriptor, RunDir>,
    /// The run root's own watch: a run directory made there is watched at once.
    base: Option<(WatchDescriptor, OwnedFd)>,
}

impl Watched {
    fn new(run_base_dir: PathBuf, rotation: LogRotation) -> Watched {
        let inotify = match Inotify::init(InitFlags::IN_CLOEXEC) {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::warn!("log rotation: no inotify ({e}): logs are checked every {:?}", rotation.every);
                None
            }
        };
        Watched { run_base_dir, rotation, inotify, dirs: HashMap::new(), base: None }
    }

    /// Every log of every run directory, each directory watched from now on.
    fn pass(&mut self) {
        let base = match std::fs::File::open(&self.run_base_dir) {
            Ok(f) => OwnedFd::from(f),
            Err(e) => return tracing::warn!("log rotation: {}: {e}", self.run_base_dir.display()),
        };
        if self.base.is_none() {
            if let Some(inotify) = &self.inotify {
                let flags = AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_ONLYDIR;
                match inotify.add_watch(proc_path(&base).as_str(), flags) {
                    Ok(wd) => self.base = Some((wd, base.try_clone().expect("a descriptor's copy"))),
                    Err(e) => tracing::debug!("log rotation: cannot watch {}: {e}", self.run_base_dir.display()),
                }
            }
        }
        for instance in sys::list(base.as_fd()).unwrap_or_default() {
            self.enter(base.as_fd(), &instance, true);
        }
    }

    /// Watches run directory `instance` of the run root `base`, rotating its logs first when
    /// `rotate` (a directory just made has none yet).
    fn enter(&mut self, base: std::os::fd::BorrowedFd<'_>, instance: &CString, rotate: bool) {
        let dir_path = self.run_base_dir.join(sys::os_str(instance));
        let dir = match crate::safefs::open_daemon_dir_at(base, instance, &dir_path) {
            Ok(d) => d,
            Err(e) => return tracing::debug!("log rotation skips {e}"),
        };
        if rotate {
            for file in sys::list(dir.as_fd()).unwrap_or_default() {
                self.rotate(dir.as_fd(), &dir_path, &file);
            }
        }
        self.watch(&dir, instance, dir_path);
    }

    /// Watches `dir` (`name` in the run root) for writes, once. The watch is added by the
    /// descriptor's /proc path, so it is the directory that was checked.
    fn watch(&mut self, dir: &OwnedFd, name: &CString, dir_path: PathBuf) {
        let Some(inotify) = &self.inotify else { return };
        let Ok(st) = sys::stat_fd(dir.as_fd()) else { return };
        match inotify.add_watch(proc_path(dir).as_str(), AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_ONLYDIR) {
            Ok(wd) => {
                let run_dir = RunDir { name: name.clone(), path: dir_path, dev: st.st_dev, ino: st.st_ino };
                self.dirs.entry(wd).or_insert(run_dir);
            }
            Err(e) => tracing::debug!("log rotation: cannot watch {}: {e}", dir_path.display()),
        }
    }

    /// Waits up to `every` for files to be written, rotating each that passed the limit.
    fn wait_for_writes(&mut self) {
        if self.inotify.is_none() {
            return std::thread::sleep(self.rotation.every);
        }
        let deadline = std::time::Instant::now() + self.rotation.every;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            let events = match self.next_events(left) {
                Ok(Some(events)) => events,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("log rotation: waiting for writes: {e}");
                    return std::thread::sleep(left);
                }
            };
            // A file written many times since the last look is looked at once.
            let mut written = BTreeSet::new();
            let mut made = Vec::new();
            for ev in events {
                if self.base.as_ref().is_some_and(|(wd, _)| *wd == ev.wd) {
                    made.extend(ev.name);
                } else if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    self.dirs.remove(&ev.wd);
                } else if let Some(name) = ev.name {
                    written.insert((ev.wd, name));
                }
            }
            if let Some(base) = self.base.as_ref().and_then(|(_, fd)| fd.try_clone().ok()) {
                for name in made {
                    if let Ok(name) = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str())) {
                        self.enter(base.as_fd(), &name, false);
                    }
                }
            }
            let mut opened: HashMap<WatchDescriptor, Option<OwnedFd>> = HashMap::new();
            for (wd, name) in written {
                let Some(run_dir) = self.dirs.get(&wd) else { continue };
                let Ok(name) = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str())) else {
                    continue;
                };
                let held = self.base.as_ref().map(|(_, base)| base);
                let dir = opened.entry(wd).or_insert_with(|| run_dir.open(held, &self.run_base_dir));
                let Some(dir) = dir.as_ref() else { continue };
                if over_limit(dir.as_fd(), &name, self.rotation.max_bytes) {
                    self.rotate(dir.as_fd(), &run_dir.path, &name);
                }
            }
        }
    }

    /// The next inotify events, waiting up to `left` (None: none came).
    fn next_events(&self, left: std::time::Duration) -> nix::Result<Option<Vec<nix::sys::inotify::InotifyEvent>>> {
        let Some(inotify) = &self.inotify else { return Ok(None) };
        let mut fds = [nix::poll::PollFd::new(inotify.as_fd(), nix::poll::PollFlags::POLLIN)];
        let timeout = nix::poll::PollTimeout::try_from(left.as_millis().min(60_000) as i32)
            .unwrap_or(nix::poll::PollTimeout::NONE);
        loop {
            match nix::poll::poll(&mut fds, timeout) {
                Ok(0) => return Ok(None),
                Ok(_) => return inotify.read_events().map(Some),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn rotate(&self, dir: std::os::fd::BorrowedFd<'_>, dir_path: &Path, file: &CString) {
        let name = sys::os_str(file);
        if Path::new(name).extension().is_none_or(|e| e != "log") {
            return;
        }
        let rotated = crate::runtime::process::rotate_log_at(
            dir,
            dir_path,
            OsStr::new(name),
            self.rotation.max_bytes,
            self.rotation.keep,
        );
        if let Err(e) = rotated {
            tracing::warn!("log rotation: {e}");
        }
    }
}

/// The /proc path of an open directory: a watch added through it is on that very directory.
fn proc_path(dir: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(dir))
}

/// Whether `name` in `dir` is a log larger than `max` (one `fstatat`, no symlink followed).
fn over_limit(dir: std::os::fd::BorrowedFd<'_>, name: &CString, max: u64) -> bool {
    sys::stat_at(dir, name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_size as u64 >= max)
}

/// One full pass over every instance's logs (the tests' and the timer's).
pub fn rotate_all(run_base_dir: &Path, rotation: LogRotation) {
    Watched { run_base_dir: run_base_dir.to_path_buf(), rotation, inotify: None, dirs: HashMap::new(), base: None }
        .pass();
}
