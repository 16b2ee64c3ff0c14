//! A forking daemon whose pidfile never appears (issue 15): the failure says why as far as
//! Steward can tell (the start command's exit, whether the directory is writable by the user,
//! the last lines it printed, even after it detached), repeated identical failures show as the
//! loop they are and back off, and `steward validate` warns beforehand.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use steward::supervisor::state::Kind;

#[tokio::test]
async fn a_pidfile_that_never_appears_says_why_and_the_loop_shows() {
    let d = Daemon::start("pidwhy");
    // nobody cannot write the work root itself, which Steward leaves as it is; the daemon says
    // so on stderr after it has detached (the start command itself exits 0 at once).
    let doc = spec(
        "nopid",
        1,
        json!({
            "procName": "sleep",
            "user": "nobody",
            "pidFile": "${work_base_dir}/nopid.pid",
            "startCmd": "(sleep 0.3; echo \"fatal: can't open pidfile ${pidFile}: Permission denied\" >&2; exec sleep 30) &",
            "startGracePeriod": 1
        }),
        json!({"restartPolicy": {"policy": "Always", "interval": 0}}),
    );
    let file = d.path().join("nopid.json");
    std::fs::write(&file, doc.to_string()).unwrap();

    // Beforehand: valid, with a warning naming the field and why.
    let (code, out, err) = d.cli(&["validate", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("warning: spec.template.spec.processes[0].pidFile: user nobody cannot write")
            && err.contains("/pid/"),
        "{err}"
    );

    d.apply_json(&doc).await;
    let iid = id("test", "nopid", 0);
    let s = d.wait(&iid, 20, |s| s.restarts >= 1 && s.state.kind() == Kind::Backoff).await;
    let why = s.last_exit_reason.clone().unwrap_or_default();
    assert!(why.contains("did not appear within startGracePeriod (1s)"), "{why}");
    assert!(why.contains("startCmd exited with code 0 (it detached)"), "{why}");
    assert!(why.contains("user nobody cannot write"), "{why}");
    assert!(why.contains("it printed: stderr: fatal: can't open pidfile"), "{why}");

    // The same failure again and again: shown as a loop, and backing off.
    let s = d.wait(&iid, 40, |s| s.restarts >= 3 && s.state.kind() == Kind::Backoff).await;
    assert!(s.message.contains("times in a row"), "{}", s.message);
    let (_, status, _) = d.cli(&["status", "test/nopid/0"]);
    assert!(status.contains("times in a row"), "{status}");
}
