//! File operations the daemon does as root in directories a workload can reach: its run
//! directory (logs, log positions, run markers), its workPath (pidfile, secret and configmap
//! files) and their parents. None of them goes through a path the workload's user could
//! replace: directories are walked one component at a time with `O_NOFOLLOW`, files are opened
//! relative to a directory descriptor with `O_NOFOLLOW`, and a file is used only if it is a
//! regular file with a single link (a hard link to a file elsewhere, e.g. a root-only one,
//! has two). A run directory must belong to root (or Steward's own user): one a workload owns
//! could hold anything.

use crate::fetch::sys;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// An io error that names its path.
pub fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// A directory of the daemon's at `dir` with `mode`: made with it, or one already there (a
/// symlink or a file in its place refused) set to it. Errors name the path.
pub fn dir_with_mode(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if !std::fs::symlink_metadata(dir).map_err(|e| at(dir, e))?.is_dir() {
                return Err(io::Error::other(format!("{} is not a directory", dir.display())));
            }
        }
        Err(e) => return Err(at(dir, e)),
    }
    // Set even when just made: the umask may have taken bits off.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(|e| at(dir, e))
}

fn other(path: &Path, message: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, format!("{}: {message}", path.display()))
}

fn split(path: &Path) -> io::Result<(&Path, CString)> {
    let parent = path.parent().ok_or_else(|| other(path, "has no parent directory"))?;
    let name = path.file_name().ok_or_else(|| other(path, "has no file name"))?;
    Ok((parent, sys::name(name.as_bytes()).map_err(|e| at(path, e))?))
}

/// Whether root or Steward's own user owns `st` (what the daemon creates).
fn daemon_owned(st: &libc::stat) -> bool {
    st.st_uid == 0 || st.st_uid == nix::unistd::geteuid().as_raw()
}

/// Opens a directory of the daemon's (an instance's run directory, or a root of the config):
/// its parent by path (configured by the administrator, trusted), the directory itself without
/// following a symlink; refused unless root (or Steward's own user) owns it.
pub fn open_daemon_dir(path: &Path) -> io::Result<OwnedFd> {
    let (parent, name) = split(path)?;
    let parent_fd: OwnedFd = File::open(parent).map_err(|e| at(parent, e))?.into();
    open_daemon_dir_at(parent_fd.as_fd(), &name, path)
}

/// [`open_daemon_dir`] of `name` in `dir` (shown as `path`).
pub fn open_daemon_dir_at(dir: BorrowedFd<'_>, name: &CString, path: &Path) -> io::Result<OwnedFd> {
    let fd = sys::open_dir(dir, name).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => other(path, "is not a directory (a symlink?); refusing it"),
        _ => at(path, e),
    })?;
    let st = sys::stat_fd(fd.as_fd()).map_err(|e| at(path, e))?;
    if !daemon_owned(&st) {
        return Err(other(
            path,
            format!("belongs to uid {}, not to root: a workload's directory, not the daemon's; refusing it", st.st_uid),
        ));
    }
    Ok(fd)
}

/// Opens `name` in `dir` (shown as `path`) without following a symlink and without blocking on
/// a fifo; refused unless it is a regular file with one link.
pub fn open_regular_at(dir: BorrowedFd<'_>, name: &CString, path: &Path, flags: i32, mode: u32) -> io::Result<File> {
    open_regular_stat_at(dir, name, path, flags, mode).map(|(file, _)| file)
}

/// [`open_regular_at`], with the file's stat as checked.
fn open_regular_stat_at(
    dir: BorrowedFd<'_>,
    name: &CString,
    path: &Path,
    flags: i32,
    mode: u32,
) -> io::Result<(File, libc::stat)> {
    let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    let fd = loop {
        // SAFETY: openat with a valid directory fd, a NUL-terminated name, flags and a mode.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint) };
        if fd >= 0 {
            break fd;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ELOOP) => return Err(other(path, "is a symlink; refusing to follow it")),
            // A fifo without a reader, opened for writing without blocking.
            Some(libc::ENXIO) => return Err(other(path, "is not a regular file; refusing it")),
            _ => return Err(at(path, e)),
        }
    };
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    let st = check_regular(&file, path)?;
    Ok((file, st))
}

