//! The cgroup layer against this machine's real cgroup filesystem (whatever version it runs),
//! plus the v2 implementation on a private cgroup2 mount (possible on hybrid hosts too). Needs
//! root; without it every test prints why it is skipped. Each test uses its own parent
//! `steward-test-<pid>-<name>` and removes it in a Drop guard, so runs never collide.

use nix::sys::signal::Signal;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use steward::cgroups::{Cgroup, CgroupConfig, CgroupError, Hierarchy, Limits, Version};

/// True when the tests can touch cgroups; otherwise says why not.
fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIP {test}: needs root to create cgroups");
    false
}

/// One test's hierarchy and instances; kills and removes them all on drop (even on panic).
struct Fixture {
    hierarchy: Hierarchy,
    keys: Vec<String>,
}

impl Fixture {
    /// The real hierarchy at /sys/fs/cgroup with a parent unique to this test and process.
    fn real(test: &str) -> Fixture {
        Fixture::at(PathBuf::from("/sys/fs/cgroup"), test)
    }

    fn at(mount_root: PathBuf, test: &str) -> Fixture {
        let config = CgroupConfig { mount_root, parent: format!("steward-test-{}-{test}", std::process::id()) };
        let hierarchy = Hierarchy::detect(&config).unwrap_or_else(|e| panic!("detect: {e}"));
        eprintln!("{test}: {hierarchy}");
        Fixture { hierarchy, keys: Vec::new() }
    }

    /// A created instance cgroup with a key unique to this process (under systemd delegation
    /// every test shares `<service>/instances`).
    fn instance(&mut self, name: &str) -> (String, Box<dyn Cgroup>) {
        let key = format!("{name}.{}.0", std::process::id());
        let cg = self.hierarchy.try_instance(&key).unwrap();
        cg.create().unwrap_or_else(|e| panic!("create: {e}"));
        cg.create().expect("create is idempotent");
        self.keys.push(key.clone());
        (key, cg)
    }

    /// The instance directory that has `file` (v1: the right hierarchy; v2: the only one).
    fn file(&self, key: &str, file: &str) -> PathBuf {
        self.hierarchy
            .parent_dirs()
            .into_iter()
            .map(|d| d.join(key).join(file))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no {file} for {key}"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for key in &self.keys {
            let cg = self.hierarchy.instance(key);
            if let Err(e) = cg.kill_all() {
                eprintln!("cleanup kill {key}: {e}");
            }
            if let Err(e) = cg.remove() {
                eprintln!("cleanup remove {key}: {e}");
            }
        }
        // Shared under delegation: another test may still use it; then it stays.
        let _ = self.hierarchy.remove_parent();
    }
}

/// Starts `/bin/sh -c script` inside `cg`: the child writes "0" to each join fd in pre_exec,
/// so it (and everything it forks) is in the cgroup before exec.
fn spawn_in(cg: &dyn Cgroup, script: &str) -> Child {
    let fds = cg.join_files().unwrap_or_else(|e| panic!("join_files: {e}"));
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(script);
    // SAFETY: only write(2) on fds opened before the fork; iterating a Vec does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &raw {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn");
    drop(fds);
    child
}

