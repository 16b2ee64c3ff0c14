//! stewardd as a process: how fast and how bounded its end is after SIGTERM, a log file without
//! terminal colour codes, the descriptors a spawn copies, the code pages it lets go when quiet.

mod common;

use common::{id, Daemon};
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

/// Sends SIGTERM and returns how long the daemon took to exit (panics past `limit`).
fn terminate(d: &mut Daemon, limit: Duration) -> Duration {
    let mut child = d.child.take().unwrap();
    let started = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "SIGTERM ends stewardd with status 0: {status}\n{}", d.log());
            return started.elapsed();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("stewardd still running {limit:?} after SIGTERM\n{}", d.log());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_idle_daemon_ends_at_once_on_sigterm() {
    let mut d = Daemon::start("term-idle");
    std::thread::sleep(Duration::from_millis(300));
    // Measured about 0.07 s (debug build); most of it is the store's clean close. The limit
    // leaves room for a loaded test machine, and is far under the bound for busy daemons.
    let took = terminate(&mut d, Duration::from_secs(2));
    eprintln!("idle stewardd exited {took:?} after SIGTERM");
    assert!(!d.socket.exists(), "the socket is removed");
}

#[tokio::test]
async fn a_request_under_way_holds_the_end_no_longer_than_the_grace() {
    let mut d = Daemon::start("term-busy");
    // A process that ignores SIGTERM, stopped with a long kill grace: the stop request waits.
    let spec = common::spec(
        "stubborn",
        1,
        serde_json::json!({"startCmd": "trap '' TERM; while true; do sleep 0.1; done"}),
        serde_json::json!({"killPolicy": {"gracePeriod": 60}}),
    );
    d.apply_json(&spec).await;
    d.wait_state(&id("test", "stubborn", 0), Kind::Running, 20).await;
    let client = d.client.clone();
    let stop = tokio::spawn(async move { client.action(&id("test", "stubborn", 0), "stop", Some(60.0)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let took = tokio::task::spawn_blocking(move || {
        let took = terminate(&mut d, Duration::from_secs(9));
        (took, d)
    })
    .await
    .unwrap();
    let (took, _d) = took;
    eprintln!("busy stewardd exited {took:?} after SIGTERM");
    // steward::daemon::REQUEST_GRACE (5 s) for the request, then at most 1 s of blocking work.
    assert!(took >= Duration::from_secs(4), "the request got its grace: {took:?}");
    assert!(took < Duration::from_secs(7), "bounded: {took:?}");
    assert!(stop.await.unwrap().is_err(), "the waiting client is cut off, not answered");
}

#[test]
fn a_log_file_gets_no_colour_codes() {
    // The fixture sends stderr to a file, as a service manager or `stewardd 2>log` does.
    let d = Daemon::start("plain-log");
    let (code, _, _) = d.cli(&["status", "test/nope/0"]);
    assert_eq!(code, 4);
    let log = d.log();
    assert!(log.contains("stewardd ready"), "{log}");
    assert!(!log.contains('\u{1b}'), "no ANSI escape in a log file:\n{log}");
}

/// Issue 48: a spawn does not copy the daemon's descriptors, and the daemon holds at most one
/// per instance. A clone copies its parent's descriptor table into the child, which closes it
/// again at exec: a cost per start that grew with what the daemon held. The child now starts
/// on the daemon's table and takes its own copy of only what it keeps, so a main process's
/// table is the smallest the kernel makes (its `FDSize`), however many the daemon holds; the
/// daemon holds its own children's pidfds (their exits are told by them), a daemonizing
/// (pidfile) instance's main included (reparented to the daemon, it is its child too, reaped by
/// its pidfd rather than by a scan of every child), and nothing else per instance (the log
/// rotation keeps its run directories by name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_copies_none_of_the_daemons_descriptors() {
    let daemon = Daemon::start("descriptors");
    let d = &daemon;
    let open = || std::fs::read_dir(format!("/proc/{}/fd", d.pid())).unwrap().count();
    let apply = |n: u32| {
        let foreground =
            common::spec("fg", n, serde_json::json!({"startCmd": "exec sleep 1000"}), serde_json::json!({}));
        let forking = common::spec(
            "forking",
            n,
            serde_json::json!({
                "procName": "sleep",
                "pidFile": "${run_base_dir}/${namespace}.${processname}.${instanceid}/p.pid",
                "startCmd": "setsid sh -c 'echo $$ > ${pidFile}; exec sleep 1000' </dev/null >/dev/null 2>&1 &",
                "startGracePeriod": 10
            }),
            serde_json::json!({}),
        );
        (foreground, forking)
    };
    // N of each, all Running, then the daemon's open descriptors once the log rotation's pass
    // and the starts' own descriptors settled.
    let deployed = |n: u32| async move {
        let (fg, forking) = apply(n);
        d.apply_json(&fg).await;
        d.apply_json(&forking).await;
        for name in ["fg", "forking"] {
            for i in 0..n {
                d.wait_state(&id("test", name, i), Kind::Running, 60).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        open()
    };
    let at_10 = deployed(10).await;
    let at_110 = deployed(110).await;
    assert!(at_110 <= at_10 + 200 + 5, "{at_10} descriptors at 20 instances, {at_110} at 220\n{}", d.log());
    let table = |pid: i32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let size = status.lines().find_map(|l| l.strip_prefix("FDSize:")).unwrap().trim().to_string();
        size.parse::<u32>().unwrap()
    };
    assert!(table(d.pid()) >= 128, "the daemon holds more than a child's table: {}", table(d.pid()));
    let children: Vec<i32> = std::fs::read_dir(format!("/proc/{}/task", d.pid()))
        .unwrap()
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .map(|p| p.parse().unwrap())
                .collect::<Vec<i32>>()
        })
        .collect();
    assert!(children.len() >= 110, "{children:?}");
    let copied: Vec<(i32, u32)> = children.iter().map(|&p| (p, table(p))).filter(|&(_, size)| size > 64).collect();
    assert!(copied.is_empty(), "children with the daemon's table copied (pid, FDSize): {copied:?}");
}

/// The daemon's resident file pages (its code and read-only data), from /proc.
fn resident_file_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// After a burst (an apply of 80 instances) and a quiet tick, the daemon lets go of the code
/// pages the burst mapped (`release_code_pages`, issue 48: they stayed resident for its life);
/// they come back as they are used: the instances answer, stop and start as before, and a
/// restart's code, mapped again, is not let go again for so little. With `release_code_pages =
/// false` what was mapped stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_daemon_lets_go_of_its_code_pages_unless_told_not_to() {
    for release in [true, false] {
        let d = Daemon::start_with(&format!("code-pages-{release}"), &format!("release_code_pages = {release}\n"));
        // A burst: 80 starts, some 240 events (the code of one under 128 events stays mapped).
        let spec = common::spec("burst", 80, serde_json::json!({"startCmd": "exec sleep 1000"}), serde_json::json!({}));
        d.apply_json(&spec).await;
        for i in 0..80 {
            d.wait_state(&id("test", "burst", i), Kind::Running, 20).await;
        }
        let after_burst = resident_file_kib(d.pid());
        // The trimmer's tick is 2 s: the burst is over after one quiet tick.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let quiet = resident_file_kib(d.pid());
        if release {
            assert!(
                quiet < after_burst / 2,
                "code pages kept: {after_burst} KiB resident after the burst, {quiet} KiB once quiet"
            );
        } else {
            assert!(
                quiet * 10 >= after_burst * 9,
                "release_code_pages = false let go: {after_burst} KiB, then {quiet} KiB"
            );
        }
        // Restarts are no burst: the code they map stays, for the next one to run without faults.
        for i in [3, 4].into_iter().filter(|_| release) {
            d.client.action(&id("test", "burst", i), "restart", Some(20.0)).await.unwrap();
            d.wait_state(&id("test", "burst", i), Kind::Running, 20).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        if release {
            let warm = resident_file_kib(d.pid());
            d.client.action(&id("test", "burst", 5), "restart", Some(20.0)).await.unwrap();
            d.wait_state(&id("test", "burst", 5), Kind::Running, 20).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            let after = resident_file_kib(d.pid());
            assert!(after * 10 >= warm * 9, "a restart's code was let go again: {warm} KiB, then {after} KiB");
        }
        assert_eq!(d.client.list(&[("name", "burst")]).await.unwrap().len(), 80);
    }
}

/// The daemon's children that are zombies (ended, not reaped).
fn zombie_children(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            if stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')) {
                found.push(child);
            }
        }
    }
    found
}

