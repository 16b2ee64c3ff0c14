//! The README's first command as a new user meets it: `bash scripts/demo.sh` in a real terminal
//! (a pseudo-terminal made by util-linux `script`), then Ctrl-C typed into it. The terminal's
//! line discipline turns it into SIGINT for the whole foreground process group, as a real one
//! does. Afterwards no process of the demo's instances, no demo container and no stewardd may
//! remain. The demo runs this build's binaries (`STEWARD_DEMO_BIN`) and its embedded default
//! configuration, as the README's command does.

mod common;

use std::io::{Read, Write};
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
    let mut daemon = DefaultDaemon::start(&stewardd);
    let steward = stewardd.with_file_name("steward");
    let applied = Command::new(&steward).arg("apply").arg("-f").arg(&earlier).arg("--wait").output().unwrap();
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let earlier_pid = Client::new(DEFAULT_SOCKET).list(&[]).await.unwrap()[0].pid.unwrap();
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
    assert_eq!(processes_of(&stewardd), Vec::<i32>::new(), "stewardd outlived the demo:\n{screen}");

    // Leave nothing: what is left and the earlier work go with a daemon of its own.
    let mut daemon = DefaultDaemon::start(&stewardd);
    let deleted = Command::new(&steward).args(["delete", "--all"]).output().unwrap();
    assert!(deleted.status.success(), "{}", String::from_utf8_lossy(&deleted.stderr));
    for values in ["secret", "configmap"] {
        let listed = Command::new(&steward).args(["-o", "json", values, "ls"]).output().unwrap();
        let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
        for v in listed.as_array().unwrap() {
            let name = format!("{}/{}", v["namespace"].as_str().unwrap(), v["name"].as_str().unwrap());
            Command::new(&steward).args([values, "rm", &name]).output().unwrap();
        }
    }
    daemon.stop();
    let _ = std::fs::remove_file(&earlier);
}

/// `bash scripts/demo.sh` in a pseudo-terminal, once it shows its status screen: the child, the
/// screen so far (kept up to date by the returned thread).
fn start_demo(stewardd: &Path) -> (std::process::Child, Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let mut demo = Command::new("script")
        // `script` runs the command with $SHELL -c; a dash there (SHELL unset or /bin/sh, as in
        // CI) would itself take the terminal's SIGINT and die of it after the demo's clean exit.
        // `exec` leaves the demo alone in the terminal, as it is under a user's interactive shell.
        .args(["-qfec", "exec bash scripts/demo.sh", "/dev/null"])
        .env("SHELL", "/bin/bash")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("STEWARD_DEMO_BIN", stewardd.parent().unwrap())
        .env_remove("DEMO_ONCE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux script");
    let screen = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (mut out, screen) = (demo.stdout.take().unwrap(), screen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while !screen.lock().unwrap().contains("Ctrl-C ends the demo.") {
        if Instant::now() > deadline || demo.try_wait().unwrap().is_some() {
            let _ = demo.kill();
            panic!("the demo did not reach its status screen:\n{}", screen.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (demo, screen, reader)
}

/// stewardd with its embedded default configuration (the demo's), in a session of its own.
struct DefaultDaemon(std::process::Child);

impl DefaultDaemon {
    fn start(stewardd: &Path) -> DefaultDaemon {
        let child = Command::new("setsid").arg(stewardd).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(DEFAULT_SOCKET).is_err() {
            assert!(Instant::now() < deadline, "stewardd (default configuration) did not open {DEFAULT_SOCKET}");
            std::thread::sleep(Duration::from_millis(20));
        }
        DefaultDaemon(child)
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
