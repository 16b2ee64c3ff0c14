//! The process supervisor against real processes, signals and the real stewardd binary.

mod common;

use common::{alive, id, spec, wait_gone, Daemon};
use serde_json::json;
use std::time::Duration;
use steward::supervisor::state::{ExitStatus, Kind, State};

#[tokio::test]
async fn foreground_process_runs_in_its_cgroup_and_stops() {
    let d = Daemon::start("fg");
    let ids =
        d.apply_json(&spec("fg", 2, json!({"startCmd": "exec sleep 1000", "procName": "sleep"}), json!({}))).await;
    assert_eq!(ids, vec!["test/fg/0", "test/fg/1"]);
    for i in 0..2 {
        let s = d.wait_state(&id("test", "fg", i), Kind::Running, 10).await;
        let pid = s.pid.expect("a running instance has a pid");
        assert!(alive(pid));
        assert_eq!(d.cgroup_pids(&id("test", "fg", i)), vec![pid]);
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(comm.trim(), "sleep");
        // Its own session (setsid): it leads it.
        let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).unwrap();
        assert_eq!(sid.as_raw(), pid);
    }
    let s = d.client.action(&id("test", "fg", 0), "stop", Some(10.0)).await.unwrap();
    assert_eq!(s.state, State::Stopped);
    assert!(d.cgroup_pids(&id("test", "fg", 0)).is_empty());
    // Logs go to the instance's run dir.
    assert!(d.run_dir().join("test.fg.0/sleep.stdout.log").exists());
}

#[tokio::test]
async fn forking_daemon_with_late_pidfile_is_adopted() {
    let d = Daemon::start("fork");
    // The launcher exits at once; the daemonized child writes its pidfile 0.5 s later, with a
    // trailing newline and a second line.
    let start = r#"setsid sh -c 'sleep 0.5; printf "%s\nsecond line\n" $$ > ${pidFile}.tmp; mv ${pidFile}.tmp ${pidFile}; exec sleep 1000' >/dev/null 2>&1 < /dev/null &"#;
    let s = spec(
        "fork",
        1,
        json!({"startCmd": start, "procName": "sleep", "startGracePeriod": 3,
               "pidFile": "${run_base_dir}/${namespace}.${processname}.${instanceid}/pid/fork.pid"}),
        json!({}),
    );
    d.apply_json(&s).await;
    let st = d.wait_state(&id("test", "fork", 0), Kind::Running, 10).await;
    let pid = st.pid.unwrap();
    let pidfile = d.run_dir().join("test.fork.0/pid/fork.pid");
    let written: i32 = std::fs::read_to_string(&pidfile).unwrap().lines().next().unwrap().trim().parse().unwrap();
    assert_eq!(pid, written);
    assert!(alive(pid));
    // Reparented to the daemon, the child subreaper.
    let stat = steward::runtime::procinfo::Stat::read(pid).unwrap();
    assert_eq!(stat.ppid, d.pid());
    // Killing the main process is noticed and, by the default policy (OnFailure), restarted.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let again = d.wait(&id("test", "fork", 0), 10, |s| s.state.kind() == Kind::Running && s.pid != Some(pid)).await;
    assert_eq!(again.last_exit, Some(ExitStatus::Signal(9)));
    assert_eq!(again.restarts, 1);
}

#[tokio::test]
async fn pidfile_that_never_appears_fails() {
    let d = Daemon::start("nopid");
    let s = spec(
        "nopid",
        1,
        json!({"startCmd": "true", "startGracePeriod": 1, "pidFile": "${workPath}/never.pid"}),
        json!({"restartPolicy": {"policy": "Never"}}),
    );
    d.apply_json(&s).await;
    let st = d.wait_state(&id("test", "nopid", 0), Kind::Failed, 10).await;
    assert!(st.message.contains("never.pid did not appear within startGracePeriod (1s)"), "{}", st.message);
}

