//! Resource limits, usage and reliable killing through cgroups: one interface ([`Cgroup`]) over
//! cgroup v1 (one hierarchy per controller, as on hybrid hosts) and cgroup v2 (one unified
//! tree), in the manner of youki's libcgroups. [`Hierarchy::detect`] runs once at daemon start;
//! [`Hierarchy::instance`] names one instance's cgroup.
//!
//! Layout:
//! - v1: `<controller mount>/<parent>/<key>` in each of the cpu, cpuacct, memory, pids and
//!   freezer hierarchies that are mounted (co-mounted ones such as `cpu,cpuacct` count once).
//! - v2: `<mount_root>/<parent>/<key>`, or under systemd delegation (see [`Hierarchy::detect`])
//!   `<own service cgroup>/instances/<key>` with the daemon itself in `<own>/daemon`.

pub(crate) mod common;
mod dynmods;
mod error;
mod v1;
mod v2;

#[cfg(test)]
mod tests;

pub use dynmods::{favor_dynamic_moves, DynMods};
pub use error::CgroupError;

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// Which cgroup filesystem the host runs; decides file names and the killing strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// Legacy per-controller hierarchies (also "hybrid" hosts, whose unified tree has no
    /// controllers and is not used here).
    V1,
    /// The unified hierarchy.
    V2,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// Where the cgroup filesystem is and under which name our instances live (daemon config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupConfig {
    /// The cgroupfs mount point (the v2 mount, or the tmpfs holding the v1 mounts).
    pub mount_root: PathBuf,
    /// The cgroup under which every instance gets its own; a relative path without "..".
    pub parent: String,
}

impl Default for CgroupConfig {
    /// The usual places: /sys/fs/cgroup and "steward".
    fn default() -> Self {
        CgroupConfig { mount_root: PathBuf::from("/sys/fs/cgroup"), parent: "steward".into() }
    }
}

/// Resource limits of one instance (the spec's `limits`); None means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// CPU time as a number of cores (0.5 = half of one CPU), enforced by CFS bandwidth.
    pub cpu_cores: Option<f64>,
    /// Memory in MiB (1 MiB = 1048576 bytes: what the spec means); over it the OOM killer acts.
    pub memory_mb: Option<f64>,
    /// Tasks (processes and threads) in the whole cgroup; a fork past it fails with EAGAIN.
    pub pids_max: Option<u64>,
}

/// The default tasks limit of an instance (config `default_tasks_max`, as systemd's
/// DefaultTasksMax): `N%` of the smaller of the kernel's pid_max and threads-max, a count, or
/// `infinity`. None: unlimited. Err names what is wrong with `text`.
pub fn tasks_max(text: &str) -> Result<Option<u64>, String> {
    let text = text.trim();
    if text == "infinity" {
        return Ok(None);
    }
    if let Some(percent) = text.strip_suffix('%') {
        let p: f64 = percent.trim().parse().map_err(|_| format!("{text:?} is not a percentage"))?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(format!("{text:?} must be above 0% and at most 100%"));
        }
        let read = |f: &str| std::fs::read_to_string(f).ok().and_then(|s| s.trim().parse::<u64>().ok());
        let ceiling = [read("/proc/sys/kernel/pid_max"), read("/proc/sys/kernel/threads-max")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(32768);
        return Ok(Some(((ceiling as f64 * p / 100.0) as u64).max(1)));
    }
    match text.parse::<u64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!("{text:?} must be a count above 0, a percentage (\"15%\") or \"infinity\"")),
    }
}

/// Resource use of one instance, as the kernel accounts it (whole cgroup tree).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time consumed, in microseconds (v1 cpuacct.usage / 1000, v2 cpu.stat usage_usec).
    pub cpu_usage_usec: u64,
    /// Memory charged now, in bytes (v1 memory.usage_in_bytes, v2 memory.current).
    pub memory_bytes: u64,
    /// How many processes the OOM killer killed for hitting the limit.
    pub oom_kills: u64,
    /// Tasks (processes and threads) now, and the limit in force (None: unlimited, or no pids
    /// controller) — pids.current and pids.max.
    pub tasks: u64,
    pub tasks_max: Option<u64>,
}

/// One instance's cgroup, whatever the version: the daemon's whole view of cgroups.
pub trait Cgroup: Send + Sync + fmt::Debug {
    /// How many processes the OOM killer killed in it ([`Usage::oom_kills`]), read from one
    /// file (v1 `memory.oom_control`, v2 `memory.events`): every run's end asks. None: unknown.
    fn oom_kills(&self) -> Option<u64>;

