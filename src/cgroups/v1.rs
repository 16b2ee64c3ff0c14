//! cgroup v1: one hierarchy per controller (or per co-mounted group such as `cpu,cpuacct`);
//! an instance is a directory of the same relative path in each hierarchy we use.

use super::common::{self, Freezer, MountEntry, PROCS};
use super::{cpu_quota_us, memory_bytes, Cgroup, CgroupConfig, CgroupError, Limits, Usage, CPU_PERIOD_US};
use std::collections::BTreeSet;
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The controllers we use, in the order their hierarchies are listed and joined: cpu (limits),
/// cpuacct (usage), memory (limits, usage, OOM count), pids (accounting), freezer (kill_all).
pub(crate) const CONTROLLERS: [&str; 5] = ["cpu", "cpuacct", "memory", "pids", "freezer"];

/// One mounted v1 hierarchy holding some of our controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// Our controllers bound to this hierarchy (several when co-mounted).
    pub controllers: Vec<&'static str>,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The cgroup the mount shows (mountinfo "root"): what /proc/PID/cgroup paths start with.
    pub fs_root: String,
}

/// The v1 layout: our hierarchies and the parent's relative path in each.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub mounts: Vec<Mount>,
    pub parent: PathBuf,
}

impl Layout {
    /// Picks, from mountinfo, the hierarchy of each controller we use. A hierarchy mounted twice
    /// (bind mounts) counts once, preferring the mount under `config.mount_root`.
    pub fn from_mountinfo(config: &CgroupConfig, entries: &[MountEntry]) -> Result<Layout, CgroupError> {
        let mut mounts: Vec<Mount> = Vec::new();
        for e in entries.iter().filter(|e| e.fstype == "cgroup") {
            let controllers: Vec<&'static str> =
                CONTROLLERS.iter().copied().filter(|c| e.super_options.split(',').any(|o| o == *c)).collect();
            if controllers.is_empty() {
                continue;
            }
            let candidate = Mount { controllers, mount_point: e.mount_point.clone(), fs_root: e.root.clone() };
            match mounts.iter_mut().find(|m| m.controllers == candidate.controllers) {
                Some(m) => {
                    if !m.mount_point.starts_with(&config.mount_root)
                        && candidate.mount_point.starts_with(&config.mount_root)
                    {
                        *m = candidate;
                    }
                }
                None => mounts.push(candidate),
            }
        }
        if mounts.is_empty() {
            return Err(CgroupError::NoHierarchy {
                op: "find cgroups under",
                path: config.mount_root.clone(),
                reason: format!(
                    "no cgroup.controllers there (not cgroup v2) and none of the v1 controllers {} is mounted \
                     according to /proc/self/mountinfo",
                    CONTROLLERS.join(", ")
                ),
            });
        }
        mounts.sort_by_key(|m| CONTROLLERS.iter().position(|c| *c == m.controllers[0]));
        Ok(Layout { mounts, parent: PathBuf::from(&config.parent) })
    }

    /// `<mount>/<parent>` in every hierarchy.
    pub fn parent_dirs(&self) -> Vec<PathBuf> {
        self.mounts.iter().map(|m| m.mount_point.join(&self.parent)).collect()
    }

    /// The instance cgroup `key` (already validated).
    pub fn instance(self: &Arc<Self>, key: &str) -> V1Cgroup {
        V1Cgroup { layout: self.clone(), key: key.into() }
    }
}

impl fmt::Display for Layout {
    /// "cpu at /sys/fs/cgroup/cpu, ...; parent steward".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mounts: Vec<String> =
            self.mounts.iter().map(|m| format!("{} at {}", m.controllers.join(","), m.mount_point.display())).collect();
        write!(f, "{}; parent {}", mounts.join(", "), self.parent.display())
    }
}

/// An instance's directory in one hierarchy.
pub(crate) struct Part<'a> {
    pub mount: &'a Mount,
    pub dir: PathBuf,
}

impl Part<'_> {
    /// The path as /proc/PID/cgroup shows it for this hierarchy.
    fn kernel_path(&self) -> String {
        common::kernel_path(&self.mount.mount_point, &self.mount.fs_root, &self.dir)
    }
}

/// One instance's cgroup on v1: its key in the shared layout. Its directories are derived when
/// used rather than kept, since a daemon holds one of these per instance, thousands of them.
#[derive(Debug, Clone)]
pub(crate) struct V1Cgroup {
    layout: Arc<Layout>,
    key: Box<str>,
}

