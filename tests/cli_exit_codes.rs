//! steward(1)'s exit codes, verb by verb, against the real stewardd: a missing instance is 4
//! for every verb, a stopped daemon is 3, usage mistakes are 2, and `-o json` prints JSON
//! wherever it applies (refused with 2 where it cannot).

mod common;

use common::Daemon;

/// Every verb that names one instance (or secret/configmap), given one that does not exist.
const MISSING: &[&[&str]] = &[
    &["status", "exit/nope/0"],
    &["logs", "exit/nope/0"],
    &["start", "exit/nope/0"],
    &["stop", "exit/nope/0"],
    &["restart", "exit/nope/0"],
    &["reload", "exit/nope/0"],
    &["delete", "exit/nope/0"],
    &["secret", "rm", "exit/nope"],
    &["configmap", "rm", "exit/nope"],
];

fn write_spec(d: &Daemon, name: &str, start_cmd: &str) -> String {
    let path = d.path().join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion = \"v4\"\nkind = \"process\"\n[metadata]\nname = \"{name}\"\nnamespace = \"exit\"\n\
             [spec]\ninstance = 1\n[[spec.template.spec.processes]]\nprocName = \"sh\"\n\
             workPath = \"${{work_base_dir}}/${{namespace}}.${{processname}}.${{instanceid}}\"\n\
             startCmd = \"{start_cmd}\"\nstartGracePeriod = 1\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

fn json(out: &str, what: &[&str]) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{what:?} -o json printed no JSON ({e}): {out:?}"))
}

