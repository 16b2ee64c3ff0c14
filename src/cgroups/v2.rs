//! cgroup v2: one unified tree. Controllers must be enabled in every ancestor's
//! cgroup.subtree_control, and a cgroup with enabled children may hold no processes.

use super::common::{self, Freezer, MountEntry, PROCS};
use super::{cpu_quota_us, memory_bytes, Cgroup, CgroupConfig, CgroupError, Limits, Usage, CPU_PERIOD_US};
use std::collections::BTreeSet;
use std::fmt;
use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The controllers we enable for instances, where the kernel offers them.
pub(crate) const CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

/// Under delegation: the daemon's own leaf below its service cgroup.
pub(crate) const DAEMON_LEAF: &str = "daemon";

/// Under delegation: the parent of the instance cgroups below the service cgroup.
pub(crate) const INSTANCES: &str = "instances";

/// How long kill_all waits for cgroup.kill's victims to leave before falling back to rounds.
const CGROUP_KILL_WAIT: Duration = Duration::from_secs(1);

/// The v2 layout.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// The cgroup2 mount point.
    pub mount_point: PathBuf,
    /// The cgroup the mount shows (mountinfo "root"): what /proc/PID/cgroup paths start with.
    pub fs_root: String,
    /// The topmost cgroup whose subtree_control we manage: the mount root, or the delegated
    /// service cgroup (we never touch anything above a delegation).
    pub base: PathBuf,
    /// Where instance cgroups are created.
    pub parent_dir: PathBuf,
    /// Running under systemd delegation (see `Hierarchy::detect`).
    pub delegated: bool,
}

impl Layout {
    /// Builds the layout and, under delegation, moves `own_pid` into `<service>/daemon`.
    pub fn detect(
        config: &CgroupConfig,
        mounts: &[MountEntry],
        own_cgroup: &str,
        own_pid: i32,
    ) -> Result<Layout, CgroupError> {
        let mount_point = config.mount_root.clone();
        let fs_root = mounts
            .iter()
            .rev()
            .find(|m| m.fstype == "cgroup2" && m.mount_point == mount_point)
            .map_or_else(|| "/".to_string(), |m| m.root.clone());
        if let Some(service) = delegated_service(&mount_point, &fs_root, own_cgroup) {
            let daemon = service.join(DAEMON_LEAF);
            mkdir(&daemon)?;
            common::write(&daemon.join(PROCS), &own_pid.to_string(), "move the daemon into")?;
            tracing::info!(cgroup = %daemon.display(), "systemd delegation: daemon moved to its own leaf cgroup");
            return Ok(Layout {
                mount_point,
                fs_root,
                parent_dir: service.join(INSTANCES),
                base: service,
                delegated: true,
            });
        }
        Ok(Layout {
            parent_dir: mount_point.join(&config.parent),
            base: mount_point.clone(),
            mount_point,
            fs_root,
            delegated: false,
        })
    }

    /// The instance cgroup `key` (already validated).
    pub fn instance(&self, key: &str) -> V2Cgroup {
        let dir = self.parent_dir.join(key);
        let kernel_path = common::kernel_path(&self.mount_point, &self.fs_root, &dir);
        V2Cgroup { dir, kernel_path, base: self.base.clone() }
    }
}

impl fmt::Display for Layout {
    /// "instances under /sys/fs/cgroup/steward (delegated)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instances under {}", self.parent_dir.display())?;
        if self.delegated {
            write!(f, " (systemd delegation, daemon in {})", self.base.join(DAEMON_LEAF).display())?;
        }
        Ok(())
    }
}

/// The delegated service cgroup's directory, if our own cgroup (from /proc/self/cgroup text)
/// is `<x>.service` or `<x>.service/daemon`.
fn delegated_service(mount_point: &Path, fs_root: &str, own_cgroup: &str) -> Option<PathBuf> {
    let own = common::proc_cgroup_path(own_cgroup, None)?;
    let rel = if fs_root == "/" { own } else { own.strip_prefix(fs_root.trim_end_matches('/'))? };
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        return None;
    }
    let own_dir = mount_point.join(rel);
    let is_service = |p: &Path| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".service"));
    let service = if is_service(&own_dir) {
        own_dir
    } else if own_dir.file_name().is_some_and(|n| n == DAEMON_LEAF) && own_dir.parent().is_some_and(is_service) {
        own_dir.parent()?.to_path_buf()
    } else {
        return None;
    };
    service.is_dir().then_some(service)
}