impl V1Cgroup {
    /// The instance's directory in each hierarchy, in the layout's order.
    pub fn parts(&self) -> impl Iterator<Item = Part<'_>> {
        self.layout.mounts.iter().map(|m| Part { mount: m, dir: self.dir_in(m) })
    }

    fn dir_in(&self, m: &Mount) -> PathBuf {
        m.mount_point.join(&self.layout.parent).join(&*self.key)
    }

    /// The directory in the hierarchy that has `controller`, if that controller is mounted.
    fn dir_of(&self, controller: &str) -> Option<PathBuf> {
        self.layout.mounts.iter().find(|m| m.controllers.contains(&controller)).map(|m| self.dir_in(m))
    }

    /// The first hierarchy's directory, to name the cgroup in errors.
    fn main_dir(&self) -> PathBuf {
        self.dir_in(&self.layout.mounts[0])
    }
}

/// The v1 freezer of one cgroup: freezer.state FROZEN / THAWED.
struct V1Freezer<'a> {
    dir: &'a Path,
}

impl Freezer for V1Freezer<'_> {
    fn freeze(&self) -> Result<(), CgroupError> {
        let state = self.dir.join("freezer.state");
        common::write(&state, "FROZEN", "freeze")?;
        // FREEZING until every task has stopped; a task in D state can hold it there.
        let deadline = Instant::now() + common::FREEZE_WAIT;
        loop {
            let now = common::read(&state, "read freezer state")?;
            if now.trim() == "FROZEN" {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CgroupError::Parse { op: "wait until frozen", path: state, content: now });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn thaw(&self) -> Result<(), CgroupError> {
        common::write(&self.dir.join("freezer.state"), "THAWED", "thaw")
    }
}

impl Cgroup for V1Cgroup {
    fn oom_kills(&self) -> Option<u64> {
        let path = self.dir_of("memory")?.join("memory.oom_control");
        let s = common::read_optional(&path, "read OOM kills").ok()??;
        Some(common::keyed(&s, "oom_kill").unwrap_or(0))
    }

    fn create(&self) -> Result<bool, CgroupError> {
        let mut fresh = true;
        for p in self.parts() {
            match std::fs::create_dir(&p.dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => fresh = false,
                // The parent is missing (first instance): make it too.
                Err(_) => std::fs::create_dir_all(&p.dir).map_err(CgroupError::io("create cgroup", &p.dir))?,
            }
        }
        Ok(fresh)
    }

    fn join_files(&self) -> Result<Vec<OwnedFd>, CgroupError> {
        self.parts().map(|p| common::open_procs(&p.dir)).collect()
    }

    fn add_pid(&self, pid: i32) -> Result<(), CgroupError> {
        for p in self.parts() {
            common::write(&p.dir.join(PROCS), &pid.to_string(), "add a process to")?;
        }
        Ok(())
    }

    fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        // The union over hierarchies: a root workload could leave one of them; it is still ours.
        let mut all = BTreeSet::new();
        for p in self.parts() {
            common::procs_recursive(&p.dir, &mut all)?;
        }
        Ok(all.into_iter().collect())
    }

    fn known_empty(&self) -> bool {
        // The pids hierarchy is the one that tracks: its count is hierarchical and includes
        // zombies, so 0 means nothing, anywhere below. (A root workload that moves itself out
        // of our pids cgroup alone escapes this check, as leaving every hierarchy escapes all.)
        let Some(dir) = self.dir_of("pids") else { return false };
        common::read_optional(&dir.join("pids.current"), "count tasks in")
            .is_ok_and(|s| s.is_some_and(|s| s.trim() == "0"))
    }

    fn contains(&self, pid: i32) -> bool {
        let Some(content) = common::read_proc_cgroup(pid) else { return false };
        self.parts().any(|p| {
            common::proc_cgroup_path(&content, Some(p.mount.controllers[0]))
                .is_some_and(|at| common::path_within(at, &p.kernel_path()))
        })
    }

    fn kill_all(&self) -> Result<usize, CgroupError> {
        let freezer_dir = self.dir_of("freezer").filter(|d| d.is_dir());
        let freezer = freezer_dir.as_deref().map(|dir| V1Freezer { dir });
        common::kill_loop(&self.main_dir(), &|| self.pids(), freezer.as_ref().map(|f| f as &dyn Freezer))
    }

    fn signal_all(&self, sig: nix::sys::signal::Signal) -> Result<usize, CgroupError> {
        common::signal_pids(&self.pids()?, sig, &self.main_dir())
    }

    fn set_limits(&self, limits: &Limits, fresh: bool) -> Result<(), CgroupError> {
        let unavailable = |op, controller| CgroupError::Unavailable { op, path: self.main_dir(), controller };
        // Every value is checked before anything is written: no half-applied limits.
        let cpu = match (self.dir_of("cpu"), limits.cpu_cores) {
            (Some(dir), Some(c)) => {
                let quota = cpu_quota_us(c, &dir)?.to_string();
                Some((dir, quota))
            }
            (Some(dir), None) => Some((dir, "-1".to_string())),
            (None, Some(_)) => return Err(unavailable("set cpu limit of", "cpu")),
            (None, None) => None,
        };
        let memory = match (self.dir_of("memory"), limits.memory_mb) {
            (Some(dir), Some(mb)) => {
                let bytes = memory_bytes(mb, &dir)?.to_string();
                Some((dir, bytes))
            }
            (Some(dir), None) => Some((dir, "-1".to_string())),
            (None, Some(_)) => return Err(unavailable("set memory limit of", "memory")),
            (None, None) => None,
        };
        let pids = match (self.dir_of("pids"), limits.pids_max) {
            (None, Some(_)) => return Err(unavailable("set tasks limit of", "pids")),
            (dir, _) => dir,
        };
        if let Some((dir, quota)) = cpu {
            // Period first: the kernel validates the quota against the period in force.
            let (exact, limiting) = (|_: &str| false, limits.cpu_cores.is_some());
            let period = CPU_PERIOD_US.to_string();
            common::put_limit(&dir.join("cpu.cfs_period_us"), &period, "set cpu period of", fresh, limiting, exact)?;
            common::put_limit(&dir.join("cpu.cfs_quota_us"), &quota, "set cpu quota of", fresh, limiting, exact)?;
        }
        if let Some((dir, bytes)) = memory {
            // "-1" reads back as the largest page-aligned value: unlimited either way.
            let unlimited = |cur: &str| bytes == "-1" && cur.parse::<u64>().is_ok_and(|v| v >= 1 << 62);
            let (path, limiting) = (dir.join("memory.limit_in_bytes"), limits.memory_mb.is_some());
            common::put_limit(&path, &bytes, "set memory limit of", fresh, limiting, unlimited)?;
        }
        if let Some(dir) = pids {
            let max = limits.pids_max.map_or("max".to_string(), |n| n.to_string());
            let limiting = limits.pids_max.is_some();
            match common::put_limit(&dir.join("pids.max"), &max, "set tasks limit of", fresh, limiting, |_| false) {
                // No file to say "unlimited" in is unlimited.
                Err(e) if e.is_not_found() && limits.pids_max.is_none() => {}
                other => other?,
            }
        }
        Ok(())
    }

    fn usage(&self) -> Result<Usage, CgroupError> {
        if !self.parts().any(|p| p.dir.is_dir()) {
            let path = self.main_dir();
            return Err(CgroupError::Io { op: "read usage of", path, source: std::io::ErrorKind::NotFound.into() });
        }
        let mut usage = Usage::default();
        if let Some(dir) = self.dir_of("cpuacct") {
            let path = dir.join("cpuacct.usage");
            if let Some(s) = common::read_optional(&path, "read cpu usage")? {
                usage.cpu_usage_usec = common::parse_u64(&s, &path, "read cpu usage")? / 1000;
            }
        }
        if let Some(dir) = self.dir_of("memory") {
            let path = dir.join("memory.usage_in_bytes");
            if let Some(s) = common::read_optional(&path, "read memory usage")? {
                usage.memory_bytes = common::parse_u64(&s, &path, "read memory usage")?;
            }
            let path = dir.join("memory.oom_control");
            if let Some(s) = common::read_optional(&path, "read OOM kills")? {
                usage.oom_kills = common::keyed(&s, "oom_kill").unwrap_or(0);
            }
        }
        if let Some(dir) = self.dir_of("pids") {
            (usage.tasks, usage.tasks_max) = common::tasks(&dir);
        }
        Ok(usage)
    }

    fn remove(&self) -> Result<(), CgroupError> {
        // Try every hierarchy even if one fails, so as little as possible is left behind.
        let mut first_err = None;
        for p in self.parts() {
            if let Err(e) = common::rmdir_tree(&p.dir) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn path(&self) -> String {
        let controllers: Vec<String> = self.layout.mounts.iter().map(|m| m.controllers.join(",")).collect();
        let first = self.parts().next().map(|p| p.kernel_path()).unwrap_or_default();
        format!("{first} (cgroup v1: {})", controllers.join(" "))
    }
}
