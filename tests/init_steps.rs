//! A process's init steps (seed 003 `initializers`, issue 17) on real processes: they run in
//! order before every start, as the process's user, in its workPath; a failing or hanging step
//! fails the start with its reason and output, counted by the restart policy.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use steward::supervisor::state::{Kind, State};

#[tokio::test]
async fn init_steps_run_in_order_before_every_start_as_the_processes_user() {
    let d = Daemon::start("init");
    let doc = spec(
        "steps",
        1,
        json!({
            "user": "nobody",
            "initializers": [
                {"name": "first", "command": "echo first-$(id -un) >> order"},
                {"name": "second", "command": "echo second >> order"}
            ],
            "startCmd": "echo start >> order; exec sleep 1000"
        }),
        json!({}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "steps", 0);
    d.wait_state(&iid, Kind::Running, 20).await;
    let order = d.work_dir().join("test.steps.0").join("order");
    let read = || std::fs::read_to_string(&order).unwrap_or_default();
    assert_eq!(read(), "first-nobody\nsecond\nstart\n");

    // Every start: a restart runs them again, in order, before startCmd.
    let (code, out, err) = d.cli(&["restart", "test/steps/0"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait(&iid, 20, |s| s.state.kind() == Kind::Running && s.restarts == 0 && read().lines().count() == 6).await;
    assert_eq!(read(), "first-nobody\nsecond\nstart\nfirst-nobody\nsecond\nstart\n");
}

#[tokio::test]
async fn a_failing_step_fails_the_start_with_its_output_and_the_rest_never_run() {
    let d = Daemon::start("initfail");
    let doc = spec(
        "broken",
        1,
        json!({
            "initializers": [
                {"name": "ok", "command": "echo ok >> ran"},
                {"name": "migrate", "command": "echo 'schema v3 is newer than this binary' >&2; exit 3"},
                {"name": "never", "command": "echo never >> ran"}
            ],
            "startCmd": "echo start >> ran; exec sleep 1000"
        }),
        json!({"restartPolicy": {"policy": "Never"}}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "broken", 0);
    let s = d.wait_state(&iid, Kind::Failed, 20).await;
    let State::Failed { reason } = &s.state else { unreachable!() };
    assert!(reason.contains("init step migrate exited with code 3"), "{reason}");
    assert!(reason.contains("schema v3 is newer than this binary"), "{reason}");
    let ran = std::fs::read_to_string(d.work_dir().join("test.broken.0").join("ran")).unwrap();
    assert_eq!(ran, "ok\n", "the steps after the failing one and startCmd must not run");
    assert!(d.cgroup_pids(&iid).is_empty(), "nothing of the failed start runs on");
}

#[tokio::test]
async fn a_hanging_step_is_killed_at_its_timeout_and_counts_toward_the_restart_policy() {
    let d = Daemon::start("inithang");
    let doc = spec(
        "hang",
        1,
        json!({
            "initializers": [{"name": "wait-db", "command": "sleep 1000", "timeout": 1}],
            "startCmd": "exec sleep 1000"
        }),
        json!({"restartPolicy": {"policy": "OnFailure", "interval": 0, "maxtimes": 1}}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "hang", 0);
    let s = d.wait_state(&iid, Kind::Failed, 30).await;
    let State::Failed { reason } = &s.state else { unreachable!() };
    assert!(reason.contains("init step wait-db did not finish within 1s"), "{reason}");
    assert!(reason.contains("maxtimes"), "the policy counted the failed starts: {reason}");
    assert_eq!(s.restarts, 1);
    assert!(d.cgroup_pids(&iid).is_empty(), "the hanging step was killed");
}