/// A regular file with exactly one link: not a device or fifo, and not a hard link to a file
/// elsewhere.
pub fn check_regular(file: &File, path: &Path) -> io::Result<libc::stat> {
    let st = sys::stat_fd(file.as_fd()).map_err(|e| at(path, e))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(other(path, "is not a regular file; refusing it"));
    }
    if st.st_nlink != 1 {
        return Err(other(path, format!("has {} hard links, not one; refusing it", st.st_nlink)));
    }
    Ok(st)
}

/// Opens (appending, creating it 0640 if missing) a log file in a directory of the daemon's.
/// An entry of that name that is not such a file (a symlink, a hard link, a fifo) is removed
/// and replaced by a new file: the directory is the daemon's, so nobody else put it there
/// legitimately.
pub fn open_log(path: &Path) -> io::Result<File> {
    let (parent, name) = split(path)?;
    let dir = open_daemon_dir(parent)?;
    open_log_at(dir.as_fd(), &name, path)
}

/// [`open_log`] of `name` in `dir` (shown as `path`).
pub fn open_log_at(dir: BorrowedFd<'_>, name: &CString, path: &Path) -> io::Result<File> {
    open_log_stat_at(dir, name, path).map(|(file, _)| file)
}

/// [`open_log_at`], with the file's stat as checked (its owner and mode, for the caller).
pub fn open_log_stat_at(dir: BorrowedFd<'_>, name: &CString, path: &Path) -> io::Result<(File, libc::stat)> {
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT;
    match open_regular_stat_at(dir, name, path, flags, 0o640) {
        Ok(opened) => Ok(opened),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            tracing::warn!("{e}; replacing it with a new log file");
            sys::unlink(dir, name, false).map_err(|e| at(path, e))?;
            open_regular_stat_at(dir, name, path, flags | libc::O_EXCL, 0o640)
        }
        Err(e) => Err(e),
    }
}

/// Opens a file in a directory of the daemon's (a log) for reading: a regular file with one
/// link, never through a symlink.
pub fn open_daemon_file(path: &Path) -> io::Result<File> {
    let (parent, name) = split(path)?;
    let dir = open_daemon_dir(parent)?;
    open_regular_at(dir.as_fd(), &name, path, libc::O_RDONLY, 0)
}

/// Reads a file in a directory of the daemon's (a log, a log position), up to `max` bytes.
pub fn read_daemon_file(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (parent, name) = split(path)?;
    let dir = open_daemon_dir(parent)?;
    let file = open_regular_at(dir.as_fd(), &name, path, libc::O_RDONLY, 0)?;
    let mut data = Vec::new();
    file.take(max).read_to_end(&mut data).map_err(|e| at(path, e))?;
    Ok(data)
}

/// Overwrites a small file of the daemon's in place (no truncation: see `write_small` callers);
/// an entry of that name that is not its regular file is replaced, as in [`open_log`].
pub fn write_daemon_file(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let (parent, name) = split(path)?;
    let dir = open_daemon_dir(parent)?;
    let flags = libc::O_WRONLY | libc::O_CREAT;
    let mut file = match open_regular_at(dir.as_fd(), &name, path, flags, mode) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            tracing::warn!("{e}; replacing it");
            sys::unlink(dir.as_fd(), &name, false).map_err(|e| at(path, e))?;
            open_regular_at(dir.as_fd(), &name, path, flags | libc::O_EXCL, mode)?
        }
        Err(e) => return Err(e),
    };
    file.write_all(data).map_err(|e| at(path, e))
}

/// The length of a file of the daemon's (0 if missing or not acceptable).
pub fn daemon_file_len(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).ok().filter(|m| m.is_file()).map_or(0, |m| m.len())
}

/// Opens directory `path` in a workload's tree (its workPath and below), creating what is
/// missing owned by `owner` when given: a symlink on the way is followed only if root owns it
/// (one the workload planted is refused).
pub fn open_workload_dir(path: &Path, owner: Option<(u32, u32)>) -> io::Result<OwnedFd> {
    crate::fetch::open_dir_walk(path, owner).map_err(|m| other(path, m))
}

/// Reads a file the workload wrote (its pidfile) in its own tree, up to `max` bytes: refused
/// unless it is a regular file with one link owned by `uid` (or by anyone when the workload
/// runs as root, who can read everything anyway). So a planted symlink or hard link to a file
/// the workload cannot read gets it nothing.
pub fn read_workload_file(path: &Path, uid: u32, max: u64) -> io::Result<Vec<u8>> {
    let (parent, name) = split(path)?;
    let dir = open_workload_dir(parent, None)?;
    let file = open_regular_at(dir.as_fd(), &name, path, libc::O_RDONLY, 0)?;
    let st = sys::stat_fd(file.as_fd()).map_err(|e| at(path, e))?;
    if uid != 0 && st.st_uid != uid {
        return Err(other(path, format!("belongs to uid {}, not to the process's user (uid {uid})", st.st_uid)));
    }
    let mut data = Vec::new();
    file.take(max).read_to_end(&mut data).map_err(|e| at(path, e))?;
    Ok(data)
}

