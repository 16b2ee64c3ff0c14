//! `steward --remote URL --ca FILE --token-file FILE`: the real CLI driving a real stewardd
//! through its remote listener (TLS, bearer token) on loopback, the same as over its socket;
//! a refused token, a foreign CA and an unreachable address told as such; usage mistakes exit 2.

mod common;

use common::remote::{cert, free_port, start, Remote, TOKEN};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The real `steward` with `args`. STEWARD_CONFIG names a file that does not exist and nothing
/// else is inherited from the environment's STEWARD_*: what works went over --remote, without
/// this host's configuration.
fn steward(args: &[String]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(args)
        .env("STEWARD_CONFIG", "/nonexistent/stewardd.toml")
        .env_remove("STEWARD_SOCKET")
        .env_remove("STEWARD_REMOTE")
        .env_remove("STEWARD_TOKEN_FILE")
        .env_remove("STEWARD_CA")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The global options that reach `r` with the token in `token_file` and the CA `ca`.
fn remote_args(r: &Remote, token_file: &Path, ca: &Path, rest: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--remote".to_string(),
        format!("https://{}", r.addr),
        "--token-file".into(),
        token_file.display().to_string(),
        "--ca".into(),
        ca.display().to_string(),
    ];
    args.extend(rest.iter().map(|s| s.to_string()));
    args
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("no JSON ({e}): {out:?}"))
}

/// What two views of the same instances must agree on (usage figures move between calls).
fn summary(list: &Value) -> Vec<Value> {
    let items = list.as_array().unwrap_or_else(|| panic!("not a list: {list}"));
    let keep = ["id", "state", "pid", "ports", "restarts", "revision", "specGeneration"];
    items.iter().map(|i| keep.iter().map(|k| (k.to_string(), i[k].clone())).collect()).collect()
}

