//! Starting and signalling an instance's processes: `/bin/sh -c CMD` (or CMD's program itself)
//! in its work dir, as its user, in a new session and its own cgroup, with its environment and
//! log files.

use super::reaper::{ExitWatch, Reaper};
use super::spawn::{Credentials, Prepared};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A user as the kernel needs it, looked up before forking (lookups allocate and read files,
/// which a forked child of a threaded process must not do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (what initgroups would set).
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

/// What a user's lookup was read from: /etc/passwd's and /etc/group's inode, size and change
/// time. A start looks a user up again only when one of them changed (an edit, a useradd, a
/// file replaced by rename), at the price of two stats instead of reading and parsing both.
type AccountFiles = [(u64, u64, u64, i64, i64); 2];

fn account_files() -> Option<AccountFiles> {
    use std::os::unix::fs::MetadataExt;
    let stamp =
        |path: &str| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino(), m.size(), m.ctime(), m.ctime_nsec()));
    Some([stamp("/etc/passwd")?, stamp("/etc/group")?])
}

/// Users looked up, valid while the account files are as they were.
static LOOKED_UP: std::sync::Mutex<Option<(AccountFiles, std::collections::HashMap<String, ResolvedUser>)>> =
    std::sync::Mutex::new(None);

impl ResolvedUser {
    /// `name`'s ids, groups and home, as the account files say now (see [`AccountFiles`]: a
    /// lookup is kept until they change; a user given by another name service than the files
    /// is looked up again after any change of theirs).
    pub fn lookup(name: &str) -> Result<ResolvedUser, String> {
        let files = account_files();
        if let Some(files) = files {
            let cache = LOOKED_UP.lock().expect("users lock");
            if let Some(user) = cache.as_ref().filter(|(f, _)| *f == files).and_then(|(_, users)| users.get(name)) {
                return Ok(user.clone());
            }
        }
        let user = Self::read(name)?;
        if let Some(files) = files {
            let mut cache = LOOKED_UP.lock().expect("users lock");
            let (kept, users) = cache.get_or_insert_with(|| (files, Default::default()));
            if *kept != files {
                (*kept, *users) = (files, Default::default());
            }
            users.insert(name.to_string(), user.clone());
        }
        Ok(user)
    }

    /// [`Self::lookup`] from the name services themselves.
    fn read(name: &str) -> Result<ResolvedUser, String> {
        let user = nix::unistd::User::from_name(name)
            .map_err(|e| format!("cannot look up user {name:?}: {e}"))?
            .ok_or_else(|| format!("user {name:?} does not exist on this host"))?;
        let cname = CString::new(name).map_err(|_| format!("user {name:?} has a NUL byte"))?;
        let groups = nix::unistd::getgrouplist(&cname, user.gid)
            .map_err(|e| format!("cannot list groups of {name:?}: {e}"))?
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        Ok(ResolvedUser {
            name: name.to_string(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            groups,
            home: user.dir,
        })
    }

    /// Root, without reading any file.
    pub fn root() -> ResolvedUser {
        ResolvedUser { name: "root".into(), uid: 0, gid: 0, groups: Vec::new(), home: PathBuf::from("/root") }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// Everything needed to start one command of an instance.
pub struct Launch<'a> {
    pub command: &'a str,
    pub work_dir: &'a Path,
    pub user: &'a ResolvedUser,
    pub env: &'a [(String, String)],
    pub stdout: File,
    pub stderr: File,
    /// cgroup.procs files the child joins before exec, so every descendant is inside.
    pub cgroup_join: Vec<OwnedFd>,
}

/// Starts `sh -c command` (or the program itself when the command is one plain call, see
/// [`super::command`]); returns its pid and a watch on its exit (from the one reaper).
pub fn launch(reaper: &Reaper, l: Launch<'_>) -> io::Result<(i32, ExitWatch)> {
    let path = l.env.iter().rev().find(|(k, _)| k == "PATH").map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    let argv = super::command::direct_argv(l.command, path, l.work_dir)
        .unwrap_or_else(|| vec!["/bin/sh".to_string(), "-c".to_string(), l.command.to_string()]);
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), l.user.home.to_string_lossy().into_owned()),
        ("USER".into(), l.user.name.clone()),
        ("LOGNAME".into(), l.user.name.clone()),
        ("SHELL".into(), "/bin/sh".into()),
    ];
    env.extend(l.env.iter().cloned());
    let credentials =
        (!l.user.is_root()).then(|| Credentials { uid: l.user.uid, gid: l.user.gid, groups: l.user.groups.clone() });
    // argv[0] is the program's path for a direct call and "/bin/sh" for the shell: exec it.
    let program = argv[0].clone();
    let prepared = Prepared::new(&program, &argv, &env, l.work_dir, l.stdout, l.stderr, l.cgroup_join, credentials)?;
    reaper.spawn(|| prepared.spawn())
}