#[tokio::test]
async fn pidfile_naming_another_program_fails() {
    let d = Daemon::start("wrongname");
    // The pidfile names a `sleep`, but procName says gamesvr.
    let start = "setsid sh -c 'echo $$ > ${pidFile}; exec sleep 1000' >/dev/null 2>&1 </dev/null &";
    let s = spec(
        "wrongname",
        1,
        json!({"startCmd": start, "procName": "gamesvr", "startGracePeriod": 1, "pidFile": "${workPath}/x.pid"}),
        json!({"restartPolicy": {"policy": "Never"}}),
    );
    d.apply_json(&s).await;
    let st = d.wait_state(&id("test", "wrongname", 0), Kind::Failed, 10).await;
    assert!(st.message.contains("not procName \"gamesvr\""), "{}", st.message);
    // The wrong process was launched by the instance: it is cleaned up with it.
    assert!(d.cgroup_pids(&id("test", "wrongname", 0)).is_empty());
}

#[tokio::test]
async fn pidfile_naming_a_process_outside_the_instance_fails() {
    let d = Daemon::start("outside");
    // PID 1 is alive but not ours.
    let s = spec(
        "outside",
        1,
        json!({"startCmd": "echo 1 > ${pidFile}", "procName": "init", "startGracePeriod": 1, "pidFile": "${workPath}/x.pid"}),
        json!({"restartPolicy": {"policy": "Never"}}),
    );
    d.apply_json(&s).await;
    let st = d.wait_state(&id("test", "outside", 0), Kind::Failed, 10).await;
    assert!(st.message.contains("not a process of this instance"), "{}", st.message);
}

/// Never / OnFailure / Always for exit 0, exit 1 and a signal.
#[tokio::test]
async fn restart_policies_by_exit_kind() {
    let d = Daemon::start("policy");
    let exits = [("zero", "sleep 0.2; exit 0"), ("one", "sleep 0.2; exit 1"), ("sig", "sleep 0.2; kill -KILL $$")];
    let mut expected = Vec::new();
    for policy in ["Never", "OnFailure", "Always"] {
        for (exit_name, cmd) in exits {
            let name = format!("{}{exit_name}", policy.to_lowercase());
            let s = spec(
                &name,
                1,
                json!({"startCmd": cmd}),
                json!({"restartPolicy": {"policy": policy, "interval": 0, "maxtimes": 2}}),
            );
            d.apply_json(&s).await;
            let restarts = !matches!((policy, exit_name), ("Never", _) | ("OnFailure", "zero"));
            expected.push((name, restarts, exit_name));
        }
    }
    for (name, restarts, exit_name) in expected {
        let iid = id("test", &name, 0);
        let want_exit = match exit_name {
            "zero" => ExitStatus::Code(0),
            "one" => ExitStatus::Code(1),
            _ => ExitStatus::Signal(9),
        };
        if restarts {
            // maxtimes 2: two restarts, then Failed stays.
            let st = d.wait_state(&iid, Kind::Failed, 15).await;
            assert_eq!(st.restarts, 2, "{name}");
            assert!(st.message.contains("maxtimes 2"), "{name}: {}", st.message);
            assert_eq!(st.last_exit, Some(want_exit), "{name}");
            tokio::time::sleep(Duration::from_millis(700)).await;
            assert_eq!(d.status(&iid).await.state.kind(), Kind::Failed, "{name}: Failed stays");
        } else {
            let st = d.wait_state(&iid, Kind::Exited, 10).await;
            assert_eq!(st.restarts, 0, "{name}");
            assert_eq!(st.state, State::Exited { status: want_exit }, "{name}");
        }
    }
}