#[test]
fn apply_ls_status_stop_start_logs_delete_over_remote_match_the_socket() {
    let r = start("cli-remote", "");
    let token = write(&r.certs, "operator.token", &format!("# the operator's\n{TOKEN}\n"));
    let ca = r.certs.join("ca.pem");
    let cli = |rest: &[&str]| steward(&remote_args(&r, &token, &ca, rest));
    // An absolute workPath under the remote daemon's work root, not under this host's default
    // roots: the daemon checks it against its own.
    let work = format!("{}/web.${{instanceid}}", r.daemon.work_dir().display());
    let mut spec = common::spec("web", 2, json!({"startCmd": "echo hello from web; exec sleep 1000"}), json!({}));
    spec["spec"]["template"]["spec"]["processes"][0]["workPath"] = json!(work);
    let file = write(r.daemon.path(), "web.json", &spec.to_string());
    let file = file.to_str().unwrap();

    let (code, out, err) = cli(&["apply", "-f", file, "--wait"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("applied") && out.contains("test/web/0, test/web/1"), "{out}");

    // ls and status: what the socket sees, as text and as JSON.
    let (code, out, err) = cli(&["ls"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("test ")).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().all(|l| l.contains("Running")), "{out}");
    let (code, remote_ls, err) = cli(&["-o", "json", "ls"]);
    assert_eq!(code, 0, "{err}");
    let (code, local_ls, err) = r.daemon.cli(&["-o", "json", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(summary(&json(&remote_ls)), summary(&json(&local_ls)));
    let (code, out, err) = cli(&["-o", "json", "status", "test/web/0"]);
    assert_eq!(code, 0, "{err}");
    let remote_status = json(&out);
    let local_status = json(&r.daemon.cli(&["-o", "json", "status", "test/web/0"]).1);
    assert_eq!(remote_status["pid"], local_status["pid"]);
    assert!(remote_status["pid"].as_i64().unwrap() > 0, "{remote_status}");
    let (code, out, _) = cli(&["status", "test/web/0"]);
    assert_eq!(code, 0);
    assert!(out.contains("Running"), "{out}");

    // The instance's output, through the daemon.
    let (code, out, err) = cli(&["logs", "test/web/0"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("hello from web"), "{out}");

    // stop and start act on the remote daemon's instance.
    let (code, out, err) = cli(&["stop", "test/web/0"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("test/web/0: Stopped"), "{out}");
    assert_eq!(json(&r.daemon.cli(&["-o", "json", "status", "test/web/0"]).1)["state"]["state"], "Stopped");
    let (code, out, err) = cli(&["-o", "json", "start", "test/web/0"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(json(&out)[0]["state"]["state"], "Running", "{out}");
    let local = json(&r.daemon.cli(&["-o", "json", "status", "test/web/0"]).1);
    assert_eq!(local["state"]["state"], "Running");
    assert_ne!(local["pid"], remote_status["pid"], "a new process");

    // The node is the remote daemon's.
    let (code, out, err) = cli(&["-o", "json", "node"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["instances"], 2, "{out}");

    // A path outside the remote daemon's roots: refused by it, named with the file and field.
    let mut outside = spec.clone();
    outside["metadata"]["name"] = json!("outside");
    outside["spec"]["template"]["spec"]["processes"][0]["workPath"] = json!("/etc/outside");
    let bad = write(r.daemon.path(), "outside.json", &outside.to_string());
    let (code, _, err) = cli(&["apply", "-f", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("outside.json") && err.contains("workPath"), "{err}");

    let (code, out, err) = cli(&["delete", "test/web"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(json(&r.daemon.cli(&["-o", "json", "ls"]).1), json!([]));
    let (code, out, _) = cli(&["-o", "json", "ls"]);
    assert_eq!((code, json(&out)), (0, json!([])));
}

#[test]
fn a_refused_token_a_foreign_ca_and_no_listener_are_told_and_fail() {
    let r = start("cli-remote-refused", "");
    let ca = r.certs.join("ca.pem");
    let token = write(&r.certs, "operator.token", &format!("{TOKEN}\n"));

    // A token the daemon does not list: 401, told with the file, exit 5.
    let wrong = write(&r.certs, "wrong.token", "not-the-token-0123456789abcdef\n");
    let (code, out, err) = steward(&remote_args(&r, &wrong, &ca, &["ls"]));
    assert_eq!(code, 5, "{out}{err}");
    assert!(err.contains("refused the token") && err.contains("wrong.token"), "{err}");
    // A verb given instances stops at the first refusal, with the same message.
    let (code, _, err) = steward(&remote_args(&r, &wrong, &ca, &["stop", "test/a/0", "test/b/0"]));
    assert_eq!(code, 5, "{err}");
    assert_eq!(err.matches("refused the token").count(), 1, "{err}");

    // A CA that did not sign the daemon's certificate: exit 3, about the certificate and --ca.
    let other = tempfile::tempdir().unwrap();
    cert(other.path(), "other");
    let (code, out, err) = steward(&remote_args(&r, &token, &other.path().join("ca.pem"), &["ls"]));
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains(&format!("certificate does not verify against --ca {}", other.path().join("ca.pem").display())),
        "{err}"
    );
    assert!(!err.contains("systemctl"), "{err}");
    // The certificate is for 127.0.0.1, not for the name asked for.
    let mut args = remote_args(&r, &token, &ca, &["--server-name", "elsewhere.example", "ls"]);
    let (code, _, err) = steward(&args);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("certificate is not for \"elsewhere.example\"") && err.contains("--server-name"), "{err}");
    args.retain(|a| a != "--server-name" && a != "elsewhere.example");
    assert_eq!(steward(&args).0, 0, "the right token, CA and name");

    // No listener at the address: the URL named, the options to check, no local fallback.
    let nowhere = format!("https://127.0.0.1:{}", free_port());
    let mut args = remote_args(&r, &token, &ca, &["logs", "test/web/0"]);
    args[1] = nowhere.clone();
    let (code, out, err) = steward(&args);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains(&format!("cannot reach stewardd at {nowhere}")), "{err}");
    assert!(err.contains("--ca and --token-file") && !err.contains("systemctl"), "{err}");
    assert!(!err.contains("log files"), "a remote daemon's files are not read here: {err}");

    // A token file that is missing or holds no token: exit 2, naming the option and the file.
    let empty = write(&r.certs, "empty.token", "# no token yet\n\n");
    for (file, why) in [(empty, "holds no token"), (r.certs.join("missing.token"), "No such file")] {
        let (code, _, err) = steward(&remote_args(&r, &file, &ca, &["ls"]));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(&format!("--token-file {}", file.display())) && err.contains(why), "{err}");
    }
}

#[test]
fn remote_options_misused_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem").display().to_string();
    let token = write(dir.path(), "token", &format!("{TOKEN}\n")).display().to_string();
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let (code, _, err) = steward(&args(&["--remote", "https://127.0.0.1:7443", "--ca", &ca, "ls"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--token-file"), "{err}");
    let (code, _, err) = steward(&args(&["--remote", "127.0.0.1:7443", "--token-file", &token, "ls"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--ca"), "{err}");
    let (code, _, err) =
        steward(&args(&["--remote", "http://127.0.0.1:7443", "--token-file", &token, "--ca", &ca, "ls"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--remote") && err.contains("http://") && err.contains("TLS only"), "{err}");
    let (code, _, err) = steward(&args(&["--remote", "127.0.0.1", "--token-file", &token, "--ca", &ca, "ls"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--remote") && err.contains("no port"), "{err}");
    let remote = ["--remote", "127.0.0.1:7443", "--token-file", &token, "--ca", &ca];
    let mut with_socket = args(&remote);
    with_socket.extend(args(&["--socket", "/run/steward/stewardd.sock", "ls"]));
    let (code, _, err) = steward(&with_socket);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--remote") && err.contains("--socket"), "{err}");
    // A CA file that is not there: named with the option.
    let mut no_ca = args(&remote);
    no_ca.push("ls".into());
    let (code, _, err) = steward(&no_ca);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("--ca {ca}")), "{err}");
}
