//! The README's first command as a new user meets it: `bash scripts/demo.sh` in a real terminal
//! (a pseudo-terminal made by util-linux `script`), then Ctrl-C typed into it. The terminal's
//! line discipline turns it into SIGINT for the whole foreground process group, as a real one
//! does. Afterwards no process of the demo's instances, no demo container and no stewardd may
//! remain. The demo runs this build's binaries (`STEWARD_DEMO_BIN`) and its embedded default
//! configuration, as the README's command does. The screen is the CLI's: the daemon's own log
//! lines go to the file the demo names (`stewardd's log: PATH`), without colour codes.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use steward::client::Client;

const DEFAULT_SOCKET: &str = "/run/steward/stewardd.sock";
const DEFAULT_STATE: &str = "/var/lib/steward/state";

/// Live processes whose executable is `exe`.
fn processes_of(exe: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        if std::fs::read_link(entry.path().join("exe")).is_ok_and(|p| p == exe) && common::alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// `text` without its ANSI escape sequences (CSI `ESC [ ... final byte`, and a lone `ESC x`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
        } else if chars.next_if_eq(&'[').is_some() {
            while chars.next().is_some_and(|c| !('@'..='~').contains(&c)) {}
        } else {
            chars.next();
        }
    }
    out
}

/// The lines of `text` that the daemon's tracing wrote (`2026-01-01T00:00:00.000000Z  INFO
/// steward::...: ...`), with or without colour.
fn daemon_log_lines(text: &str) -> Vec<String> {
    strip_ansi(text)
        .lines()
        .filter(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.len() >= 3
                && words[0].ends_with('Z')
                && words[0].contains('T')
                && ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&words[1])
                && words[2].starts_with("steward")
        })
        .map(|l| l.trim().to_string())
        .collect()
}

/// What the screen shows is the CLI's and the demo's: no colour codes, no daemon log lines, and
/// the daemon's log is the file it names.
fn assert_the_screen_is_the_clis(screen: &str) -> std::path::PathBuf {
    assert!(!screen.contains('\x1b'), "ANSI escape codes on the demo's screen:\n{screen:?}");
    let daemon_lines = daemon_log_lines(screen);
    assert!(daemon_lines.is_empty(), "daemon log lines on the demo's screen: {daemon_lines:#?}\n{screen}");
    let named = screen.lines().find_map(|l| l.trim().strip_prefix("== stewardd's log: "));
    std::path::PathBuf::from(named.unwrap_or_else(|| panic!("the demo names stewardd's log:\n{screen}")))
}

fn demo_containers() -> Vec<String> {
    let filter = format!("label=io.steward.owner={DEFAULT_STATE}");
    let (_, out, _) = common::docker::docker(common::docker::SHARED_SOCKET, &["ps", "-aq", "--filter", &filter]);
    out.lines().filter(|l| !l.is_empty()).map(String::from).collect()
}

