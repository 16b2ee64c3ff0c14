//! The steward CLI end to end against the real stewardd binary: every command, -o json, exit
//! codes, daemon restarts between commands, and who may change what.

mod common;

use common::{id, Daemon};
use std::time::Duration;
use steward::supervisor::state::Kind;

fn write_spec(d: &Daemon, name: &str, instances: u32) -> String {
    let path = d.path().join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion = \"v4\"\nkind = \"process\"\n[metadata]\nname = \"{name}\"\nnamespace = \"cli\"\n\
             [spec]\ninstance = {instances}\n[[spec.template.spec.processes]]\nprocName = \"sleep\"\n\
             workPath = \"${{work_base_dir}}/${{namespace}}.${{processname}}.${{instanceid}}\"\n\
             startCmd = \"echo hello from ${{instanceid}}; exec sleep 1000\"\nstartGracePeriod = 0\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn every_command_against_the_real_daemon_across_restarts() {
    let mut d = Daemon::start("cli");
    let file = write_spec(&d, "web", 2);

    let (code, out, err) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("applied") && out.contains("2/2 running"), "{out}");

    let (code, out, _) = d.cli(&["ls"]);
    assert_eq!(code, 0);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAMESPACE", "NAME", "ID", "STATE", "READY", "PID", "PORTS", "RESTARTS", "AGE", "HEALTH"]);
    assert_eq!(out.lines().filter(|l| l.starts_with("cli") && l.contains("Running")).count(), 2, "{out}");

    let (code, out, _) = d.cli(&["-o", "json", "status", "cli/web/0"]);
    assert_eq!(code, 0);
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["state"]["state"], "Running");
    let pid = status["pid"].as_i64().unwrap();

    // The daemon restarts between commands; the instance keeps its pid.
    d.kill9();
    let (code, _, err) = d.cli(&["ls"]);
    assert_eq!(code, 3, "unreachable daemon");
    assert!(err.contains("cannot reach stewardd at") && err.contains("systemctl start stewardd"), "{err}");
    d.spawn();
    let (code, out, _) = d.cli(&["-o", "json", "ls", "--name", "web"]);
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(list[0]["pid"].as_i64(), Some(pid), "re-adopted, not restarted");

    let (code, out, _) = d.cli(&["stop", "cli/web/0"]);
    assert_eq!(code, 0);
    assert!(out.contains("cli/web/0: Stopped"), "{out}");
    let (code, out, _) = d.cli(&["ls", "--state", "stopped"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2, "header and one row: {out}");

    d.kill9();
    d.spawn();
    let (code, out, _) = d.cli(&["start", "--all"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("cli/web/0: Running") && out.contains("cli/web/1: Running"), "{out}");
    let (code, out, _) = d.cli(&["restart", "cli/web/1"]);
    assert_eq!(code, 0);
    assert!(out.contains("Running"));
    let (code, _, err) = d.cli(&["reload", "cli/web/1"]);
    assert_eq!(code, 0, "SIGHUP to sleep ends it, but the reload itself succeeds: {err}");

    let (code, out, _) = d.cli(&["logs", "cli/web/0"]);
    assert_eq!(code, 0);
    assert!(out.contains("hello from 0"), "{out}");

    let (code, out, _) = d.cli(&["events", "--since", "0"]);
    assert_eq!(code, 0);
    assert!(out.contains("cli/web/0 Running -> Stopping") && out.contains("Stopping -> Stopped"), "{out}");
    // Each line: sequence number, then the time in RFC 3339 UTC with milliseconds.
    let time = regex::Regex::new(r"^ *\d+ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \S").unwrap();
    assert!(out.lines().all(|l| time.is_match(l)), "{out}");
    let (code, out, _) = d.cli(&["-o", "json", "events", "--since", "3"]);
    assert_eq!(code, 0);
    let seqs: Vec<u64> =
        out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.first(), Some(&4));
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "no gap: {seqs:?}");

    let (code, out, _) = d.cli(&["-o", "json", "node"]);
    assert_eq!(code, 0);
    let node: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(node["hostIp"], "127.0.0.1");
    assert_eq!(node["instances"], 2);
    assert!(node["ports"]["free"].as_u64().unwrap() > 900);
    let (code, out, _) = d.cli(&["node"]);
    assert_eq!(code, 0);
    assert!(out.contains("hostname:") && out.contains("free in 31000-32000"), "{out}");

    // Mistakes: exit codes from steward(1).
    let (code, _, err) = d.cli(&["status", "cli/nope/0"]);
    assert_eq!(code, 4, "{err}");
    let bad = d.path().join("bad.json");
    std::fs::write(&bad, r#"{"apiVersion": "v4", "kind": "process", "metadata": {"name": "Bad"}}"#).unwrap();
    let (code, _, err) = d.cli(&["apply", "-f", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("metadata.name") && err.contains("spec.template.spec.processes"), "{err}");
    let (code, _, _) = d.cli(&["stop"]);
    assert_eq!(code, 2, "no target");

    let (code, out, _) = d.cli(&["delete", "cli/web/0", "cli/web/1"]);
    assert_eq!(code, 0);
    assert!(out.contains("cli/web/1: deleted"));
    let (_, out, _) = d.cli(&["-o", "json", "ls"]);
    assert_eq!(out.trim(), "[]");
}

fn ensure_user(name: &str, groups: Option<&str>) {
    let _ = std::process::Command::new("groupadd").args(["--system", "steward"]).output();
    let _ = std::process::Command::new("useradd").args(["--system", "--no-create-home", name]).output();
    if let Some(g) = groups {
        let _ = std::process::Command::new("usermod").args(["-a", "-G", g, name]).output();
    }
}

#[tokio::test]
async fn an_unprivileged_user_cannot_change_anything() {
    ensure_user("steward-t2", None);
    ensure_user("steward-t3", Some("steward"));
    // Reads allowed for all: the socket is 0666 and SO_PEERCRED decides.
    let d = Daemon::start_with("access", "allow_read_for_all = true\n");
    let file = write_spec(&d, "guarded", 1);
    let (code, _, _) = d.cli(&["apply", "-f", &file, "--wait"]);
    assert_eq!(code, 0);
    let nobody = Some("steward-t2");
    let (code, out, _) = d.cli_as(nobody, &["ls"]);
    assert_eq!(code, 0, "reading is allowed");
    assert!(out.contains("guarded"));
    for args in [
        vec!["stop", "cli/guarded/0"],
        vec!["restart", "cli/guarded/0"],
        vec!["reload", "cli/guarded/0"],
        vec!["delete", "cli/guarded/0"],
        vec!["apply", "-f", file.as_str()],
    ] {
        let (code, _, err) = d.cli_as(nobody, &args);
        assert_ne!(code, 0, "{args:?} must be refused");
        assert!(err.contains("may not change instances"), "{args:?}: {err}");
    }
    assert_eq!(d.status(&id("cli", "guarded", 0)).await.state.kind(), Kind::Running, "nothing changed");
    // A member of the steward group may.
    let (code, out, err) = d.cli_as(Some("steward-t3"), &["stop", "cli/guarded/0"]);
    assert_eq!(code, 0, "{out}{err}");

    // Default: the socket is 0660 root:steward, and others cannot even connect.
    let strict = Daemon::start("strict");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&strict.socket).unwrap().permissions().mode() & 0o777, 0o660);
    let (code, _, err) = strict.cli_as(nobody, &["ls"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("Permission denied"), "{err}");
}

