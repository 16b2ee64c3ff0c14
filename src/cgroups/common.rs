//! What v1 and v2 share: cgroupfs file access, walking nested cgroups, parsing the kernel's
//! text formats (/proc/self/mountinfo, /proc/PID/cgroup, flat-keyed files), and the
//! freeze → kill → thaw loop.

use super::CgroupError;
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Every process's membership file; writing a pid (or "0" for oneself) moves a process.
pub(crate) const PROCS: &str = "cgroup.procs";

/// How long kill_all keeps at it before reporting survivors (a fork bomb dies in a few rounds;
/// only processes stuck in uninterruptible sleep can outlast this).
/// kill_all blocks its caller, so the bound is short; the caller may retry.
pub(crate) const KILL_DEADLINE: Duration = Duration::from_secs(5);

/// How long a freeze may take before we kill anyway (a task in D state can delay freezing).
pub(crate) const FREEZE_WAIT: Duration = Duration::from_secs(1);

/// How long remove() retries rmdir while the kernel finishes releasing exited processes.
const RMDIR_RETRY: Duration = Duration::from_millis(500);

/// Reads a whole cgroupfs file.
pub(crate) fn read(path: &Path, op: &'static str) -> Result<String, CgroupError> {
    crate::runtime::procinfo::read_kernel_file(path).map_err(CgroupError::io(op, path))
}

/// Reads a file that may legitimately be absent (controller not available): None then.
pub(crate) fn read_optional(path: &Path, op: &'static str) -> Result<Option<String>, CgroupError> {
    match crate::runtime::procinfo::read_kernel_file(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CgroupError::io(op, path)(e)),
    }
}

/// Writes `value` with one write(2) to an existing file, never creating it: the kernel parses
/// each write separately, and a missing file means a missing controller, not a file to make.
pub(crate) fn write(path: &Path, value: &str, op: &'static str) -> Result<(), CgroupError> {
    let mut f = fs::OpenOptions::new().write(true).truncate(true).open(path).map_err(CgroupError::io(op, path))?;
    f.write_all(value.as_bytes()).map_err(CgroupError::io(op, path))
}

/// [`write`], unless the file already holds `value` (or what `same` accepts as it). Setting
/// a cpu quota or period takes the kernel's global bandwidth lock (tg_set_bandwidth): writing
/// "unlimited" over "unlimited" was a sixth of the daemon's CPU time when starting 500
/// instances at once.
pub(crate) fn write_if_changed(
    path: &Path,
    value: &str,
    op: &'static str,
    same: impl Fn(&str) -> bool,
) -> Result<(), CgroupError> {
    match crate::runtime::procinfo::read_kernel_file(path) {
        Ok(current) if current.trim() == value || same(current.trim()) => Ok(()),
        _ => write(path, value, op),
    }
}

/// Sets one limit file: in a cgroup made just now ([`super::Cgroup::create`] said so) it holds
/// the kernel's default (unlimited), so a limit is written without reading and a reset is not
/// written at all; otherwise as [`write_if_changed`]. A start of a new instance then opens only
/// the files of the limits it has.
pub(crate) fn put_limit(
    path: &Path,
    value: &str,
    op: &'static str,
    fresh: bool,
    limiting: bool,
    same: impl Fn(&str) -> bool,
) -> Result<(), CgroupError> {
    match (fresh, limiting) {
        (true, false) => Ok(()),
        (true, true) => write(path, value, op),
        (false, _) => write_if_changed(path, value, op, same),
    }
}

/// Parses one unsigned integer file (memory.current, cpuacct.usage, ...).
pub(crate) fn parse_u64(content: &str, path: &Path, op: &'static str) -> Result<u64, CgroupError> {
    content.trim().parse().map_err(|_| CgroupError::Parse { op, path: path.to_path_buf(), content: content.into() })
}

/// The value of `key` in a flat-keyed file ("key value" per line: cpu.stat, memory.events,
/// memory.oom_control, cgroup.events).
pub(crate) fn keyed(content: &str, key: &str) -> Option<u64> {
    content.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(key)).then(|| it.next()?.parse().ok()).flatten()
    })
}

