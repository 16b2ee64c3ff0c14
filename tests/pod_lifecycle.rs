//! Seed 003 probes, lifecycle hooks and init containers for pods on the real Docker Engine
//! (issue 17): EXEC by docker exec inside the container, HTTP at the pod's own address,
//! postStart and preStop around the stop signal, init containers in order before every start.

mod common;

use common::docker::{self, sh, SHARED_SOCKET};
use common::{id, Daemon};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use steward::supervisor::state::{Kind, State};

fn pod(name: &str, containers: Value, top: Value) -> Value {
    docker::pod("podlife", name, containers, top)
}

fn exec(command: &[&str]) -> Value {
    json!({"type": "EXEC", "method": {"command": command}})
}

/// A host directory below the daemon's work dir, mounted at /shared in `container`.
fn share(d: &Daemon, container: &mut Value, dir: &str) -> std::path::PathBuf {
    let host = d.work_dir().join(dir);
    std::fs::create_dir_all(&host).unwrap();
    container["volumes"] = json!([{"hostPath": host.display().to_string(), "mountPath": "/shared"}]);
    host
}

fn docker_exec(container: &str, script: &str) {
    let (code, out, err) = docker::docker(SHARED_SOCKET, &["exec", container, "/bin/sh", "-c", script]);
    assert_eq!(code, 0, "docker exec {script}: {out}{err}");
}

async fn wait_for_file(path: &std::path::Path, want: &str, secs: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text == want || Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Readiness (HTTP at the pod's own address, on the container's port) flips Ready both ways
/// without a restart; liveness (EXEC by docker exec) kills after `failure` failures and the
/// policy restarts the pod.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_and_liveness_probe_a_pod() {
    docker::shared_engine();
    let d = Daemon::start("podprobes");
    let mut server = sh("server", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 80 -h /www");
    server["ports"] = json!([{"name": "http", "containerPort": 80, "hostPort": 0}]);
    server["probe"] = json!({
        "readiness": {"handler": {"type": "HTTP", "method": {"portName": "http", "path": "/ready.html"}},
                      "period": 1, "threshold": {"success": 1, "failure": 2}},
        "liveness": {"handler": exec(&["test", "!", "-f", "/tmp/stuck"]), "period": 1, "threshold": {"failure": 3}}
    });
    d.apply_json(&pod("probed", json!([server]), json!({}))).await;
    let iid = id("podlife", "probed", 0);
    let s = d.wait_state(&iid, Kind::Running, 30).await;
    let container = s.containers[0].id.clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!d.status(&iid).await.ready, "not ready while /ready.html is missing");

    docker_exec(&container, "echo yes > /www/ready.html");
    let s = d.wait(&iid, 10, |s| s.ready).await;
    assert_eq!((s.restarts, s.containers[0].id.as_str()), (0, container.as_str()), "ready without a restart");
    let (code, out, _) = d.cli(&["ls"]);
    assert_eq!(code, 0);
    assert!(
        out.lines().any(|l| l.starts_with("podlife") && l.contains("probed") && l.contains(" yes ")),
        "READY in ls:\n{out}"
    );

    docker_exec(&container, "rm /www/ready.html");
    let s = d.wait(&iid, 10, |s| !s.ready).await;
    assert_eq!((s.restarts, s.state.kind()), (0, Kind::Running), "not ready, and not restarted");

    // Liveness: three failures in a row (period 1 s) kill; the policy starts the pod again.
    docker_exec(&container, "touch /tmp/stuck");
    let stuck = Instant::now();
    let s = d.wait(&iid, 20, |s| s.restarts >= 1 && s.state.kind() == Kind::Running).await;
    assert!(stuck.elapsed() >= Duration::from_secs(2), "killed before three failures: {:?}", stuck.elapsed());
    assert_ne!(s.containers[0].id, container, "a new container");
    let (_, out, _) = d.cli(&["events", "--since", "0"]);
    assert!(
        out.contains("liveness probe of container server failed 3 times in a row: command exited with code 1"),
        "the kill's reason:\n{out}"
    );
}