/// 16 concurrent clients × 1000 requests: no error, and an event subscriber sees every event,
/// in order, with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_thousand_requests_no_error_no_lost_event() {
    let d = Daemon::start("load");
    let spec = common::spec(
        "load",
        16,
        serde_json::json!({"startCmd": "exec sleep 1000", "procName": "sleep"}),
        serde_json::json!({}),
    );
    d.apply_json(&spec).await;
    for i in 0..16 {
        d.wait_state(&id("test", "load", i), Kind::Running, 20).await;
    }
    let start_seq = {
        let mut last = 0;
        d.client
            .events(0, false, |e| {
                last = e.seq;
                true
            })
            .await
            .unwrap();
        last
    };
    // Subscribe before the load, from the current end of the journal.
    let subscriber = d.client.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(0u64);
    let collector = tokio::spawn(async move {
        let mut seen = Vec::new();
        let _ = subscriber
            .events(start_seq, true, |e| {
                seen.push(e.seq);
                let target = *stop_rx.borrow_and_update();
                !(target > 0 && e.seq >= target)
            })
            .await;
        seen
    });
    let mut tasks = Vec::new();
    for c in 0..16u32 {
        let client = d.client.clone();
        tasks.push(tokio::spawn(async move {
            let me = id("test", "load", c);
            let mut stops = 0;
            for r in 0..1000u32 {
                let result = match r % 50 {
                    10 => client.action(&me, "stop", Some(30.0)).await.map(|_| stops += 1),
                    20 => client.action(&me, "start", Some(30.0)).await.map(|_| ()),
                    r if r % 3 == 0 => client.list(&[]).await.map(|l| assert_eq!(l.len(), 16)),
                    r if r % 3 == 1 => client.node().await.map(|_| ()),
                    _ => client.status(&me).await.map(|_| ()),
                };
                if let Err(e) = result {
                    panic!("client {c} request {r}: {e}");
                }
            }
            stops
        }));
    }
    let mut stops = 0;
    for t in tasks {
        stops += t.await.unwrap();
    }
    assert_eq!(stops, 16 * 20);
    let last = d.client.metrics().await.unwrap();
    let last_seq: u64 =
        last.lines().find_map(|l| l.strip_prefix("steward_events_last_sequence ")).unwrap().parse().unwrap();
    stop_tx.send(last_seq).unwrap();
    // Wake the collector if it is waiting: one more event.
    d.client.action(&id("test", "load", 0), "stop", Some(30.0)).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(30), collector).await.unwrap().unwrap();
    let expected: Vec<u64> = (start_seq + 1..=last_seq).collect();
    assert_eq!(&seen[..expected.len()], &expected[..], "every event, in order, no gap");
    // Each stop and start produced its transitions: 2 per stop (Stopping, Stopped) and 3 per start.
    assert!(expected.len() >= 16 * 20 * 5, "{} events", expected.len());
}