/// pids.current and pids.max in `dir` (a pids controller's): 0 and None where they are not.
pub(crate) fn tasks(dir: &std::path::Path) -> (u64, Option<u64>) {
    let read = |f: &str| crate::runtime::procinfo::read_kernel_file(&dir.join(f)).ok();
    let current = read("pids.current").and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let max = read("pids.max").and_then(|s| s.trim().parse().ok());
    (current, max)
}

/// The pids in one cgroup.procs file (not its children). An absent file is an empty cgroup.
pub(crate) fn procs_of(dir: &Path) -> Result<Vec<i32>, CgroupError> {
    let path = dir.join(PROCS);
    let Some(content) = read_optional(&path, "list processes in")? else { return Ok(Vec::new()) };
    content
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.parse().map_err(|_| CgroupError::Parse { op: "list processes in", path: path.clone(), content: l.into() })
        })
        .collect()
}

/// Every pid in `dir` and all cgroups nested below it (a workload may create sub-cgroups).
/// A cgroup that does not exist (or vanishes while we walk) holds no processes.
pub(crate) fn procs_recursive(dir: &Path, out: &mut BTreeSet<i32>) -> Result<(), CgroupError> {
    out.extend(procs_of(dir)?);
    if !has_subdirs(dir) {
        return Ok(());
    }
    for child in subdirs(dir)? {
        procs_recursive(&child, out)?;
    }
    Ok(())
}

/// Whether `dir` may have child directories: a directory's link count is 2 plus its
/// subdirectories (kernfs keeps it so for cgroups), so one stat spares a listing of the
/// common cgroup that has none. Unknown (a stat that fails): true.
pub(crate) fn has_subdirs(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(dir).map_or(true, |m| m.nlink() != 2)
}

/// The child cgroups (directories) of `dir`; none if `dir` is absent.
pub(crate) fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CgroupError::io("list child cgroups of", dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(CgroupError::io("list child cgroups of", dir))?;
        // file_type() does not follow symlinks; cgroupfs has none below a mount anyway.
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// rmdir of `dir` after its nested cgroups (children first); absent is fine. EBUSY is retried
/// briefly: processes that were just killed leave their cgroup a moment after they die.
pub(crate) fn rmdir_tree(dir: &Path) -> Result<(), CgroupError> {
    for child in subdirs(dir)? {
        rmdir_tree(&child)?;
    }
    let deadline = Instant::now() + RMDIR_RETRY;
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(CgroupError::io("remove cgroup", dir)(e)),
        }
    }
}

/// Opens `dir/cgroup.procs` write-only and close-on-exec: the fd survives fork (so a child can
/// join by writing "0" before exec, without allocating) and is closed by the exec itself.
pub(crate) fn open_procs(dir: &Path) -> Result<std::os::fd::OwnedFd, CgroupError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(PROCS);
    let f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(CgroupError::io("open for joining", &path))?;
    Ok(f.into())
}

/// Sends `sig` to each pid; returns how many received it. A pid that is already gone is not
/// an error (it exited between listing and signalling).
pub(crate) fn signal_pids(pids: &[i32], sig: Signal, path: &Path) -> Result<usize, CgroupError> {
    let me = std::process::id() as i32;
    let mut n = 0;
    for &pid in pids {
        // Never signal ourselves, whatever a misconfiguration put in the cgroup.
        if pid == me || pid <= 0 {
            continue;
        }
        match kill(Pid::from_raw(pid), sig) {
            Ok(()) => n += 1,
            Err(Errno::ESRCH) => {}
            Err(source) => return Err(CgroupError::Signal { op: "signal", path: path.to_path_buf(), pid, source }),
        }
    }
    Ok(n)
}

/// How kill_all freezes a cgroup tree; None where no freezer exists.
pub(crate) trait Freezer {
    /// Freezes the tree and waits (bounded by FREEZE_WAIT) until the kernel reports it frozen.
    fn freeze(&self) -> Result<(), CgroupError>;
    /// Thaws the tree, so SIGKILLed processes can die.
    fn thaw(&self) -> Result<(), CgroupError>;
}