/// Writes `data` to `path` atomically, owned by `uid:gid` with `mode`: a new file beside it
/// (created exclusively, never through a symlink), then renamed over the old one. The
/// directory is opened as [`open_workload_dir`] does, so the write stays in the tree.
pub fn replace_file(path: &Path, data: &[u8], mode: u32, uid: u32, gid: u32) -> io::Result<()> {
    let (parent, name) = split(path)?;
    let dir = open_workload_dir(parent, None)?;
    let tmp_text = format!(".{}.steward-tmp", path.file_name().unwrap_or_default().to_string_lossy());
    let tmp = sys::name(tmp_text.as_bytes()).map_err(|e| at(path, e))?;
    let tmp_path: PathBuf = parent.join(&tmp_text);
    match sys::unlink(dir.as_fd(), &tmp, false) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(at(&tmp_path, e)),
        _ => {}
    }
    let result = (|| {
        let mut f = sys::create_file(dir.as_fd(), &tmp)?;
        sys::chown_fd(f.as_fd(), uid, gid)?;
        sys::chmod_fd(f.as_fd(), mode)?;
        f.write_all(data)?;
        f.sync_all()?;
        sys::rename(dir.as_fd(), &tmp, dir.as_fd(), &name, 0)?;
        // The directory entry too.
        let _ = nix::unistd::fsync(dir.as_raw_fd());
        Ok(())
    })();
    if result.is_err() {
        let _ = sys::unlink(dir.as_fd(), &tmp, false);
    }
    result.map_err(|e| at(path, e))
}

/// Removes file `path` from a workload's tree, if it is there: the entry itself (a symlink the
/// workload planted is removed, never followed), found through its directory opened as
/// [`open_workload_dir`] does. A directory of that name is an error.
pub fn remove_workload_file(path: &Path) -> io::Result<()> {
    let Some((dir, name)) = workload_parent(path)? else { return Ok(()) };
    match sys::unlink(dir.as_fd(), &name, false) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(at(path, e)),
        _ => Ok(()),
    }
}

/// Removes a workload's directory `path` and everything in it, as root, without following a
/// symlink anywhere (one the workload planted on the way to it, or in it, is removed, not
/// followed) and without crossing into another filesystem mounted inside it.
pub fn remove_workload_dir(path: &Path) -> io::Result<()> {
    let Some((dir, name)) = workload_parent(path)? else { return Ok(()) };
    sys::remove_tree(dir.as_fd(), &name).map_err(|e| at(path, e))
}

