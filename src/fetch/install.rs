//! Putting an archive's contents into the output directory. The archive is extracted into a
//! fresh temporary directory next to the output directory (same filesystem), and then each of
//! its top-level entries is swapped into the output directory with one `renameat2` each: an
//! entry of the same name is exchanged out and removed, entries the archive doesn't have are
//! left alone, and no half-written file is ever visible. Every step works on directory
//! descriptors, so nothing an application does to its own directories can turn a write by
//! root into a write elsewhere.

use super::archive::{self, Format};
use super::sandbox::{EntryError, Limits, Sandbox};
use super::sys;
use std::collections::VecDeque;
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Names of our temporary directories; `<prefix><token>-<n>`.
pub const TEMP_PREFIX: &str = ".steward-fetch-";
const MAX_SYMLINKS: usize = 40;

#[derive(Debug)]
pub enum InstallError {
    /// The output directory cannot be opened or created.
    Dir(String),
    /// An entry was refused, the archive is damaged, or writing it failed.
    Entry(EntryError),
    /// Moving extracted entries into place failed.
    Move(String),
}

pub struct Job<'a> {
    pub output_dir: &'a Path,
    pub uid: u32,
    pub gid: u32,
    /// Unique to this daemon run: temporary directories with another token are leftovers.
    pub token: &'a str,
    pub seq: u64,
    pub format: &'a Format,
    pub limits: Limits,
}

pub fn install(job: &Job<'_>, file: File) -> Result<(), InstallError> {
    let shown = job.output_dir.display();
    let out = open_output_dir(job.output_dir, Some((job.uid, job.gid))).map_err(InstallError::Dir)?;
    let parent =
        sys::open_dir_dotdot(out.as_fd()).map_err(|e| InstallError::Dir(format!("opening its parent: {e}")))?;
    // Renames only work within one filesystem: if the output directory is a mount point,
    // extract inside it instead.
    let same_fs = match (sys::stat_fd(parent.as_fd()), sys::stat_fd(out.as_fd())) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev,
        _ => false,
    };
    let host = if same_fs { parent } else { out.try_clone().map_err(|e| InstallError::Dir(e.to_string()))? };
    remove_leftovers(&host, job.token);

    let tmp_name = sys::name(format!("{TEMP_PREFIX}{}-{}", job.token, job.seq).as_bytes())
        .map_err(|e| InstallError::Dir(e.to_string()))?;
    sys::mkdir(host.as_fd(), &tmp_name, 0o700)
        .map_err(|e| InstallError::Dir(format!("creating a temporary directory beside it: {e}")))?;
    let result = (|| {
        let tmp = sys::open_dir(host.as_fd(), &tmp_name).map_err(|e| InstallError::Dir(e.to_string()))?;
        let new = make_sub(&tmp, c"new")?;
        let old = make_sub(&tmp, c"old")?;
        let mut sandbox =
            Sandbox::new(new.try_clone().map_err(|e| InstallError::Dir(e.to_string()))?, job.uid, job.gid, job.limits);
        archive::extract(job.format, file, &mut sandbox).map_err(InstallError::Entry)?;
        drop(sandbox);
        let names = sys::list(new.as_fd()).map_err(|e| InstallError::Move(e.to_string()))?;
        for (i, name) in names.iter().enumerate() {
            move_in(&new, &old, &out, name, i).map_err(|e| {
                InstallError::Move(format!("moving {} into place: {e}", sys::os_str(name).to_string_lossy()))
            })?;
        }
        Ok(())
    })();
    if let Err(e) = sys::remove_tree(host.as_fd(), &tmp_name) {
        tracing::warn!(dir = %shown, "cannot remove the temporary extraction directory: {e}");
    }
    result
}

fn make_sub(tmp: &OwnedFd, name: &CStr) -> Result<OwnedFd, InstallError> {
    sys::mkdir(tmp.as_fd(), name, 0o700).map_err(|e| InstallError::Dir(e.to_string()))?;
    sys::open_dir(tmp.as_fd(), name).map_err(|e| InstallError::Dir(e.to_string()))
}

