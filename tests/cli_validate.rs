//! `steward validate` and `steward render` as an operator runs them: the real binary, exit codes,
//! what goes to stdout and what to stderr.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn spec_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs").join(rel)
}

/// Runs `steward` with the embedded default configuration (no config file, no environment).
fn steward(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_steward")).args(args).env_remove("STEWARD_CONFIG").output().expect("run steward")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn assert_exit(o: &Output, code: i32) {
    assert_eq!(o.status.code(), Some(code), "stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
}

/// The blessed error lines of an invalid corpus spec.
fn expected_errors(rel: &str) -> Vec<String> {
    let text = std::fs::read_to_string(spec_file(rel).with_extension("errors")).unwrap();
    text.lines().filter(|l| !l.trim().is_empty()).map(String::from).collect()
}

/// The seed's example runs as "user", which need not exist where the tests run: validated
/// `--offline` (this host's users: validate_refuses_a_user_unknown_on_this_host_unless_offline).
const VALID: &str = "valid/seed000-cleaned.json";
const VALID_TOML: &str = "valid/seed000-cleaned.toml";
const SEED: &str = "invalid/seed000-template.json";

#[test]
fn validate_a_valid_file_exits_0_and_says_valid() {
    let file = spec_file(VALID);
    let o = steward(&["validate", "--offline", file.to_str().unwrap()]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), format!("{}: valid\n", file.display()));
    assert_eq!(stderr(&o), "");
}

#[test]
fn validate_reads_toml_too() {
    let file = spec_file(VALID_TOML);
    let o = steward(&["validate", "--offline", file.to_str().unwrap()]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("seed000-cleaned.toml: valid"), "{}", stdout(&o));
}

#[test]
fn validate_the_seed_template_exits_1_with_all_17_errors() {
    let file = spec_file(SEED);
    let o = steward(&["validate", file.to_str().unwrap()]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    let mut lines = err.lines();
    assert_eq!(lines.next(), Some(format!("{}: 17 errors", file.display()).as_str()));
    let reported: Vec<&str> = lines.map(|l| l.strip_prefix("  ").unwrap_or(l)).collect();
    let expected = expected_errors(SEED);
    assert_eq!(expected.len(), 17);
    assert_eq!(reported, expected);
}

#[test]
fn validate_reports_every_file_of_several() {
    let valid = spec_file(VALID);
    let seed = spec_file(SEED);
    let toml = spec_file("invalid/hostport-out-of-range.toml");
    let o =
        steward(&["validate", "--offline", valid.to_str().unwrap(), seed.to_str().unwrap(), toml.to_str().unwrap()]);
    assert_exit(&o, 1);
    assert!(stdout(&o).contains(&format!("{}: valid", valid.display())), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("{}: 17 errors", seed.display())), "{err}");
    assert!(err.contains(&format!("{}: 2 errors", toml.display())), "{err}");
    for line in expected_errors(SEED).iter().chain(&expected_errors("invalid/hostport-out-of-range.toml")) {
        assert!(err.contains(line.as_str()), "missing {line:?} in:\n{err}");
    }
}

#[test]
fn validate_exits_0_only_when_every_file_is_valid() {
    let a = spec_file(VALID);
    let b = spec_file("valid/minimal.json");
    let o = steward(&["validate", "--offline", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).lines().count(), 2);
}

#[test]
fn validate_json_output_lists_each_file_with_its_errors() {
    let valid = spec_file(VALID);
    let seed = spec_file(SEED);
    let o = steward(&["-o", "json", "validate", "--offline", valid.to_str().unwrap(), seed.to_str().unwrap()]);
    assert_exit(&o, 1);
    let report: Value = serde_json::from_str(&stdout(&o)).expect("stdout is JSON");
    let files = report.as_array().expect("a list of files");
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["file"], valid.to_str().unwrap());
    assert_eq!(files[0]["valid"], true);
    assert_eq!(files[0]["errors"], serde_json::json!([]));
    assert_eq!(files[1]["file"], seed.to_str().unwrap());
    assert_eq!(files[1]["valid"], false);
    let errors: Vec<String> = files[1]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{}: {}", e["path"].as_str().unwrap(), e["message"].as_str().unwrap()))
        .collect();
    assert_eq!(errors, expected_errors(SEED));
}

#[test]
fn validate_json_output_puts_the_syntax_error_at_the_empty_path() {
    let file = spec_file("invalid/json-syntax-error.json");
    let o = steward(&["validate", "-o", "json", file.to_str().unwrap()]);
    assert_exit(&o, 1);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report[0]["errors"][0]["path"], "");
    assert!(report[0]["errors"][0]["message"].as_str().unwrap().starts_with("JSON syntax error at line 7"));
}

