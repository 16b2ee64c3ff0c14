//! The kernel's `favordynmods` mount option (Linux 6.0+). Every move of a process into a cgroup
//! (each start's write to `cgroup.procs`, v1 and v2 alike) takes the kernel's global
//! threadgroup rwsem for writing, and unless a move happened a moment before, that waits for an
//! RCU grace period: 5–12 ms measured on this project's 2-core machine, during which the new
//! process has not exec'd and the daemon's spawning thread (a vfork) is held. With
//! `favordynmods` the rwsem stays in its slow mode and a move takes ~0.2 ms; the kernel's price
//! is slightly costlier forks and exits host-wide (docs/config.md, `cgroup_favor_dynmods`).
//!
//! The option is set on the cgroup v2 mount (the unified tree, also present on hybrid hosts);
//! the rwsem is global, so v1 moves gain as well. A remount keeps the mount's other options
//! (`nsdelegate`, `memory_recursiveprot`: systemd's delegation depends on them).

use std::path::{Path, PathBuf};

/// What [`favor_dynamic_moves`] found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum DynMods {
    /// Set before stewardd came (by the host, or by an earlier stewardd).
    AlreadyOn(PathBuf),
    /// Set now by a remount.
    TurnedOn(PathBuf),
    /// No cgroup v2 mount to set it on (a v1-only host).
    NoUnifiedMount,
    /// The remount failed (a kernel before 6.0 does not know the option, or no privilege).
    Refused(PathBuf, String),
}

/// The cgroup2 mount at or below `root` in `/proc/self/mountinfo` text: its mount point and
/// super options.
pub(super) fn unified_mount(mountinfo: &str, root: &Path) -> Option<(PathBuf, Vec<String>)> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let mut fs = fs.split(' ');
        if fs.next()? != "cgroup2" {
            return None;
        }
        let super_options = fs.nth(1).unwrap_or("").split(',').map(str::to_string).collect();
        let point = PathBuf::from(unescape(mount.split(' ').nth(4)?));
        point.starts_with(root).then_some((point, super_options))
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4).and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The remount's data: the super options kept (less `rw`/`ro`, which are mount flags), and
/// `favordynmods`.
pub(super) fn remount_data(super_options: &[String]) -> String {
    let mut kept: Vec<&str> =
        super_options.iter().map(String::as_str).filter(|o| !o.is_empty() && *o != "rw" && *o != "ro").collect();
    kept.push("favordynmods");
    kept.join(",")
}

/// Sets `favordynmods` on the cgroup v2 mount at or below `root` (the config's `cgroup_root`)
/// unless it is set already.
pub fn favor_dynamic_moves(root: &Path) -> DynMods {
    let mountinfo = match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(text) => text,
        Err(e) => return DynMods::Refused(PathBuf::from("/proc/self/mountinfo"), e.to_string()),
    };
    let Some((point, options)) = unified_mount(&mountinfo, root) else { return DynMods::NoUnifiedMount };
    if options.iter().any(|o| o == "favordynmods") {
        return DynMods::AlreadyOn(point);
    }
    match remount(&point, &remount_data(&options)) {
        Ok(()) => DynMods::TurnedOn(point),
        Err(e) => DynMods::Refused(point, e.to_string()),
    }
}

fn remount(point: &std::path::Path, data: &str) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let invalid = |_| std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let target = CString::new(point.as_os_str().as_bytes()).map_err(invalid)?;
    let data = CString::new(data).map_err(invalid)?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(c"cgroup2".as_ptr(), target.as_ptr(), c"cgroup2".as_ptr(), libc::MS_REMOUNT, data.as_ptr().cast())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 33 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:11 - cgroup cgroup rw,cpu
";

    #[test]
    fn finds_the_unified_mount_and_keeps_its_options() {
        let root = Path::new("/sys/fs/cgroup");
        let (point, options) = unified_mount(HYBRID, root).unwrap();
        assert_eq!(point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(options, ["rw", "nsdelegate"]);
        assert_eq!(remount_data(&options), "nsdelegate,favordynmods");
        let systemd = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
        let (point, options) = unified_mount(systemd, root).unwrap();
        assert_eq!(point, PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(remount_data(&options), "nsdelegate,memory_recursiveprot,favordynmods");
        assert_eq!(unified_mount("35 33 0:30 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", root), None);
        // A cgroup_root elsewhere (a test's fixture) names no mount of the host's.
        assert_eq!(unified_mount(HYBRID, Path::new("/tmp/fixture")), None);
    }

    #[test]
    fn mount_points_are_unescaped() {
        let line = "34 33 0:29 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n";
        assert_eq!(unified_mount(line, Path::new("/mnt")).unwrap().0, PathBuf::from("/mnt/my cgroups"));
    }
}