/// mkdir that tolerates an existing directory.
/// Makes `dir`; true when it did not exist.
fn mkdir(dir: &Path) -> Result<bool, CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(CgroupError::io("create cgroup", dir)(e)),
    }
}

/// Enables our controllers in `dir`'s cgroup.subtree_control, those that `dir` itself has (its
/// cgroup.controllers) and that are not enabled yet. One write for all first; if the kernel
/// refuses (one controller can fail, e.g. cpu with realtime tasks around), each one alone, and
/// the ones still refused are logged: limits on them will report "not available".
pub(crate) fn enable_controllers(dir: &Path) -> Result<(), CgroupError> {
    let Some(available) = common::read_optional(&dir.join("cgroup.controllers"), "read controllers of")? else {
        return Ok(());
    };
    let control = dir.join("cgroup.subtree_control");
    let enabled = common::read_optional(&control, "read enabled controllers of")?.unwrap_or_default();
    let missing: Vec<&str> = CONTROLLERS
        .iter()
        .copied()
        .filter(|c| available.split_whitespace().any(|a| a == *c) && !enabled.split_whitespace().any(|e| e == *c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let all: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
    if common::write(&control, &all.join(" "), "enable controllers in").is_ok() {
        return Ok(());
    }
    for c in missing {
        if let Err(e) = common::write(&control, &format!("+{c}"), "enable controller in") {
            tracing::warn!("cgroup controller {c} not enabled: {e}");
        }
    }
    Ok(())
}

/// One instance's cgroup on v2.
#[derive(Debug, Clone)]
pub(crate) struct V2Cgroup {
    pub dir: PathBuf,
    /// The path as /proc/PID/cgroup shows it.
    pub kernel_path: String,
    /// Where controller enabling starts (see Layout::base).
    pub base: PathBuf,
}

impl V2Cgroup {
    /// Kills by freeze rounds even if cgroup.kill exists (for the fallback test).
    #[cfg(test)]
    pub fn kill_all_by_freezing(&self) -> Result<usize, CgroupError> {
        common::kill_loop(&self.dir, &|| self.pids(), Some(&V2Freezer { dir: &self.dir }))
    }

    /// Writes a limit file; an absent file is fine when resetting (nothing to reset) and means
    /// "controller not available" when limiting.
    fn write_limit(
        &self,
        file: &str,
        value: &str,
        fresh: bool,
        limiting: bool,
        controller: &'static str,
    ) -> Result<(), CgroupError> {
        let path = self.dir.join(file);
        match common::put_limit(&path, value, "set limit", fresh, limiting, |_| false) {
            Err(e) if e.is_not_found() && self.dir.is_dir() => {
                if limiting {
                    Err(CgroupError::Unavailable { op: "set limit", path, controller })
                } else {
                    Ok(())
                }
            }
            other => other,
        }
    }
}

/// The v2 freezer of one cgroup tree: cgroup.freeze, confirmed by cgroup.events "frozen 1".
struct V2Freezer<'a> {
    dir: &'a Path,
}

impl Freezer for V2Freezer<'_> {
    fn freeze(&self) -> Result<(), CgroupError> {
        common::write(&self.dir.join("cgroup.freeze"), "1", "freeze")?;
        let events = self.dir.join("cgroup.events");
        let deadline = Instant::now() + common::FREEZE_WAIT;
        loop {
            let now = common::read(&events, "read freeze state")?;
            if common::keyed(&now, "frozen") == Some(1) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CgroupError::Parse { op: "wait until frozen", path: events, content: now });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn thaw(&self) -> Result<(), CgroupError> {
        common::write(&self.dir.join("cgroup.freeze"), "0", "thaw")
    }
}

impl Cgroup for V2Cgroup {
    fn oom_kills(&self) -> Option<u64> {
        let s = common::read_optional(&self.dir.join("memory.events"), "read OOM kills").ok()??;
        Some(common::keyed(&s, "oom_kill").unwrap_or(0))
    }

    fn create(&self) -> Result<bool, CgroupError> {
        // Enable down the chain base → … → parent, so the instance gets the controllers; the
        // instance itself is a leaf and enables nothing (it holds processes).
        let parent = self.dir.parent().unwrap_or(&self.dir);
        let rel = parent.strip_prefix(&self.base).unwrap_or(Path::new(""));
        let mut at = self.base.clone();
        enable_controllers(&at)?;
        for c in rel.components() {
            at.push(c);
            mkdir(&at)?;
            enable_controllers(&at)?;
        }
        mkdir(&self.dir)
    }

    fn join_files(&self) -> Result<Vec<OwnedFd>, CgroupError> {
        Ok(vec![common::open_procs(&self.dir)?])
    }

    fn add_pid(&self, pid: i32) -> Result<(), CgroupError> {
        common::write(&self.dir.join(PROCS), &pid.to_string(), "add a process to")
    }

    fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        let mut all = BTreeSet::new();
        common::procs_recursive(&self.dir, &mut all)?;
        Ok(all.into_iter().collect())
    }

    fn known_empty(&self) -> bool {
        // Hierarchical, and an exited task has left its cgroup even before it is reaped.
        common::read_optional(&self.dir.join("cgroup.events"), "read events of")
            .is_ok_and(|s| s.is_some_and(|s| common::keyed(&s, "populated") == Some(0)))
    }

    fn contains(&self, pid: i32) -> bool {
        let Some(content) = common::read_proc_cgroup(pid) else { return false };
        common::proc_cgroup_path(&content, None).is_some_and(|at| common::path_within(at, &self.kernel_path))
    }

    fn kill_all(&self) -> Result<usize, CgroupError> {
        let before = self.pids()?;
        if before.is_empty() {
            return Ok(0);
        }
        // cgroup.kill (Linux 5.14+) kills the whole subtree atomically with respect to forks.
        match common::write(&self.dir.join("cgroup.kill"), "1", "kill every process in") {
            Ok(()) => {
                let deadline = Instant::now() + CGROUP_KILL_WAIT;
                while Instant::now() < deadline {
                    // cgroup.events, one file, where a listing walked the tree (the kernel
                    // has it wherever it has cgroup.kill).
                    if self.known_empty() {
                        return Ok(before.len());
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                tracing::warn!(cgroup = %self.dir.display(), "processes left after cgroup.kill; killing in rounds");
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        let freezer_file = self.dir.join("cgroup.freeze");
        let freezer = freezer_file.exists().then_some(V2Freezer { dir: &self.dir });
        let n = common::kill_loop(&self.dir, &|| self.pids(), freezer.as_ref().map(|f| f as &dyn Freezer))?;
        Ok(n.max(before.len()))
    }

    fn signal_all(&self, sig: nix::sys::signal::Signal) -> Result<usize, CgroupError> {
        common::signal_pids(&self.pids()?, sig, &self.dir)
    }

    fn set_limits(&self, limits: &Limits, fresh: bool) -> Result<(), CgroupError> {
        // Every value is checked before anything is written: no half-applied limits.
        let cpu = match limits.cpu_cores {
            Some(c) => format!("{} {CPU_PERIOD_US}", cpu_quota_us(c, &self.dir)?),
            None => format!("max {CPU_PERIOD_US}"),
        };
        let memory = match limits.memory_mb {
            Some(mb) => memory_bytes(mb, &self.dir)?.to_string(),
            None => "max".to_string(),
        };
        let pids = limits.pids_max.map_or("max".to_string(), |n| n.to_string());
        self.write_limit("cpu.max", &cpu, fresh, limits.cpu_cores.is_some(), "cpu")?;
        self.write_limit("memory.max", &memory, fresh, limits.memory_mb.is_some(), "memory")?;
        self.write_limit("pids.max", &pids, fresh, limits.pids_max.is_some(), "pids")
    }

    fn usage(&self) -> Result<Usage, CgroupError> {
        if !self.dir.is_dir() {
            let path = self.dir.clone();
            return Err(CgroupError::Io { op: "read usage of", path, source: ErrorKind::NotFound.into() });
        }
        let mut usage = Usage::default();
        // cpu.stat exists without the cpu controller too (core accounting).
        if let Some(s) = common::read_optional(&self.dir.join("cpu.stat"), "read cpu usage")? {
            usage.cpu_usage_usec = common::keyed(&s, "usage_usec").unwrap_or(0);
        }
        let path = self.dir.join("memory.current");
        if let Some(s) = common::read_optional(&path, "read memory usage")? {
            usage.memory_bytes = common::parse_u64(&s, &path, "read memory usage")?;
        }
        if let Some(s) = common::read_optional(&self.dir.join("memory.events"), "read OOM kills")? {
            usage.oom_kills = common::keyed(&s, "oom_kill").unwrap_or(0);
        }
        (usage.tasks, usage.tasks_max) = common::tasks(&self.dir);
        Ok(usage)
    }

    fn remove(&self) -> Result<(), CgroupError> {
        common::rmdir_tree(&self.dir)
    }

    fn path(&self) -> String {
        self.dir.display().to_string()
    }
}