#[test]
fn validate_a_missing_file_exits_1_naming_it() {
    let o = steward(&["validate", "/nonexistent/spec.json"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("cannot read /nonexistent/spec.json"), "{}", stderr(&o));
}

#[test]
fn validate_without_files_is_a_usage_error() {
    assert_exit(&steward(&["validate"]), 2);
}

fn render_seed(extra: &[&str]) -> Output {
    let file = spec_file(VALID);
    let mut args = vec!["render", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    steward(&args)
}

#[test]
fn render_prints_the_instance_with_every_variable_resolved() {
    let o = render_seed(&["--instance", "1", "--hostip", "10.0.0.9", "--port", "metric_port=31005"]);
    assert_exit(&o, 0);
    let r: Value = serde_json::from_str(&stdout(&o)).expect("stdout is JSON");
    assert_eq!(r["id"], serde_json::json!({"namespace": "ns-a", "name": "gamesvc", "index": 1}));
    assert_eq!(r["runDir"], "/var/lib/steward/run/ns-a.gamesvc.1");
    let p = &r["processes"][0];
    let work = "/var/lib/steward/work/ns-a.gamesvc.1/gamesvc";
    let pid = "/var/lib/steward/run/ns-a.gamesvc.1/pid/gamesvc.pid";
    assert_eq!(p["workPath"], work);
    assert_eq!(p["pidFile"], pid);
    assert_eq!(p["startCmd"], "./start.sh --address 10.0.0.9 --service-port 8899");
    assert_eq!(p["stopCmd"], format!("./stop.sh --pidfile {pid}"));
    assert_eq!(p["reloadCmd"], format!("./reload.sh --pidfile {pid}"));
    assert_eq!(p["uris"][0]["outputDir"], "/var/lib/steward/work/ns-a.gamesvc.1");
    assert_eq!(p["uris"][0]["password"], "***");
    assert!(!stdout(&o).contains("xxxxxx"), "the password must not show");
    assert_eq!(
        p["ports"][1],
        serde_json::json!({"name": "metric_port", "hostPort": 31005, "protocol": "TCP", "random": true})
    );
    let env: Vec<(String, String)> = p["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().into(), e["value"].as_str().unwrap().into()))
        .collect();
    let env = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap();
    assert_eq!(env("http_port"), "8899");
    assert_eq!(env("metric_port"), "31005");
    assert_eq!(env("hostip"), "10.0.0.9");
    assert_eq!(env("work_dir"), format!("{work}/"));
    assert_eq!(env("pid_file"), format!("{pid}/"));
    assert_eq!(env("instanceid"), "1");
    assert_eq!(p["healthChecks"][0]["probe"]["port"], 8899);
    let files: Vec<&str> =
        p["injections"].as_array().unwrap().iter().filter_map(|i| i["target"]["path"].as_str()).collect();
    assert_eq!(files, [format!("{work}/conf/filename.conf"), format!("{work}/conf/config-two")]);
}

#[test]
fn render_reads_toml_to_the_same_instance() {
    let args = ["--instance", "2", "--hostip", "10.0.0.9", "--port", "metric_port=31005"];
    let json = render_seed(&args);
    let toml_file = spec_file(VALID_TOML);
    let mut toml_args = vec!["render", toml_file.to_str().unwrap()];
    toml_args.extend_from_slice(&args);
    let toml = steward(&toml_args);
    assert_exit(&json, 0);
    assert_exit(&toml, 0);
    assert_eq!(stdout(&json), stdout(&toml));
}

#[test]
fn render_an_instance_out_of_range_exits_1_naming_spec_instance() {
    let o = render_seed(&["--instance", "3", "--hostip", "10.0.0.9", "--port", "metric_port=31005"]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "");
    assert!(stderr(&o).contains("spec.instance: instance 3 does not exist"), "{}", stderr(&o));
}

#[test]
fn render_without_a_random_port_exits_1_with_a_hint() {
    let o = render_seed(&["--instance", "1", "--hostip", "10.0.0.9"]);
    assert_exit(&o, 1);
    assert_eq!(stdout(&o), "");
    let err = stderr(&o);
    assert!(
        err.contains("spec.template.spec.processes[0].ports[1].hostPort: port \"metric_port\" is random (hostPort 0) and no port was allocated for it"),
        "{err}"
    );
    assert!(err.contains("hint: give random ports with --port NAME=PORT"), "{err}");
}

#[test]
fn render_an_invalid_spec_exits_1_with_its_errors() {
    let file = spec_file(SEED);
    let o = steward(&["render", file.to_str().unwrap(), "--hostip", "10.0.0.9"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("17 errors"), "{err}");
    assert!(err.contains("unknown variable `${hospip}`"), "{err}");
}

#[test]
fn render_rejects_a_malformed_port_assignment() {
    for bad in ["metric_port", "metric_port=0", "metric_port=70000", "=31005"] {
        let o = render_seed(&["--hostip", "10.0.0.9", "--port", bad]);
        assert_exit(&o, 2);
        assert!(stderr(&o).contains("--port"), "{bad}: {}", stderr(&o));
    }
}

#[test]
fn render_follows_the_configured_roots() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("stewardd.toml");
    std::fs::write(&config, "work_base_dir = \"/srv/work\"\nrun_base_dir = \"/srv/run\"\n").unwrap();
    let o = render_seed(&["--config", config.to_str().unwrap(), "--hostip", "10.0.0.9", "--port", "metric_port=31005"]);
    assert_exit(&o, 0);
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(r["processes"][0]["workPath"], "/srv/work/ns-a.gamesvc.0/gamesvc");
    assert_eq!(r["processes"][0]["pidFile"], "/srv/run/ns-a.gamesvc.0/pid/gamesvc.pid");
}

/// `render` of a pod: its random ports are given with --port like a process's (they were
/// refused as "no such port"); without them the error names the port and gives the hint.
#[test]
fn render_works_for_pods_with_random_ports() {
    let pod = Path::new(env!("CARGO_MANIFEST_DIR")).join("units/webpod.json");
    let o = steward(&["render", pod.to_str().unwrap(), "--port", "http=31001"]);
    assert_exit(&o, 0);
    let rendered: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let containers = rendered["pod"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2, "{rendered}");
    for c in containers {
        let env = c["env"].as_array().unwrap();
        assert!(env.iter().any(|e| e["name"] == "PORT_http" && e["value"] == "31001"), "{c}");
    }
    assert_eq!(containers[0]["ports"][0]["hostPort"], 31001, "{rendered}");
    let o = steward(&["render", pod.to_str().unwrap()]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("port \"http\" is random") && stderr(&o).contains("--port NAME=PORT"),
        "{}",
        stderr(&o)
    );
}

/// `minimal.json` with `edit` applied, written to a file in `dir`.
fn minimal_with(dir: &Path, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(spec_file("valid/minimal.json")).unwrap()).unwrap();
    edit(&mut doc);
    let file = dir.join("app.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    file
}

/// The host users a process spec names (its processes' `user`, the owners of its secret and
/// configmap files) must exist where it runs (issue 42, defect 7): validate on this host refuses
/// one that does not, naming the field; `--offline` checks only what holds on any host, as
/// steward-sched does, so a spec for another host still validates.
#[test]
fn validate_refuses_a_user_unknown_on_this_host_unless_offline() {
    let dir = tempfile::tempdir().unwrap();
    let file = minimal_with(dir.path(), |d| {
        let p = &mut d["spec"]["template"]["spec"]["processes"][0];
        p["user"] = "steward-no-such-user-42".into();
        p["secrets"] = serde_json::json!([{"secretName": "db", "items": [
            {"type": "file", "dataKey": "pw", "keyOrPath": "pw.txt", "user": "steward-no-such-owner-42"},
            {"type": "file", "dataKey": "ok", "keyOrPath": "ok.txt", "user": "nobody"}
        ]}]);
    });
    let path = file.to_str().unwrap();
    let o = steward(&["validate", path]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("spec.template.spec.processes[0].user: no user \"steward-no-such-user-42\" on this host"),
        "{err}"
    );
    assert!(
        err.contains(
            "spec.template.spec.processes[0].secrets[0].items[0].user: no user \"steward-no-such-owner-42\" on this host"
        ),
        "{err}"
    );
    assert!(!err.contains("items[1]"), "nobody exists: {err}");
    let o = steward(&["-o", "json", "validate", path]);
    assert_exit(&o, 1);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report[0]["errors"][0]["path"], "spec.template.spec.processes[0].user", "{report}");
    // Offline: what holds on any host only.
    let o = steward(&["validate", "--offline", path]);
    assert_exit(&o, 0);
    // A user that exists here.
    let file = minimal_with(dir.path(), |d| d["spec"]["template"]["spec"]["processes"][0]["user"] = "nobody".into());
    assert_exit(&steward(&["validate", file.to_str().unwrap()]), 0);
}