    /// Creates the cgroup (idempotent) so limits can be set and processes join: v1 in every
    /// hierarchy we use, v2 after enabling +cpu +memory +pids down to the parent as available.
    /// True when it was made just now (no directory of it existed): it then has the kernel's
    /// defaults, no limits and no OOM kills, and a start need not read or write them.
    fn create(&self) -> Result<bool, CgroupError>;

    /// The cgroup.procs of every hierarchy, opened O_WRONLY|O_CLOEXEC: a forked child writes
    /// "0" to each in pre_exec (no allocation there), so it and all its descendants are inside
    /// before exec and nothing can escape by forking early.
    fn join_files(&self) -> Result<Vec<OwnedFd>, CgroupError>;

    /// Moves an existing process into the cgroup (every hierarchy).
    fn add_pid(&self, pid: i32) -> Result<(), CgroupError>;

    /// Every process in the cgroup, including nested child cgroups, sorted; an absent cgroup is
    /// empty. This is how the daemon knows an instance is really gone.
    fn pids(&self) -> Result<Vec<i32>, CgroupError>;

    /// Whether one kernel file shows that no process is left in the cgroup tree, without
    /// listing it: every run's end asks before a restart, and a stop polls it. v2 reads
    /// `cgroup.events` ("populated 0"), v1 the pids hierarchy's `pids.current` (0; it counts a
    /// zombie too). False means not known so: something is there, or the file is not; then
    /// [`Cgroup::pids`] lists every hierarchy.
    fn known_empty(&self) -> bool {
        false
    }

    /// Whether `pid` is in the cgroup (or below it), from /proc/PID/cgroup: checks a pidfile's
    /// pid and re-adopted processes. False if the process is gone.
    fn contains(&self, pid: i32) -> bool;

    /// SIGKILLs every process and makes sure none survive by forking: v2 cgroup.kill when the
    /// kernel has it, else freeze → kill → thaw (plain kill rounds without a freezer), until
    /// empty or a bounded deadline. Returns how many processes were signalled.
    fn kill_all(&self) -> Result<usize, CgroupError>;

    /// Sends `sig` to every process (SIGTERM at stop, SIGHUP at reload); returns how many got it.
    fn signal_all(&self, sig: nix::sys::signal::Signal) -> Result<usize, CgroupError>;

    /// Applies CPU and memory limits; None resets to unlimited (where the controller exists).
    /// `fresh`: the cgroup was made just now ([`Cgroup::create`] said so) and has the kernel's
    /// defaults, so nothing is read first and only what limits is written.
    fn set_limits(&self, limits: &Limits, fresh: bool) -> Result<(), CgroupError>;

    /// Current resource use. A controller that is not available reads as 0.
    fn usage(&self) -> Result<Usage, CgroupError>;

    /// Removes the cgroup in every hierarchy, nested cgroups first; absent is fine. Fails
    /// (EBUSY) while processes remain: kill_all first.
    fn remove(&self) -> Result<(), CgroupError>;

    /// A human-readable location for messages and logs.
    fn path(&self) -> String;
}

/// The host's cgroup layout as found at daemon start; hands out instance cgroups.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    layout: Layout,
}

/// Version-specific layout.
#[derive(Debug, Clone)]
enum Layout {
    V1(std::sync::Arc<v1::Layout>),
    V2(v2::Layout),
}

impl Hierarchy {
    /// Finds the layout: v2 if `mount_root/cgroup.controllers` exists, else v1 with each
    /// controller's mount point read from /proc/self/mountinfo (never guessed from names: a
    /// host may co-mount cpu,cpuacct or mount them separately, as this one does).
    ///
    /// Delegation rule (v2 only): the kernel forbids processes in a cgroup whose children have
    /// controllers enabled ("no internal processes"). When systemd runs us with `Delegate=yes`
    /// we sit in e.g. `/system.slice/stewardd.service` and own that subtree; we then move the
    /// daemon itself into `<own>/daemon` and put instances under `<own>/instances` (the
    /// configured parent name is not used), enabling controllers only inside our subtree. This
    /// applies when our own cgroup (from /proc/self/cgroup) ends in ".service", or is already
    /// `<something>.service/daemon` (a previous run moved us, or systemd's DelegateSubgroup).
    /// On v1 (and hybrid hosts) instances always live at `<controller mount>/<parent>`.
    pub fn detect(config: &CgroupConfig) -> Result<Hierarchy, CgroupError> {
        validate_parent(config)?;
        let mountinfo = read_self("/proc/self/mountinfo")?;
        if config.mount_root.join("cgroup.controllers").exists() {
            let own = read_self("/proc/self/cgroup")?;
            Self::detect_v2(config, &mountinfo, &own, std::process::id() as i32)
        } else {
            Self::detect_v1(config, &mountinfo)
        }
    }

