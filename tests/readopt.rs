//! Daemon restarts: kill -9 of stewardd never touches its instances; the next daemon re-adopts
//! what still runs, finishes what was interrupted, and never starts anything twice.

mod common;

use common::{alive, id, spec, wait_gone, Daemon};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use steward::supervisor::state::{Kind, State};

#[tokio::test]
async fn kill9_then_restart_readopts_finishes_stops_and_restarts_the_dead() {
    let mut d = Daemon::start("readopt");
    d.apply_json(&spec(
        "many",
        50,
        json!({"startCmd": "exec sleep 1000", "procName": "sleep"}),
        json!({"restartPolicy": {"policy": "Always"}}),
    ))
    .await;
    // One instance whose stop takes a while: SIGTERM is ignored, so the 3 s grace runs out.
    d.apply_json(&spec(
        "slowstop",
        1,
        json!({"startCmd": "trap '' TERM; sleep 1000 & wait"}),
        json!({"killPolicy": {"gracePeriod": 3}}),
    ))
    .await;
    let mut pids = BTreeMap::new();
    for i in 0..50 {
        let st = d.wait_state(&id("test", "many", i), Kind::Running, 20).await;
        pids.insert(i, st.pid.unwrap());
    }
    let slow = id("test", "slowstop", 0);
    d.wait_state(&slow, Kind::Running, 10).await;
    let slow_pids = d.cgroup_pids(&slow);

    // Mid-stop: ask for the stop, then kill the daemon while it waits out the grace period.
    d.client.action(&slow, "stop", None).await.unwrap();
    d.wait_state(&slow, Kind::Stopping, 5).await;
    d.kill9();

    // Instances keep running without the daemon.
    for pid in pids.values() {
        assert!(alive(*pid));
    }
    // One dies while the daemon is away.
    let victim = pids[&7];
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_gone(victim, 5).await);

    d.spawn();
    // From its first answer on, the daemon never reports the dead process as running.
    let first = d.status(&id("test", "many", 7)).await;
    assert!(!(first.state == State::Running && first.pid == Some(victim)), "stale status: {first:?}");
    // The stop completes.
    let st = d.wait_state(&slow, Kind::Stopped, 15).await;
    assert_eq!(st.state, State::Stopped);
    assert!(d.cgroup_pids(&slow).is_empty());
    for pid in slow_pids {
        assert!(wait_gone(pid, 3).await, "slowstop pid {pid} survived");
    }
    // The dead one is restarted by its policy; the other 49 keep their pids, with no restart.
    let again = d.wait(&id("test", "many", 7), 10, |s| s.state.kind() == Kind::Running && s.pid != Some(victim)).await;
    assert_eq!(again.restarts, 1);
    for (i, pid) in &pids {
        if *i == 7 {
            continue;
        }
        let st = d.status(&id("test", "many", *i)).await;
        assert_eq!(st.state, State::Running, "instance {i}");
        assert_eq!(st.pid, Some(*pid), "instance {i} kept its pid");
        assert_eq!(st.restarts, 0, "instance {i} was not restarted");
        // Exactly one process tree per instance.
        assert_eq!(d.cgroup_pids(&id("test", "many", *i)), vec![*pid]);
    }
}

#[tokio::test]
async fn a_stale_record_whose_pid_was_reused_is_not_adopted() {
    let mut d = Daemon::start("reuse");
    d.apply_json(&spec(
        "reuse",
        1,
        json!({"startCmd": "exec sleep 1000", "procName": "sleep"}),
        json!({"restartPolicy": {"policy": "Always"}}),
    ))
    .await;
    let iid = id("test", "reuse", 0);
    let st = d.wait_state(&iid, Kind::Running, 10).await;
    let old = st.pid.unwrap();
    d.kill9();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(wait_gone(old, 5).await);

    // Another program now holds a pid the record names: point the record at it, keeping the
    // recorded start time, exactly what pid reuse looks like.
    let mut stranger = std::process::Command::new("sleep").arg("1000").spawn().unwrap();
    let stranger_pid = stranger.id() as i32;
    {
        let store = steward::store::Store::open(&d.path().join("state")).unwrap();
        let snap = store.snapshot().unwrap();
        let mut rec = snap.get(steward::store::Table::Instances, "test/reuse/0").unwrap().clone();
        rec["mains"][0]["pid"] = json!(stranger_pid);
        store
            .commit_blocking(steward::store::Batch::new().put(steward::store::Table::Instances, "test/reuse/0", &rec))
            .unwrap();
    }

    d.spawn();
    let again = d.wait(&iid, 10, |s| s.state.kind() == Kind::Running && s.pid != Some(stranger_pid)).await;
    assert_ne!(again.pid, Some(stranger_pid));
    assert!(alive(stranger_pid), "the stranger was left alone");
    assert!(d.log().contains("pid was reused"), "{}", d.log());
    let _ = stranger.kill();
    let _ = stranger.wait();
}

