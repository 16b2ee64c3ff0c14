//! Issue 51: hostile workloads against the daemon that serves them as root. A pod's container
//! races a volume subpath between the daemon's check and the engine's mount; a workload swaps
//! its own workPath for a symlink under `steward cp`. Real daemon, real CLI, the real Docker
//! Engine; a root-owned directory of the test stands for the host's /etc.

mod common;

use common::docker;
use common::{id, Daemon};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

fn pod(name: &str, containers: Value) -> Value {
    let mut p = docker::pod("hostile", name, containers, json!({}));
    p["spec"]["template"]["spec"]["volumes"] = json!([{"name": "scratch", "type": "Temp"}]);
    p
}

/// A root-owned directory standing for the host's /etc: nothing a container does may reach it.
fn host_target(d: &Daemon) -> std::path::PathBuf {
    let target = d.path().join("host-etc");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    target
}

fn untouched(target: &Path) {
    let names: Vec<String> =
        std::fs::read_dir(target).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["passwd".to_string()], "a container wrote into the host's directory");
}

/// The race made deterministic: the daemon is held (a failpoint) after it has checked the
/// subpath and before the engine mounts it, while the subpath's directory is swapped for a
/// symlink to a root-owned host directory. The container must get the directory that was
/// checked (now renamed), never the symlink's target.
#[tokio::test(flavor = "multi_thread")]
async fn a_subpath_swapped_for_a_symlink_after_its_check_mounts_what_was_checked() {
    docker::shared_engine();
    let mut d = Daemon::start("subpath-window");
    d.env = vec![("STEWARD_FAILPOINTS".into(), "subpath-checked~3000".into())];
    d.restart(false);
    let target = host_target(&d);
    let mut writer = docker::sh("writer", "touch /sub/pwned && exec sleep 1000");
    writer["mounts"] = json!([{"name": "scratch", "path": "/sub", "subpath": "sub"}]);
    d.apply_json(&pod("window", json!([writer]))).await;
    let volume = d.run_dir().join("hostile.window.0/volumes/scratch");
    let sub = volume.join("sub");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sub.is_dir() {
        assert!(Instant::now() < deadline, "the subpath was never made\n{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Inside the window: the checked directory moves aside, a symlink takes its name.
    std::fs::rename(&sub, volume.join("checked")).unwrap();
    std::os::unix::fs::symlink(&target, &sub).unwrap();
    let iid = id("hostile", "window", 0);
    d.wait_state(&iid, Kind::Running, 30).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !volume.join("checked/pwned").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    untouched(&target);
    assert!(volume.join("checked/pwned").exists(), "the container did not get the checked directory");
    d.client.delete(&iid, Some(30.0)).await.unwrap();
    assert!(!d.run_dir().join("hostile.window.0").exists());
}

/// The live race: one container swaps the subpath between a directory and a symlink to a
/// root-owned host directory as fast as it can, while the pod is restarted again and again
/// for 30 s; the second container writes into its subpath mount at every start. Nothing ever
/// lands in the host's directory.
#[tokio::test(flavor = "multi_thread")]
async fn a_container_racing_a_subpath_against_the_mount_never_reaches_the_host() {
    docker::shared_engine();
    let d = Daemon::start("subpath-race");
    let target = host_target(&d);
    let swap = format!(
        "mkdir -p /data/sub; while true; do mv /data/sub /data/real 2>/dev/null; ln -s {t} /data/sub; \
         rm -f /data/sub; mv /data/real /data/sub 2>/dev/null; done",
        t = target.display()
    );
    let mut swapper = docker::sh("swapper", &swap);
    swapper["mounts"] = json!([{"name": "scratch", "path": "/data"}]);
    let mut victim = docker::sh("victim", "touch /sub/pwned-$$ 2>/dev/null; exec sleep 1000");
    victim["mounts"] = json!([{"name": "scratch", "path": "/sub", "subpath": "sub"}]);
    d.apply_json(&pod("race", json!([swapper, victim]))).await;
    let iid = id("hostile", "race", 0);
    let sub = d.run_dir().join("hostile.race.0/volumes/scratch/sub");
    let end = Instant::now() + Duration::from_secs(30);
    let (mut started, mut refused) = (std::collections::BTreeSet::new(), 0);
    while Instant::now() < end {
        let s = d.wait(&iid, 30, |s| s.state.kind() == Kind::Running || s.message.contains("symlink")).await;
        if s.state.kind() == Kind::Running {
            started.insert(s.containers[1].id.clone());
        } else {
            // The swapper was stopped with a symlink in place: the start was refused. Put the
            // directory back, so that every start races again.
            refused += 1;
            if std::fs::symlink_metadata(&sub).is_ok_and(|m| m.file_type().is_symlink()) {
                std::fs::remove_file(&sub).unwrap();
            }
            let _ = std::fs::rename(sub.with_file_name("real"), &sub);
        }
        untouched(&target);
        d.cli(&["restart", "hostile/race/0", "--timeout", "10"]);
    }
    let starts = started.len();
    eprintln!("{refused} starts refused (a symlink at the check)");
    untouched(&target);
    eprintln!("{starts} starts of the pod under the race");
    assert!(starts >= 5, "{starts} starts only under the race\n{}", d.log());
    d.client.delete(&iid, Some(30.0)).await.unwrap();
    untouched(&target);
    assert_eq!(std::fs::metadata(&target).unwrap().uid(), 0);
}

/// A workload that owns its workPath's parent swaps the workPath for a symlink to a root-owned
/// directory; root's `steward cp` into a subdirectory must refuse it and create nothing,
/// anywhere (it used to make `sub/dir` inside the target, owned by the workload, then refuse).
#[tokio::test]
async fn cp_into_a_workpath_swapped_for_a_symlink_creates_nothing_anywhere() {
    let d = Daemon::start("cp-swap");
    let process = json!({"user": "nobody", "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}/w"});
    d.apply_json(&common::spec("cpw", 1, process, json!({}))).await;
    d.wait_state(&id("test", "cpw", 0), Kind::Running, 30).await;
    let parent = d.work_dir().join("test.cpw.0");
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(std::fs::metadata(&parent).unwrap().uid(), nobody.uid.as_raw(), "the workload owns the parent");
    let target = host_target(&d);
    // What the workload can do in its own directory: the workPath becomes its symlink.
    std::fs::rename(parent.join("w"), parent.join("w.real")).unwrap();
    std::os::unix::fs::symlink(&target, parent.join("w")).unwrap();
    std::os::unix::fs::lchown(parent.join("w"), Some(nobody.uid.as_raw()), Some(nobody.gid.as_raw())).unwrap();
    let local = d.path().join("f");
    std::fs::write(&local, "x").unwrap();
    for dest in ["test/cpw/0:sub/dir/x", "test/cpw/0:x"] {
        let (code, _, err) = d.cli(&["cp", local.to_str().unwrap(), dest]);
        assert_ne!(code, 0, "{dest} was written through the symlink");
        assert!(err.contains("symlink"), "{err}");
        untouched(&target);
    }
}

fn with_log_limit(d: &mut Daemon, max_bytes: u64, check_secs: u64) {
    let config = std::fs::read_to_string(&d.config)
        .unwrap()
        .replace("log_max_bytes = 4096", &format!("log_max_bytes = {max_bytes}"))
        .replace("log_check_secs = 1", &format!("log_check_secs = {check_secs}"));
    std::fs::write(&d.config, config).unwrap();
    d.restart(false);
}

/// A workload cannot pin its log file with a hard link (the file is root's, 0640, so the
/// kernel refuses the link); it used to own the file, link it, and rotation refused the file
/// for good while it grew.
#[tokio::test]
async fn a_workload_cannot_hard_link_its_log_and_rotation_goes_on() {
    let mut d = Daemon::start("log-pin");
    with_log_limit(&mut d, 65536, 1);
    let pin = d.path().join("pins");
    std::fs::create_dir(&pin).unwrap();
    std::fs::set_permissions(&pin, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let script = format!(
        "ln {log} {p}/by-path 2>{p}/refused-by-path; \
         ln -L /proc/self/fd/1 {p}/by-fd 2>{p}/refused-by-fd; \
         while true; do head -c 65536 /dev/zero | tr '\\0' x; echo; sleep 0.05; done",
        p = pin.display(),
        log = d.run_dir().join("test.pin.0/sh.stdout.log").display()
    );
    let process = json!({"user": "nobody", "startCmd": script});
    d.apply_json(&common::spec("pin", 1, process, json!({}))).await;
    d.wait_state(&id("test", "pin", 0), Kind::Running, 30).await;
    // A loaded machine (the suite runs a fork flood and a 200 MB burst beside this) may take
    // a while to write the first 64 KiB: wait for the first rotation rather than a fixed time.
    let rotated = d.run_dir().join("test.pin.0/sh.stdout.log.1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rotated.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(rotated.exists(), "the log was never rotated");
    // Then as long again as the test always gave it (about 45 more writes of 64 KiB): rotation
    // must go on, not stop after the first.
    std::thread::sleep(Duration::from_secs(3));
    let log = d.run_dir().join("test.pin.0/sh.stdout.log");
    let meta = std::fs::metadata(&log).unwrap();
    assert_eq!((meta.uid(), meta.nlink()), (0, 1), "the log is root's, with one link");
    assert!(!pin.join("by-path").exists() && !pin.join("by-fd").exists(), "the workload linked its log");
    assert!(meta.len() < 1 << 20, "rotation stopped: the log is {} bytes", meta.len());
}

/// A burst (200 MB, written in 400 quick pieces) is rotated as it arrives, not at the next timer
/// (a minute here): the log never holds most of it, and ends under its limit (it used to keep
/// the whole burst until the timer came). The pieces give the rotation a moment to be scheduled
/// between them on a loaded host: in one write of 200 MB from /dev/zero, a loaded CI host let
/// 80 MB land before it ran.
#[tokio::test]
async fn a_burst_is_rotated_as_it_arrives() {
    let mut d = Daemon::start("log-burst");
    with_log_limit(&mut d, 1 << 20, 60);
    let burst = "i=0; while [ $i -lt 400 ]; do head -c 500000 /dev/zero; i=$((i+1)); done";
    let process = json!({"startCmd": format!("sleep 1; {burst}; exec sleep 1000")});
    d.apply_json(&common::spec("burst", 1, process, json!({}))).await;
    d.wait_state(&id("test", "burst", 0), Kind::Running, 30).await;
    let log = d.run_dir().join("test.burst.0/sh.stdout.log");
    let (mut largest, mut at_rest) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let len = std::fs::metadata(&log).map_or(0, |m| m.len());
        largest = largest.max(len);
        std::thread::sleep(Duration::from_millis(5));
        at_rest = if len == std::fs::metadata(&log).map_or(0, |m| m.len()) { at_rest + 1 } else { 0 };
        if at_rest > 200 && largest > 0 {
            break;
        }
    }
    let end = std::fs::metadata(&log).unwrap().len();
    eprintln!("a 200 MB burst against a 1 MiB limit: largest seen {largest} bytes, at the end {end}");
    assert!(end < 1 << 20, "the log ended at {end} bytes");
    assert!(largest < 100_000_000, "the log reached {largest} bytes: half the burst or more");
}

/// Every instance has a tasks limit by default (`default_tasks_max`, systemd's DefaultTasksMax),
/// its spec's `limits.pids` in place of it, -1 for none: a workload forking 300 sleeps gets no
/// more than its limit (a job used to reach 1,475 processes).
#[tokio::test]
async fn a_fork_flood_stops_at_the_tasks_limit() {
    let d = Daemon::start_with("tasks-max", "default_tasks_max = \"64\"\n");
    // A fork that fails is passed over (a shell would exit at the first).
    let script = d.path().join("flood.py");
    std::fs::write(
        &script,
        "import os, time\nfor i in range(300):\n    try:\n        if os.fork() == 0:\n            time.sleep(1000)\n            os._exit(0)\n    except OSError:\n        pass\ntime.sleep(1000)\n",
    )
    .unwrap();
    let flood = format!("exec python3 {}", script.display());
    let with_pids = |pids: Option<&str>| {
        let mut p = json!({"startCmd": flood});
        if let Some(n) = pids {
            p["resources"] = json!({"limits": {"pids": n}});
        }
        p
    };
    d.apply_json(&common::spec("bydefault", 1, with_pids(None), json!({}))).await;
    d.apply_json(&common::spec("byspec", 1, with_pids(Some("20")), json!({}))).await;
    d.apply_json(&common::spec("unlimited", 1, with_pids(Some("-1")), json!({}))).await;
    for (name, most) in [("bydefault", 64), ("byspec", 20), ("unlimited", 400)] {
        let iid = id("test", name, 0);
        d.wait_state(&iid, Kind::Running, 30).await;
        let mut n = 0;
        for _ in 0..50 {
            n = d.cgroup_pids(&iid).len();
            if n >= most.min(300) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("{name}: {n} processes");
        assert!(n <= most, "{name}: {n} processes, the limit is {most}");
        assert!(n >= most.min(300) - 2, "{name}: only {n} processes");
    }
    // `steward status` shows the tasks against the limit in force.
    let (code, out, err) = d.cli(&["status", "test/byspec/0"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tasks:     20 (limit 20)"), "{out}");
    let (_, out, _) = d.cli(&["status", "test/bydefault/0"]);
    assert!(out.contains("(limit 64)"), "{out}");
    // Refused when it is no number of tasks, naming the field.
    let bad = common::spec("bad", 1, with_pids(Some("lots")), json!({}));
    let err = d.client.apply(&bad.to_string(), steward::spec::Format::Json).await.unwrap_err().to_string();
    assert!(err.contains("resources.limits.pids"), "{err}");
}

/// A cron job's runs leave no work directory behind: history pruning and the app's delete
/// remove each run's workPath (45 were left after 15 s of an every-second cron) — without
/// following a symlink a run planted in it.
#[tokio::test]
async fn cron_runs_take_their_work_directories_with_them() {
    let d = Daemon::start("cron-workdirs");
    let target = host_target(&d);
    let script = format!("echo data > state; ln -s {} escape; exit 0", target.display());
    let mut doc = common::spec("tidy", 1, json!({"user": "nobody", "startCmd": script}), json!({}));
    doc["cronJob"] = json!({"rule": "* * * * * *", "history": {"success": 1, "fail": 0}});
    doc["restartPolicy"] = json!({"policy": "Never"});
    d.apply_json(&doc).await;
    let runs = || -> Vec<String> {
        std::fs::read_dir(d.work_dir())
            .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<String>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with("test.tidy."))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut most = 0;
    loop {
        let succeeded = d.client.cron("test", "tidy").await.map_or(0, |c| c.status.succeeded);
        most = most.max(runs().len());
        if succeeded >= 6 {
            break;
        }
        assert!(Instant::now() < deadline, "the cron job did not run 6 times\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = runs();
    assert!(left.len() <= 3, "{} work directories after 6 runs: {left:?}", left.len());
    let (code, _, err) = d.cli(&["delete", "test/tidy"]);
    assert_eq!(code, 0, "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !runs().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(runs().is_empty(), "left after the delete: {:?}", runs());
    untouched(&target);
    assert!(target.join("passwd").exists(), "the removal followed a run's symlink");
}
