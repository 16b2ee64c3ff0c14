//! What an operator of one host relies on across restarts of stewardd and re-applies (issue 30):
//! secrets and configmaps survive, a healthy instance is never killed at re-adoption, `apply
//! --wait` waits for the new spec, apply brings back deleted instances, a whole app is deleted.

mod common;

use common::{alive, id, spec, wait_gone, Daemon};
use serde_json::json;
use std::time::Duration;
use steward::supervisor::state::Kind;

/// Writes a spec file into the daemon's directory for the CLI.
fn spec_file(d: &Daemon, file: &str, s: &serde_json::Value) -> String {
    let path = d.path().join(file);
    std::fs::write(&path, serde_json::to_string_pretty(s).unwrap()).unwrap();
    path.display().to_string()
}

/// Applies app test/slow (`instances` that ignore SIGTERM, stopped by SIGKILL after `grace`
/// seconds) and waits for it; its spec file, for the CLI.
fn apply_slow(d: &Daemon, instances: u32, grace: u32) -> String {
    let s = spec(
        "slow",
        instances,
        json!({"startCmd": "trap '' TERM; sleep 1000 & wait"}),
        json!({"killPolicy": {"gracePeriod": grace}}),
    );
    let file = spec_file(d, "slow.json", &s);
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    file
}

fn names(out: &str) -> Vec<String> {
    let v: Vec<serde_json::Value> = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v.iter().map(|s| format!("{}/{} {:?}", s["namespace"], s["name"], s["keys"])).collect()
}

/// Secrets and configmaps were written to the store and never read back: every daemon restart
/// lost them, and an instance using one crash-looped. Now they survive SIGTERM and kill -9, and
/// an instance created after the restarts gets their values.
#[tokio::test]
async fn secrets_and_configmaps_survive_sigterm_and_kill9() {
    let mut d = Daemon::start("keepvalues");
    let (code, _, err) = d.cli(&["secret", "create", "trial/creds", "--from-literal", "password=pw-1234"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = d.cli(&["configmap", "create", "trial/conf", "--from-literal", "level=7"]);
    assert_eq!(code, 0, "{err}");
    let listed = |d: &Daemon| {
        let (_, secrets, _) = d.cli(&["-o", "json", "secret", "ls"]);
        let (_, maps, _) = d.cli(&["-o", "json", "configmap", "ls"]);
        (names(&secrets), names(&maps))
    };
    let before = listed(&d);
    assert_eq!(before.0.len(), 1, "{before:?}");
    assert_eq!(before.1.len(), 1, "{before:?}");
    for kill9 in [false, true] {
        d.restart(kill9);
        assert_eq!(listed(&d), before, "after a restart by {}", if kill9 { "kill -9" } else { "SIGTERM" });
    }
    let mut s = spec(
        "uses",
        1,
        json!({
            "startCmd": "echo \"$PASSWORD $LEVEL\" > values.txt; exec sleep 1000",
            "secrets": [{"secretName": "creds", "items": [{"type": "env", "dataKey": "password", "keyOrPath": "PASSWORD"}]}],
            "configmaps": [{"name": "conf", "items": [{"type": "env", "dataKey": "level", "keyOrPath": "LEVEL"}]}]
        }),
        json!({}),
    );
    s["metadata"]["namespace"] = json!("trial");
    d.apply_json(&s).await;
    let iid = id("trial", "uses", 0);
    d.wait_state(&iid, Kind::Running, 10).await;
    let file = d.work_dir().join("trial.uses.0/values.txt");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&file).unwrap_or_default().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "pw-1234 7\n");
}

/// A foreground instance whose start command execs another program runs under another name
/// than its procName. Re-adoption identifies it by what was recorded at start (pid, start time,
/// boot), so neither SIGTERM nor kill -9 of the daemon restarts it.
#[tokio::test]
async fn an_execd_foreground_instance_is_readopted_after_sigterm_and_kill9() {
    let mut d = Daemon::start("execd");
    d.apply_json(&spec(
        "forkd",
        1,
        json!({"procName": "sh", "startCmd": "echo started; exec sleep 100000"}),
        json!({"restartPolicy": {"policy": "Always"}}),
    ))
    .await;
    let iid = id("test", "forkd", 0);
    let pid = d.wait_state(&iid, Kind::Running, 10).await.pid.unwrap();
    assert_eq!(std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap().trim(), "sleep");
    for kill9 in [false, true] {
        d.restart(kill9);
        let st = d.wait_state(&iid, Kind::Running, 10).await;
        assert_eq!(st.pid, Some(pid), "kept its process (kill9 {kill9}):\n{}", d.log());
        assert_eq!(st.restarts, 0, "not restarted (kill9 {kill9})");
        assert!(!d.log().contains("not adopted"), "{}", d.log());
    }
    assert!(alive(pid));
}