    /// v1 detection from given mountinfo text (tests pass fixtures).
    pub(crate) fn detect_v1(config: &CgroupConfig, mountinfo: &str) -> Result<Hierarchy, CgroupError> {
        validate_parent(config)?;
        let layout = v1::Layout::from_mountinfo(config, &common::parse_mountinfo(mountinfo))?;
        Ok(Hierarchy { layout: Layout::V1(std::sync::Arc::new(layout)) })
    }

    /// v2 detection from given mountinfo and /proc/self/cgroup text; may move `own_pid` into
    /// `<own>/daemon` under delegation (tests pass fixtures).
    pub(crate) fn detect_v2(
        config: &CgroupConfig,
        mountinfo: &str,
        own_cgroup: &str,
        own_pid: i32,
    ) -> Result<Hierarchy, CgroupError> {
        validate_parent(config)?;
        let layout = v2::Layout::detect(config, &common::parse_mountinfo(mountinfo), own_cgroup, own_pid)?;
        Ok(Hierarchy { layout: Layout::V2(layout) })
    }

    /// The cgroup version in use.
    pub fn version(&self) -> Version {
        match self.layout {
            Layout::V1(_) => Version::V1,
            Layout::V2(_) => Version::V2,
        }
    }

    /// The v2 layout is delegated by systemd (daemon in `<own>/daemon`, instances in
    /// `<own>/instances`); always false on v1.
    pub fn delegated(&self) -> bool {
        matches!(&self.layout, Layout::V2(l) if l.delegated)
    }

    /// The cgroup of instance `key` (e.g. "demo.gamesvc.0"); nothing is created yet. An invalid
    /// key (empty, '/', "..", ...) gives a cgroup whose every operation fails with
    /// [`CgroupError::InvalidName`], so a bad key can never touch another directory; use
    /// [`Hierarchy::try_instance`] to learn about it at once.
    pub fn instance(&self, key: &str) -> Box<dyn Cgroup> {
        match validate_key(key) {
            Ok(()) => self.build(key),
            Err(reason) => Box::new(self.invalid(key, reason)),
        }
    }

    /// Like [`Hierarchy::instance`], but rejects an invalid key up front.
    pub fn try_instance(&self, key: &str) -> Result<Box<dyn Cgroup>, CgroupError> {
        validate_key(key).map_err(|reason| self.invalid(key, reason).err("name an instance cgroup under"))?;
        Ok(self.build(key))
    }

    /// The instance cgroup of a key already validated.
    fn build(&self, key: &str) -> Box<dyn Cgroup> {
        match &self.layout {
            Layout::V1(l) => Box::new(l.instance(key)),
            Layout::V2(l) => Box::new(l.instance(key)),
        }
    }

    /// The stand-in for an invalid key.
    fn invalid(&self, key: &str, reason: &'static str) -> Invalid {
        Invalid { key: key.to_string(), reason, parent: self.parent_dirs().into_iter().next().unwrap_or_default() }
    }

    /// Names of the instance cgroups that exist under the parent (in any hierarchy), sorted:
    /// at start the daemon re-adopts or cleans up what a previous run left.
    pub fn list_instances(&self) -> Vec<String> {
        let mut names = std::collections::BTreeSet::new();
        for dir in self.parent_dirs() {
            for sub in common::subdirs(&dir).unwrap_or_default() {
                if let Some(name) = sub.file_name().and_then(|n| n.to_str()) {
                    if validate_key(name).is_ok() {
                        names.insert(name.to_string());
                    }
                }
            }
        }
        names.into_iter().collect()
    }

    /// The parent directory in every hierarchy (for messages, cleanup and tests).
    pub fn parent_dirs(&self) -> Vec<PathBuf> {
        match &self.layout {
            Layout::V1(l) => l.parent_dirs(),
            Layout::V2(l) => vec![l.parent_dir.clone()],
        }
    }

    /// Removes the (empty) parent cgroup in every hierarchy; absent is fine. For uninstall and
    /// tests; fails while instance cgroups remain below it.
    pub fn remove_parent(&self) -> Result<(), CgroupError> {
        for dir in self.parent_dirs() {
            match std::fs::remove_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(CgroupError::io("remove parent cgroup", &dir)(e)),
            }
        }
        Ok(())
    }
}

impl fmt::Display for Hierarchy {
    /// One line for the daemon's start-up log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.layout {
            Layout::V1(l) => write!(f, "cgroup v1: {l}"),
            Layout::V2(l) => write!(f, "cgroup v2: {l}"),
        }
    }
}