/// A pidfd: a handle on one process that survives pid reuse. Readable when it exits.
/// It joins the event loop only while someone waits on it (see [`Pidfd::exited`]): a daemon
/// holds thousands, most of them only to signal or identify a process.
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
}

impl Pidfd {
    pub fn open(pid: i32) -> io::Result<Pidfd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just gave us this fd and nobody else owns it.
        Ok(Pidfd::from_owned(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    /// A pidfd the kernel gave otherwise (`CLONE_PIDFD`), held as any other (see
    /// [`super::spawn::held_high`]).
    pub fn from_owned(fd: OwnedFd) -> Pidfd {
        Pidfd { fd: super::spawn::held_high(fd) }
    }

    /// Reaps the process, our child, if it has ended (`waitid(P_PIDFD)`: that one child looked
    /// at): its status, or None while it runs or once another reaped it.
    pub fn reap(&self) -> Option<super::exit::ExitStatus> {
        loop {
            // SAFETY: waitid fills the zeroed siginfo it is given; P_PIDFD names the child by
            // the descriptor we hold.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WEXITED | libc::WNOHANG;
            let r = unsafe { libc::waitid(libc::P_PIDFD, self.fd.as_raw_fd() as libc::id_t, &mut info, flags) };
            if r < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return None;
            }
            // SAFETY: waitid filled a SIGCHLD siginfo (si_pid 0: not ended yet under WNOHANG).
            let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
            if pid == 0 {
                return None;
            }
            return Some(match info.si_code {
                libc::CLD_EXITED => super::exit::ExitStatus::Code(status),
                _ => super::exit::ExitStatus::Signal(status),
            });
        }
    }

    /// Resolves when the process has exited.
    pub async fn exited(&self) {
        loop {
            // Registered for this wait only.
            let fd = std::os::fd::AsFd::as_fd(&self.fd);
            // SAFETY: the AsyncFd borrows the OwnedFd, so the descriptor stays open and the same
            // for the AsyncFd's whole life.
            let registered =
                unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
            match registered {
                // A pidfd stays readable once the process exited; nothing to clear.
                Ok(fd) => match fd.readable().await {
                    Ok(_guard) => return,
                    Err(e) => tracing::warn!("pidfd wait: {e}"),
                },
                Err(e) => tracing::warn!("pidfd registration: {}", e.into_parts().1),
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Sends `sig` to exactly this process, never to a later process with the same pid.
    pub fn signal(&self, sig: nix::sys::signal::Signal) -> io::Result<()> {
        // SAFETY: pidfd_send_signal with a valid fd, a signal number and no siginfo.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, self.fd.as_raw_fd(), sig as i32, 0usize, 0u32) };
        if r == 0 {
            Ok(())
        } else {
            let e = io::Error::last_os_error();
            // Already gone is what a signal was for.
            if e.raw_os_error() == Some(libc::ESRCH) {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

/// The pid in a pidfile: the first non-blank line, whitespace and extra lines tolerated. Read
/// as [`crate::safefs::read_workload_file`] does: only a regular file of the process's user
/// (`uid`), never through a symlink or a hard link it planted.
pub fn read_pidfile(path: &Path, uid: u32) -> Result<i32, String> {
    let data = crate::safefs::read_workload_file(path, uid, 4096).map_err(|e| format!("cannot read pidfile {e}"))?;
    let text = String::from_utf8_lossy(&data);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    let first = first.ok_or_else(|| format!("pidfile {} is empty", path.display()))?;
    match first.parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(format!("pidfile {} holds {first:?}, not a pid", path.display())),
    }
}

/// Creates `dir` and any missing parents below `root`, giving the new ones to `user`.
/// Existing directories are left as they are; a symlink on the way is refused.
/// Whether `user` may create files in directory `dir`, by its owner, group and mode (root
/// may); Err says why not, for people.
pub fn writable_by(dir: &Path, user: &ResolvedUser) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if user.uid == 0 {
        return Ok(());
    }
    let m = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let bit = if m.uid() == user.uid {
        0o200
    } else if m.gid() == user.gid || user.groups.contains(&m.gid()) {
        0o020
    } else {
        0o002
    };
    if m.mode() & bit != 0 {
        return Ok(());
    }
    let owner = nix::unistd::User::from_uid(m.uid().into()).ok().flatten().map_or(m.uid().to_string(), |u| u.name);
    let group = nix::unistd::Group::from_gid(m.gid().into()).ok().flatten().map_or(m.gid().to_string(), |g| g.name);
    Err(format!(
        "user {} cannot write {} (owner {owner}, group {group}, mode {:04o})",
        user.name,
        dir.display(),
        m.mode() & 0o7777
    ))
}

pub fn create_owned_dirs(root: &Path, dir: &Path, user: &ResolvedUser) -> io::Result<()> {
    crate::safefs::create_dirs(root, dir, user.uid, user.gid)
}

/// Opens (appending, creating) a log file the daemon hands to a child, in the instance's run
/// directory (which must be root's): never through a symlink or a hard link. It is root's,
/// readable by the workload's group (0640), so the workload reads its own logs and writes
/// them through the descriptor it is given, but cannot hard-link them elsewhere (the kernel's
/// protected_hardlinks wants the owner, or read and write permission): a second link would
/// make rotation refuse the file for good.
pub fn open_log(path: &Path, user: &ResolvedUser) -> io::Result<File> {
    let [file] = open_logs(path.parent().unwrap_or(Path::new("/")), [path], user)?;
    Ok(file)
}

/// [`open_log`] of each of `paths`, all in the run directory `dir`, which is opened once.
pub fn open_logs<const N: usize>(dir: &Path, paths: [&Path; N], user: &ResolvedUser) -> io::Result<[File; N]> {
    let dir_fd = crate::safefs::open_daemon_dir(dir)?;
    debug_assert!(paths.iter().all(|p| p.parent() == Some(dir)));
    let mut files = Vec::with_capacity(N);
    for path in paths {
        let name = path.file_name().unwrap_or_default();
        let name = crate::fetch::sys::name(name.as_encoded_bytes()).map_err(|e| crate::safefs::at(path, e))?;
        let (file, st) = crate::safefs::open_log_stat_at(std::os::fd::AsFd::as_fd(&dir_fd), &name, path)?;
        files.push(owned_log(file, st, path, user)?);
    }
    Ok(files.try_into().unwrap_or_else(|_| unreachable!("one file per path")))
}

/// A log file as the workload's group reads it (see [`open_log`]).
fn owned_log(file: File, st: libc::stat, path: &Path, user: &ResolvedUser) -> io::Result<File> {
    // Every start passes here (a respawn too): change nothing that is already so.
    if (st.st_uid, st.st_gid) != (0, user.gid) {
        nix::unistd::fchown(file.as_raw_fd(), Some(0.into()), Some(user.gid.into()))
            .map_err(|e| crate::safefs::at(path, e.into()))?;
    }
    if st.st_mode & 0o7777 != 0o640 {
        crate::fetch::sys::chmod_fd(std::os::fd::AsFd::as_fd(&file), 0o640).map_err(|e| crate::safefs::at(path, e))?;
    }
    Ok(file)
}

/// Size-based rotation that works while the child keeps its fd open (O_APPEND): copy the file
/// to `.1` (shifting older copies up to `keep`), then truncate it in place. `path` is in a
/// run directory, which must be root's (see [`rotate_log_at`]).
pub fn rotate_log(path: &Path, max_bytes: u64, keep: u32) -> io::Result<bool> {
    let dir_path = path.parent().unwrap_or(Path::new("/"));
    let dir = crate::safefs::open_daemon_dir(dir_path)?;
    let name = path.file_name().unwrap_or_default();
    rotate_log_at(std::os::fd::AsFd::as_fd(&dir), dir_path, name, max_bytes, keep)
}

/// [`rotate_log`] of `name` in the open directory `dir` (shown as `dir_path`). Everything goes
/// through the descriptor: the log is opened without following a symlink and used only if it
/// is a regular file with one link (so never a hard link to a file elsewhere); the copy is a
/// new file the daemon creates, given the log's owner; it is read and truncated through the
/// descriptor it was checked on.
pub fn rotate_log_at(
    dir: std::os::fd::BorrowedFd<'_>,
    dir_path: &Path,
    name: &std::ffi::OsStr,
    max_bytes: u64,
    keep: u32,
) -> io::Result<bool> {
    use crate::fetch::sys;
    use std::os::unix::ffi::OsStrExt;
    let path = dir_path.join(name);
    let cname = |n: &[u8]| sys::name(n).map_err(|e| crate::safefs::at(&path, e));
    let log_name = cname(name.as_bytes())?;
    let mut file = match crate::safefs::open_regular_at(dir, &log_name, &path, libc::O_RDWR, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let st = crate::safefs::check_regular(&file, &path)?;
    if (st.st_size as u64) < max_bytes || keep == 0 {
        return Ok(false);
    }
    let numbered = |n: u32| {
        let mut b = name.as_bytes().to_vec();
        b.extend_from_slice(format!(".{n}").as_bytes());
        b
    };
    for n in (1..keep).rev() {
        let (from, to) = (cname(&numbered(n))?, cname(&numbered(n + 1))?);
        match sys::rename(dir, &from, dir, &to, 0) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(crate::safefs::at(&path, e)),
            _ => {}
        }
    }
    let mut tmp_name = numbered(1);
    tmp_name.extend_from_slice(b".steward-tmp");
    let tmp = cname(&tmp_name)?;
    let tmp_path = dir_path.join(std::ffi::OsStr::from_bytes(&tmp_name));
    match sys::unlink(dir, &tmp, false) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(crate::safefs::at(&tmp_path, e)),
        _ => {}
    }
    let copied = (|| {
        let mut copy = sys::create_file(dir, &tmp)?;
        sys::chown_fd(std::os::fd::AsFd::as_fd(&copy), st.st_uid, st.st_gid)?;
        sys::chmod_fd(std::os::fd::AsFd::as_fd(&copy), 0o640)?;
        use std::io::{Seek, SeekFrom};
        file.seek(SeekFrom::Start(0))?;
        // What the file held when it was checked: a writer still bursting must not keep the
        // copy going (what it writes until the truncation is lost, as with any copytruncate).
        io::copy(&mut io::Read::take(&mut file, st.st_size as u64), &mut copy)?;
        sys::rename(dir, &tmp, dir, &cname(&numbered(1)).map_err(io::Error::other)?, 0)
    })();
    if let Err(e) = copied {
        let _ = sys::unlink(dir, &tmp, false);
        return Err(crate::safefs::at(&tmp_path, e));
    }
    file.set_len(0).map_err(|e| crate::safefs::at(&path, e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn pidfile_tolerates_whitespace_and_extra_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pid");
        std::fs::write(&p, "\n  4242 \nsecond line\n").unwrap();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(read_pidfile(&p, me).unwrap(), 4242);
        std::fs::write(&p, "abc\n").unwrap();
        assert!(read_pidfile(&p, me).unwrap_err().contains("not a pid"));
        std::fs::write(&p, "   \n").unwrap();
        assert!(read_pidfile(&p, me).unwrap_err().contains("empty"));
        std::fs::write(&p, "-5").unwrap();
        assert!(read_pidfile(&p, me).is_err());
    }

    #[test]
    fn rotation_keeps_numbered_copies_and_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.log");
        let mut f = std::fs::OpenOptions::new().append(true).create(true).open(&p).unwrap();
        for round in 0..3 {
            f.write_all(format!("round {round} {}\n", "x".repeat(100)).as_bytes()).unwrap();
            assert!(rotate_log(&p, 50, 2).unwrap());
        }
        // The writer's fd keeps appending at the new end after truncation.
        f.write_all(b"after\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "after\n");
        assert!(std::fs::read_to_string(dir.path().join("out.log.1")).unwrap().starts_with("round 2"));
        assert!(std::fs::read_to_string(dir.path().join("out.log.2")).unwrap().starts_with("round 1"));
        assert!(!dir.path().join("out.log.3").exists());
        assert!(!rotate_log(&p, 50, 2).unwrap(), "small files stay");
    }

    #[test]
    fn owned_dirs_refuse_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("work");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("evil")).unwrap();
        let me = ResolvedUser::lookup("root").unwrap();
        let err = create_owned_dirs(&root, &root.join("evil/x"), &me).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        create_owned_dirs(&root, &root.join("a/b/c"), &me).unwrap();
        assert!(root.join("a/b/c").is_dir());
    }

    #[test]
    fn unknown_user_is_a_clear_error() {
        let err = ResolvedUser::lookup("no-such-user-steward").unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }
}
