//! The fleet demo as a new user meets it: `bash scripts/fleet-demo.sh` in a real terminal (a
//! pseudo-terminal made by util-linux `script`), Ctrl-C typed into it at two points. Once in the
//! middle of a deploy, then again as it cleans up: it ends at once (130) and lists what it left.
//! Then a run to the end, which first removes what the cut-short run left, shows every step
//! (placement, the service, a rollout, a leader killed and the other leading, a host cut off
//! and back with nothing running twice), and on Ctrl-C leaves nothing: no process, network
//! namespace, bridge, cgroup or state of its own. It runs this build's binaries
//! (`STEWARD_DEMO_BIN`).

mod common;

use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BASE: &str = "/var/lib/steward-fleet-demo";

/// What is left of the fleet demo: its processes (by their working directory, which is under
/// its state directory for the daemons, the schedulers and every instance, or by etcd's name),
/// namespaces, bridge, cgroups and state.
fn leftovers() -> Vec<String> {
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cwd = std::fs::read_link(entry.path().join("cwd")).map(|p| p.display().to_string()).unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let ours = cwd.starts_with(BASE) || cmdline.contains(BASE) || cmdline.contains("--name fleet-demo");
        if ours && pid != std::process::id() as i32 && !cmdline.contains("fleet-demo.sh") {
            left.push(format!("process {pid} ({cmdline}) in {cwd}"));
        }
    }
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    for ns in String::from_utf8_lossy(&netns.stdout).lines().filter(|l| l.starts_with("stwfleet-")) {
        left.push(format!("network namespace {ns}"));
    }
    if Command::new("ip").args(["link", "show", "stwfleet0"]).output().unwrap().status.success() {
        left.push("bridge stwfleet0".into());
    }
    for mount in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let mut dirs = vec![mount.path()];
        dirs.extend(std::fs::read_dir(mount.path()).into_iter().flatten().flatten().map(|e| e.path()));
        for dir in dirs {
            if dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("steward-fleet-")) {
                left.push(format!("cgroup {}", dir.display()));
            }
        }
    }
    if std::path::Path::new(BASE).exists() {
        left.push(BASE.into());
    }
    left
}

struct Demo {
    child: std::process::Child,
    screen: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Demo {
    /// `bash scripts/fleet-demo.sh` in a pseudo-terminal.
    fn start() -> Demo {
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_stewardd")).parent().unwrap().to_path_buf();
        let (child, screen, reader) = common::terminal::run(
            "scripts/fleet-demo.sh",
            &[("STEWARD_DEMO_BIN", bin.as_path())],
            &["FLEET_ONCE", "FLEET_HOSTS"],
        );
        Demo { child, screen, reader: Some(reader) }
    }

    fn screen(&self) -> String {
        self.screen.lock().unwrap().clone()
    }

    /// Waits until the screen shows `text`, within `secs`.
    fn wait_for(&mut self, text: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !self.screen().contains(text) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the fleet demo ended ({status}) before showing {text:?}:\n{}", self.screen());
            }
            assert!(Instant::now() < deadline, "no {text:?} within {secs} s:\n{}", self.screen());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Ctrl-C, typed into the terminal.
    fn ctrl_c(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"\x03").unwrap();
        stdin.flush().unwrap();
    }

    /// How it ended, within `secs`, and its whole screen.
    fn ended(mut self, secs: u64) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the fleet demo did not end within {secs} s:\n{}", self.screen());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.reader.take().unwrap().join().unwrap();
        (status, self.screen())
    }
}

#[test]
fn the_fleet_demo_runs_to_the_end_and_ctrl_c_leaves_nothing_of_it() {
    // Cut short: Ctrl-C in the middle of the deploys, and again as it cleans up.
    let mut demo = Demo::start();
    demo.wait_for("== deploy the example units", 600);
    demo.ctrl_c();
    demo.wait_for("== removing the fleet", 10);
    demo.ctrl_c();
    let (status, screen) = demo.ended(20);
    eprintln!("{screen}");
    assert_eq!(status.code(), Some(130), "a second Ctrl-C ends it at once:\n{screen}");
    assert!(screen.contains("interrupted again") && screen.contains("left:"), "{screen}");

    // To the end: what the cut-short run left goes first; every step is shown.
    let started = Instant::now();
    let mut demo = Demo::start();
    demo.wait_for("Ctrl-C ends the fleet demo.", 600);
    let screen = demo.screen();
    eprintln!("to the end in {} s:\n{screen}", started.elapsed().as_secs());
    assert!(screen.contains("an earlier fleet demo left its pieces: removing them first"), "{screen}");
    for shown in [
        "engine: leader",
        "every instance Running",
        "HTTP/1.0 200 OK",
        "rollout of demo/gamesvc: h",
        "complete; 2 of 2 updated",
        "leads after",
        "gamesvc placed off",
        "export STEWARD_CLUSTER=",
    ] {
        assert!(screen.contains(shown), "{shown:?} is not shown:\n{screen}");
    }
    // The last status, after the cut host came back: each instance once, Running.
    let last = screen.rfind("link back").expect("the host comes back");
    let rows: Vec<&str> = screen[last..].lines().filter(|l| l.starts_with("demo/")).collect();
    let mut ids: Vec<&str> = rows.iter().map(|l| l.split_whitespace().next().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["demo/gamesvc/0", "demo/gamesvc/1", "demo/ticker/0"], "{screen}");
    assert!(rows.iter().all(|l| l.contains("Running")), "{screen}");
    assert!(!leftovers().is_empty(), "the fleet runs");

    demo.ctrl_c();
    let (status, screen) = demo.ended(120);
    assert!(status.success(), "Ctrl-C ends it cleanly ({status}):\n{screen}");
    assert!(screen.contains("nothing of the fleet is left"), "{screen}");
    assert_eq!(leftovers(), Vec::<String>::new(), "{screen}");
}