#[tokio::test]
async fn ctrl_c_in_a_terminal_deletes_the_demos_instances_and_stops_the_daemon() {
    let stewardd = Path::new(env!("CARGO_BIN_EXE_stewardd")).canonicalize().unwrap();
    assert!(
        Client::new(DEFAULT_SOCKET).health().await.is_err(),
        "a stewardd already answers on {DEFAULT_SOCKET}: the demo needs the default socket"
    );
    // Other work on the same state directory, left running by a daemon that stopped: the demo
    // names it before it applies its own, and leaves it.
    let earlier = std::env::temp_dir().join(format!("steward-demo-earlier-{}.json", std::process::id()));
    let mut other =
        common::spec("sleeper", 1, serde_json::json!({"startCmd": "exec sleep 1000"}), serde_json::json!({}));
    other["metadata"]["namespace"] = serde_json::json!("earlier");
    std::fs::write(&earlier, other.to_string()).unwrap();
    let leave_nothing = LeaveNothing { stewardd: stewardd.clone(), earlier: earlier.clone() };
    let mut daemon = DefaultDaemon::start(&stewardd);
    let steward = stewardd.with_file_name("steward");
    let applied = Command::new(&steward).arg("apply").arg("-f").arg(&earlier).arg("--wait").output().unwrap();
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    // Its pid, once listed (the answer to --wait may come a moment before the list has it).
    let mut earlier_pid = None;
    for _ in 0..100 {
        earlier_pid = Client::new(DEFAULT_SOCKET).list(&[]).await.unwrap().first().and_then(|i| i.pid);
        if earlier_pid.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let earlier_pid = earlier_pid.expect("the earlier app's instance runs");
    daemon.stop();

    let (mut demo, screen, reader) = start_demo(&stewardd);
    // What the demo runs, as the daemon reports it.
    let client = Client::new(DEFAULT_SOCKET);
    let instances = client.list(&[]).await.unwrap();
    let names: Vec<String> = instances.iter().map(|s| s.id.to_string()).collect();
    assert!(names.iter().any(|n| n == "demo/ticker/0"), "{names:?}\n{}", screen.lock().unwrap());
    let pids: Vec<i32> =
        instances.iter().filter(|s| s.id.namespace == "demo").flat_map(|s| s.pids.iter().flatten().copied()).collect();
    assert!(!pids.is_empty());
    assert!(!processes_of(&stewardd).is_empty(), "stewardd runs");

    // Ctrl-C, typed into the terminal.
    let typed = Instant::now();
    demo.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    demo.stdin.as_mut().unwrap().flush().unwrap();
    let ended = loop {
        if let Some(status) = demo.try_wait().unwrap() {
            break status;
        }
        if typed.elapsed() > Duration::from_secs(60) {
            let _ = demo.kill();
            panic!("the demo did not end within 60 s of Ctrl-C:\n{}", screen.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = typed.elapsed();
    reader.join().unwrap();
    let screen = screen.lock().unwrap().clone();
    eprintln!("Ctrl-C to prompt: {} ms\n{screen}", took.as_millis());
    assert!(ended.success(), "the demo ends cleanly after Ctrl-C ({ended}):\n{screen}");
    assert!(!screen.contains("cannot reach stewardd"), "{screen}");
    for pid in pids {
        assert!(!common::alive(pid), "pid {pid} of the demo's instances outlived the demo:\n{screen}");
    }
    assert_eq!(processes_of(&stewardd), Vec::<i32>::new(), "stewardd outlived the demo:\n{screen}");
    assert_eq!(demo_containers(), Vec::<String>::new(), "demo containers outlived the demo:\n{screen}");
    let first_apply = screen.find("== steward apply").unwrap();
    let named = screen[..first_apply].lines().any(|l| l.contains("earlier") && l.contains("sleeper"));
    assert!(named, "the earlier instance is named before the applies:\n{screen}");
    assert!(common::alive(earlier_pid), "the demo deleted what was not its own");
    // The daemon's lines went to the file the demo named, from its start to its stop.
    let log_path = assert_the_screen_is_the_clis(&screen);
    let log = std::fs::read_to_string(&log_path).unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
    assert!(!log.contains('\x1b'), "colour codes in {}:\n{log}", log_path.display());
    let logged = daemon_log_lines(&log);
    assert!(logged.len() >= 2, "the daemon's lines are in {}:\n{log}", log_path.display());
    assert!(logged.iter().any(|l| l.contains("stewardd ready")), "from its start:\n{log}");
    assert!(logged.last().is_some_and(|l| l.contains("stewardd stopping")), "to its stop:\n{log}");

    // A second Ctrl-C during the cleanup ends the demo at once and says what was left.
    let (mut demo, screen, reader) = start_demo(&stewardd);
    demo.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    demo.stdin.as_mut().unwrap().flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !screen.lock().unwrap().contains("removing the demo's apps") {
        assert!(Instant::now() < deadline, "no cleanup after Ctrl-C:\n{}", screen.lock().unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = Instant::now();
    demo.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    demo.stdin.as_mut().unwrap().flush().unwrap();
    let ended = loop {
        if let Some(status) = demo.try_wait().unwrap() {
            break status;
        }
        assert!(second.elapsed() < Duration::from_secs(10), "a second Ctrl-C did not end the demo");
        std::thread::sleep(Duration::from_millis(20));
    };
    reader.join().unwrap();
    let screen = screen.lock().unwrap().clone();
    eprintln!("second Ctrl-C to prompt: {} ms", second.elapsed().as_millis());
    assert_eq!(ended.code(), Some(130), "{screen}");
    assert!(screen.contains("interrupted again") && screen.contains("left:"), "{screen}");
    assert_the_screen_is_the_clis(&screen);
    assert_eq!(processes_of(&stewardd), Vec::<i32>::new(), "stewardd outlived the demo:\n{screen}");

    // Leave nothing: what is left and the earlier work go with a daemon of its own.
    drop(leave_nothing);
}

/// What is left on the default state directory (instances, secrets, configmaps) goes when the
/// test ends, passed or failed, through the daemon answering there or one of its own.
struct LeaveNothing {
    stewardd: std::path::PathBuf,
    earlier: std::path::PathBuf,
}

impl Drop for LeaveNothing {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.earlier);
        let steward = self.stewardd.with_file_name("steward");
        let mut daemon = None;
        if std::os::unix::net::UnixStream::connect(DEFAULT_SOCKET).is_err() {
            match DefaultDaemon::try_start(&self.stewardd) {
                Some(d) => daemon = Some(d),
                None => return,
            }
        }
        let deleted = Command::new(&steward).args(["delete", "--all"]).output();
        for values in ["secret", "configmap"] {
            let Ok(listed) = Command::new(&steward).args(["-o", "json", values, "ls"]).output() else { continue };
            let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap_or_default();
            for v in listed.as_array().into_iter().flatten() {
                let name = format!("{}/{}", v["namespace"].as_str().unwrap_or(""), v["name"].as_str().unwrap_or(""));
                let _ = Command::new(&steward).args([values, "rm", &name]).output();
            }
        }
        drop(daemon);
        if !std::thread::panicking() {
            let deleted = deleted.unwrap();
            assert!(deleted.status.success(), "{}", String::from_utf8_lossy(&deleted.stderr));
        }
    }
}

/// `bash scripts/demo.sh` in a pseudo-terminal, once it shows its status screen: the child, the
/// screen so far (kept up to date by the returned thread).
fn start_demo(stewardd: &Path) -> (std::process::Child, Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let bin = stewardd.parent().unwrap();
    let (mut demo, screen, reader) =
        common::terminal::run("scripts/demo.sh", &[("STEWARD_DEMO_BIN", bin)], &["DEMO_ONCE"]);
    let started = Instant::now();
    while !screen.lock().unwrap().contains("Ctrl-C ends the demo.") {
        if started.elapsed() > Duration::from_secs(300) || demo.try_wait().unwrap().is_some() {
            let _ = demo.kill();
            panic!("the demo did not reach its status screen:\n{}", screen.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("demo start to its status screen: {} ms", started.elapsed().as_millis());
    (demo, screen, reader)
}

/// stewardd with its embedded default configuration (the demo's), in a session of its own.
struct DefaultDaemon(std::process::Child);

impl DefaultDaemon {
    fn start(stewardd: &Path) -> DefaultDaemon {
        DefaultDaemon::try_start(stewardd)
            .unwrap_or_else(|| panic!("stewardd (default configuration) did not open {DEFAULT_SOCKET}"))
    }

    fn try_start(stewardd: &Path) -> Option<DefaultDaemon> {
        let child = Command::new("setsid").arg(stewardd).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
        let mut daemon = DefaultDaemon(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(DEFAULT_SOCKET).is_err() {
            if Instant::now() > deadline {
                daemon.stop();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(daemon)
    }

    fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

impl Drop for DefaultDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}