/// Delays follow interval + backoff*(k-1), checked from the journal's timestamps.
#[tokio::test]
async fn restart_delays_follow_interval_and_backoff() {
    let d = Daemon::start("delays");
    let s = spec(
        "delays",
        1,
        json!({"startCmd": "exit 3"}),
        json!({"restartPolicy": {"policy": "OnFailure", "interval": 1, "backoff": 1, "maxtimes": 3}}),
    );
    d.apply_json(&s).await;
    d.wait_state(&id("test", "delays", 0), Kind::Failed, 30).await;
    let mut events = Vec::new();
    d.client
        .events(0, false, |e| {
            events.push(e);
            true
        })
        .await
        .unwrap();
    let mine: Vec<_> = events
        .iter()
        .filter(|e| e.body.to_value()["instance"] == "test/delays/0" && e.body.to_value()["type"] == "transition")
        .collect();
    // Each Backoff entry (the restart it set: its delay, and when it is due), and when the
    // Staging that ends it was journaled. Measured from the Backoff's own deadline, not from
    // when its entry was journaled: that commit comes a moment after the transition set the
    // deadline (on a loaded machine a few ms: 2999 ms was once seen against a 3000 ms policy).
    let mut restarts = Vec::new();
    let mut backoff = None;
    for e in &mine {
        let body = e.body.to_value();
        match body["to"].as_str() {
            Some("Backoff") => {
                let due = body["state"]["untilMs"].as_u64().unwrap_or_else(|| panic!("no untilMs: {body}"));
                backoff = Some((body["message"].as_str().unwrap_or_default().to_string(), due));
            }
            Some("Staging") => {
                if let Some((message, due)) = backoff.take() {
                    restarts.push((message, due, e.at_ms));
                }
            }
            _ => {}
        }
    }
    assert_eq!(restarts.len(), 3, "three restarts: {mine:#?}");
    for (k, (message, due, staged_at)) in restarts.iter().enumerate() {
        let want = 1000 * (1 + k as u64);
        assert!(message.ends_with(&format!("restart {} in {want} ms", k + 1)), "restart {}: {message:?}", k + 1);
        // The deadline is the lower bound; the upper one only tells consecutive steps apart (a
        // Staging is journaled with the Starting after it, later still on a loaded machine).
        assert!(
            *staged_at >= *due && *staged_at < due + 900,
            "restart {}: staged at {staged_at}, due at {due} ({message})",
            k + 1
        );
    }
}

/// A crash loop with `interval: 0` (and a start that fails before any process runs) backs off,
/// after three quick ends at once, from 100 ms doubling, instead of restarting hundreds of times a second; a run of a second
/// or more is restarted at once again.
#[tokio::test]
async fn crash_loops_back_off_even_with_interval_zero() {
    let d = Daemon::start("crashloop");
    let always = json!({"restartPolicy": {"policy": "Always", "interval": 0}});
    d.apply_json(&spec("crashy", 1, json!({"startCmd": "exit 1"}), always.clone())).await;
    // A start that fails before any process runs: its secret does not exist.
    let items = json!([{"type": "env", "dataKey": "k", "keyOrPath": "K"}]);
    let nosecret = json!({"secrets": [{"secretName": "steward-no-such-secret", "items": items}]});
    d.apply_json(&spec("nosecret", 1, nosecret, always.clone())).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for name in ["crashy", "nosecret"] {
        let st = d.status(&id("test", name, 0)).await;
        // Three at once, then 100 + 200 + 400 + 800 ms fit in 2.5 s, 1600 more do not.
        assert!((6..=9).contains(&st.restarts), "{name}: {} restarts in 2.5 s: {st:?}", st.restarts);
        assert!(st.message.contains("restart"), "{name}: {}", st.message);
    }
    assert!(d.status(&id("test", "nosecret", 0)).await.message.contains("steward-no-such-secret"));

    // A process that ran for over a second comes back at once.
    d.apply_json(&spec("steady", 1, json!({}), always)).await;
    let iid = id("test", "steady", 0);
    let first = d.wait_state(&iid, Kind::Running, 10).await.pid.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let killed = std::time::Instant::now();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGKILL);
    let st = d.wait(&iid, 10, |s| s.pid.is_some_and(|p| p != first)).await;
    assert!(killed.elapsed() < Duration::from_millis(500), "respawned after {:?}", killed.elapsed());
    assert_eq!(st.restarts, 1);
}

