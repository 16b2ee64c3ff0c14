//! Pods as an operator meets them (issue 31), against the real Docker Engine: secret files only
//! their owner reads, logs that a daemon restart neither replays nor loses, deletes and stops
//! ordered with a start in flight, short-lived mains, PORT_<name> everywhere, checks in BRIDGE
//! mode, published ports on host_ip and bounded Docker logs.

mod common;

use common::docker::{self, sh, SHARED_SOCKET};
use common::{id, Daemon};
use serde_json::{json, Value};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;
use steward::supervisor::state::Kind;

fn pod(name: &str, containers: Value, top: Value) -> Value {
    docker::pod("ops", name, containers, top)
}

/// The output of `docker exec CONTAINER sh -c SCRIPT`.
fn exec(container: &str, script: &str) -> String {
    let (code, out, err) = docker::docker(SHARED_SOCKET, &["exec", container, "/bin/sh", "-c", script]);
    assert_eq!(code, 0, "docker exec {container} {script}: {err}");
    out
}

/// A pod's secret files: root's and 0400 (or the item's uid), below 0700 directories of root's,
/// so another user of the host cannot read them; the container still can.
#[tokio::test(flavor = "multi_thread")]
async fn secret_files_are_readable_only_by_their_owner() {
    docker::shared_engine();
    let d = Daemon::start("pods-secretfiles");
    let data = [("token".to_string(), "tok-s3cret".to_string())].into();
    d.client.put_values("secrets", "ops", "creds", &data).await.unwrap();
    let mut main = sh("main", "exec sleep 1000");
    main["secrets"] = json!([{"secretName": "creds", "items": [
        {"type": "file", "dataKey": "token", "keyOrPath": "/etc/app/token"},
        {"type": "file", "dataKey": "token", "keyOrPath": "/etc/app/token-1000", "user": "1000"}
    ]}]);
    d.apply_json(&pod("sec", json!([main]), json!({}))).await;
    let s = d.wait_state(&id("ops", "sec", 0), Kind::Running, 60).await;
    let container = &s.containers[0].id;
    assert_eq!(exec(container, "cat /etc/app/token"), "tok-s3cret");

    let values = d.run_dir().join("ops.sec.0/values");
    for dir in [values.clone(), values.join("main")] {
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o700), "{}", dir.display());
    }
    let files: Vec<_> = std::fs::read_dir(values.join("main")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut owners = Vec::new();
    for f in &files {
        let meta = std::fs::metadata(f).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o400, "{}", f.display());
        owners.push(meta.uid());
        // Another user of the host: refused.
        let out = std::process::Command::new("runuser").args(["-u", "nobody", "--", "cat"]).arg(f).output().unwrap();
        assert!(!out.status.success(), "nobody read {}", f.display());
        assert!(!String::from_utf8_lossy(&out.stdout).contains("tok-s3cret"));
    }
    owners.sort();
    assert_eq!(owners, [0, 1000]);
}

/// Containers of one instance on the shared engine, as `status name` pairs.
fn containers_of(d: &Daemon, instance: &str) -> Vec<String> {
    let owner = format!("label=io.steward.owner={}", d.path().join("state").display());
    let which = format!("label=io.steward.instance={instance}");
    let (_, out, _) = docker::docker(
        SHARED_SOCKET,
        &["ps", "-a", "--filter", &owner, "--filter", &which, "--format", "{{.State}} {{.Names}}"],
    );
    out.lines().filter(|l| !l.is_empty()).map(String::from).collect()
}

