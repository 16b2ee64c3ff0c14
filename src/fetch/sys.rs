//! Thin, safe wrappers over the `*at` system calls the extractor is built on. Every name passed
//! here is one path component (no `/`), resolved relative to a directory descriptor, and nothing
//! follows a symbolic link unless it says so: a directory renamed or replaced behind our back
//! cannot redirect a write outside the tree we hold open.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// A single path component as a C string; refuses `/`, NUL, empty, `.` and `..`.
pub fn name(component: &[u8]) -> io::Result<CString> {
    if component.is_empty() || component == b"." || component == b".." || component.contains(&b'/') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a single path component"));
    }
    CString::new(component).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a name"))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn retry<F: FnMut() -> libc::c_int>(mut f: F) -> io::Result<libc::c_int> {
    loop {
        match check(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Opens a path from the real root (used once, for `/`).
pub fn open_root() -> io::Result<OwnedFd> {
    let fd = retry(|| unsafe { libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the directory `name` in `dir` without following a symlink (ELOOP/ENOTDIR if it is one).
pub fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let fd = retry(|| unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `name` in `dir` as a bare reference (`O_PATH`) without following a symlink: a symlink
/// there is opened as itself, for the caller to see and refuse.
pub fn open_path(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let fd = retry(|| unsafe {
        libc::openat(dir.as_raw_fd(), name.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the real parent of a directory (`..` of the descriptor, whatever its path now is).
pub fn open_dir_dotdot(dir: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let fd = retry(|| unsafe {
        libc::openat(dir.as_raw_fd(), c"..".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Creates a new regular file (never an existing one, never through a symlink), mode 0600.
pub fn create_file(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<File> {
    let fd = retry(|| unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    })?;
    Ok(unsafe { File::from_raw_fd(fd) })
}

pub fn mkdir(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    retry(|| unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) }).map(drop)
}

pub fn symlink(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    retry(|| unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// A hard link; the old name is not followed if it is a symlink.
pub fn link(old_dir: BorrowedFd<'_>, old: &CStr, new_dir: BorrowedFd<'_>, new: &CStr) -> io::Result<()> {
    retry(|| unsafe { libc::linkat(old_dir.as_raw_fd(), old.as_ptr(), new_dir.as_raw_fd(), new.as_ptr(), 0) }).map(drop)
}

pub fn unlink(dir: BorrowedFd<'_>, name: &CStr, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    retry(|| unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `lstat` relative to a directory.
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    retry(|| unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    retry(|| unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

pub fn readlink(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    let n = unsafe { libc::readlinkat(dir.as_raw_fd(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// `lchown`: changes the entry itself, never what a symlink points to.
pub fn chown_at(dir: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
    retry(|| unsafe { libc::fchownat(dir.as_raw_fd(), name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) }).map(drop)
}

pub fn chown_fd(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    retry(|| unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) }).map(drop)
}

pub fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    retry(|| unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) }).map(drop)
}

/// Sets a file's modification (and access) time, in seconds since the epoch.
pub fn set_mtime(fd: BorrowedFd<'_>, secs: i64) -> io::Result<()> {
    let t = libc::timespec { tv_sec: secs as libc::time_t, tv_nsec: 0 };
    let times = [t, t];
    retry(|| unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) }).map(drop)
}

pub const RENAME_NOREPLACE: libc::c_uint = 1;
pub const RENAME_EXCHANGE: libc::c_uint = 2;

pub fn rename(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
    flags: libc::c_uint,
) -> io::Result<()> {
    retry(|| unsafe {
        libc::syscall(libc::SYS_renameat2, old_dir.as_raw_fd(), old.as_ptr(), new_dir.as_raw_fd(), new.as_ptr(), flags)
            as libc::c_int
    })
    .map(drop)
}

/// The names in a directory (without `.` and `..`).
pub fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let fd = dir.try_clone_to_owned()?;
    // A duplicated descriptor shares the directory offset: rewind so a second listing sees all.
    if unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut d = nix::dir::Dir::from(fd).map_err(io::Error::from)?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let entry = entry.map_err(io::Error::from)?;
        let n = entry.file_name();
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            names.push(n.to_owned());
        }
    }
    Ok(names)
}

/// Removes `name` in `dir` and everything below it, never following a symlink.
pub fn remove_tree(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let st = match stat_at(dir, name) {
        Ok(st) => st,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        let sub = open_dir(dir, name)?;
        empty_dir(&sub, st.st_dev, 0)?;
        unlink(dir, name, true)
    } else {
        unlink(dir, name, false)
    }
}

/// Empties `dir` (on device `dev`): a directory of another device below it (something mounted
/// there) is an error, never emptied.
fn empty_dir(dir: &OwnedFd, dev: libc::dev_t, depth: usize) -> io::Result<()> {
    use std::os::fd::AsFd;
    if depth > 4096 {
        return Err(io::Error::other("directory tree too deep to remove"));
    }
    for child in list(dir.as_fd())? {
        let st = match stat_at(dir.as_fd(), &child) {
            Ok(st) => st,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            if st.st_dev != dev {
                return Err(io::Error::other(format!(
                    "{} is a mount point; left in place",
                    os_str(&child).to_string_lossy()
                )));
            }
            let sub = open_dir(dir.as_fd(), &child)?;
            empty_dir(&sub, dev, depth + 1)?;
            drop(sub);
            unlink(dir.as_fd(), &child, true)?;
        } else {
            unlink(dir.as_fd(), &child, false)?;
        }
    }
    Ok(())
}

pub fn os_str(name: &CStr) -> &OsStr {
    OsStr::from_bytes(name.to_bytes())
}
