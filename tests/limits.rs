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
            oom_event |= e.body.to_value()["type"] == "oomKilled";
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

#[tokio::test]
async fn status_shows_the_spec_s_limits_next_to_the_usage() {
    let d = Daemon::start("limits-shown");
    let two = json!({"processes": [
        {"procName": "sleep", "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}",
         "startCmd": "exec sleep 1000", "startGracePeriod": 0, "resources": {"limits": {"cpu": "0.25", "memory": 24}}},
        {"procName": "sh", "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}",
         "startCmd": "sleep 1001", "startGracePeriod": 0, "resources": {"limits": {"cpu": 0.25, "memory": "8"}}}
    ]});
    let mut s = spec("capped", 1, json!({}), json!({}));
    s["spec"]["template"]["spec"] = two;
    d.apply_json(&s).await;
    let open = spec("open", 1, json!({"resources": {"limits": {"cpu": "0.5", "memory": "-1"}}}), json!({}));
    d.apply_json(&open).await;
    d.wait_state(&id("test", "capped", 0), Kind::Running, 10).await;
    d.wait_state(&id("test", "open", 0), Kind::Running, 10).await;

    // The instance's cgroup gets the sum over its processes.
    let (code, out, _) = d.cli(&["-o", "json", "status", "test/capped/0"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["limits"], json!({"cpuCores": 0.5, "memoryMib": 32.0}));
    let (_, text, _) = d.cli(&["status", "test/capped/0"]);
    assert!(text.contains("(limit 0.5 cores)") && text.contains("(limit 32 MiB)"), "{text}");
    // -1 is no limit, and says so.
    let (_, text, _) = d.cli(&["status", "test/open/0"]);
    assert!(
        text.contains("(limit 0.5 cores)")
            && text.lines().any(|l| l.starts_with("memory:") && l.ends_with("(no limit)")),
        "{text}"
    );
    // Lists leave it out, as they leave out usage.
    let (_, list, _) = d.cli(&["-o", "json", "ls"]);
    assert!(!list.contains("\"limits\""), "{list}");
}