/// A delete or stop while a pod is starting, at many delays after the apply: the start's
/// containers are removed (a delete leaves none, a stop none created or running), never left
/// behind in Created state.
#[tokio::test(flavor = "multi_thread")]
async fn delete_and_stop_race_a_pod_start_and_leave_no_container() {
    docker::shared_engine();
    let d = Daemon::start("pods-race");
    let containers = json!([sh("a", "exec sleep 1000"), sh("b", "exec sleep 1000"), sh("c", "exec sleep 1000")]);
    for (round, delay_ms) in [0u64, 5, 15, 30, 50, 80, 120, 160, 200].into_iter().enumerate() {
        let name = format!("race{round}");
        let iid = id("ops", &name, 0);
        let instance = iid.to_string();
        d.apply_json(&pod(&name, containers.clone(), json!({}))).await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        let stop = round % 2 == 1;
        if stop {
            d.client.action(&iid, "stop", Some(30.0)).await.unwrap();
            assert_eq!(d.status(&iid).await.state.kind(), Kind::Stopped);
        } else {
            d.client.delete(&iid, Some(30.0)).await.unwrap();
        }
        // A create dockerd was still working on would show up within this.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let left = containers_of(&d, &instance);
        if stop {
            assert!(
                left.iter().all(|c| c.starts_with("exited")),
                "stop after {delay_ms} ms left {left:?}\n{}",
                d.log()
            );
            d.client.delete(&iid, Some(30.0)).await.unwrap();
        } else {
            assert!(left.is_empty(), "delete after {delay_ms} ms left {left:?}\n{}", d.log());
        }
    }
}

/// `line-1`, `line-2`, ... as the log files hold them (rotated copies first).
fn numbered_lines(d: &Daemon, instance_dir: &str, file: &str) -> Vec<u64> {
    let dir = d.run_dir().join(instance_dir);
    let mut text = String::new();
    for name in [format!("{file}.2"), format!("{file}.1"), file.to_string()] {
        text.push_str(&std::fs::read_to_string(dir.join(name)).unwrap_or_default());
    }
    // Each line as Docker's timestamp, then the container's own text.
    text.lines()
        .filter_map(|l| l.split_once(' ').and_then(|(_, text)| text.strip_prefix("line-")))
        .map(|n| n.parse().unwrap())
        .collect()
}

