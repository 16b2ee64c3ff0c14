//! Seed 003 lifecycle hooks on real processes (issue 17): postStart runs once after each start
//! and a failure restarts by policy; preStop runs before the stop signal on every stop and
//! restart, and one that hangs does not push the stop past the grace period.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use std::time::{Duration, Instant};
use steward::supervisor::state::{Kind, State};

fn exec(command: &[&str]) -> serde_json::Value {
    json!({"type": "EXEC", "method": {"command": command}})
}

#[tokio::test]
async fn a_failing_post_start_restarts_by_policy_and_a_passing_one_runs_once_per_start() {
    let d = Daemon::start("poststart");
    let doc = spec(
        "bad",
        1,
        json!({"lifecycle": {"postStart": exec(&["sh", "-c", "echo 'no config' >&2; exit 3"])}}),
        json!({"restartPolicy": {"policy": "OnFailure", "interval": 0, "maxtimes": 2}}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "bad", 0);
    let s = d.wait_state(&iid, Kind::Failed, 30).await;
    let State::Failed { reason } = &s.state else { unreachable!() };
    assert!(reason.contains("postStart of sh failed: command exited with code 3"), "{reason}");
    assert_eq!(s.restarts, 2, "each failed postStart counted by the policy");

    let good =
        spec("good", 1, json!({"lifecycle": {"postStart": exec(&["sh", "-c", "echo started >> hooks"])}}), json!({}));
    d.apply_json(&good).await;
    let gid = id("test", "good", 0);
    d.wait_state(&gid, Kind::Running, 20).await;
    let hooks = d.work_dir().join("test.good.0").join("hooks");
    let read = || std::fs::read_to_string(&hooks).unwrap_or_default();
    let waited = Instant::now();
    while read().is_empty() && waited.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(read(), "started\n");
    // A daemon restart re-adopts the process: no new start, no second postStart.
    let mut d = d;
    d.restart(true);
    d.wait_state(&gid, Kind::Running, 20).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(read(), "started\n", "postStart runs after a start, not after a re-adoption");
    assert_eq!(d.status(&gid).await.state.kind(), Kind::Running);
}

#[tokio::test]
async fn pre_stop_runs_before_the_stop_signal_on_stop_and_restart() {
    let d = Daemon::start("prestop");
    // The main process notes the SIGTERM; preStop notes itself first.
    let doc = spec(
        "drain",
        1,
        json!({
            "startCmd": "trap 'echo term >> order; exit 0' TERM; while true; do sleep 0.1; done",
            "lifecycle": {"preStop": exec(&["sh", "-c", "echo prestop >> order"])}
        }),
        json!({"killPolicy": {"gracePeriod": 10}}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "drain", 0);
    d.wait_state(&iid, Kind::Running, 20).await;
    let order = d.work_dir().join("test.drain.0").join("order");
    let read = || std::fs::read_to_string(&order).unwrap_or_default();

    let (code, out, err) = d.cli(&["restart", "test/drain/0"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&iid, Kind::Running, 20).await;
    assert_eq!(read(), "prestop\nterm\n", "restart: preStop, then the stop signal");

    let (code, out, err) = d.cli(&["stop", "test/drain/0"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&iid, Kind::Stopped, 20).await;
    assert_eq!(read(), "prestop\nterm\nprestop\nterm\n", "stop: preStop, then the stop signal");
}

#[tokio::test]
async fn a_hanging_pre_stop_does_not_push_the_stop_past_the_grace_period() {
    let d = Daemon::start("prestophang");
    let doc = spec(
        "hang",
        1,
        json!({"lifecycle": {"preStop": exec(&["sleep", "30"])}}),
        json!({"killPolicy": {"gracePeriod": 2}}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "hang", 0);
    d.wait_state(&iid, Kind::Running, 20).await;
    let asked = Instant::now();
    let (code, out, err) = d.cli(&["stop", "test/hang/0"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&iid, Kind::Stopped, 20).await;
    let took = asked.elapsed();
    assert!(took < Duration::from_millis(3500), "the stop took {took:?} with a grace period of 2 s");
    assert!(d.cgroup_pids(&iid).is_empty(), "the hook and the process are gone");
}