/// Checks an instance key: it becomes one directory name, so it must not be empty, contain
/// '/' or NUL, be "." or "..", contain "..", start with '.', or look like a kernel interface
/// file (names with "cgroup." are reserved). Err carries the reason.
pub fn validate_key(key: &str) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("empty");
    }
    if key.len() > 255 {
        return Err("longer than 255 bytes");
    }
    if key.contains('/') {
        return Err("contains '/'");
    }
    if key.contains('\0') || key.chars().any(char::is_control) {
        return Err("contains a control character");
    }
    if key.contains("..") {
        return Err("contains \"..\"");
    }
    if key.starts_with('.') {
        return Err("starts with '.'");
    }
    if key.starts_with("cgroup.") {
        return Err("starts with \"cgroup.\"");
    }
    Ok(())
}

/// The configured parent must be a relative path of plain names (it may be nested).
fn validate_parent(config: &CgroupConfig) -> Result<(), CgroupError> {
    let bad = |reason| CgroupError::InvalidName {
        op: "use as parent cgroup under",
        path: config.mount_root.clone(),
        name: config.parent.clone(),
        reason,
    };
    let p = Path::new(&config.parent);
    if config.parent.is_empty() {
        return Err(bad("empty"));
    }
    if !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(bad("must be a relative path without \".\" or \"..\""));
    }
    for c in p.components() {
        validate_key(&c.as_os_str().to_string_lossy()).map_err(bad)?;
    }
    Ok(())
}

/// Reads one of our own /proc files.
fn read_self(path: &str) -> Result<String, CgroupError> {
    common::read(Path::new(path), "read")
}

/// The stand-in for an instance with an invalid key: every operation fails, nothing is touched.
#[derive(Debug)]
struct Invalid {
    key: String,
    reason: &'static str,
    parent: PathBuf,
}

impl Invalid {
    /// The error every operation returns.
    fn err(&self, op: &'static str) -> CgroupError {
        CgroupError::InvalidName { op, path: self.parent.clone(), name: self.key.clone(), reason: self.reason }
    }
}

impl Cgroup for Invalid {
    fn oom_kills(&self) -> Option<u64> {
        None
    }
    fn create(&self) -> Result<bool, CgroupError> {
        Err(self.err("create cgroup"))
    }
    fn join_files(&self) -> Result<Vec<OwnedFd>, CgroupError> {
        Err(self.err("open for joining"))
    }
    fn add_pid(&self, _pid: i32) -> Result<(), CgroupError> {
        Err(self.err("add a process to"))
    }
    fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        Err(self.err("list processes in"))
    }
    fn contains(&self, _pid: i32) -> bool {
        false
    }
    fn kill_all(&self) -> Result<usize, CgroupError> {
        Err(self.err("kill every process in"))
    }
    fn signal_all(&self, _sig: nix::sys::signal::Signal) -> Result<usize, CgroupError> {
        Err(self.err("signal every process in"))
    }
    fn set_limits(&self, _limits: &Limits, _fresh: bool) -> Result<(), CgroupError> {
        Err(self.err("set limits of"))
    }
    fn usage(&self) -> Result<Usage, CgroupError> {
        Err(self.err("read usage of"))
    }
    fn remove(&self) -> Result<(), CgroupError> {
        Err(self.err("remove cgroup"))
    }
    fn path(&self) -> String {
        format!("{}/<invalid cgroup name {:?}: {}>", self.parent.display(), self.key, self.reason)
    }
}

/// CFS bandwidth period in microseconds (the kernel's default): quota = cores × period.
pub(crate) const CPU_PERIOD_US: u64 = 100_000;

/// The kernel's smallest accepted CFS quota (1 ms); smaller requests are raised to it.
pub(crate) const CPU_MIN_QUOTA_US: u64 = 1_000;

/// CPU quota in microseconds per period for `cores`; Err for values no quota can express.
pub(crate) fn cpu_quota_us(cores: f64, path: &Path) -> Result<u64, CgroupError> {
    if !cores.is_finite() || cores <= 0.0 {
        return Err(CgroupError::InvalidLimit { op: "set cpu limit of", path: path.into(), what: "cpu", value: cores });
    }
    Ok(((cores * CPU_PERIOD_US as f64).round() as u64).max(CPU_MIN_QUOTA_US))
}

/// Memory limit in bytes for `mb` MiB; Err for values no limit can express.
pub(crate) fn memory_bytes(mb: f64, path: &Path) -> Result<u64, CgroupError> {
    if !mb.is_finite() || mb <= 0.0 {
        return Err(CgroupError::InvalidLimit {
            op: "set memory limit of",
            path: path.into(),
            what: "memory",
            value: mb,
        });
    }
    Ok((mb * 1024.0 * 1024.0).round() as u64)
}