/// A container writing numbered lines while the daemon is killed (-9) and stopped (SIGTERM)
/// mid-stream: its log holds every line exactly once, in order (it used to be replayed from
/// the first line at every restart).
#[tokio::test(flavor = "multi_thread")]
async fn logs_resume_across_daemon_restarts_without_replay_or_loss() {
    docker::shared_engine();
    let mut d = Daemon::start("pods-logresume");
    let writer = sh("writer", "i=0; while true; do i=$((i+1)); echo line-$i; sleep 0.05; done");
    d.apply_json(&pod("talk", json!([writer]), json!({}))).await;
    let iid = id("ops", "talk", 0);
    d.wait_state(&iid, Kind::Running, 60).await;
    for kill9 in [true, false, true] {
        tokio::time::sleep(Duration::from_millis(700)).await;
        d.restart(kill9);
        d.wait_state(&iid, Kind::Running, 30).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    d.client.action(&iid, "stop", Some(30.0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lines = numbered_lines(&d, "ops.talk.0", "writer.stdout.log");
    assert!(lines.len() > 30, "{lines:?}");
    let expected: Vec<u64> = (1..=*lines.last().unwrap()).collect();
    assert_eq!(lines, expected, "every line once, in order");
}

/// PORT_<name> reaches every container (a sidecar learns the main's random port); a check on a
/// literal container port in BRIDGE mode probes the pod's own address, so a healthy pod stays up
/// (it was probed on the host's 127.0.0.1 and killed again and again); ports publish on host_ip
/// only, and Docker's own copy of the output is bounded by log_max_bytes.
#[tokio::test(flavor = "multi_thread")]
async fn ports_reach_every_container_checks_probe_the_pod_and_publishing_is_bounded() {
    docker::shared_engine();
    let d = Daemon::start("pods-ports");
    let mut server = sh("server", "echo ok > /www/index.html && exec httpd -f -p 80 -h /www");
    server["ports"] = json!([{"name": "http", "containerPort": 80, "hostPort": 0}]);
    server["healthChecks"] = json!([{"type": "HTTP", "http": {"port": 80, "path": "/"},
        "intervalSeconds": 2, "timeoutSeconds": 1, "consecutiveFailures": 1, "gracePeriodSeconds": 0}]);
    let sidecar = sh("sidecar", "echo \"main=$PORT_http\"; exec sleep 1000");
    d.apply_json(&pod("ports", json!([server, sidecar]), json!({}))).await;
    let iid = id("ops", "ports", 0);
    let s = d.wait(&iid, 60, |s| s.state.kind() == Kind::Running && s.health.as_deref() == Some("healthy")).await;
    let port = s.ports["http"];
    // Several probes later: still the same containers, never restarted.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = d.status(&iid).await;
    assert_eq!((later.restarts, later.health.as_deref()), (0, Some("healthy")), "{later:#?}\n{}", d.log());
    assert_eq!(exec(&s.containers[1].id, "echo $PORT_http"), port.to_string(), "the sidecar knows the main's port");

    let main = &s.containers[0].id;
    // Two containers: the pod's network holder publishes the ports.
    let bindings = docker::inspect(SHARED_SOCKET, "steward-ops.ports.0-network", "{{json .HostConfig.PortBindings}}");
    let bindings: Value = serde_json::from_str(&bindings).unwrap();
    assert_eq!(bindings["80/tcp"], json!([{"HostIp": "127.0.0.1", "HostPort": port.to_string()}]), "{bindings}");
    let log = docker::inspect(SHARED_SOCKET, main, "{{json .HostConfig.LogConfig}}");
    let log: Value = serde_json::from_str(&log).unwrap();
    assert_eq!(log, json!({"Type": "json-file", "Config": {"max-file": "2", "max-size": "4096"}}), "{log}");
}

/// A job-like main container that exits 0 at once, with a sidecar: the pod's network is held by
/// a holder container (steward-pause), so the sidecar joins it and the pod runs (it used to fail
/// "cannot join network of a non running container" forever). A stop removes the holder.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_lived_main_leaves_the_pod_network_to_its_holder() {
    docker::shared_engine();
    let d = Daemon::start("pods-holder");
    let mut main = sh("main", "echo job done");
    main["ports"] = json!([{"name": "http", "containerPort": 80, "hostPort": 0}]);
    let sidecar = sh("sidecar", "echo \"up on $PORT_http\" > /www/index.html; exec httpd -f -p 80 -h /www");
    d.apply_json(&pod("job", json!([main, sidecar]), json!({}))).await;
    let iid = id("ops", "job", 0);
    let s = d.wait_state(&iid, Kind::Running, 60).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s2 = d.status(&iid).await;
    assert_eq!((s2.state.kind(), s2.restarts), (Kind::Running, 0), "{s2:#?}\n{}", d.log());
    assert_eq!(s2.containers[0].status, "exited", "{s2:#?}");
    assert!(s2.containers[1].is_running(), "{s2:#?}");
    let holder = docker::inspect(SHARED_SOCKET, "steward-ops.job.0-network", "{{.Id}} {{.State.Status}}");
    let (holder_id, holder_state) = holder.split_once(' ').unwrap();
    assert_eq!(holder_state, "running");
    for c in &s.containers {
        assert_eq!(c.network_mode, format!("container:{holder_id}"), "{c:?}");
        assert!(!c.ip_address.is_empty(), "the pod's address is reported: {c:?}");
    }
    // The holder publishes the pod's port: the sidecar's server answers on it.
    let port = s.ports["http"];
    let mut answered = false;
    for _ in 0..50 {
        let mut curl = std::process::Command::new("curl");
        curl.args(["-sf", "-m", "1", "-o", "/dev/null"]).arg(format!("http://127.0.0.1:{port}/"));
        if curl.status().unwrap().success() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "nothing on the pod's published port {port}");
    d.client.action(&iid, "stop", Some(30.0)).await.unwrap();
    let (code, _, _) = docker::docker(SHARED_SOCKET, &["inspect", "steward-ops.job.0-network"]);
    assert_ne!(code, 0, "the holder went with the stop");
}

/// Status and events name a pod's containers: an exit says which container ended, a health
/// kill keeps the check's reason as the last exit's (not the 137 the kill leaves), health lines
/// name the container, and a stopped pod says when its last run started, not "started … ago".
#[tokio::test(flavor = "multi_thread")]
async fn status_names_containers_and_keeps_the_health_reason() {
    docker::shared_engine();
    let d = Daemon::start("pods-names");
    let never = json!({"restartPolicy": {"policy": "Never"}});
    // A container that fails: the pod's end names it.
    d.apply_json(&pod(
        "ends",
        json!([sh("steady", "exec sleep 1000"), sh("quits", "sleep 0.5; exit 3")]),
        never.clone(),
    ))
    .await;
    let ends = id("ops", "ends", 0);
    let s = d.wait(&ends, 60, |s| matches!(s.state.kind(), Kind::Exited | Kind::Failed)).await;
    assert_eq!(s.last_exit_reason.as_deref(), Some("container quits: exited with code 3"), "{s:#?}");
    let (_, status, _) = d.cli(&["status", "ops/ends/0"]);
    assert!(status.contains("last exit: container quits: exited with code 3"), "{status}");
    assert!(status.contains("last run:  started") && !status.contains("started:   "), "{status}");
    let mut transitions = Vec::new();
    d.client
        .events(0, false, |e| {
            if e.body.to_value()["type"] == "transition" && e.body.to_value()["instance"] == "ops/ends/0" {
                transitions.push(e.body.to_value()["reason"].as_str().unwrap_or_default().to_string());
            }
            true
        })
        .await
        .unwrap();
    assert!(transitions.iter().any(|r| r == "container quits: exited with code 3"), "{transitions:?}");

    // A health kill: its reason is the last exit's.
    let mut checked = sh("checked", "exec sleep 1000");
    checked["healthChecks"] = json!([{"type": "TCP", "tcp": {"port": 9},
        "intervalSeconds": 2, "timeoutSeconds": 1, "consecutiveFailures": 1, "gracePeriodSeconds": 0}]);
    d.apply_json(&pod("sick", json!([checked, sh("side", "exec sleep 1000")]), never)).await;
    let sick = id("ops", "sick", 0);
    let (_, running, _) = d.cli(&["status", "ops/sick/0"]);
    let starting = ["state:     Staging", "state:     Starting"].iter().any(|s| running.contains(s));
    assert!(running.contains("container checked") || starting, "{running}");
    let s = d.wait(&sick, 60, |s| matches!(s.state.kind(), Kind::Exited | Kind::Failed)).await;
    let why = s.last_exit_reason.clone().unwrap_or_default();
    assert!(why.contains("health") && !why.contains("137"), "{s:#?}");
    let (_, status, _) = d.cli(&["status", "ops/sick/0"]);
    assert!(status.contains(&format!("last exit: {why}")), "{status}");
}

/// `steward logs` of a pod, through the daemon: per container, with Docker's timestamps and
/// run markers; a pod whose start failed keeps what its started containers said.
#[tokio::test(flavor = "multi_thread")]
async fn logs_per_container_with_timestamps_markers_and_a_failed_starts_output() {
    docker::shared_engine();
    let d = Daemon::start("pods-logs");
    let pod_spec = pod(
        "chat",
        json!([sh("a", "echo from-a; exec sleep 1000"), sh("b", "echo from-b; exec sleep 1000")]),
        json!({}),
    );
    d.apply_json(&pod_spec).await;
    d.wait_state(&id("ops", "chat", 0), Kind::Running, 60).await;
    let mut out = String::new();
    for _ in 0..50 {
        out = d.cli(&["logs", "ops/chat/0", "--container", "b", "--timestamps"]).1;
        if out.contains("from-b") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!out.contains("from-a"), "only container b: {out}");
    let line = out.lines().find(|l| l.contains("from-b")).unwrap_or_else(|| panic!("{out}"));
    let stamp = line.strip_prefix("[b.stdout.log] ").and_then(|l| l.split_once(' ')).map(|(t, _)| t).unwrap();
    assert!(stamp.len() >= 20 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T', "{line}");
    assert!(out.contains("--- steward: run started"), "{out}");
    let (_, plain, _) = d.cli(&["logs", "ops/chat/0", "--container", "b"]);
    assert!(plain.lines().any(|l| l == "[b.stdout.log] from-b"), "no time without --timestamps: {plain}");

    // A start that fails after container a ran: a's output is kept (retried by policy).
    let mut broken = sh("b", "exec sleep 1000");
    broken["command"]["value"] = json!("/no/such/program");
    let failing = pod("fails", json!([sh("a", "echo a-said-this; exec sleep 1000"), broken]), json!({}));
    d.apply_json(&failing).await;
    let mut seen = String::new();
    for _ in 0..100 {
        seen = d.cli(&["logs", "ops/fails/0", "--container", "a"]).1;
        if seen.contains("a-said-this") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen.contains("[a.stdout.log] a-said-this"), "{seen}\n{}", d.log());
    d.client.delete(&id("ops", "fails", 0), Some(30.0)).await.unwrap();
}