#[tokio::test]
async fn sighup_reloads_node_labels() {
    let d = Daemon::start_with("hup", "[node]\nlabels = { rack = \"a1\" }\n");
    let node = serde_json::to_value(d.client.node().await.unwrap()).unwrap();
    assert_eq!(node["labels"]["rack"], "a1");
    let text = std::fs::read_to_string(&d.config).unwrap().replace("rack = \"a1\"", "rack = \"b7\", tier = \"game\"");
    std::fs::write(&d.config, text).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid()), nix::sys::signal::Signal::SIGHUP).unwrap();
    let mut labels = serde_json::Value::Null;
    for _ in 0..100 {
        labels = serde_json::to_value(d.client.node().await.unwrap()).unwrap()["labels"].clone();
        if labels["rack"] == "b7" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(labels, serde_json::json!({"rack": "b7", "tier": "game"}));
    // A broken file keeps the running configuration.
    std::fs::write(&d.config, "this is = not toml [").unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid()), nix::sys::signal::Signal::SIGHUP).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(serde_json::to_value(d.client.node().await.unwrap()).unwrap()["labels"]["rack"], "b7");
    assert!(d.log().contains("reload failed, keeping the running configuration"));
}

#[tokio::test]
async fn a_reloaded_port_range_is_shown_pending_next_to_the_one_in_effect() {
    let d = Daemon::start_with("hup-ports", "port_range_start = 31300\nport_range_end = 31309\n");
    let ports = serde_json::to_value(d.client.node().await.unwrap()).unwrap()["ports"].clone();
    assert_eq!((ports["rangeStart"].as_u64(), ports["rangeEnd"].as_u64()), (Some(31300), Some(31309)));
    assert!(ports.get("pending").is_none(), "nothing pending: {ports}");
    let text = std::fs::read_to_string(&d.config).unwrap().replace("31309", "31399");
    std::fs::write(&d.config, text).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid()), nix::sys::signal::Signal::SIGHUP).unwrap();
    let mut ports = serde_json::Value::Null;
    for _ in 0..100 {
        ports = serde_json::to_value(d.client.node().await.unwrap()).unwrap()["ports"].clone();
        if ports.get("pending").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The allocator still hands out the old range: that is what is in effect.
    assert_eq!(ports["rangeEnd"], 31309, "{ports}");
    assert_eq!(ports["pending"], serde_json::json!({"rangeStart": 31300, "rangeEnd": 31399}));
    assert!(ports["free"].as_u64().unwrap() <= 10, "free counts the range in effect: {ports}");
    let (code, out, _) = d.cli(&["node"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("in 31300-31309") && out.contains("31300-31399 configured, in effect after a restart"),
        "{out}"
    );
}