/// Exits nobody watches are reaped however SIGCHLDs coalesce: the scan of every child is made
/// only for a signal that may be about a child no pidfd reaps, and one skipped is made up
/// within a second (src/runtime/reaper.rs). 20 instances each leave three daemonized `sleep 1`s
/// (reparented to the daemon, its child subreaper) that end at the same moment, while their
/// mains are killed and respawned by their pidfds: no zombie is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_nobody_watches_are_reaped_however_the_signals_coalesce() {
    let d = Daemon::start("orphan-exits");
    let start = "for i in 1 2 3; do (sleep 1 &); done; exec sleep 1000";
    let spec = common::spec("orphans", 20, serde_json::json!({"startCmd": start}), serde_json::json!({}));
    d.apply_json(&spec).await;
    let mut mains = Vec::new();
    for i in 0..20 {
        mains.push(d.wait_state(&id("test", "orphans", i), Kind::Running, 20).await.pid.unwrap());
    }
    // The mains' ends (their pidfds' to reap) among the orphans' (the scan's).
    tokio::time::sleep(Duration::from_millis(900)).await;
    for pid in &mains {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let zombies = zombie_children(d.pid());
        if zombies.is_empty() && Instant::now() > deadline - Duration::from_secs(3) {
            break;
        }
        assert!(Instant::now() < deadline, "unreaped children of the daemon: {zombies:?}\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..20 {
        let s = d
            .wait(&id("test", "orphans", i), 20, |s| {
                s.state.kind() == Kind::Running && s.pid != Some(mains[i as usize])
            })
            .await;
        assert!(s.restarts >= 1, "{s:?}");
    }
}

