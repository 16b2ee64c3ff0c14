//! Resource limits through the instance's cgroup: memory (OOM kill reported as the reason) and
//! CPU quota (measured from the cgroup's own accounting).

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use std::time::Duration;
use steward::supervisor::state::{ExitStatus, Kind, State};

#[tokio::test]
async fn over_its_memory_limit_an_instance_is_oom_killed_and_told_so() {
    let d = Daemon::start("oom");
    let s = spec(
        "hog",
        1,
        json!({"startCmd": "exec perl -e '$x = q(a) x 200_000_000; sleep 5'", "procName": "perl",
               "resources": {"limits": {"memory": "16", "cpu": "-1"}}}),
        json!({"restartPolicy": {"policy": "Never"}}),
    );
    d.apply_json(&s).await;
    let st = d.wait_state(&id("test", "hog", 0), Kind::Exited, 20).await;
    assert_eq!(st.state, State::Exited { status: ExitStatus::Signal(9) });
    assert!(st.message.contains("OOM-killed: over its memory limit of 16 MiB"), "{}", st.message);
    let mut oom_event = false;
    d.client
        .events(0, false, |e| {
            oom_event |= e.body["type"] == "oomKilled";
            true
        })
        .await
        .unwrap();
    assert!(oom_event, "an oomKilled event is journaled");
}

#[tokio::test]
async fn a_busy_loop_under_half_a_core_uses_about_half_a_core() {
    let d = Daemon::start("cpu");
    let s =
        spec("spin", 1, json!({"startCmd": "while :; do :; done", "resources": {"limits": {"cpu": "0.5"}}}), json!({}));
    d.apply_json(&s).await;
    let iid = id("test", "spin", 0);
    d.wait_state(&iid, Kind::Running, 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = d.status(&iid).await.usage.unwrap().cpu_usage_usec;
    let t = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = d.status(&iid).await;
    let used = (after.usage.unwrap().cpu_usage_usec - before) as f64 / t.elapsed().as_micros() as f64;
    assert!((0.35..0.65).contains(&used), "used {used:.2} of a core under a 0.5 limit");
    let metrics = d.client.metrics().await.unwrap();
    assert!(metrics.contains("steward_instance_cpu_seconds_total{instance=\"test/spin/0\"}"), "{metrics}");
    assert!(metrics.contains("steward_instance_memory_bytes{instance=\"test/spin/0\"}"));
}