#[tokio::test]
async fn a_missing_instance_is_4_for_every_verb_and_usage_mistakes_are_2() {
    let d = Daemon::start("exit-missing");
    for args in MISSING {
        let (code, out, err) = d.cli(args);
        assert_eq!(code, 4, "{args:?}: {out}{err}");
        assert!(err.contains("nope"), "{args:?} names what is missing: {err}");
        let mut with_json = vec!["-o", "json"];
        with_json.extend_from_slice(args);
        assert_eq!(d.cli(&with_json).0, 4, "{with_json:?}");
    }
    // Several targets: the missing one still decides the code, the others are done.
    let file = write_spec(&d, "real", "exec sleep 1000");
    assert_eq!(d.cli(&["apply", "-f", &file, "--wait"]).0, 0);
    let (code, out, err) = d.cli(&["stop", "exit/real/0", "exit/nope/0"]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(out.contains("exit/real/0: Stopped"), "{out}");

    for (args, why) in [
        (vec![], "no command"),
        (vec!["frobnicate"], "unknown command"),
        (vec!["ls", "--bogus"], "unknown option"),
        (vec!["stop"], "no target"),
        (vec!["stop", "not-an-id"], "malformed instance id"),
        (vec!["status", "a/b"], "malformed instance id"),
        (vec!["logs", "a/b/x"], "malformed instance id"),
        (vec!["-o", "yaml", "ls"], "unknown output format"),
        (vec!["-o", "json", "completions", "bash"], "-o json cannot apply"),
        (vec!["stop", "--all", "exit/real/0"], "--all and ids"),
    ] {
        let (code, out, err) = d.cli(&args);
        assert_eq!(code, 2, "{why}: {args:?}: {out}{err}");
        assert!(!err.is_empty(), "{why}: says what is wrong");
    }
}

#[tokio::test]
async fn a_stopped_daemon_is_3_for_every_verb_that_needs_it() {
    let mut d = Daemon::start("exit-down");
    let file = write_spec(&d, "down", "exec sleep 1000");
    assert_eq!(d.cli(&["apply", "-f", &file, "--wait"]).0, 0);
    let lit = "k=v";
    d.kill9();
    for args in [
        vec!["apply", "-f", &file],
        vec!["ls"],
        vec!["status", "exit/down/0"],
        vec!["start", "exit/down/0"],
        vec!["stop", "exit/down/0"],
        vec!["stop", "--all"],
        vec!["restart", "exit/down/0"],
        vec!["reload", "exit/down/0"],
        vec!["delete", "exit/down/0"],
        vec!["events"],
        vec!["node"],
        vec!["secret", "create", "exit/s", "--from-literal", lit],
        vec!["secret", "ls"],
        vec!["secret", "rm", "exit/s"],
        vec!["configmap", "create", "exit/c", "--from-literal", lit],
        vec!["configmap", "ls"],
        vec!["configmap", "rm", "exit/c"],
    ] {
        let (code, out, err) = d.cli(&args);
        assert_eq!(code, 3, "{args:?}: {out}{err}");
        assert!(err.contains("cannot reach stewardd"), "{args:?}: {err}");
    }
    // logs reads the instance's files itself: with the daemon down it still shows them, says it
    // could not ask the daemon, and exits 3 like every verb (README's table; issue 44).
    let (code, out, err) = d.cli(&["logs", "exit/down/0"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("cannot reach stewardd") && err.contains("showing the log files"), "{err}");
    assert!(out.contains("[sh.stderr.log] --- steward: run started"), "the files are shown: {out}");
    let (code, out, err) = d.cli(&["logs", "exit/down/0", "--container", "nosuch"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("no log files of \"nosuch\""), "{err}");
    // The instance kept running without its daemon; the fixture's drop cleans it up.
    d.spawn();
    assert_eq!(d.cli(&["status", "exit/down/0"]).0, 0);
}

#[tokio::test]
async fn a_failed_wait_says_the_instance_s_reason_and_is_6() {
    let d = Daemon::start("exit-wait");
    let file = write_spec(&d, "crash", "echo starting; sleep 0.2; echo boom >&2; exit 3");
    assert_eq!(d.cli(&["apply", "-f", &file]).0, 0);
    let (code, _, err) = d.cli(&["stop", "exit/crash/0"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = d.cli(&["start", "exit/crash/0", "--timeout", "20"]);
    assert_eq!(code, 6, "{out}{err}");
    assert!(err.contains("start failed") && err.contains("exited with code 3"), "the reason: {err}");
    let (code, _, err) = d.cli(&["restart", "exit/crash/0", "--timeout", "20"]);
    assert_eq!(code, 6, "{err}");
    assert!(err.contains("exited with code 3"), "{err}");
}

#[tokio::test]
async fn json_output_parses_for_every_command() {
    let d = Daemon::start("exit-json");
    let file = write_spec(&d, "js", "echo out line; echo err line >&2; exec sleep 1000");
    let run = |args: &[&str]| {
        let mut full = vec!["-o", "json"];
        full.extend_from_slice(args);
        let (code, out, err) = d.cli(&full);
        assert_eq!(code, 0, "{full:?}: {out}{err}");
        out
    };
    let applied = json(&run(&["apply", "-f", &file, "--wait"]), &["apply"]);
    assert_eq!(applied["instances"][0]["id"]["name"], "js", "{applied}");
    assert_eq!(applied["instances"][0]["outcome"], "running", "{applied}");
    assert!(json(&run(&["validate", &file]), &["validate"])[0]["valid"].as_bool().unwrap());
    assert!(json(&run(&["render", &file]), &["render"]).is_object());
    assert_eq!(json(&run(&["ls"]), &["ls"]).as_array().unwrap().len(), 1);
    assert_eq!(json(&run(&["status", "exit/js/0"]), &["status"])["state"]["state"], "Running");
    assert!(json(&run(&["node"]), &["node"])["ports"]["free"].is_u64());
    for verb in ["stop", "start", "restart", "reload"] {
        let v = json(&run(&[verb, "exit/js/0"]), &[verb]);
        assert_eq!(v[0]["id"]["index"], 0, "{verb}: {v}");
    }
    // NDJSON: one object per line.
    for line in run(&["events"]).lines() {
        assert!(json(line, &["events"])["seq"].is_u64());
    }
    let logs: Vec<serde_json::Value> = run(&["logs", "exit/js/0"]).lines().map(|l| json(l, &["logs"])).collect();
    let streams: Vec<(&str, &str)> =
        logs.iter().map(|l| (l["stream"].as_str().unwrap(), l["line"].as_str().unwrap())).collect();
    assert!(streams.contains(&("stdout", "out line")) && streams.contains(&("stderr", "err line")), "{logs:?}");
    assert!(logs.iter().all(|l| l["file"].as_str().unwrap().ends_with(".log")));
    let only_err = run(&["logs", "exit/js/0", "--stream", "stderr"]);
    assert!(only_err.lines().all(|l| json(l, &["logs"])["stream"] == "stderr") && !only_err.is_empty());
    for kind in ["secret", "configmap"] {
        let created = json(&run(&[kind, "create", "exit/v", "--from-literal", "k=v"]), &[kind, "create"]);
        assert!(created.is_object(), "{created}");
        assert_eq!(json(&run(&[kind, "ls"]), &[kind, "ls"])[0]["name"], "v");
        let removed = json(&run(&[kind, "rm", "exit/v"]), &[kind, "rm"]);
        assert_eq!(removed, serde_json::json!({"namespace": "exit", "name": "v", "removed": true}));
    }
    let certs = d.path().join("certs");
    let cert = json(&run(&["cert", "--dir", certs.to_str().unwrap(), "--name", "h1"]), &["cert"]);
    assert!(std::path::Path::new(cert["cert"].as_str().unwrap()).exists(), "{cert}");
    let deleted = json(&run(&["delete", "exit/js/0"]), &["delete"]);
    assert_eq!(deleted, serde_json::json!({"deleted": ["exit/js/0"]}));
}

#[tokio::test]
async fn a_wait_that_runs_out_says_where_the_instance_is_and_is_6() {
    let d = Daemon::start("exit-slow");
    // Ignores SIGTERM, with a long kill grace: a stop takes 30 s.
    let spec = common::spec(
        "stubborn",
        1,
        serde_json::json!({"startCmd": "trap '' TERM; while true; do sleep 0.1; done"}),
        serde_json::json!({"killPolicy": {"gracePeriod": 30}}),
    );
    d.apply_json(&spec).await;
    d.wait_state(&common::id("test", "stubborn", 0), steward::supervisor::state::Kind::Running, 20).await;
    let (code, out, err) = d.cli(&["stop", "test/stubborn/0", "--timeout", "1"]);
    assert_eq!(code, 6, "{out}{err}");
    assert!(err.contains("stop did not finish in 1 s: still Stopping"), "{err}");
    let (code, out, err) = d.cli(&["delete", "test/stubborn/0", "--timeout", "1"]);
    assert_eq!(code, 6, "{out}{err}");
    assert!(err.contains("delete did not finish in 1 s: still Stopping"), "{err}");
    assert!(!out.contains("deleted"), "{out}");
}

/// A user that does not exist on the daemon's host is refused by the apply itself, at once, with
/// 1 and the field (issue 42, defect 7), not found out by a `--wait` that runs out. The check is
/// the host's: the scheduler's validation (pure, on another host) accepts the spec, and it applies
/// wherever the user exists.
#[tokio::test]
async fn a_user_unknown_on_the_host_is_refused_by_apply_with_1() {
    let d = Daemon::start("exit-nouser");
    let doc = common::spec("nouser", 1, serde_json::json!({"user": "steward-no-such-user-42"}), serde_json::json!({}));
    let file = d.path().join("nouser.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let started = std::time::Instant::now();
    let (code, out, err) = d.cli(&["apply", "-f", file.to_str().unwrap(), "--wait", "--timeout", "60"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "refused at once, not at the timeout");
    assert!(
        err.contains("spec.template.spec.processes[0].user: no user \"steward-no-such-user-42\" on this host"),
        "{err}"
    );
    assert!(err.contains("nouser.json"), "named with the file: {err}");
    assert!(d.client.list(&[("name", "nouser")]).await.unwrap().is_empty(), "nothing was applied");
    // The API itself: 422 naming the field.
    match d.client.apply(&doc.to_string(), steward::spec::Format::Json).await {
        Err(steward::client::ClientError::Api { status: 422, field, .. }) => {
            assert_eq!(field.as_deref(), Some("spec.template.spec.processes[0].user"))
        }
        other => panic!("{other:?}"),
    }
    // Validated elsewhere (steward-sched's pure check), it applies where the user exists.
    assert!(steward::sched::scheduler::check_spec(&doc).is_ok());
    let mut here = doc.clone();
    here["spec"]["template"]["spec"]["processes"][0]["user"] = "nobody".into();
    let file = d.path().join("here.json");
    std::fs::write(&file, here.to_string()).unwrap();
    let (code, out, err) = d.cli(&["apply", "-f", file.to_str().unwrap(), "--wait", "--timeout", "30"]);
    assert_eq!(code, 0, "{out}{err}");
}