/// The pidfds the daemon holds on `pid` (a pidfd's fdinfo names its process).
fn pidfds_on(daemon: i32, pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{daemon}/fdinfo"))
        .unwrap()
        .flatten()
        .filter(|f| {
            let info = std::fs::read_to_string(f.path()).unwrap_or_default();
            info.lines().any(|l| l.strip_prefix("Pid:").is_some_and(|p| p.trim() == pid.to_string()))
        })
        .count()
}

/// A daemonizing main whose pidfile is read while its launcher still runs is the launcher's
/// child then; when the launcher ends it is the daemon's (its subreaper), and from then on it is
/// reaped by a pidfd of the reaper's (not left to the scan of every child on every SIGCHLD,
/// src/supervisor/instance/process/launch.rs `adopt_when_launcher_ends`). Its end is reported
/// with its signal, it is not left a zombie, and it is started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_main_its_launcher_leaves_behind_is_reaped_by_its_pidfd_and_reported() {
    let d = Daemon::start("launcher-lingers");
    let spec = common::spec(
        "lingering",
        1,
        serde_json::json!({
            "procName": "sleep",
            "pidFile": "${run_base_dir}/${namespace}.${processname}.${instanceid}/p.pid",
            "startCmd": "sleep 1000 & echo $! > ${pidFile}; sleep 1",
            "startGracePeriod": 10
        }),
        serde_json::json!({}),
    );
    d.apply_json(&spec).await;
    let iid = id("test", "lingering", 0);
    let main = d.wait_state(&iid, Kind::Running, 20).await.pid.unwrap();
    let ppid = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat.rsplit_once(')').unwrap().1.split_whitespace().nth(1).unwrap().parse::<i32>().unwrap()
    };
    assert_ne!(ppid(main), d.pid(), "read while its launcher ran: the launcher's child");
    assert_eq!(pidfds_on(d.pid(), main), 1, "the actor's, to see its end");
    let deadline = Instant::now() + Duration::from_secs(5);
    while ppid(main) != d.pid() || pidfds_on(d.pid(), main) < 2 {
        assert!(
            Instant::now() < deadline,
            "the launcher ended: the main is the daemon's child (parent {}), reaped by a pidfd ({} held)",
            ppid(main),
            pidfds_on(d.pid(), main)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(main), nix::sys::signal::Signal::SIGKILL).unwrap();
    let s = d.wait(&iid, 20, |s| s.restarts >= 1 && s.state.kind() == Kind::Running && s.pid != Some(main)).await;
    let exit = s.last_exit.map(|e| format!("{e:?}")).unwrap_or_default();
    assert!(exit.contains('9'), "ended by its signal, not an unknown end: {s:?}");
    assert!(zombie_children(d.pid()).is_empty(), "{:?}", zombie_children(d.pid()));
}