/// Swaps `new/name` into `out/name`. The previous entry of that name ends up in the temporary
/// directory, which is removed afterwards.
fn move_in(new: &OwnedFd, old: &OwnedFd, out: &OwnedFd, name: &CStr, i: usize) -> io::Result<()> {
    let (new, old, out) = (new.as_fd(), old.as_fd(), out.as_fd());
    for _ in 0..3 {
        match sys::rename(new, name, out, name, sys::RENAME_EXCHANGE) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // Nothing of that name yet.
                match sys::rename(new, name, out, name, sys::RENAME_NOREPLACE) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue, // appeared meanwhile
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return sys::rename(new, name, out, name, 0),
                    Err(e) => return Err(e),
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // A filesystem without RENAME_EXCHANGE: move the old entry aside first.
                let aside = sys::name(i.to_string().as_bytes())?;
                match sys::rename(out, name, old, &aside, 0) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(e) => return Err(e),
                }
                return sys::rename(new, name, out, name, 0);
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("the entry kept changing while it was being replaced"))
}

/// Temporary directories of an earlier daemon run (a crash mid-extraction).
fn remove_leftovers(host: &OwnedFd, token: &str) {
    let Ok(names) = sys::list(host.as_fd()) else { return };
    for name in names {
        let text = name.to_string_lossy();
        if let Some(rest) = text.strip_prefix(TEMP_PREFIX) {
            if !rest.starts_with(&format!("{token}-")) {
                if let Err(e) = sys::remove_tree(host.as_fd(), &name) {
                    tracing::warn!("cannot remove the leftover {text}: {e}");
                }
            }
        }
    }
}

/// Opens (creating what is missing, owned by `owner`, when given) the output directory, walking
/// it one component at a time. A symlink on the way is followed only if root (or Steward's own user)
/// owns it: one planted by the application (which owns its work directory) would otherwise let
/// it aim root's writes anywhere.
pub fn open_output_dir(path: &Path, owner: Option<(u32, u32)>) -> Result<OwnedFd, String> {
    if !path.is_absolute() {
        return Err("not an absolute path".into());
    }
    let mut pending: VecDeque<Vec<u8>> = VecDeque::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => pending.push_back(n.as_bytes().to_vec()),
            Component::ParentDir => pending.push_back(b"..".to_vec()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let mut cur = sys::open_root().map_err(|e| format!("opening /: {e}"))?;
    let mut hops = 0;
    while let Some(c) = pending.pop_front() {
        if c == b".." {
            cur = sys::open_dir_dotdot(cur.as_fd()).map_err(|e| e.to_string())?;
            continue;
        }
        let name = sys::name(&c).map_err(|e| e.to_string())?;
        let what = String::from_utf8_lossy(&c).into_owned();
        match sys::open_dir(cur.as_fd(), &name) {
            Ok(fd) => cur = fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let Some((uid, gid)) = owner else { return Err(format!("{what}: {e}")) };
                match sys::mkdir(cur.as_fd(), &name, 0o755) {
                    Ok(()) => sys::chown_at(cur.as_fd(), &name, uid, gid)
                        .map_err(|e| format!("cannot give {what} to uid {uid}: {e}"))?,
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(format!("cannot create {what}: {e}")),
                }
                cur = sys::open_dir(cur.as_fd(), &name).map_err(|e| format!("{what}: {e}"))?;
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) => {
                let st = sys::stat_at(cur.as_fd(), &name).map_err(|e| format!("{what}: {e}"))?;
                if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
                    return Err(format!("{what} exists and is not a directory"));
                }
                if st.st_uid != 0 && st.st_uid != nix::unistd::geteuid().as_raw() {
                    return Err(format!(
                        "{what} is a symlink owned by uid {}; refusing to follow it as root",
                        st.st_uid
                    ));
                }
                hops += 1;
                if hops > MAX_SYMLINKS {
                    return Err("too many levels of symbolic links".into());
                }
                let target = sys::readlink(cur.as_fd(), &name).map_err(|e| format!("{what}: {e}"))?;
                if target.first() == Some(&b'/') {
                    cur = sys::open_root().map_err(|e| format!("opening /: {e}"))?;
                }
                for part in target.split(|b| *b == b'/').rev() {
                    if !part.is_empty() && part != b"." {
                        pending.push_front(part.to_vec());
                    }
                }
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
    Ok(cur)
}