/// `apply --wait` of a changed spec returns once the instance runs the new spec (a new pid,
/// Running), not at once with the old pid, and says so per instance.
#[tokio::test]
async fn apply_wait_waits_for_the_new_spec_to_run() {
    let d = Daemon::start("applywait");
    // A slow stop (the process ignores SIGTERM for its grace period) makes an early return
    // visible: the new process starts only after the old one is gone.
    let slow = "trap '' TERM; sleep 1000 & wait";
    let v1 = spec(
        "web",
        2,
        json!({"startCmd": slow, "env": [{"name": "V", "value": "1"}]}),
        json!({"killPolicy": {"gracePeriod": 1}}),
    );
    let file = spec_file(&d, "web.json", &v1);
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    let old: Vec<i32> = {
        let mut pids = Vec::new();
        for i in 0..2 {
            pids.push(d.status(&id("test", "web", i)).await.pid.unwrap());
        }
        pids
    };
    let v2 = spec(
        "web",
        2,
        json!({"startCmd": slow, "env": [{"name": "V", "value": "2"}]}),
        json!({"killPolicy": {"gracePeriod": 1}}),
    );
    std::fs::write(&file, serde_json::to_string(&v2).unwrap()).unwrap();
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait", "--timeout", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("generation 2"), "{out}");
    for (i, old_pid) in old.iter().enumerate() {
        let st = d.status(&id("test", "web", i as u32)).await;
        assert_eq!(st.state.kind(), Kind::Running, "{st:?}");
        assert_ne!(st.pid, Some(*old_pid), "instance {i} runs a new process when apply --wait returns");
        assert_eq!(st.run_generation, 2);
        assert!(out.contains(&format!("test/web/{i}  Running pid {}", st.pid.unwrap())), "{out}");
        assert!(!alive(*old_pid), "the old process is gone");
    }
    // Then unchanged: said so, nothing restarts.
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("unchanged"), "{out}");
}

/// Every `--wait` failure prints the instance's reason: a spec whose secret does not exist backs
/// off until the timeout, and the reason is on stderr with exit code 6. (A user that does not
/// exist is refused by the apply itself: tests/cli_exit_codes.rs.)
#[tokio::test]
async fn apply_wait_prints_why_an_instance_does_not_run() {
    let d = Daemon::start("waitwhy");
    let items = json!([{"type": "env", "dataKey": "k", "keyOrPath": "K"}]);
    let s =
        spec("nosecret", 1, json!({"secrets": [{"secretName": "steward-no-such-secret", "items": items}]}), json!({}));
    let file = spec_file(&d, "nosecret.json", &s);
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait", "--timeout", "2"]);
    assert_eq!(code, 6, "{out}{err}");
    assert!(err.contains("test/nosecret/0"), "{err}");
    assert!(err.contains("secret test/steward-no-such-secret does not exist"), "{err}");
    // A spec that fails for good says Failed and why, before any timeout.
    let s = spec(
        "dies",
        1,
        json!({"startCmd": "exit 3"}),
        json!({"restartPolicy": {"policy": "OnFailure", "interval": 0, "maxtimes": 1}}),
    );
    let file = spec_file(&d, "dies.json", &s);
    let started = std::time::Instant::now();
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait", "--timeout", "60"]);
    assert_eq!(code, 6, "{out}{err}");
    assert!(started.elapsed() < Duration::from_secs(30), "returned at the failure, not the timeout");
    assert!(err.contains("test/dies/0  Failed"), "{err}");
}

/// A changed spec is the operator's fix: a Failed instance starts on it at once.
#[tokio::test]
async fn a_changed_spec_starts_a_failed_instance() {
    let d = Daemon::start("fixfailed");
    let bad =
        spec("fix", 1, json!({"startCmd": "exit 3"}), json!({"restartPolicy": {"policy": "OnFailure", "maxtimes": 1}}));
    d.apply_json(&bad).await;
    let iid = id("test", "fix", 0);
    d.wait_state(&iid, Kind::Failed, 10).await;
    let good = spec(
        "fix",
        1,
        json!({"startCmd": "exec sleep 1000"}),
        json!({"restartPolicy": {"policy": "OnFailure", "maxtimes": 1}}),
    );
    let file = spec_file(&d, "fix.json", &good);
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait", "--timeout", "20"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(d.status(&iid).await.state.kind(), Kind::Running);
}