/// postStart runs once after each start and preStop before the stop signal on a restart and a
/// stop, both inside the container; a failing postStart restarts by policy; a preStop that
/// hangs does not push the stop past the grace period.
#[tokio::test(flavor = "multi_thread")]
async fn hooks_run_in_the_container_around_starts_and_stops() {
    docker::shared_engine();
    let d = Daemon::start("podhooks");
    let mut main = sh("main", "trap 'echo term >> /shared/order; exit 0' TERM; while true; do sleep 0.1; done");
    let host = share(&d, &mut main, "hooks");
    main["lifecycle"] = json!({
        "postStart": exec(&["sh", "-c", "echo poststart >> /shared/order"]),
        "preStop": exec(&["sh", "-c", "echo prestop >> /shared/order"])
    });
    d.apply_json(&pod("hooked", json!([main]), json!({"killPolicy": {"gracePeriod": 10}}))).await;
    let iid = id("podlife", "hooked", 0);
    d.wait_state(&iid, Kind::Running, 30).await;
    let order = host.join("order");
    assert_eq!(wait_for_file(&order, "poststart\n", 10).await, "poststart\n");

    let (code, out, err) = d.cli(&["restart", "podlife/hooked/0"]);
    assert_eq!(code, 0, "{out}{err}");
    let want = "poststart\nprestop\nterm\npoststart\n";
    assert_eq!(wait_for_file(&order, want, 20).await, want, "restart: preStop, the stop signal, postStart");

    let (code, out, err) = d.cli(&["stop", "podlife/hooked/0"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&iid, Kind::Stopped, 20).await;
    let want = format!("{want}prestop\nterm\n");
    assert_eq!(std::fs::read_to_string(&order).unwrap(), want, "stop: preStop, then the stop signal");

    // A preStop that hangs: the stop still ends at the 2 s grace period.
    let mut slow = sh("slow", "exec sleep 1000");
    slow["lifecycle"] = json!({"preStop": exec(&["sleep", "100"])});
    d.apply_json(&pod("slowstop", json!([slow]), json!({"killPolicy": {"gracePeriod": 2}}))).await;
    let sid = id("podlife", "slowstop", 0);
    d.wait_state(&sid, Kind::Running, 30).await;
    let asked = Instant::now();
    let (code, out, err) = d.cli(&["stop", "podlife/slowstop/0"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&sid, Kind::Stopped, 20).await;
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(6), "the stop took {took:?}, past the 2 s grace period");

    // A failing postStart restarts by policy, and the policy's limit ends it Failed.
    let mut bad = sh("app", "exec sleep 1000");
    bad["lifecycle"] = json!({"postStart": exec(&["sh", "-c", "echo 'no config' >&2; exit 3"])});
    let policy = json!({"restartPolicy": {"policy": "OnFailure", "interval": 0, "maxtimes": 2}});
    d.apply_json(&pod("badstart", json!([bad]), policy)).await;
    let bid = id("podlife", "badstart", 0);
    let s = d.wait_state(&bid, Kind::Failed, 60).await;
    let State::Failed { reason } = &s.state else { unreachable!() };
    assert!(reason.contains("postStart of app failed: command exited with code 3"), "{reason}");
    assert_eq!(s.restarts, 2, "each failed postStart counted by the policy");
}

/// Init containers run one after another, in the pod's network namespace, before every start;
/// a failing one leaves the instance Failed with its exit code and output, and neither the
/// init containers after it nor the pod's containers run.
#[tokio::test(flavor = "multi_thread")]
async fn init_containers_run_in_order_before_every_start() {
    docker::shared_engine();
    let d = Daemon::start("podinit");
    let mut first = sh("first", "echo first | tee -a /shared/ran");
    let host = share(&d, &mut first, "init");
    let mut second = sh("second", "cat /sys/class/net/eth0/address > /shared/second-mac; echo second >> /shared/ran");
    second["volumes"] = first["volumes"].clone();
    let mut main =
        sh("main", "echo main >> /shared/ran; cat /sys/class/net/eth0/address > /shared/main-mac; exec sleep 1000");
    main["volumes"] = first["volumes"].clone();
    let mut doc = pod("inits", json!([main]), json!({}));
    doc["spec"]["template"]["spec"]["initializers"] = json!([first, second]);
    d.apply_json(&doc).await;
    let iid = id("podlife", "inits", 0);
    d.wait_state(&iid, Kind::Running, 30).await;
    let ran = host.join("ran");
    assert_eq!(wait_for_file(&ran, "first\nsecond\nmain\n", 10).await, "first\nsecond\nmain\n");
    let mac = |f: &str| std::fs::read_to_string(host.join(f)).unwrap_or_default();
    assert!(!mac("main-mac").trim().is_empty(), "the pod has an interface");
    assert_eq!(mac("second-mac"), mac("main-mac"), "init containers run in the pod's network namespace");
    let (code, out, err) = d.cli(&["restart", "podlife/inits/0"]);
    assert_eq!(code, 0, "{out}{err}");
    let want = "first\nsecond\nmain\nfirst\nsecond\nmain\n";
    assert_eq!(wait_for_file(&ran, want, 30).await, want, "every start runs them again");
    let (code, logs, err) = d.cli(&["logs", "podlife/inits/0"]);
    assert_eq!(code, 0, "{err}");
    assert!(logs.lines().any(|l| l.ends_with("first")), "an init container's output in steward logs:\n{logs}");

    let mut migrate = sh("migrate", "echo 'schema v3 is newer than this binary' >&2; exit 3");
    let broken_dir = share(&d, &mut migrate, "broken");
    let mut never = sh("never", "echo never >> /shared/ran");
    never["volumes"] = migrate["volumes"].clone();
    let mut main = sh("main", "echo main >> /shared/ran; exec sleep 1000");
    main["volumes"] = migrate["volumes"].clone();
    let mut doc = pod("broken", json!([main]), json!({"restartPolicy": {"policy": "Never"}}));
    doc["spec"]["template"]["spec"]["initializers"] = json!([migrate, never]);
    d.apply_json(&doc).await;
    let bid = id("podlife", "broken", 0);
    let s = d.wait_state(&bid, Kind::Failed, 30).await;
    let State::Failed { reason } = &s.state else { unreachable!() };
    assert!(reason.contains("init container \"migrate\" exited with code 3"), "{reason}");
    assert!(reason.contains("schema v3 is newer than this binary"), "{reason}");
    assert!(!broken_dir.join("ran").exists(), "neither the next init container nor the pod's ran");
    let filter = "label=io.steward.instance=podlife/broken/0";
    let (_, left, _) = docker::docker(SHARED_SOCKET, &["ps", "-aq", "--filter", filter]);
    assert!(left.trim().is_empty(), "nothing of the failed start is left: {left}");
}