/// A respawn hands its commit to the store and spawns while the fsync runs: a crash between the
/// two leaves a process in the cgroup that the record does not know of. The next daemon's first
/// start clears it, so the instance never runs two process trees.
#[tokio::test]
async fn a_process_the_record_does_not_know_is_cleared_before_the_next_start() {
    let mut d = Daemon::start("unknown");
    d.apply_json(&spec(
        "flaky",
        1,
        json!({"startCmd": "sleep 0.3; exit 3"}),
        json!({"restartPolicy": {"policy": "Always", "interval": 2}}),
    ))
    .await;
    let iid = id("test", "flaky", 0);
    d.wait_state(&iid, Kind::Backoff, 10).await;
    d.kill9();
    // What a spawn cut short by the crash leaves: a live process in the instance's cgroup.
    let mut stray = std::process::Command::new("sleep").arg("1000").spawn().unwrap();
    let stray_pid = stray.id() as i32;
    let key = "test.flaky.0";
    d.hierarchy().instance(key).add_pid(stray_pid).unwrap();
    assert_eq!(d.cgroup_pids(&iid), vec![stray_pid]);

    d.spawn();
    // The restart comes due: before it spawns, the stray is gone.
    let st = d.wait(&iid, 10, |s| s.state.kind() == Kind::Running).await;
    let _ = stray.wait();
    assert!(!alive(stray_pid), "the unknown process was left running beside the new start");
    let pids = d.cgroup_pids(&iid);
    assert!(!pids.contains(&stray_pid), "{pids:?}");
    assert!(pids.contains(&st.pid.unwrap()), "{pids:?} {st:?}");
}

/// The daemon's own SIGTERM leaves instances running, and a new daemon adopts them.
#[tokio::test]
async fn sigterm_of_the_daemon_leaves_instances_running() {
    let mut d = Daemon::start("term");
    d.apply_json(&spec("term", 1, json!({"startCmd": "exec sleep 1000", "procName": "sleep"}), json!({}))).await;
    let iid = id("test", "term", 0);
    let pid = d.wait_state(&iid, Kind::Running, 10).await.pid.unwrap();
    let mut child = d.child.take().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "stewardd exits cleanly on SIGTERM: {status}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(alive(pid));
    d.spawn();
    let st = d.wait_state(&iid, Kind::Running, 10).await;
    assert_eq!(st.pid, Some(pid));
    assert_eq!(st.restarts, 0);
}

/// SIGUSR2 (what a package upgrade sends when systemd is not the init system): the daemon shuts
/// down, executes its binary again under the same pid, and re-adopts every instance — the same
/// processes, no restart. Its instances were its children and still are: their exits are seen.
#[tokio::test]
async fn sigusr2_restarts_in_place_keeping_the_daemon_pid_and_every_instance() {
    let d = Daemon::start("reexec");
    d.apply_json(&spec(
        "kept",
        3,
        json!({"startCmd": "exec sleep 1000", "procName": "sleep"}),
        json!({"restartPolicy": {"policy": "Always"}}),
    ))
    .await;
    let mut pids = BTreeMap::new();
    for i in 0..3 {
        pids.insert(i, d.wait_state(&id("test", "kept", i), Kind::Running, 20).await.pid.unwrap());
    }
    let daemon = d.pid();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon), nix::sys::signal::Signal::SIGUSR2).unwrap();
    // The restart is done when the log says so twice over: the old image went, the new one is
    // ready (its socket opens only once every instance is resumed).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while d.log().matches("stewardd ready").count() < 2 {
        assert!(std::time::Instant::now() < deadline, "no second start:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(d.log().contains("restarting in place"), "{}", d.log());
    assert_eq!(d.pid(), daemon);
    assert!(alive(daemon), "the daemon's pid went away");
    for (i, pid) in &pids {
        let st = d.status(&id("test", "kept", *i)).await;
        assert_eq!(st.state, State::Running, "instance {i}");
        assert_eq!(st.pid, Some(*pid), "instance {i} kept its pid");
        assert_eq!(st.restarts, 0, "instance {i} was not restarted");
    }
    // An instance that dies after the restart is seen (reaped by the new image) and restarted.
    let victim = pids[&1];
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), nix::sys::signal::Signal::SIGKILL).unwrap();
    let again = d.wait(&id("test", "kept", 1), 15, |s| s.state.kind() == Kind::Running && s.pid != Some(victim)).await;
    assert_eq!(again.restarts, 1);
}