/// An instance deleted alone comes back at the next apply of the unchanged spec; `steward delete
/// NAMESPACE/NAME` removes the whole app (instances and spec), and a second one says no such app.
#[tokio::test]
async fn apply_restores_deleted_instances_and_delete_takes_whole_apps() {
    let d = Daemon::start("appdel");
    let s = spec("forkd", 3, json!({"startCmd": "exec sleep 1000"}), json!({}));
    let file = spec_file(&d, "forkd.json", &s);
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = d.cli(&["delete", "test/forkd/1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(d.client.list(&[("name", "forkd")]).await.unwrap().len(), 2);
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("unchanged"), "an instance was brought back: {out}");
    let back = d.wait_state(&id("test", "forkd", 1), Kind::Running, 10).await;
    assert_eq!(back.restarts, 0);

    let pids: Vec<i32> = d.client.list(&[("name", "forkd")]).await.unwrap().iter().filter_map(|s| s.pid).collect();
    assert_eq!(pids.len(), 3);
    let (code, out, err) = d.cli(&["delete", "test/forkd"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("test/forkd: deleted with test/forkd/0, test/forkd/1, test/forkd/2"), "{out}");
    assert!(d.client.list(&[("name", "forkd")]).await.unwrap().is_empty());
    for pid in pids {
        assert!(wait_gone(pid, 5).await, "pid {pid} outlived its app's delete");
    }
    let (code, _, err) = d.cli(&["delete", "test/forkd"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("no app test/forkd"), "{err}");
    // The spec went too: an apply now is a new app (generation 1).
    let (code, out, err) = d.cli(&["apply", "-f", &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("generation 1"), "{out}");
}

/// A delete cut short by the daemon's restart completes after it: the instance disappears
/// (it used to linger in listings as Stopped, and a whole-app delete then said "no app"), and
/// the app can still be deleted and applied again.
#[tokio::test]
async fn a_delete_interrupted_by_a_daemon_restart_completes_after_it() {
    let mut d = Daemon::start("delresume");
    let file = apply_slow(&d, 1, 3);
    let iid = id("test", "slow", 0);
    let (code, _, err) = d.cli(&["delete", "test/slow/0", "--timeout", "0"]);
    assert_eq!(code, 0, "{err}");
    d.wait_state(&iid, Kind::Stopping, 5).await;
    d.restart(true);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !d.client.list(&[("name", "slow")]).await.unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the resumed delete did not complete:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(d.client.status(&iid).await.is_err(), "no ghost left to answer for it");
    let (code, out, err) = d.cli(&["delete", "test/slow"]);
    assert_eq!(code, 0, "the app (its spec) is still there to delete: {out}{err}");
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("generation 1"), "{out}");
}

/// An app's delete answered before it finished (`--timeout 0`: 202 Accepted) is recorded before
/// that answer: a kill -9 right after it cannot lose it (it used to be answered first and
/// recorded as its instances stopped, the spec going last, so the restarted daemon kept the app
/// and ran its instances again). The restarted daemon finishes it: the instances stop and the
/// spec goes; an apply then makes a new app.
#[tokio::test]
async fn an_answered_app_delete_survives_a_kill_9_right_after_the_answer() {
    let mut d = Daemon::start("appdelkill");
    let file = apply_slow(&d, 2, 2);
    let (code, out, err) = d.cli(&["delete", "test/slow", "--timeout", "0"]);
    assert_eq!((code, out.trim()), (0, "test/slow: deleting"), "{err}");
    d.restart(true);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = d.client.list(&[("name", "slow")]).await.unwrap();
        let app = d.client.rollout_status("test", "slow").await;
        if left.is_empty() && app.is_err() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the answered delete was lost: {left:?} {:?}\n{}",
            app.map(|a| a.revision),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("generation 1"), "a new app: {out}");
}

/// An instance's stop, restart, delete or start answered without a timeout (202) is recorded
/// before that answer: a kill -9 right after it cannot lose it. A pause in the actor before it
/// takes the request holds the window open (the answer used to come as soon as the request was
/// sent, so the restarted daemon re-adopted the instance as Running). Each is found done after
/// the restart: 0 stopped, slow/0 deleted, 2 restarted (a new pid), 0 started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_instance_actions_survive_a_kill_9_right_after_the_answer() {
    let mut d = Daemon::start("actionkill");
    let quick = |i| id("test", "quick", i);
    d.apply_json(&spec("quick", 3, json!({"startCmd": "exec sleep 1000"}), json!({}))).await;
    let mut pids = Vec::new();
    for i in 0..3 {
        pids.push(d.wait(&quick(i), 20, |s| s.state.kind() == Kind::Running).await.pid.unwrap());
    }

    with_requests_paused(&mut d);
    d.client.action(&quick(0), "stop", None).await.unwrap();
    killed_and_back(&mut d);
    // Lost, it is re-adopted as Running and stays so (the wait shows its status).
    d.wait(&quick(0), 20, |s| s.state.kind() == Kind::Stopped).await;
    assert!(wait_gone(pids[0], 10).await, "the stopped instance's process ended");

    // The delete's instance ignores SIGTERM for 3 s: the kill -9 lands while it is stopping.
    // (After the stop, before the record goes: the next test.)
    apply_slow(&d, 1, 3);
    let slow = id("test", "slow", 0);
    let slow_pid = d.wait(&slow, 20, |s| s.state.kind() == Kind::Running).await.pid.unwrap();
    with_requests_paused(&mut d);
    assert!(!d.client.delete_finished(&slow, None).await.unwrap(), "answered at once (202)");
    killed_and_back(&mut d);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while d.client.status(&slow).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "the answered delete was lost\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(wait_gone(slow_pid, 10).await, "the deleted instance's process ended");

    with_requests_paused(&mut d);
    d.client.action(&quick(2), "restart", None).await.unwrap();
    killed_and_back(&mut d);
    let s = d.wait(&quick(2), 20, |s| s.state.kind() == Kind::Running && s.pid != Some(pids[2])).await;
    assert!(wait_gone(pids[2], 10).await, "the answered restart was lost: {} still runs ({s:?})", pids[2]);

    with_requests_paused(&mut d);
    d.client.action(&quick(0), "start", None).await.unwrap();
    killed_and_back(&mut d);
    // Lost, it stays Stopped.
    d.wait(&quick(0), 20, |s| s.state.kind() == Kind::Running).await;
}

/// A delete whose stop has ended is still a delete until its record goes: a kill -9 between
/// the two (failpoint `delete-record`: the processes are gone, the record not yet) is taken up
/// by the restarted daemon, which removes the instance. It used to record the ended stop as
/// `Stopped` first, and the restarted daemon kept that instance for good: the delete, already
/// answered 202, was lost. The same from rest: a stopped instance's delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_killed_before_its_record_goes_is_finished_after_the_restart() {
    let mut d = Daemon::start("delrecordkill");
    let quick = |i| id("test", "quick", i);
    d.apply_json(&spec("quick", 2, json!({"startCmd": "exec sleep 1000"}), json!({}))).await;
    let pid = d.wait(&quick(0), 20, |s| s.state.kind() == Kind::Running).await.pid.unwrap();
    d.wait(&quick(1), 20, |s| s.state.kind() == Kind::Running).await;
    d.client.action(&quick(1), "stop", Some(20.0)).await.unwrap();
    for (i, what) in [(0, "a running instance's delete"), (1, "a stopped instance's delete")] {
        d.env = vec![("STEWARD_FAILPOINTS".into(), "delete-record@1".into())];
        d.restart(false);
        // Answered 202 or cut off by the kill: either way it is recorded, and so carried out.
        let _ = d.client.delete_finished(&quick(i), None).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while alive(d.pid()) {
            assert!(std::time::Instant::now() < deadline, "{what}: the failpoint was not reached\n{}", d.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        killed_and_back(&mut d);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while let Ok(s) = d.client.status(&quick(i)).await {
            assert!(std::time::Instant::now() < deadline, "{what} was lost: {:?}\n{}", s.state, d.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(wait_gone(pid, 10).await, "the deleted instance's process ended");
    assert!(d.client.list(&[("name", "quick")]).await.unwrap().is_empty());
}

/// Restarts the daemon (SIGTERM) with each instance's actor pausing 700 ms before it takes a
/// request: the window between a request's answer and its record, held open.
fn with_requests_paused(d: &mut Daemon) {
    d.env = vec![("STEWARD_FAILPOINTS".into(), "instance-request~700".into())];
    d.restart(false);
}

/// Kills the daemon -9 at once and starts it again without the pause.
fn killed_and_back(d: &mut Daemon) {
    d.kill9();
    d.env.clear();
    d.spawn();
}