/// Polls until `cg` holds at least `n` processes (or 10 s pass); returns the last list.
fn wait_for_pids(cg: &dyn Cgroup, n: usize) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = cg.pids().unwrap();
        if pids.len() >= n || Instant::now() > deadline {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` has exited: /proc/PID gone, or a zombie waiting for its (new) parent.
fn dead(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()));
        match state {
            None | Some('Z') | Some('X') => return true,
            Some(_) if Instant::now() > deadline => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The child was killed by SIGKILL.
fn assert_sigkilled(child: &mut Child) {
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
}

/// Reads a kernel file, trimmed.
fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_string()
}

#[test]
fn process_tree_is_seen_and_killed_and_the_cgroup_removed() {
    if !root_or_skip("process_tree") {
        return;
    }
    let mut fx = Fixture::real("tree");
    let (key, cg) = fx.instance("demo.tree");
    let mut child = spawn_in(cg.as_ref(), "sleep 1000 & sleep 1000 & exec sleep 1000");
    let pids = wait_for_pids(cg.as_ref(), 3);
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(pids.contains(&(child.id() as i32)));
    for &pid in &pids {
        assert!(cg.contains(pid), "{pid} not contained");
    }
    assert!(!cg.contains(std::process::id() as i32), "the test process is not in the instance");
    assert!(!cg.contains(1));
    assert!(fx.hierarchy.list_instances().contains(&key));

    // signal_all reaches every process (SIGCONT: harmless to sleep).
    let n = cg.signal_all(Signal::SIGCONT).unwrap();
    assert_eq!(n, 3);

    let killed = cg.kill_all().unwrap_or_else(|e| panic!("kill_all: {e}"));
    assert!(killed >= 3, "{killed}");
    assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
    assert_sigkilled(&mut child);
    for &pid in &pids {
        assert!(dead(pid), "{pid} survived kill_all");
    }
    for f in ["freezer.state"] {
        if let Some(p) = fx.hierarchy.parent_dirs().iter().map(|d| d.join(&key).join(f)).find(|p| p.exists()) {
            assert_eq!(read(&p), "THAWED", "left frozen");
        }
    }
    cg.remove().unwrap_or_else(|e| panic!("remove: {e}"));
    for d in fx.hierarchy.parent_dirs() {
        assert!(!d.join(&key).exists(), "{} still there", d.display());
    }
    cg.remove().expect("remove is idempotent");
    assert!(!fx.hierarchy.list_instances().contains(&key));
}

#[test]
fn fork_loop_is_fully_killed() {
    if !root_or_skip("fork_loop") {
        return;
    }
    let mut fx = Fixture::real("forkloop");
    let (_key, cg) = fx.instance("demo.forkloop");
    let mut child = spawn_in(cg.as_ref(), "while :; do sleep 10 & done");
    std::thread::sleep(Duration::from_millis(300));
    let before = wait_for_pids(cg.as_ref(), 10);
    assert!(before.len() >= 10, "fork loop made only {} processes", before.len());
    let killed = cg.kill_all().unwrap_or_else(|e| panic!("kill_all: {e}"));
    assert!(killed >= before.len(), "{killed} < {}", before.len());
    assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
    assert_sigkilled(&mut child);
    eprintln!("fork loop: {} processes seen before, {killed} killed", before.len());
    // Still empty a moment later: nothing was left to fork again.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
    cg.remove().unwrap_or_else(|e| panic!("remove: {e}"));
}

#[test]
fn limits_reach_the_kernel_and_usage_is_read() {
    if !root_or_skip("limits") {
        return;
    }
    let mut fx = Fixture::real("limits");
    let (key, cg) = fx.instance("demo.limits");
    cg.set_limits(&Limits { cpu_cores: Some(0.5), memory_mb: Some(64.0), pids_max: None }, false)
        .unwrap_or_else(|e| panic!("{e}"));
    match fx.hierarchy.version() {
        Version::V1 => {
            assert_eq!(read(&fx.file(&key, "cpu.cfs_period_us")), "100000");
            assert_eq!(read(&fx.file(&key, "cpu.cfs_quota_us")), "50000");
            assert_eq!(read(&fx.file(&key, "memory.limit_in_bytes")), "67108864");
        }
        Version::V2 => {
            assert_eq!(read(&fx.file(&key, "cpu.max")), "50000 100000");
            assert_eq!(read(&fx.file(&key, "memory.max")), "67108864");
        }
    }
    cg.set_limits(&Limits::default(), false).unwrap();
    match fx.hierarchy.version() {
        Version::V1 => {
            assert_eq!(read(&fx.file(&key, "cpu.cfs_quota_us")), "-1");
            // "-1" reads back as the page-aligned maximum.
            let unlimited: u64 = read(&fx.file(&key, "memory.limit_in_bytes")).parse().unwrap();
            assert!(unlimited > 1 << 60, "{unlimited}");
        }
        Version::V2 => {
            assert_eq!(read(&fx.file(&key, "cpu.max")), "max 100000");
            assert_eq!(read(&fx.file(&key, "memory.max")), "max");
        }
    }
    let mut child = spawn_in(cg.as_ref(), "x=$(head -c 4000000 /dev/zero | tr '\\0' a); exec sleep 1000");
    // Once the command substitution is done, only the exec'd sleep is left.
    let me = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(10);
    while cg.pids().unwrap() != vec![me] {
        assert!(Instant::now() < deadline, "{:?}", cg.pids());
        std::thread::sleep(Duration::from_millis(10));
    }
    let usage = cg.usage().unwrap_or_else(|e| panic!("usage: {e}"));
    eprintln!("usage: {usage:?}");
    assert!(usage.memory_bytes > 0, "{usage:?}");
    assert_eq!(usage.oom_kills, 0);
    cg.kill_all().unwrap();
    assert_sigkilled(&mut child);
}

#[test]
fn memory_limit_brings_the_oom_killer() {
    if !root_or_skip("oom") {
        return;
    }
    let mut fx = Fixture::real("oom");
    let (_key, cg) = fx.instance("demo.oom");
    cg.set_limits(&Limits { cpu_cores: None, memory_mb: Some(16.0), pids_max: None }, false)
        .unwrap_or_else(|e| panic!("{e}"));
    // 200 MB in one process, against a 16 MB limit (no swap on the CI machine; with swap a
    // v1 host would page instead, but the kernel still kills when swap runs out).
    let script = if Path::new("/usr/bin/perl").exists() {
        "exec perl -e '$x = \"a\" x 200_000_000; print length($x), \"\\n\"'"
    } else if Command::new("python3").arg("-c").arg("1").status().is_ok_and(|s| s.success()) {
        "exec python3 -c 'x = bytearray(200_000_000); print(len(x))'"
    } else {
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}"
    };
    let mut child = spawn_in(cg.as_ref(), script);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the 200 MB process was not stopped by a 16 MB limit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let usage = cg.usage().unwrap();
    eprintln!("after OOM: {usage:?}");
    assert!(usage.oom_kills >= 1, "{usage:?}");
    cg.kill_all().unwrap();
}

#[test]
fn cpu_limit_holds_a_busy_loop_to_half_a_core() {
    if !root_or_skip("cpu") {
        return;
    }
    let mut fx = Fixture::real("cpu");
    let (_key, cg) = fx.instance("demo.cpu");
    cg.set_limits(&Limits { cpu_cores: Some(0.5), memory_mb: None, pids_max: None }, false)
        .unwrap_or_else(|e| panic!("{e}"));
    // Two busy loops: they want 2 cores, so the quota (not the other load on the machine)
    // decides what they get.
    let mut child = spawn_in(cg.as_ref(), "while :; do :; done & while :; do :; done");
    assert_eq!(wait_for_pids(cg.as_ref(), 2).len(), 2);
    std::thread::sleep(Duration::from_millis(200));
    let (u0, t0) = (cg.usage().unwrap().cpu_usage_usec, Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (u1, t1) = (cg.usage().unwrap().cpu_usage_usec, Instant::now());
    let share = (u1 - u0) as f64 / (t1 - t0).as_micros() as f64;
    eprintln!("cpu: {} us over {:?} = {:.0}% of a core", u1 - u0, t1 - t0, share * 100.0);
    cg.kill_all().unwrap();
    assert_sigkilled(&mut child);
    assert!((0.35..=0.65).contains(&share), "busy loop at {:.0}% of a core with a 0.5 core limit", share * 100.0);
}

#[test]
fn invalid_keys_are_refused() {
    if !root_or_skip("invalid_keys") {
        return;
    }
    let fx = Fixture::real("keys");
    for bad in ["", "../escape", "a/b", ".."] {
        let e = fx.hierarchy.try_instance(bad).unwrap_err();
        assert!(matches!(e, CgroupError::InvalidName { .. }), "{e}");
        assert!(fx.hierarchy.instance(bad).create().is_err());
    }
    for d in fx.hierarchy.parent_dirs() {
        assert!(!d.exists() || std::fs::read_dir(&d).unwrap().all(|e| !e.unwrap().path().is_dir()));
    }
}

/// A private cgroup2 mount, unmounted on drop. On a hybrid host this is the same unified tree
/// systemd mounts at /sys/fs/cgroup/unified: no controllers (they are bound to v1), but
/// cgroup.procs, cgroup.kill and cgroup.freeze work.
struct Cgroup2Mount {
    dir: tempfile::TempDir,
}

impl Cgroup2Mount {
    /// Mounts, or says why it cannot.
    fn new() -> Result<Cgroup2Mount, String> {
        let dir = tempfile::TempDir::new().map_err(|e| e.to_string())?;
        let out = Command::new("mount").args(["-t", "cgroup2", "none"]).arg(dir.path()).output();
        match out {
            Ok(o) if o.status.success() => Ok(Cgroup2Mount { dir }),
            Ok(o) => Err(format!("mount -t cgroup2: {} {}", o.status, String::from_utf8_lossy(&o.stderr).trim())),
            Err(e) => Err(format!("mount: {e}")),
        }
    }
}

impl Drop for Cgroup2Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn v2_on_a_private_cgroup2_mount() {
    if !root_or_skip("v2_private_mount") {
        return;
    }
    let mount = match Cgroup2Mount::new() {
        Ok(m) => m,
        Err(why) => {
            eprintln!("SKIP v2_on_a_private_cgroup2_mount: {why}");
            return;
        }
    };
    {
        let mut fx = Fixture::at(mount.dir.path().into(), "v2");
        assert_eq!(fx.hierarchy.version(), Version::V2);
        let (key, cg) = fx.instance("demo.v2");
        let mut child = spawn_in(cg.as_ref(), "sleep 1000 & sleep 1000 & exec sleep 1000");
        let pids = wait_for_pids(cg.as_ref(), 3);
        assert_eq!(pids.len(), 3, "{pids:?}");
        for &pid in &pids {
            assert!(cg.contains(pid), "{pid}");
        }
        assert!(!cg.contains(std::process::id() as i32));
        assert!(fx.hierarchy.list_instances().contains(&key));
        // Unlimited needs no controller; a limit reports the missing one (when it is missing).
        cg.set_limits(&Limits::default(), false).unwrap();
        let has_cpu = Path::new(&cg.path()).join("cpu.max").exists();
        if !has_cpu {
            let e =
                cg.set_limits(&Limits { cpu_cores: Some(1.0), memory_mb: None, pids_max: None }, false).unwrap_err();
            assert!(matches!(e, CgroupError::Unavailable { controller: "cpu", .. }), "{e}");
        }
        let usage = cg.usage().unwrap();
        eprintln!("v2 usage: {usage:?}");

        let killed = cg.kill_all().unwrap_or_else(|e| panic!("kill_all: {e}"));
        assert!(killed >= 3);
        assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
        assert_sigkilled(&mut child);
        for &pid in &pids {
            assert!(dead(pid), "{pid} survived");
        }

        // A fork loop, killed through cgroup.kill.
        let mut child = spawn_in(cg.as_ref(), "while :; do sleep 10 & done");
        std::thread::sleep(Duration::from_millis(300));
        assert!(wait_for_pids(cg.as_ref(), 10).len() >= 10);
        cg.kill_all().unwrap_or_else(|e| panic!("kill_all: {e}"));
        assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
        assert_sigkilled(&mut child);

        // Nested cgroups below the instance are seen, killed and removed with it.
        let nested = Path::new(&cg.path()).join("worker");
        std::fs::create_dir(&nested).unwrap();
        let mut child = spawn_in(cg.as_ref(), "exec sleep 1000");
        let pid = wait_for_pids(cg.as_ref(), 1)[0];
        std::fs::write(nested.join("cgroup.procs"), pid.to_string()).unwrap();
        assert_eq!(cg.pids().unwrap(), vec![pid]);
        assert!(cg.contains(pid));
        cg.kill_all().unwrap();
        assert_sigkilled(&mut child);
        cg.remove().unwrap_or_else(|e| panic!("remove: {e}"));
        assert!(!Path::new(&cg.path()).exists());
    }
    drop(mount);
}