/// A run is timed from its spawn, not from when its start became durable: on a host whose disk
/// takes 500 ms a commit (a failpoint holds every commit that long), a process that outlives its
/// 1 s startGracePeriod by 0.3 s is Running before it ends (seed 000: the grace is waited "after
/// startCmd is executed"), and its 1.3 s runs are no quick ends, so its restarts with interval 0
/// stay immediate past the crash-loop floor's three. Timed from the commit, the grace ended
/// after the process and every run was a quick end (the floor: 100 ms, doubling).
#[tokio::test]
async fn runs_are_timed_from_the_spawn_even_when_commits_are_slow() {
    let mut d = Daemon::start("slowdisk");
    d.env = vec![("STEWARD_FAILPOINTS".into(), "store-commit~500".into())];
    d.restart(false);
    let always = json!({"restartPolicy": {"policy": "Always", "interval": 0}});
    let process = json!({"startCmd": "exec sleep 1.3", "startGracePeriod": 1});
    d.apply_json(&spec("slowdisk", 1, process, always)).await;
    let iid = id("test", "slowdisk", 0);
    d.wait(&iid, 60, |s| s.restarts >= 5).await;
    let mut events = Vec::new();
    d.client
        .events(0, false, |e| {
            events.push(e.body.to_value());
            true
        })
        .await
        .unwrap();
    let moves: Vec<(String, String)> = events
        .iter()
        .filter(|b| b["instance"] == "test/slowdisk/0" && b["type"] == "transition")
        .map(|b| {
            (b["to"].as_str().unwrap_or_default().to_string(), b["message"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    let backoffs: Vec<usize> = (1..moves.len()).filter(|&j| moves[j].0 == "Backoff").collect();
    assert!(backoffs.len() >= 5, "{moves:#?}");
    for (k, &j) in backoffs.iter().take(5).enumerate() {
        assert_eq!(moves[j - 1].0, "Running", "run {} ended Running, not in its grace: {moves:#?}", k + 1);
        let message = &moves[j].1;
        assert!(message.ends_with(&format!("restart {} in 0 ms", k + 1)), "restart {}: {message:?}", k + 1);
    }
}

/// A stopCmd that hangs and a grandchild that ignores SIGTERM: after gracePeriod nothing is left.
/// The instance has run longer than its grace period (issue 42: every time rule is also tried
/// with instances older than its window): the grace counts from the stop, not from the start.
#[tokio::test]
async fn stop_kills_everything_after_grace() {
    let d = Daemon::start("stubborn");
    let start = "trap '' TERM; sh -c \"trap '' TERM; sleep 1000\" & sleep 1000";
    let s = spec(
        "stubborn",
        1,
        json!({"startCmd": start, "stopCmd": "sleep 1000"}),
        json!({"killPolicy": {"gracePeriod": 1}}),
    );
    d.apply_json(&s).await;
    let iid = id("test", "stubborn", 0);
    d.wait_state(&iid, Kind::Running, 10).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let before = d.cgroup_pids(&iid);
    assert!(before.len() >= 3, "main, grandchild and sleeps: {before:?}");
    let t = std::time::Instant::now();
    let st = d.client.action(&iid, "stop", Some(20.0)).await.unwrap();
    let took = t.elapsed();
    assert_eq!(st.state, State::Stopped);
    assert!(took >= Duration::from_millis(900), "the grace period is waited: {took:?}");
    assert!(took < Duration::from_secs(5), "then everything is killed: {took:?}");
    assert!(d.cgroup_pids(&iid).is_empty());
    for pid in before {
        assert!(wait_gone(pid, 2).await, "pid {pid} survived the stop");
    }
}

/// Runs as a user the test creates; capabilities are dropped.
#[tokio::test]
async fn runs_as_the_spec_user_without_capabilities() {
    let user = "steward-t1";
    let _ = std::process::Command::new("useradd").args(["--system", "--no-create-home", user]).output();
    let d = Daemon::start("user");
    let s = spec("user", 1, json!({"user": user, "startCmd": "exec sleep 1000", "procName": "sleep"}), json!({}));
    d.apply_json(&s).await;
    let st = d.wait_state(&id("test", "user", 0), Kind::Running, 10).await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", st.pid.unwrap())).unwrap();
    let field = |name: &str| {
        status.lines().find(|l| l.starts_with(name)).unwrap().split_whitespace().nth(1).unwrap().to_string()
    };
    let uid = nix::unistd::User::from_name(user).unwrap().unwrap().uid.as_raw().to_string();
    assert_eq!(field("Uid:"), uid);
    for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        assert_eq!(field(cap), "0000000000000000", "{cap}");
    }
    // Its work dir was created for it.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(d.work_dir().join("test.user.0")).unwrap();
    assert_eq!(meta.uid().to_string(), uid);
}

/// Output goes to size-rotated files in the run dir; the workload keeps writing through its
/// descriptor after a rotation (the test fixture rotates at 4 KiB, checking every second).
#[tokio::test]
async fn logs_are_rotated_by_size() {
    let d = Daemon::start("logs");
    let s = spec(
        "chatty",
        1,
        json!({"startCmd": "i=0; while true; do i=$((i+1)); echo \"line $i $(printf '%080d' 0)\"; echo \"err $i\" >&2; sleep 0.01; done"}),
        json!({}),
    );
    d.apply_json(&s).await;
    let iid = id("test", "chatty", 0);
    d.wait_state(&iid, Kind::Running, 10).await;
    let dir = d.run_dir().join("test.chatty.0");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !dir.join("sh.stdout.log.2").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no second rotation: {:?}",
            std::fs::read_dir(&dir).unwrap().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!dir.join("sh.stdout.log.3").exists(), "log_keep = 2");
    let rotated = std::fs::read_to_string(dir.join("sh.stdout.log.1")).unwrap();
    assert!(rotated.len() >= 4096 && rotated.starts_with("line "), "{}", rotated.len());
    // Still writing through the same descriptor after rotation: line numbers keep growing, and
    // the live file holds whole stdout lines only (O_APPEND writes land at the new end).
    let last_line = || {
        let mut newest = 0u64;
        for f in ["sh.stdout.log", "sh.stdout.log.1"] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            for l in text.lines() {
                assert!(l.starts_with("line "), "{f}: unexpected {l:?}");
                newest = newest.max(l.split(' ').nth(1).unwrap().parse().unwrap());
            }
        }
        newest
    };
    let before = last_line();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(last_line() > before);
    assert!(std::fs::read_to_string(dir.join("sh.stderr.log")).unwrap().contains("err "));
}

/// Deleting a Failed instance removes it for good (it used to linger in listings), and the same
/// spec applied again creates it afresh.
#[tokio::test]
async fn a_failed_instance_can_be_deleted_and_recreated() {
    let d = Daemon::start("delfailed");
    let s = spec(
        "fa",
        1,
        json!({"startCmd": "exit 5"}),
        json!({"restartPolicy": {"policy": "Always", "interval": 0, "maxtimes": 1}}),
    );
    d.apply_json(&s).await;
    let iid = id("test", "fa", 0);
    d.wait_state(&iid, Kind::Failed, 10).await;
    d.client.delete(&iid, Some(10.0)).await.unwrap();
    assert!(d.client.list(&[("name", "fa")]).await.unwrap().is_empty());
    let mut app_deleted = false;
    d.client
        .events(0, false, |e| {
            app_deleted |= e.body.to_value()["type"] == "appDeleted";
            true
        })
        .await
        .unwrap();
    assert!(app_deleted, "the last instance takes its app's spec with it");
    d.apply_json(&s).await;
    assert_eq!(d.status(&iid).await.restarts, 0, "a new instance");
}

/// Each process of a multi-process instance is stopped by its own stopCmd, run as that
/// process's user (it once ran as the first process's user for every one of them).
#[tokio::test]
async fn each_stop_cmd_runs_as_its_own_processes_user() {
    let d = Daemon::start("stopusers");
    let process = |name: &str, user: &str| {
        json!({
            "procName": name,
            "user": user,
            "workPath": format!("${{work_base_dir}}/${{namespace}}.${{processname}}.${{instanceid}}/{name}"),
            "startCmd": "exec sleep 1000",
            "stopCmd": "id -un > ${workPath}/stopped-by",
            "startGracePeriod": 0
        })
    };
    let mut doc = spec("stoppers", 1, json!({}), json!({"killPolicy": {"gracePeriod": 1}}));
    doc["spec"]["template"]["spec"]["processes"] = json!([process("first", "nobody"), process("second", "www-data")]);
    d.apply_json(&doc).await;
    let iid = id("test", "stoppers", 0);
    d.wait_state(&iid, Kind::Running, 10).await;
    let st = d.client.action(&iid, "stop", Some(20.0)).await.unwrap();
    assert_eq!(st.state.kind(), Kind::Stopped);
    let work = d.work_dir().join("test.stoppers.0");
    for (name, user) in [("first", "nobody"), ("second", "www-data")] {
        let by = std::fs::read_to_string(work.join(name).join("stopped-by")).unwrap_or_default();
        assert_eq!(by.trim(), user, "{name}'s stopCmd ran as {by:?}");
    }
}