/// SIGKILL until the cgroup is empty: freeze (nobody can fork, nobody exits, so no pid can be
/// reused between listing and killing) → SIGKILL everyone listed → thaw (they die) → look
/// again, until the cgroup is empty or KILL_DEADLINE passes. Without a freezer the loop still
/// wins against fork loops: each round kills every process that could have forked. Returns
/// how many distinct processes were signalled.
pub(crate) fn kill_loop(
    path: &Path,
    pids: &dyn Fn() -> Result<Vec<i32>, CgroupError>,
    freezer: Option<&dyn Freezer>,
) -> Result<usize, CgroupError> {
    let deadline = Instant::now() + KILL_DEADLINE;
    let mut signalled = BTreeSet::new();
    let mut pause = Duration::from_millis(1);
    let mut rounds = 0;
    loop {
        let current = pids()?;
        if current.is_empty() {
            return Ok(signalled.len());
        }
        if Instant::now() >= deadline {
            return Err(CgroupError::Survivors {
                op: "kill every process in",
                path: path.into(),
                rounds,
                pids: current,
            });
        }
        rounds += 1;
        let frozen = match freezer {
            Some(f) => match f.freeze() {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("kill_all: cannot freeze, killing unfrozen: {e}");
                    // A half-applied freeze must not stay behind.
                    let _ = f.thaw();
                    false
                }
            },
            None => false,
        };
        // While frozen the list cannot grow; list again so nothing forked since is missed.
        let current = if frozen { pids()? } else { current };
        let killed = signal_pids(&current, Signal::SIGKILL, path);
        if let (true, Some(f)) = (frozen, freezer) {
            f.thaw()?;
        }
        killed?;
        signalled.extend(current);
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// One mount from /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// The path inside the filesystem that is mounted (for cgroups: the cgroup the mount shows).
    pub root: String,
    /// Where it is mounted (octal escapes decoded).
    pub mount_point: PathBuf,
    /// "cgroup" (v1) or "cgroup2", among others.
    pub fstype: String,
    /// Per-superblock options: for v1 cgroups, the controllers of the hierarchy.
    pub super_options: String,
}

/// Parses /proc/self/mountinfo (proc(5)): `id parent maj:min root mountpoint opts [tags...] -
/// fstype source superopts`. Lines that do not fit are skipped.
pub(crate) fn parse_mountinfo(content: &str) -> Vec<MountEntry> {
    content
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            if sep < 6 || fields.len() < sep + 4 {
                return None;
            }
            Some(MountEntry {
                root: unescape(fields[3]),
                mount_point: PathBuf::from(unescape(fields[4])),
                fstype: fields[sep + 1].to_string(),
                super_options: fields[sep + 3].to_string(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as \ooo octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// From /proc/PID/cgroup: the path of the v2 hierarchy (`0::/path`) when `controller` is None,
/// else of the v1 hierarchy whose controller list (`ID:cpu,cpuacct:/path`) names `controller`.
pub(crate) fn proc_cgroup_path<'a>(content: &'a str, controller: Option<&str>) -> Option<&'a str> {
    content.lines().find_map(|line| {
        let mut it = line.splitn(3, ':');
        let (id, controllers, path) = (it.next()?, it.next()?, it.next()?);
        let hit = match controller {
            None => id == "0" && controllers.is_empty(),
            Some(c) => controllers.split(',').any(|x| x == c),
        };
        hit.then_some(path)
    })
}

/// Whether the kernel path `path` (from /proc/PID/cgroup) is `cgroup` or nested below it.
pub(crate) fn path_within(path: &str, cgroup: &str) -> bool {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path == cgroup || path.strip_prefix(cgroup).is_some_and(|rest| rest.starts_with('/'))
}

/// The path the kernel prints in /proc/PID/cgroup for `dir`, a directory below a mount whose
/// mountinfo root is `mount_root_in_fs` (e.g. "/" on the host, "/docker/ID" in a container
/// without a cgroup namespace).
pub(crate) fn kernel_path(mount_point: &Path, mount_root_in_fs: &str, dir: &Path) -> String {
    let rel = dir.strip_prefix(mount_point).unwrap_or(dir);
    let mut out = mount_root_in_fs.trim_end_matches('/').to_string();
    for c in rel.components() {
        out.push('/');
        out.push_str(&c.as_os_str().to_string_lossy());
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Reads /proc/PID/cgroup; None if the process is gone.
pub(crate) fn read_proc_cgroup(pid: i32) -> Option<String> {
    if pid <= 0 {
        return None;
    }
    crate::runtime::procinfo::read_kernel_file(Path::new(&format!("/proc/{pid}/cgroup"))).ok()
}
