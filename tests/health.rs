//! Health checks against real servers: HTTP (the example gamesvc server, whose /health turns
//! 503 while a file named `unhealthy` exists in its work dir), TCP and COMMAND.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

fn server_pl() -> String {
    format!("{}/units/packages/gamesvc/server.pl", env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test]
async fn an_http_check_that_turns_unhealthy_kills_and_restarts_after_grace() {
    let d = Daemon::start("http-check");
    let s = spec(
        "game",
        1,
        json!({
            "procName": "gamesvr",
            "startCmd": format!("exec perl {} --port ${{ports.http}} --address 127.0.0.1", server_pl()),
            "ports": [{"name": "http", "hostPort": 0, "protocol": "HTTP"}],
            "healthChecks": [{"type": "HTTP", "intervalSeconds": 1, "timeoutSeconds": 1, "consecutiveFailures": 2,
                              "gracePeriodSeconds": 4, "http": {"portName": "http", "path": "/health"}}]
        }),
        json!({"restartPolicy": {"policy": "Always", "interval": 0}}),
    );
    // timeoutSeconds must be below intervalSeconds.
    let mut bad = s.clone();
    bad["spec"]["template"]["spec"]["processes"][0]["healthChecks"][0]["timeoutSeconds"] = json!(1);
    bad["spec"]["template"]["spec"]["processes"][0]["healthChecks"][0]["intervalSeconds"] = json!(1);
    assert!(d.client.apply(&bad.to_string(), steward::spec::Format::Json).await.is_err());
    let mut s = s;
    s["spec"]["template"]["spec"]["processes"][0]["healthChecks"][0]["intervalSeconds"] = json!(2);
    d.apply_json(&s).await;
    let iid = id("test", "game", 0);
    let st = d.wait(&iid, 15, |s| s.health.as_deref() == Some("healthy")).await;
    let first_pid = st.pid.unwrap();

    // Unhealthy: killed after two counted failures in a row, then restarted by its policy.
    std::fs::write(d.work_dir().join("test.game.0/unhealthy"), "").unwrap();
    let st = d.wait(&iid, 20, |s| s.restarts == 1 && s.state.kind() == Kind::Running).await;
    assert_ne!(st.pid, Some(first_pid));
    let mut killed = None;
    d.client
        .events(0, false, |e| {
            if e.body.to_value()["to"] == "Stopping" {
                killed = e.body.to_value()["state"]["goal"]["reason"].as_str().map(String::from);
            }
            true
        })
        .await
        .unwrap();
    let killed = killed.expect("a Stopping transition with the reason");
    assert!(killed.contains("health check failed 2 times in a row") && killed.contains("HTTP 503"), "{killed}");

    // The new process is unhealthy at once, but within the 4 s grace period failures do not count.
    let restarted_at = Instant::now();
    let st = d.wait(&iid, 10, |s| s.health.as_deref() == Some("unhealthy")).await;
    assert_eq!(st.checks[0].as_ref().unwrap().consecutive_failures, 0, "grace: not counted");
    while restarted_at.elapsed() < Duration::from_millis(3500) {
        let st = d.status(&iid).await;
        assert_eq!(st.restarts, 1, "no kill within the grace period");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Healthy again before the threshold: it stays.
    std::fs::remove_file(d.work_dir().join("test.game.0/unhealthy")).unwrap();
    let st = d.wait(&iid, 10, |s| s.health.as_deref() == Some("healthy")).await;
    assert_eq!(st.restarts, 1);
    let metrics = d.client.metrics().await.unwrap();
    let failures: u64 =
        metrics.lines().find_map(|l| l.strip_prefix("steward_check_failures_total ")).unwrap().parse().unwrap();
    assert!(failures >= 3, "{failures}");
}

#[tokio::test]
async fn tcp_and_command_checks_report_without_killing_at_zero() {
    let d = Daemon::start("tcp-check");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let s = spec(
        "probe",
        2,
        json!({
            "healthChecks": [{"type": "TCP", "intervalSeconds": 1, "timeoutSeconds": 0, "consecutiveFailures": 0,
                              "gracePeriodSeconds": 0, "tcp": {"port": closed}}]
        }),
        json!({}),
    );
    let mut s = s;
    s["spec"]["template"]["spec"]["processes"][0]["healthChecks"][0]["timeoutSeconds"] = json!(1);
    s["spec"]["template"]["spec"]["processes"][0]["healthChecks"][0]["intervalSeconds"] = json!(2);
    d.apply_json(&s).await;
    let iid = id("test", "probe", 0);
    let st = d
        .wait(&iid, 15, |s| s.checks.first().and_then(|c| c.as_ref()).is_some_and(|h| h.consecutive_failures >= 2))
        .await;
    assert_eq!(st.health.as_deref(), Some("unhealthy"));
    assert_eq!(st.restarts, 0, "consecutiveFailures 0 never kills");
    assert!(st.checks[0].as_ref().unwrap().last_failure.as_deref().unwrap().contains(&format!("127.0.0.1:{closed}")));

    let c = spec(
        "cmd",
        1,
        json!({
            "user": "nobody",
            "healthChecks": [{"type": "COMMAND", "intervalSeconds": 2, "timeoutSeconds": 1, "consecutiveFailures": 0,
                              "gracePeriodSeconds": 0, "command": {"value": "test \"$(id -un)\" = nobody && test -f ${workPath}/ok"}}]
        }),
        json!({}),
    );
    d.apply_json(&c).await;
    let cid = id("test", "cmd", 0);
    d.wait(&cid, 10, |s| s.health.as_deref() == Some("unhealthy")).await;
    std::fs::write(d.work_dir().join("test.cmd.0/ok"), "").unwrap();
    d.wait(&cid, 10, |s| s.health.as_deref() == Some("healthy")).await;
}
