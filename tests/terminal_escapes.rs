//! Issue 51 finding 12: text from workloads (an init step's output, labels, event reasons and
//! messages) reaches the operator's terminal with its control characters escaped, as journalctl
//! shows them: `steward status`, `events` and `ls` print no raw ESC (0x1b) nor C1 CSI (0x9b),
//! while `-o json` keeps the text as it is (JSON escapes it).

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use steward::supervisor::state::Kind;

/// "all healthy" painted over the screen, then a C1 CSI (U+009B: bytes c2 9b).
const PAINT: &str = "printf 'boom \\033[2J\\033[32mall healthy\\033[0m \\302\\23331m' >&2; exit 1";

fn assert_escaped(what: &str, out: &str) {
    let bytes = out.as_bytes();
    assert!(!bytes.contains(&0x1b), "{what}: a raw ESC reaches the terminal:\n{out:?}");
    assert!(!bytes.contains(&0x9b), "{what}: a raw C1 CSI reaches the terminal:\n{out:?}");
    assert!(out.contains("\\x1b[2J\\x1b[32mall healthy\\x1b[0m"), "{what}: shown escaped:\n{out}");
    assert!(out.contains("\\x9b31m"), "{what}: the C1 character shown escaped:\n{out}");
}

#[tokio::test]
async fn workload_text_is_escaped_on_the_operators_terminal() {
    let d = Daemon::start("escapes");
    let doc = spec(
        "painted",
        1,
        json!({"initializers": [{"name": "paint", "command": PAINT}], "startCmd": "exec sleep 1000"}),
        json!({
            "metadata": {"name": "painted", "namespace": "test",
                         "labels": {"note": "\u{1b}[2J\u{1b}[32mall healthy\u{1b}[0m \u{9b}31m"}},
            "restartPolicy": {"policy": "Never"}
        }),
    );
    d.apply_json(&doc).await;
    d.wait_state(&id("test", "painted", 0), Kind::Failed, 20).await;

    let (code, status, err) = d.cli(&["status", "test/painted/0"]);
    assert_eq!(code, 0, "{status}\n{err}");
    assert_escaped("steward status", &status);
    let (code, events, err) = d.cli(&["events"]);
    assert_eq!(code, 0, "{events}\n{err}");
    assert_escaped("steward events", &events);
    let (code, ls, err) = d.cli(&["ls"]);
    assert_eq!(code, 0, "{ls}\n{err}");
    assert!(!ls.as_bytes().iter().any(|b| [0x1b, 0x9b].contains(b)), "steward ls:\n{ls:?}");
    assert!(ls.contains("painted"), "{ls}");

    // `steward logs` into a pipe or a file: the workload's own bytes.
    let talker = spec("talker", 1, json!({"startCmd": "printf '\\033[31mred\\n'; exec sleep 1000"}), json!({}));
    d.apply_json(&talker).await;
    d.wait_state(&id("test", "talker", 0), Kind::Running, 20).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, logs, _) = d.cli(&["logs", "test/talker/0"]);
        if logs.contains("\u{1b}[31mred") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "steward logs into a pipe is raw:\n{logs:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // JSON is left as it is: the text comes back whole once decoded.
    let (code, json_out, err) = d.cli(&["status", "test/painted/0", "-o", "json"]);
    assert_eq!(code, 0, "{json_out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    let message = v["message"].as_str().unwrap_or_default();
    assert!(message.contains("\u{1b}[32mall healthy\u{1b}[0m \u{9b}31m"), "{json_out}");
}