/// The directory holding `path` in a workload's tree, opened as [`open_workload_dir`] does, and
/// `path`'s name in it; None when that directory does not exist (nothing there to remove).
fn workload_parent(path: &Path) -> io::Result<Option<(OwnedFd, CString)>> {
    let (parent, name) = split(path)?;
    match open_workload_dir(parent, None) {
        Ok(dir) => Ok(Some((dir, name))),
        Err(_) if std::fs::symlink_metadata(parent).is_err() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates `dir` and any missing parents below `root` (a configured root, a workPath, a
/// volume's directory; made root's if missing), giving the new ones to `uid:gid` (mode 0755);
/// existing ones are left as they are. The root is opened as [`open_workload_dir`] does (a
/// symlink a workload planted on the way to it, or as it, is refused), and the rest walked by descriptor: every existing
/// component is verified before the first is created, a symlink among them is refused, and a
/// directory swapped for a symlink after its creation cannot turn the chown into one of
/// something else. So a refusal creates nothing, anywhere.
pub fn create_dirs(root: &Path, dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let root_fd = open_workload_dir(root, Some((0, 0)))?;
    create_dirs_from(root_fd.as_fd(), root, dir, uid, gid)
}

/// [`create_dirs`] below a root held open ([`HeldRoot`]): no walk from `/` to it.
pub fn create_dirs_under(root: &HeldRoot, dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let root_fd = root.open()?;
    create_dirs_from(root_fd.as_fd(), &root.path, dir, uid, gid)
}

/// [`create_dirs`] from `root_fd`, the directory at `root` opened as [`open_workload_dir`] does.
fn create_dirs_from(root_fd: BorrowedFd<'_>, root: &Path, dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let rel = dir.strip_prefix(root).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not below {}", dir.display(), root.display()))
    })?;
    let refused = |shown: &Path| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is a symlink or not a directory; refusing to follow it", shown.display()),
        )
    };
    // The directory walked so far (None: still the root).
    let mut walked: Option<OwnedFd> = None;
    fn at_dir<'a>(walked: &'a Option<OwnedFd>, root: BorrowedFd<'a>) -> BorrowedFd<'a> {
        walked.as_ref().map_or(root, |d| d.as_fd())
    }
    let mut shown = root.to_path_buf();
    let mut parts = rel.components().peekable();
    // What exists is only walked.
    while let Some(part) = parts.peek() {
        let name = sys::name(part.as_os_str().as_bytes()).map_err(|e| at(&shown.join(part), e))?;
        match sys::open_dir(at_dir(&walked, root_fd), &name) {
            Ok(next) => walked = Some(next),
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) => {
                return Err(refused(&shown.join(part)))
            }
            Err(e) => return Err(at(&shown.join(part), e)),
        }
        shown.push(part);
        parts.next();
    }
    // The rest is made, each inside the descriptor of the one before.
    for part in parts {
        shown.push(part);
        let name = sys::name(part.as_os_str().as_bytes()).map_err(|e| at(&shown, e))?;
        let created = match sys::mkdir(at_dir(&walked, root_fd), &name, 0o700) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(at(&shown, e)),
        };
        let next = sys::open_dir(at_dir(&walked, root_fd), &name).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => refused(&shown),
            _ => at(&shown, e),
        })?;
        if created {
            sys::chown_fd(next.as_fd(), uid, gid).map_err(|e| at(&shown, e))?;
            sys::chmod_fd(next.as_fd(), 0o755).map_err(|e| at(&shown, e))?;
        }
        walked = Some(next);
    }
    Ok(())
}

/// A root of the daemon's (`work_base_dir`, `run_base_dir`) opened once as
/// [`open_workload_dir`] walks it (every component from `/` root's), then reused while its path
/// still names the same directory: an instance's first start makes its directories below it
/// with one stat of the root instead of a walk from `/` (five opens). A root replaced (another
/// inode at the path) is walked again.
#[derive(Debug)]
pub struct HeldRoot {
    path: PathBuf,
    held: std::sync::Mutex<Option<(std::sync::Arc<OwnedFd>, u64, u64)>>,
}

impl HeldRoot {
    pub fn new(path: &Path) -> HeldRoot {
        HeldRoot { path: path.to_path_buf(), held: std::sync::Mutex::new(None) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root's descriptor, opened again only if the path names another directory now.
    pub fn open(&self) -> io::Result<std::sync::Arc<OwnedFd>> {
        use std::os::unix::fs::MetadataExt;
        // Missing: the walk below makes it.
        let now = std::fs::metadata(&self.path).ok().map(|m| (m.dev(), m.ino()));
        let mut held = self.held.lock().expect("held root lock");
        if let Some((fd, dev, ino)) = held.as_ref() {
            if now == Some((*dev, *ino)) {
                return Ok(fd.clone());
            }
        }
        let fd = open_workload_dir(&self.path, Some((0, 0)))?;
        let st = sys::stat_fd(fd.as_fd()).map_err(|e| at(&self.path, e))?;
        // Held for the daemon's life: above the spawns' descriptors (see `spawn::held_high`).
        let fd = std::sync::Arc::new(crate::runtime::spawn::held_high(fd));
        *held = Some((fd.clone(), st.st_dev, st.st_ino));
        Ok(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_fifos_are_refused_and_logs_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "top secret\n").unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::os::unix::fs::symlink(&secret, run.join("a.log")).unwrap();
        std::fs::hard_link(&secret, run.join("b.log")).unwrap();
        nix::unistd::mkfifo(&run.join("c.log"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for name in ["a.log", "b.log", "c.log"] {
            let err = read_daemon_file(&run.join(name), 1 << 20).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
            let mut f = open_log(&run.join(name)).unwrap();
            f.write_all(b"mine\n").unwrap();
            assert_eq!(read_daemon_file(&run.join(name), 1 << 20).unwrap(), b"mine\n");
        }
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "top secret\n");
        assert_eq!(std::fs::metadata(&secret).unwrap().len(), 11);
    }
}
