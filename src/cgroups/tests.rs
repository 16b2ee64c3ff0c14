//! Fixture tests: temporary directories laid out like cgroupfs (the files a kernel would show),
//! checking exactly what gets written and how kernel text is parsed. Killing needs a kernel:
//! the `real` module at the end (root only) and tests/cgroups.rs do that.
//!
//! Over 600 lines: it is only tests (v1 and v2 fixtures side by side, and the root-only `real`
//! module); splitting them would scatter the fixture helpers they share.

use super::common::{self, kernel_path, parse_mountinfo, path_within, proc_cgroup_path};
use super::*;
use std::fs;
use tempfile::TempDir;

/// Writes `content` to `root/rel`, creating directories: one kernel file of the fixture.
fn put(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// Reads `root/rel` back.
fn get(root: &Path, rel: &str) -> String {
    fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The files the kernel creates in a new v2 cgroup (with cpu, memory, pids enabled above it).
fn v2_cgroup_files(root: &Path, rel: &str, kill: bool) {
    put(root, &format!("{rel}/cgroup.procs"), "");
    put(root, &format!("{rel}/cgroup.controllers"), "cpu memory pids\n");
    put(root, &format!("{rel}/cgroup.subtree_control"), "");
    put(root, &format!("{rel}/cgroup.events"), "populated 0\nfrozen 0\n");
    put(root, &format!("{rel}/cgroup.freeze"), "0\n");
    put(root, &format!("{rel}/cpu.max"), "max 100000\n");
    put(root, &format!("{rel}/cpu.stat"), "usage_usec 0\nuser_usec 0\nsystem_usec 0\n");
    put(root, &format!("{rel}/memory.max"), "max\n");
    put(root, &format!("{rel}/memory.current"), "0\n");
    put(root, &format!("{rel}/memory.events"), "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n");
    if kill {
        put(root, &format!("{rel}/cgroup.kill"), "");
    }
}

/// A v2 root as the kernel shows it: controllers available, none enabled yet.
fn v2_root() -> TempDir {
    let t = TempDir::new().unwrap();
    put(t.path(), "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    put(t.path(), "cgroup.subtree_control", "");
    put(t.path(), "cgroup.procs", "1\n");
    put(t.path(), "cpu.stat", "usage_usec 1\n");
    t
}

/// A non-delegated v2 hierarchy on the fixture `root` with parent "steward".
fn v2_hierarchy(root: &Path) -> Hierarchy {
    let config = CgroupConfig { mount_root: root.into(), parent: "steward".into() };
    Hierarchy::detect_v2(&config, "", "0::/user.slice/user-0.slice/session-3.scope\n", 4242).unwrap()
}

/// v2: a fixture root, the hierarchy, and a created instance "demo.gamesvc.0" with its files.
fn v2_instance(kill: bool) -> (TempDir, Hierarchy, Box<dyn Cgroup>) {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    let cg = h.instance("demo.gamesvc.0");
    cg.create().unwrap();
    v2_cgroup_files(t.path(), "steward/demo.gamesvc.0", kill);
    (t, h, cg)
}

#[test]
fn v2_detected_by_cgroup_controllers() {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    assert_eq!(h.version(), Version::V2);
    assert!(!h.delegated());
    assert_eq!(h.parent_dirs(), vec![t.path().join("steward")]);
    assert_eq!(h.instance("a.b.0").path(), t.path().join("steward/a.b.0").display().to_string());
}

#[test]
fn v2_cpu_limits_written_exactly() {
    let (t, _h, cg) = v2_instance(false);
    let at = |cores: Option<f64>| {
        cg.set_limits(&Limits { cpu_cores: cores, memory_mb: None, pids_max: None }, false).unwrap();
        get(t.path(), "steward/demo.gamesvc.0/cpu.max")
    };
    assert_eq!(at(Some(0.5)), "50000 100000");
    assert_eq!(at(Some(2.0)), "200000 100000");
    assert_eq!(at(Some(1.25)), "125000 100000");
    assert_eq!(at(None), "max 100000");
    // Below the kernel's 1 ms minimum quota: raised to it rather than rejected by the kernel.
    assert_eq!(at(Some(0.001)), "1000 100000");
}

#[test]
fn v2_memory_limits_written_exactly() {
    let (t, _h, cg) = v2_instance(false);
    let at = |mb: Option<f64>| {
        cg.set_limits(&Limits { cpu_cores: None, memory_mb: mb, pids_max: None }, false).unwrap();
        get(t.path(), "steward/demo.gamesvc.0/memory.max")
    };
    assert_eq!(at(Some(64.0)), "67108864");
    assert_eq!(at(Some(0.5)), "524288");
    assert_eq!(at(None), "max");
}

#[test]
fn v2_limits_without_controller() {
    let (t, _h, cg) = v2_instance(false);
    fs::remove_file(t.path().join("steward/demo.gamesvc.0/cpu.max")).unwrap();
    fs::remove_file(t.path().join("steward/demo.gamesvc.0/memory.max")).unwrap();
    // Unlimited needs nothing to be written.
    cg.set_limits(&Limits::default(), false).unwrap();
    let e = cg.set_limits(&Limits { cpu_cores: Some(1.0), memory_mb: None, pids_max: None }, false).unwrap_err();
    assert!(matches!(e, CgroupError::Unavailable { controller: "cpu", .. }), "{e}");
    assert!(e.to_string().contains("cpu.max"), "{e}");
    let e = cg.set_limits(&Limits { cpu_cores: None, memory_mb: Some(1.0), pids_max: None }, false).unwrap_err();
    assert!(matches!(e, CgroupError::Unavailable { controller: "memory", .. }), "{e}");
}

#[test]
fn invalid_limits_rejected_before_writing() {
    let (t, _h, cg) = v2_instance(false);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = cg.set_limits(&Limits { cpu_cores: Some(bad), memory_mb: None, pids_max: None }, false).unwrap_err();
        assert!(matches!(e, CgroupError::InvalidLimit { what: "cpu", .. }), "{e}");
        let e = cg.set_limits(&Limits { cpu_cores: None, memory_mb: Some(bad), pids_max: None }, false).unwrap_err();
        assert!(matches!(e, CgroupError::InvalidLimit { what: "memory", .. }), "{e}");
    }
    assert_eq!(get(t.path(), "steward/demo.gamesvc.0/cpu.max"), "max 100000\n");
    assert_eq!(get(t.path(), "steward/demo.gamesvc.0/memory.max"), "max\n");
}

#[test]
fn v2_usage_parsed() {
    let (t, _h, cg) = v2_instance(false);
    put(t.path(), "steward/demo.gamesvc.0/cpu.stat", "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n");
    put(t.path(), "steward/demo.gamesvc.0/memory.current", "8392704\n");
    put(
        t.path(),
        "steward/demo.gamesvc.0/memory.events",
        "low 0\nhigh 0\nmax 17\noom 3\noom_kill 2\noom_group_kill 0\n",
    );
    put(t.path(), "steward/demo.gamesvc.0/pids.current", "7\n");
    put(t.path(), "steward/demo.gamesvc.0/pids.max", "64\n");
    let usage =
        Usage { cpu_usage_usec: 1_234_567, memory_bytes: 8_392_704, oom_kills: 2, tasks: 7, tasks_max: Some(64) };
    assert_eq!(cg.usage().unwrap(), usage);
}

#[test]
fn v2_usage_without_memory_controller_is_zero() {
    let (t, _h, cg) = v2_instance(false);
    put(t.path(), "steward/demo.gamesvc.0/cpu.stat", "usage_usec 42\n");
    fs::remove_file(t.path().join("steward/demo.gamesvc.0/memory.current")).unwrap();
    fs::remove_file(t.path().join("steward/demo.gamesvc.0/memory.events")).unwrap();
    assert_eq!(cg.usage().unwrap(), Usage { cpu_usage_usec: 42, ..Usage::default() });
}

#[test]
fn usage_of_absent_cgroup_names_the_path() {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    let e = h.instance("never.created.0").usage().unwrap_err();
    assert!(e.is_not_found());
    let msg = e.to_string();
    assert!(msg.contains("read usage of") && msg.contains("never.created.0"), "{msg}");
}

#[test]
fn garbage_in_kernel_file_is_a_parse_error() {
    let (t, _h, cg) = v2_instance(false);
    put(t.path(), "steward/demo.gamesvc.0/memory.current", "lots\n");
    let e = cg.usage().unwrap_err();
    assert!(matches!(e, CgroupError::Parse { .. }), "{e}");
    assert!(e.to_string().contains("memory.current"), "{e}");
}

#[test]
fn v2_create_enables_controllers_down_to_the_parent() {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    h.instance("demo.gamesvc.0").create().unwrap();
    // The root offers more, but we ask for exactly ours, in one write.
    assert_eq!(get(t.path(), "cgroup.subtree_control"), "+cpu +memory +pids");
    assert!(t.path().join("steward/demo.gamesvc.0").is_dir());
    // The instance is a leaf: nothing enabled there (it holds processes).
    assert!(!t.path().join("steward/demo.gamesvc.0/cgroup.subtree_control").exists());
}

#[test]
fn v2_create_enables_only_what_is_missing_and_available() {
    let t = v2_root();
    put(t.path(), "cgroup.subtree_control", "cpu memory pids\n");
    // The parent exists already; the kernel offers it cpu and memory only, cpu is enabled.
    put(t.path(), "steward/cgroup.controllers", "cpu memory\n");
    put(t.path(), "steward/cgroup.subtree_control", "cpu\n");
    let h = v2_hierarchy(t.path());
    let cg = h.instance("demo.gamesvc.0");
    assert!(cg.create().unwrap(), "made just now");
    assert_eq!(get(t.path(), "cgroup.subtree_control"), "cpu memory pids\n", "root untouched");
    assert_eq!(get(t.path(), "steward/cgroup.subtree_control"), "+memory");
    // Idempotent: a second create writes nothing new and fails on nothing.
    put(t.path(), "steward/cgroup.subtree_control", "cpu memory\n");
    assert!(!cg.create().unwrap(), "existed already");
    assert_eq!(get(t.path(), "steward/cgroup.subtree_control"), "cpu memory\n");
}

#[test]
fn v2_nested_parent_is_created_level_by_level() {
    let t = v2_root();
    let config = CgroupConfig { mount_root: t.path().into(), parent: "steward/prod".into() };
    let h = Hierarchy::detect_v2(&config, "", "0::/\n", 1).unwrap();
    h.instance("x.y.0").create().unwrap();
    assert!(t.path().join("steward/prod/x.y.0").is_dir());
}

#[test]
fn v2_pids_cover_nested_cgroups() {
    let (t, _h, cg) = v2_instance(false);
    put(t.path(), "steward/demo.gamesvc.0/cgroup.procs", "10\n11\n");
    put(t.path(), "steward/demo.gamesvc.0/worker/cgroup.procs", "12\n");
    put(t.path(), "steward/demo.gamesvc.0/worker/inner/cgroup.procs", "13\n10\n");
    put(t.path(), "steward/demo.gamesvc.0/empty/cgroup.procs", "");
    assert_eq!(cg.pids().unwrap(), vec![10, 11, 12, 13]);
}

/// One file says an instance's cgroup tree is empty (every run's end asks): v2's
/// cgroup.events, v1's pids.current; anything else leaves it to the listing.
#[test]
fn one_file_says_a_cgroup_is_empty() {
    let (t, _h, cg) = v2_instance(false);
    assert!(cg.known_empty(), "populated 0");
    put(t.path(), "steward/demo.gamesvc.0/cgroup.events", "populated 1\nfrozen 0\n");
    assert!(!cg.known_empty(), "populated 1");
    fs::remove_file(t.path().join("steward/demo.gamesvc.0/cgroup.events")).unwrap();
    assert!(!cg.known_empty(), "no cgroup.events: not known");

    let (t, _h, cg) = v1_instance();
    assert!(!cg.known_empty(), "no pids.current: not known");
    put(t.path(), "pids/steward/demo.gamesvc.0/pids.current", "2\n");
    assert!(!cg.known_empty(), "two tasks");
    put(t.path(), "pids/steward/demo.gamesvc.0/pids.current", "0\n");
    // Processes listed in another hierarchy do not count: the pids hierarchy tracks.
    put(t.path(), "memory/steward/demo.gamesvc.0/cgroup.procs", "10\n");
    assert!(cg.known_empty(), "pids.current 0");
}

#[test]
fn absent_cgroup_is_empty_and_killing_it_kills_nothing() {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    let cg = h.instance("gone.away.0");
    assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
    assert_eq!(cg.kill_all().unwrap(), 0);
    assert_eq!(cg.signal_all(nix::sys::signal::Signal::SIGTERM).unwrap(), 0);
    cg.remove().unwrap();
}

#[test]
fn garbage_in_cgroup_procs_is_reported() {
    let (t, _h, cg) = v2_instance(false);
    put(t.path(), "steward/demo.gamesvc.0/cgroup.procs", "10\nnot-a-pid\n");
    let e = cg.pids().unwrap_err();
    assert!(e.to_string().contains("cgroup.procs") && e.to_string().contains("not-a-pid"), "{e}");
}

#[test]
fn v2_join_files_and_add_pid_write_cgroup_procs() {
    let (t, _h, cg) = v2_instance(false);
    let fds = cg.join_files().unwrap();
    assert_eq!(fds.len(), 1);
    // What a child does in pre_exec: one write of "0".
    let n = nix::unistd::write(&fds[0], b"0").unwrap();
    assert_eq!(n, 1);
    assert_eq!(get(t.path(), "steward/demo.gamesvc.0/cgroup.procs"), "0");
    // Write-only and close-on-exec.
    let flags = nix::fcntl::fcntl(std::os::fd::AsRawFd::as_raw_fd(&fds[0]), nix::fcntl::FcntlArg::F_GETFD).unwrap();
    assert_ne!(flags & libc::FD_CLOEXEC, 0);
    let fl = nix::fcntl::fcntl(std::os::fd::AsRawFd::as_raw_fd(&fds[0]), nix::fcntl::FcntlArg::F_GETFL).unwrap();
    assert_eq!(fl & libc::O_ACCMODE, libc::O_WRONLY);
    cg.add_pid(4321).unwrap();
    assert_eq!(get(t.path(), "steward/demo.gamesvc.0/cgroup.procs"), "4321");
}

#[test]
fn join_files_of_uncreated_cgroup_fail_with_path() {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    let e = h.instance("not.created.0").join_files().unwrap_err();
    assert!(e.to_string().contains("open for joining") && e.to_string().contains("not.created.0/cgroup.procs"), "{e}");
}

#[test]
fn remove_takes_nested_cgroups_first_and_tolerates_absence() {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    let cg = h.instance("demo.gamesvc.0");
    cg.create().unwrap();
    fs::create_dir_all(t.path().join("steward/demo.gamesvc.0/a/b")).unwrap();
    fs::create_dir_all(t.path().join("steward/demo.gamesvc.0/c")).unwrap();
    cg.remove().unwrap();
    assert!(!t.path().join("steward/demo.gamesvc.0").exists());
    cg.remove().unwrap();
    h.remove_parent().unwrap();
    assert!(!t.path().join("steward").exists());
}

#[test]
fn keys_are_validated() {
    for ok in ["demo.gamesvc.0", "a", "ns-1.name_2.17", "x.y.z"] {
        assert_eq!(validate_key(ok), Ok(()), "{ok}");
    }
    for bad in ["", "a/b", "/abs", "..", ".", "a..b", "../x", ".hidden", "cgroup.procs", "a\nb", "a\0b"] {
        assert!(validate_key(bad).is_err(), "{bad:?} accepted");
    }
    assert!(validate_key(&"x".repeat(256)).is_err());
}

#[test]
fn invalid_key_touches_nothing() {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    for bad in ["../escape", "a/b", "", ".."] {
        assert!(h.try_instance(bad).is_err(), "{bad:?}");
        let cg = h.instance(bad);
        let e = cg.create().unwrap_err();
        assert!(matches!(e, CgroupError::InvalidName { .. }), "{e}");
        assert!(e.to_string().contains("create cgroup"), "{e}");
        assert!(cg.pids().is_err());
        assert!(cg.kill_all().is_err());
        assert!(cg.remove().is_err());
        assert!(cg.join_files().is_err());
        assert!(!cg.contains(std::process::id() as i32));
    }
    assert!(!t.path().join("escape").exists());
    assert!(!t.path().join("steward").exists());
}

#[test]
fn parent_is_validated() {
    let t = v2_root();
    for bad in ["", "../up", "/abs", "a/../b", "./a", ".hidden"] {
        let config = CgroupConfig { mount_root: t.path().into(), parent: bad.into() };
        let e = Hierarchy::detect_v2(&config, "", "0::/\n", 1).unwrap_err();
        assert!(matches!(e, CgroupError::InvalidName { .. }), "{bad:?}: {e}");
        assert!(Hierarchy::detect(&config).is_err(), "{bad:?}");
    }
}

#[test]
fn list_instances_shows_valid_directories_only() {
    let t = v2_root();
    let h = v2_hierarchy(t.path());
    assert!(h.list_instances().is_empty(), "no parent yet");
    h.instance("b.svc.1").create().unwrap();
    h.instance("a.svc.0").create().unwrap();
    put(t.path(), "steward/cgroup.procs", "");
    put(t.path(), "steward/cgroup.controllers", "cpu\n");
    assert_eq!(h.list_instances(), vec!["a.svc.0".to_string(), "b.svc.1".to_string()]);
}

#[test]
fn v2_delegation_moves_daemon_and_uses_instances() {
    let t = v2_root();
    let svc = "system.slice/stewardd.service";
    v2_cgroup_files(t.path(), svc, true);
    put(t.path(), &format!("{svc}/cgroup.procs"), "4242\n");
    // The kernel creates cgroup.procs in a new cgroup; the fixture must provide it.
    put(t.path(), &format!("{svc}/daemon/cgroup.procs"), "");
    let config = CgroupConfig::default();
    let config = CgroupConfig { mount_root: t.path().into(), ..config };
    let h = Hierarchy::detect_v2(&config, "", &format!("0::/{svc}\n"), 4242).unwrap();
    assert!(h.delegated());
    assert_eq!(get(t.path(), &format!("{svc}/daemon/cgroup.procs")), "4242");
    assert_eq!(h.parent_dirs(), vec![t.path().join(svc).join("instances")]);
    h.instance("demo.gamesvc.0").create().unwrap();
    // Controllers are enabled inside the delegated subtree only, never above it.
    assert_eq!(get(t.path(), &format!("{svc}/cgroup.subtree_control")), "+cpu +memory +pids");
    assert_eq!(get(t.path(), "cgroup.subtree_control"), "");
    assert!(t.path().join(svc).join("instances/demo.gamesvc.0").is_dir());
    assert!(h.to_string().contains("delegation"), "{h}");

    // Already in <service>/daemon (moved by a previous run, or systemd's DelegateSubgroup).
    let h = Hierarchy::detect_v2(&config, "", &format!("0::/{svc}/daemon\n"), 4242).unwrap();
    assert!(h.delegated());
    assert_eq!(h.parent_dirs(), vec![t.path().join(svc).join("instances")]);
}

#[test]
fn v2_not_delegated_outside_a_service() {
    let t = v2_root();
    put(t.path(), "user.slice/session-1.scope/cgroup.procs", "");
    put(t.path(), "system.slice/other.service/worker/cgroup.procs", "");
    for own in ["0::/\n", "0::/user.slice/session-1.scope\n", "0::/system.slice/other.service/worker\n"] {
        let config = CgroupConfig { mount_root: t.path().into(), parent: "steward".into() };
        let h = Hierarchy::detect_v2(&config, "", own, 1).unwrap();
        assert!(!h.delegated(), "{own}");
        assert_eq!(h.parent_dirs(), vec![t.path().join("steward")]);
    }
}

#[test]
fn v2_mount_of_a_subtree_maps_kernel_paths() {
    // A container without a cgroup namespace sees /docker/abc mounted at the mount root:
    // /proc/PID/cgroup paths start with /docker/abc.
    let t = v2_root();
    let svc = "system.slice/x.service";
    put(t.path(), &format!("{svc}/daemon/cgroup.procs"), "");
    let mountinfo = format!("40 31 0:38 /docker/abc {} rw,relatime - cgroup2 cgroup2 rw\n", t.path().display());
    let config = CgroupConfig { mount_root: t.path().into(), parent: "steward".into() };
    let h = Hierarchy::detect_v2(&config, &mountinfo, &format!("0::/docker/abc/{svc}\n"), 7).unwrap();
    assert!(h.delegated());
    let Layout::V2(l) = &h.layout else { panic!("not v2") };
    assert_eq!(l.instance("k.a.0").kernel_path, format!("/docker/abc/{svc}/instances/k.a.0"));
}

/// A hybrid host's mountinfo (this project's CI machine): cpu and cpuacct separate.
fn hybrid_mountinfo(root: &Path) -> String {
    let r = root.display();
    format!(
        "31 23 0:28 / {r} rw,relatime - tmpfs tmpfs rw,mode=755\n\
         32 31 0:29 / {r}/cpu rw,relatime - cgroup cgroup rw,cpu\n\
         33 31 0:30 / {r}/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n\
         34 31 0:31 / {r}/cpuset rw,relatime - cgroup cgroup rw,cpuset\n\
         35 31 0:32 / {r}/memory rw,relatime - cgroup cgroup rw,memory\n\
         37 31 0:34 / {r}/freezer rw,relatime - cgroup cgroup rw,freezer\n\
         39 31 0:36 / {r}/pids rw,relatime - cgroup cgroup rw,pids\n\
         40 31 0:37 / {r}/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
         41 31 0:38 / {r}/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
}

/// The v1 kernel files of one cgroup in each hierarchy.
fn v1_cgroup_files(root: &Path, rel: &str) {
    for h in ["cpu", "cpuacct", "memory", "freezer", "pids"] {
        put(root, &format!("{h}/{rel}/cgroup.procs"), "");
    }
    put(root, &format!("cpu/{rel}/cpu.cfs_period_us"), "100000\n");
    put(root, &format!("cpu/{rel}/cpu.cfs_quota_us"), "-1\n");
    put(root, &format!("cpuacct/{rel}/cpuacct.usage"), "0\n");
    put(root, &format!("memory/{rel}/memory.limit_in_bytes"), "9223372036854771712\n");
    put(root, &format!("memory/{rel}/memory.usage_in_bytes"), "0\n");
    put(root, &format!("memory/{rel}/memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
    put(root, &format!("freezer/{rel}/freezer.state"), "THAWED\n");
}

/// v1: a fixture root, the hierarchy from hybrid mountinfo, and a created instance.
fn v1_instance() -> (TempDir, Hierarchy, Box<dyn Cgroup>) {
    let t = TempDir::new().unwrap();
    let config = CgroupConfig { mount_root: t.path().into(), parent: "steward".into() };
    let h = Hierarchy::detect_v1(&config, &hybrid_mountinfo(t.path())).unwrap();
    let cg = h.instance("demo.gamesvc.0");
    cg.create().unwrap();
    v1_cgroup_files(t.path(), "steward/demo.gamesvc.0");
    (t, h, cg)
}

#[test]
fn v1_hierarchies_found_from_mountinfo() {
    let t = TempDir::new().unwrap();
    let config = CgroupConfig { mount_root: t.path().into(), parent: "steward".into() };
    let h = Hierarchy::detect_v1(&config, &hybrid_mountinfo(t.path())).unwrap();
    assert_eq!(h.version(), Version::V1);
    let expect: Vec<PathBuf> =
        ["cpu", "cpuacct", "memory", "pids", "freezer"].iter().map(|c| t.path().join(c).join("steward")).collect();
    assert_eq!(h.parent_dirs(), expect);
    // cpuset, name=systemd and the unified tree are not ours.
    assert!(!h.to_string().contains("cpuset") && !h.to_string().contains("unified"), "{h}");
}

#[test]
fn v1_co_mounted_and_duplicate_mounts() {
    let t = TempDir::new().unwrap();
    let r = t.path().display();
    // Debian-style cpu,cpuacct co-mount, net_cls mixed in, memory mounted twice (bind elsewhere).
    let mountinfo = format!(
        "32 31 0:29 / {r}/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
         33 31 0:30 / /mnt/elsewhere/memory rw - cgroup cgroup rw,memory\n\
         34 31 0:30 / {r}/memory rw - cgroup cgroup rw,memory\n\
         35 31 0:31 / {r}/net_cls,net_prio rw - cgroup cgroup rw,net_cls,net_prio\n\
         36 31 0:32 / {r}/pids rw - cgroup cgroup rw,pids\n"
    );
    let config = CgroupConfig { mount_root: t.path().into(), parent: "steward".into() };
    let h = Hierarchy::detect_v1(&config, &mountinfo).unwrap();
    assert_eq!(
        h.parent_dirs(),
        vec![t.path().join("cpu,cpuacct/steward"), t.path().join("memory/steward"), t.path().join("pids/steward")]
    );
    // One hierarchy, one join file.
    let cg = h.instance("a.b.0");
    cg.create().unwrap();
    for d in ["cpu,cpuacct", "memory", "pids"] {
        put(t.path(), &format!("{d}/steward/a.b.0/cgroup.procs"), "");
    }
    assert_eq!(cg.join_files().unwrap().len(), 3);
    // No freezer: killing an empty cgroup still works (rounds without freezing).
    assert_eq!(cg.kill_all().unwrap(), 0);
}

#[test]
fn v1_without_any_controller_is_an_error() {
    let t = TempDir::new().unwrap();
    let config = CgroupConfig { mount_root: t.path().into(), parent: "steward".into() };
    let e = Hierarchy::detect_v1(&config, "40 31 0:37 / /x rw - cgroup cgroup rw,name=systemd\n").unwrap_err();
    assert!(matches!(e, CgroupError::NoHierarchy { .. }), "{e}");
    assert!(e.to_string().contains(&t.path().display().to_string()), "{e}");
    // And detect() on a directory that is neither says so too (the real mountinfo has no
    // cgroup mounted at a temporary directory, but may have them elsewhere: accept either).
    if let Ok(h) = Hierarchy::detect(&config) {
        assert_eq!(h.version(), Version::V1);
    }
}

#[test]
fn v1_create_makes_the_cgroup_in_every_hierarchy() {
    let t = TempDir::new().unwrap();
    let config = CgroupConfig { mount_root: t.path().into(), parent: "steward".into() };
    let h = Hierarchy::detect_v1(&config, &hybrid_mountinfo(t.path())).unwrap();
    let cg = h.instance("demo.gamesvc.0");
    assert!(cg.create().unwrap(), "made just now, parent and all");
    assert!(!cg.create().unwrap(), "existed already");
    // Left behind in one hierarchy only (a crash mid-create): not fresh, its limits get written.
    std::fs::remove_dir(t.path().join("memory/steward/demo.gamesvc.0")).unwrap();
    assert!(!cg.create().unwrap());
    for c in ["cpu", "cpuacct", "memory", "pids", "freezer"] {
        assert!(t.path().join(c).join("steward/demo.gamesvc.0").is_dir(), "{c}");
    }
    assert!(!t.path().join("cpuset/steward").exists());
    assert_eq!(h.list_instances(), vec!["demo.gamesvc.0".to_string()]);
    cg.remove().unwrap();
    for c in ["cpu", "cpuacct", "memory", "pids", "freezer"] {
        assert!(!t.path().join(c).join("steward/demo.gamesvc.0").exists(), "{c}");
    }
}

#[test]
fn a_fresh_cgroup_gets_only_its_limits_written_and_nothing_read() {
    // A cgroup made just now holds the kernel's defaults: a reset would write them again, so
    // files the limits do not name stay as they are (here, markers no reset would leave).
    let (t, _h, cg) = v1_instance();
    let rel = "steward/demo.gamesvc.0";
    let untouched = ["cpu/{rel}/cpu.cfs_period_us", "cpu/{rel}/cpu.cfs_quota_us", "memory/{rel}/memory.limit_in_bytes"];
    for f in untouched {
        put(t.path(), &f.replace("{rel}", rel), "untouched");
    }
    put(t.path(), &format!("pids/{rel}/pids.max"), "untouched");
    cg.set_limits(&Limits { cpu_cores: None, memory_mb: None, pids_max: Some(64) }, true).unwrap();
    assert_eq!(get(t.path(), &format!("pids/{rel}/pids.max")), "64");
    for f in untouched {
        assert_eq!(get(t.path(), &f.replace("{rel}", rel)), "untouched", "{f}");
    }
    // A limit is written without reading what was there.
    cg.set_limits(&Limits { cpu_cores: Some(0.5), memory_mb: None, pids_max: None }, true).unwrap();
    assert_eq!(get(t.path(), &format!("cpu/{rel}/cpu.cfs_quota_us")), "50000");

    let (t, _h, cg) = v2_instance(false);
    for f in ["cpu.max", "memory.max", "pids.max"] {
        put(t.path(), &format!("{rel}/{f}"), "untouched");
    }
    cg.set_limits(&Limits { cpu_cores: None, memory_mb: Some(64.0), pids_max: None }, true).unwrap();
    assert_eq!(get(t.path(), &format!("{rel}/memory.max")), "67108864");
    assert_eq!(get(t.path(), &format!("{rel}/cpu.max")), "untouched");
    assert_eq!(get(t.path(), &format!("{rel}/pids.max")), "untouched");
}

#[test]
fn v1_limits_written_exactly() {
    let (t, _h, cg) = v1_instance();
    let rel = "steward/demo.gamesvc.0";
    put(t.path(), &format!("cpu/{rel}/cpu.cfs_period_us"), "250000\n");
    put(t.path(), &format!("pids/{rel}/pids.max"), "max\n");
    cg.set_limits(&Limits { cpu_cores: Some(0.5), memory_mb: Some(64.0), pids_max: None }, false).unwrap();
    assert_eq!(get(t.path(), &format!("cpu/{rel}/cpu.cfs_period_us")), "100000");
    assert_eq!(get(t.path(), &format!("cpu/{rel}/cpu.cfs_quota_us")), "50000");
    assert_eq!(get(t.path(), &format!("memory/{rel}/memory.limit_in_bytes")), "67108864");
    cg.set_limits(&Limits { cpu_cores: Some(3.0), memory_mb: Some(1.5), pids_max: Some(64) }, false).unwrap();
    assert_eq!(get(t.path(), &format!("pids/{rel}/pids.max")), "64");
    assert_eq!(get(t.path(), &format!("cpu/{rel}/cpu.cfs_quota_us")), "300000");
    assert_eq!(get(t.path(), &format!("memory/{rel}/memory.limit_in_bytes")), "1572864");
    cg.set_limits(&Limits::default(), false).unwrap();
    assert_eq!(get(t.path(), &format!("cpu/{rel}/cpu.cfs_period_us")), "100000");
    assert_eq!(get(t.path(), &format!("cpu/{rel}/cpu.cfs_quota_us")), "-1");
    assert_eq!(get(t.path(), &format!("memory/{rel}/memory.limit_in_bytes")), "-1");
    assert_eq!(get(t.path(), &format!("pids/{rel}/pids.max")), "max");
}

#[test]
fn v1_limits_without_controller() {
    let t = TempDir::new().unwrap();
    let r = t.path().display();
    let config = CgroupConfig { mount_root: t.path().into(), parent: "steward".into() };
    let h = Hierarchy::detect_v1(&config, &format!("1 1 0:1 / {r}/pids rw - cgroup cgroup rw,pids\n")).unwrap();
    let cg = h.instance("a.b.0");
    cg.create().unwrap();
    cg.set_limits(&Limits::default(), false).unwrap();
    let e = cg.set_limits(&Limits { cpu_cores: Some(1.0), memory_mb: None, pids_max: None }, false).unwrap_err();
    assert!(matches!(e, CgroupError::Unavailable { controller: "cpu", .. }), "{e}");
    let e = cg.set_limits(&Limits { cpu_cores: None, memory_mb: Some(1.0), pids_max: None }, false).unwrap_err();
    assert!(matches!(e, CgroupError::Unavailable { controller: "memory", .. }), "{e}");
    assert_eq!(cg.usage().unwrap(), Usage::default());
}

#[test]
fn v1_usage_parsed() {
    let (t, _h, cg) = v1_instance();
    let rel = "steward/demo.gamesvc.0";
    put(t.path(), &format!("cpuacct/{rel}/cpuacct.usage"), "1234567890\n");
    put(t.path(), &format!("memory/{rel}/memory.usage_in_bytes"), "16777216\n");
    put(t.path(), &format!("memory/{rel}/memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
    put(t.path(), &format!("pids/{rel}/pids.current"), "2\n");
    put(t.path(), &format!("pids/{rel}/pids.max"), "max\n");
    let usage = Usage { cpu_usage_usec: 1_234_567, memory_bytes: 16_777_216, oom_kills: 3, tasks: 2, tasks_max: None };
    assert_eq!(cg.usage().unwrap(), usage);
    // Kernels before 4.13 have no oom_kill line.
    put(t.path(), &format!("memory/{rel}/memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\n");
    assert_eq!(cg.usage().unwrap().oom_kills, 0);
}

#[test]
fn v1_pids_are_the_union_over_hierarchies_and_nested_cgroups() {
    let (t, _h, cg) = v1_instance();
    let rel = "steward/demo.gamesvc.0";
    put(t.path(), &format!("cpu/{rel}/cgroup.procs"), "100\n101\n");
    put(t.path(), &format!("memory/{rel}/cgroup.procs"), "100\n101\n102\n");
    put(t.path(), &format!("freezer/{rel}/sub/cgroup.procs"), "103\n");
    assert_eq!(cg.pids().unwrap(), vec![100, 101, 102, 103]);
}

#[test]
fn v1_join_files_one_per_hierarchy() {
    let (t, _h, cg) = v1_instance();
    let fds = cg.join_files().unwrap();
    assert_eq!(fds.len(), 5);
    for fd in &fds {
        nix::unistd::write(fd, b"0").unwrap();
    }
    for h in ["cpu", "cpuacct", "memory", "freezer", "pids"] {
        assert_eq!(get(t.path(), &format!("{h}/steward/demo.gamesvc.0/cgroup.procs")), "0", "{h}");
    }
    cg.add_pid(77).unwrap();
    assert_eq!(get(t.path(), "memory/steward/demo.gamesvc.0/cgroup.procs"), "77");
    assert!(cg.path().contains("/steward/demo.gamesvc.0"), "{}", cg.path());
}

#[test]
fn mountinfo_parsing() {
    let m = parse_mountinfo(
        "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n\
         42 31 0:39 /a\\040b /my\\040cgroups/cpu rw - cgroup cgroup rw,cpu,cpuacct\n\
         garbage line\n",
    );
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].root, "/mnt1");
    assert_eq!(m[0].fstype, "ext3");
    assert_eq!(m[1].mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
    assert_eq!(m[1].fstype, "cgroup2");
    assert_eq!(m[2].root, "/a b");
    assert_eq!(m[2].mount_point, PathBuf::from("/my cgroups/cpu"));
    assert_eq!(m[2].super_options, "rw,cpu,cpuacct");
}

#[test]
fn proc_cgroup_parsing() {
    let v1 = "9:name=systemd:/\n8:pids:/steward/a.b.0\n4:memory:/process_api/d72e\n2:cpu,cpuacct:/x\n0::/\n";
    assert_eq!(proc_cgroup_path(v1, Some("pids")), Some("/steward/a.b.0"));
    assert_eq!(proc_cgroup_path(v1, Some("memory")), Some("/process_api/d72e"));
    assert_eq!(proc_cgroup_path(v1, Some("cpuacct")), Some("/x"));
    assert_eq!(proc_cgroup_path(v1, Some("freezer")), None);
    assert_eq!(proc_cgroup_path(v1, Some("systemd")), None);
    assert_eq!(proc_cgroup_path(v1, None), Some("/"));
    let v2 = "0::/system.slice/stewardd.service/instances/a.b.0\n";
    assert_eq!(proc_cgroup_path(v2, None), Some("/system.slice/stewardd.service/instances/a.b.0"));
    assert_eq!(proc_cgroup_path(v2, Some("memory")), None);
    // Paths may contain ':'.
    assert_eq!(proc_cgroup_path("0::/a:b\n", None), Some("/a:b"));

    assert!(path_within("/steward/a.b.0", "/steward/a.b.0"));
    assert!(path_within("/steward/a.b.0/sub", "/steward/a.b.0"));
    assert!(!path_within("/steward/a.b.01", "/steward/a.b.0"));
    assert!(!path_within("/steward", "/steward/a.b.0"));

    assert_eq!(kernel_path(Path::new("/sys/fs/cgroup"), "/", Path::new("/sys/fs/cgroup/steward/k")), "/steward/k");
    assert_eq!(kernel_path(Path::new("/m"), "/docker/x/", Path::new("/m/steward/k")), "/docker/x/steward/k");
    assert_eq!(kernel_path(Path::new("/m"), "/", Path::new("/m")), "/");
}

#[test]
fn contains_uses_proc_pid_cgroup() {
    // Our own process: in the fixture hierarchy's instance? No. A process that is gone: no.
    let (_t, _h, cg) = v2_instance(false);
    assert!(!cg.contains(std::process::id() as i32));
    assert!(!cg.contains(0));
    assert!(!cg.contains(-1));
    assert!(!cg.contains(i32::MAX));
    // A v2 hierarchy whose "instance" is our own cgroup (seen through the real mountinfo
    // root), as far as /proc/self/cgroup is concerned.
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    if let Some(path) = proc_cgroup_path(&own, None).filter(|p| *p != "/") {
        let (parent, key) = path.rsplit_once('/').unwrap();
        let t = v2_root();
        let config = CgroupConfig { mount_root: t.path().into(), parent: parent.trim_start_matches('/').into() };
        if let Ok(h) = Hierarchy::detect_v2(&config, "", "0::/\n", 1) {
            if validate_key(key).is_ok() {
                assert!(h.instance(key).contains(std::process::id() as i32));
            }
        }
    }
}

#[test]
fn error_messages_name_operation_and_path() {
    let e = common::read(Path::new("/nonexistent/cgroup.procs"), "list processes in").unwrap_err();
    assert_eq!(e.to_string().split(':').next().unwrap(), "cannot list processes in /nonexistent/cgroup.procs");
    let e = common::write(Path::new("/nonexistent/memory.max"), "1", "set limit").unwrap_err();
    assert!(e.to_string().starts_with("cannot set limit /nonexistent/memory.max"), "{e}");
}

/// Against the real kernel: paths the integration test cannot reach through the public API
/// (v2 freeze rounds while cgroup.kill exists; v1 without a freezer). Root only; a skip says why.
mod real {
    use super::super::v2;
    use super::*;
    use std::os::fd::{AsRawFd, RawFd};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    /// Starts `script` with /bin/sh inside `cg` (joined in pre_exec, before exec).
    fn spawn_in(cg: &dyn Cgroup, script: &str) -> Child {
        let fds = cg.join_files().unwrap();
        let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script);
        // SAFETY: only write(2) on fds prepared before the fork; no allocation.
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
        cmd.spawn().unwrap()
    }

    /// Waits until `cg` holds at least `n` processes.
    fn wait_for(cg: &dyn Cgroup, n: usize) -> Vec<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = cg.pids().unwrap();
            if pids.len() >= n || Instant::now() > deadline {
                return pids;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn v2_kill_by_freezing_on_a_private_cgroup2_mount() {
        if !is_root() {
            eprintln!("SKIP v2_kill_by_freezing: needs root");
            return;
        }
        let dir = TempDir::new().unwrap();
        let mounted = Command::new("mount").args(["-t", "cgroup2", "none"]).arg(dir.path()).status();
        if !matches!(mounted, Ok(s) if s.success()) {
            eprintln!("SKIP v2_kill_by_freezing: cannot mount cgroup2 at {}: {mounted:?}", dir.path().display());
            return;
        }
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg(self.0).status();
            }
        }
        let _unmount = Unmount(dir.path());
        let parent = format!("steward-unit-{}", std::process::id());
        let config = CgroupConfig { mount_root: dir.path().into(), parent: parent.clone() };
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let own = fs::read_to_string("/proc/self/cgroup").unwrap();
        let h = Hierarchy::detect_v2(&config, &mountinfo, &own, 0).unwrap();
        let Layout::V2(layout) = &h.layout else { panic!() };
        let cg: v2::V2Cgroup = layout.instance("freeze.test.0");
        cg.create().unwrap();
        let mut child = spawn_in(&cg, "sleep 1000 & sleep 1000 & while :; do sleep 10 & done");
        std::thread::sleep(Duration::from_millis(200));
        let before = wait_for(&cg, 3);
        assert!(before.len() >= 3, "{before:?}");
        assert!(cg.contains(child.id() as i32));
        let n = cg.kill_all_by_freezing().unwrap();
        assert!(n >= before.len(), "{n} < {}", before.len());
        assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        // Left thawed.
        assert_eq!(fs::read_to_string(cg.dir.join("cgroup.freeze")).unwrap().trim(), "0");
        cg.remove().unwrap();
        h.remove_parent().unwrap();
    }

    /// The file the end of a run reads says empty only once the last process is gone and
    /// reaped (on v1 a zombie still counts; then the listing decides, which skips zombies):
    /// on this host's hierarchy, and on a private cgroup2 mount.
    #[test]
    fn an_instance_is_known_empty_once_its_last_process_is_reaped() {
        if !is_root() {
            eprintln!("SKIP known_empty: needs root");
            return;
        }
        let parent = format!("steward-unit-empty-{}", std::process::id());
        let host = CgroupConfig { mount_root: "/sys/fs/cgroup".into(), parent: parent.clone() };
        check_known_empty(&Hierarchy::detect(&host).unwrap());
        let dir = TempDir::new().unwrap();
        let mounted = Command::new("mount").args(["-t", "cgroup2", "none"]).arg(dir.path()).status();
        if !matches!(mounted, Ok(s) if s.success()) {
            eprintln!("SKIP known_empty on v2: cannot mount cgroup2 at {}", dir.path().display());
            return;
        }
        let config = CgroupConfig { mount_root: dir.path().into(), parent };
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let own = fs::read_to_string("/proc/self/cgroup").unwrap();
        let checked = Hierarchy::detect_v2(&config, &mountinfo, &own, 0).map(|h| check_known_empty(&h));
        let _ = Command::new("umount").arg(dir.path()).status();
        checked.unwrap();
    }

    fn check_known_empty(h: &Hierarchy) {
        let cg = h.instance("empty.test.0");
        cg.create().unwrap();
        let mut child = spawn_in(cg.as_ref(), "exec sleep 1000");
        assert_eq!(wait_for(cg.as_ref(), 1).len(), 1);
        assert!(!cg.known_empty(), "{}: a process runs in it", h.version());
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGKILL).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        if h.version() == Version::V1 {
            assert!(!cg.known_empty(), "a zombie still counts on v1");
        }
        child.wait().unwrap();
        assert!(cg.known_empty(), "{}: nothing left after the reap", h.version());
        cg.remove().unwrap();
        h.remove_parent().unwrap();
    }

    #[test]
    fn v1_kill_without_freezer() {
        if !is_root() {
            eprintln!("SKIP v1_kill_without_freezer: needs root");
            return;
        }
        let config = CgroupConfig {
            mount_root: "/sys/fs/cgroup".into(),
            parent: format!("steward-unit-{}", std::process::id()),
        };
        if config.mount_root.join("cgroup.controllers").exists() {
            eprintln!("SKIP v1_kill_without_freezer: this host runs cgroup v2");
            return;
        }
        let mountinfo: String = fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| !l.contains("freezer"))
            .map(|l| format!("{l}\n"))
            .collect();
        let h = match Hierarchy::detect_v1(&config, &mountinfo) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("SKIP v1_kill_without_freezer: {e}");
                return;
            }
        };
        let cg = h.instance("nofreeze.test.0");
        cg.create().unwrap();
        let mut child = spawn_in(cg.as_ref(), "sleep 1000 & while :; do sleep 10 & done");
        std::thread::sleep(Duration::from_millis(200));
        assert!(wait_for(cg.as_ref(), 2).len() >= 2);
        let result = cg.kill_all();
        let _ = child.wait();
        let n = result.unwrap();
        assert!(n >= 2);
        assert_eq!(cg.pids().unwrap(), Vec::<i32>::new());
        cg.remove().unwrap();
        h.remove_parent().unwrap();
    }
}
