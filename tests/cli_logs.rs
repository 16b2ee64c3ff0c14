//! `steward logs` against the real daemon: the files oldest-written first, `--stream`, `--tail`,
//! and with `-f` the lines of both streams in the order they were written.

mod common;

use common::{id, Daemon};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

#[tokio::test]
async fn logs_show_both_streams_in_an_honest_order_and_follow_them_as_written() {
    let d = Daemon::start("logs");
    // stderr is written first, stdout last: the stdout file is the newer one.
    let still = common::spec(
        "still",
        1,
        serde_json::json!({"startCmd": "echo early-err >&2; echo more-err >&2; sleep 0.3; echo late-out; exec sleep 1000"}),
        serde_json::json!({}),
    );
    let talk = common::spec(
        "talk",
        1,
        serde_json::json!({"startCmd": "i=0; while true; do i=$((i+1)); echo out-$i; sleep 0.3; echo err-$i >&2; sleep 0.3; done"}),
        serde_json::json!({}),
    );
    d.apply_json(&still).await;
    d.apply_json(&talk).await;
    d.wait_state(&id("test", "still", 0), Kind::Running, 10).await;
    d.wait_state(&id("test", "talk", 0), Kind::Running, 10).await;
    tokio::time::sleep(Duration::from_millis(600)).await;

    let (code, out, err) = d.cli(&["logs", "test/still/0", "--tail", "1"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "the last line of each file: {out}");
    assert_eq!(lines, ["[sh.stderr.log] more-err", "[sh.stdout.log] late-out"], "the older file first");
    let (_, out, _) = d.cli(&["logs", "test/still/0", "--stream", "stderr"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("[sh.stderr.log] --- steward: run started "), "each run is marked: {out}");
    assert_eq!(lines[1..], ["[sh.stderr.log] early-err", "[sh.stderr.log] more-err"]);
    // --timestamps: a process's lines have no time ("-"); --container picks one process.
    let (_, out, _) = d.cli(&["logs", "test/still/0", "--stream", "stderr", "--timestamps", "--container", "sh"]);
    assert!(out.lines().all(|l| l.starts_with("[sh.stderr.log] - ")), "{out}");
    // A process the instance lacks is a mistake, named with those it has (issue 44).
    let (code, out, err) = d.cli(&["logs", "test/still/0", "--container", "nosuch"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("no process \"nosuch\" in the instance (it has sh)"), "{err}");

    // -f: the alternating lines come out alternating, whichever file they are in.
    let mut follow = Command::new(env!("CARGO_BIN_EXE_steward"))
        .arg("--config")
        .arg(&d.config)
        .args(["logs", "test/talk/0", "-f", "--tail", "0"])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(follow.stdout.take().unwrap());
    let started = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 6 && started.elapsed() < Duration::from_secs(20) {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        seen.push(line.trim_end().split_once("] ").unwrap().1.to_string());
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(seen.len(), 6, "{seen:?}");
    // Written out-N, err-N, out-N+1, ... 300 ms apart: printed in that order.
    let numbers: Vec<(String, u32)> = seen
        .iter()
        .map(|l| {
            let (stream, n) = l.split_once('-').unwrap();
            (stream.to_string(), n.parse().unwrap())
        })
        .collect();
    for pair in numbers.windows(2) {
        let ((s1, n1), (s2, n2)) = (&pair[0], &pair[1]);
        let next = if s1 == "out" { ("err", *n1) } else { ("out", n1 + 1) };
        assert_eq!((s2.as_str(), *n2), next, "in written order: {seen:?}");
    }
}

/// `--container` names one of the pod's containers (or init containers); another is refused with
/// 1, naming those the pod has, as `steward cp` does (issue 44).
#[tokio::test]
async fn logs_of_a_container_the_pod_lacks_name_the_pod_s_containers() {
    common::docker::shared_engine();
    let mut d = Daemon::start("logs-pod");
    let (main, side) =
        (common::docker::sh("main", "echo from-main; exec sleep 1000"), common::docker::sh("side", "exec sleep 1000"));
    let mut pod = common::docker::pod("test", "duo", serde_json::json!([main, side]), serde_json::json!({}));
    pod["spec"]["template"]["spec"]["initializers"] = serde_json::json!([common::docker::sh("setup", "echo set-up")]);
    d.apply_json(&pod).await;
    d.wait_state(&id("test", "duo", 0), Kind::Running, 60).await;

    let (code, out, err) = d.cli(&["logs", "test/duo/0", "--container", "nosuch"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("no container \"nosuch\" in the pod (it has setup, main, side)"), "{err}");
    let (code, out, err) = d.cli(&["logs", "test/duo/0", "--container", "setup"]);
    assert_eq!(code, 0, "an init container's logs: {out}{err}");
    assert!(out.contains("set-up"), "{out}");
    let (code, out, err) = d.cli(&["logs", "test/duo/0", "--container", "main"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("from-main"), "{out}");

    // steward cp names the container by its name in the spec, not by its 64-hex id.
    let file = d.path().join("note.txt");
    std::fs::write(&file, "x").unwrap();
    let (code, out, err) = d.cli(&[
        "cp",
        file.to_str().unwrap(),
        "test/duo/0:/tmp/note.txt",
        "--container",
        "side",
        "--user",
        "nosuchuser",
    ]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("container side: user \"nosuchuser\""), "{err}");
    let hex64 = err.split(|c: char| !c.is_ascii_hexdigit()).any(|w| w.len() == 64);
    assert!(!hex64, "no container id: {err}");

    // A container removed while stewardd was down is said to be removed, not "not a child of
    // this daemon" (process wording).
    let side = d.status(&id("test", "duo", 0)).await.containers[1].id.clone();
    d.kill9();
    assert_eq!(common::docker::docker(common::docker::SHARED_SOCKET, &["rm", "-f", &side]).0, 0);
    d.spawn();
    let after =
        d.wait(&id("test", "duo", 0), 30, |s| s.last_exit_reason.as_deref().is_some_and(|r| r.contains("side"))).await;
    let reason = after.last_exit_reason.unwrap_or_default();
    assert!(reason.contains("was removed") && !reason.contains("not a child"), "{reason}");
}
