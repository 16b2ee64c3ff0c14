//! Chaos: 200 instances under random workload kills, kill -9 and restart of the daemon,
//! SIGSTOP/SIGCONT of the daemon and concurrent API calls. Afterwards every instance is in the
//! state its policy says, with exactly one process tree (counted by cgroup), no orphan
//! processes, no gap in the event sequence and no leaked port. Bounded well under 3 minutes.

mod common;

use common::{alive, id, spec, Daemon};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use steward::spec::InstanceId;
use steward::supervisor::state::{ExitStatus, Kind, State};

/// The sleeps of this test carry a duration nothing else on the host uses, to find orphans.
const MARK: &str = "100731";

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn marked_processes() -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.first().is_some_and(|a| a.ends_with(b"sleep")) && args.get(1) == Some(&MARK.as_bytes()) && alive(pid) {
            out.insert(pid);
        }
    }
    out
}

fn kill9(pid: i32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_instances_survive_chaos() {
    let started = Instant::now();
    let mut d = Daemon::start_with("chaos", "port_range_start = 31200\nport_range_end = 31599\n");
    let fg = json!({"startCmd": format!("exec sleep {MARK}"), "procName": "sleep",
                    "ports": [{"name": "p", "hostPort": 0}]});
    let forking = json!({"procName": "sleep", "startGracePeriod": 5,
        "pidFile": "${run_base_dir}/${namespace}.${processname}.${instanceid}/p.pid",
        "startCmd": format!("setsid sh -c 'echo $$ > ${{pidFile}}; exec sleep {MARK}' </dev/null >/dev/null 2>&1 &")});
    let apps = [
        ("always", fg.clone(), json!({"policy": "Always", "interval": 0})),
        ("onfail", fg.clone(), json!({"policy": "OnFailure", "interval": 0})),
        ("never", fg.clone(), json!({"policy": "Never"})),
        ("forking", forking, json!({"policy": "Always", "interval": 0})),
    ];
    for (name, process, policy) in &apps {
        d.apply_json(&spec(name, 50, process.clone(), json!({"restartPolicy": policy}))).await;
    }
    let all: Vec<InstanceId> = apps.iter().flat_map(|(name, _, _)| (0..50).map(move |i| id("test", name, i))).collect();
    for iid in &all {
        d.wait_state(iid, Kind::Running, 60).await;
    }

    // Concurrent API calls all along: reads, and restarts of the Always instances.
    let client = d.client.clone();
    let stop_api = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let api_stop = stop_api.clone();
    let api = tokio::spawn(async move {
        let mut rng = Rng(0x2545f4914f6cdd1d);
        let mut calls = 0u64;
        while !api_stop.load(std::sync::atomic::Ordering::Relaxed) {
            let target = id("test", "always", rng.below(50) as u32);
            // The daemon may be down or stopped for a moment: errors are expected then.
            let _ = match rng.below(4) {
                0 => client.action(&target, "restart", Some(5.0)).await.map(|_| ()),
                1 => client.list(&[]).await.map(|_| ()),
                _ => client.status(&target).await.map(|_| ()),
            };
            calls += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        calls
    });

    // Chaos for 45 s.
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut killed_never: BTreeSet<u32> = BTreeSet::new();
    let (mut kills, mut daemon_kills, mut pauses) = (0, 0, 0);
    let chaos_until = Instant::now() + Duration::from_secs(45);
    while Instant::now() < chaos_until {
        match rng.below(100) {
            0..=1 => {
                // kill -9 of the daemon, then a new one.
                d.kill9();
                tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
                d.spawn();
                daemon_kills += 1;
            }
            2..=3 => {
                let pid = nix::unistd::Pid::from_raw(d.pid());
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
                tokio::time::sleep(Duration::from_millis(200 + rng.below(600))).await;
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
                pauses += 1;
            }
            _ => {
                // kill -9 of a random workload (from the daemon's view, or straight from its
                // cgroup while the daemon cannot answer).
                let iid = &all[rng.below(all.len() as u64) as usize];
                let pids = d.cgroup_pids(iid);
                if let Some(pid) = pids.first() {
                    kill9(*pid);
                    kills += 1;
                    if iid.name == "never" {
                        killed_never.insert(iid.index);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20 + rng.below(60))).await;
    }
    stop_api.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls = api.await.unwrap();
    assert!(
        kills > 100 && daemon_kills > 0 && pauses > 0,
        "chaos happened: {kills} kills, {daemon_kills} daemon kills, {pauses} pauses"
    );

    // Settle: let the last kills be noticed, then every instance as its policy says.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut settled = BTreeMap::new();
    for iid in &all {
        let want_exited = iid.name == "never" && killed_never.contains(&iid.index);
        let st = d
            .wait(iid, deadline.saturating_duration_since(Instant::now()).as_secs().max(1), |s| {
                if want_exited {
                    matches!(s.state, State::Exited { .. })
                } else {
                    s.state == State::Running
                }
            })
            .await;
        if want_exited {
            let State::Exited { status } = st.state else { unreachable!() };
            assert!(matches!(status, ExitStatus::Signal(9) | ExitStatus::Unknown), "{iid}: {status:?}");
        }
        settled.insert(iid.clone(), st);
    }

    // Exactly one process tree per running instance, counted by its cgroup; none for the rest.
    let mut running_pids = BTreeSet::new();
    for iid in settled.keys() {
        let st = d.status(iid).await;
        let in_cgroup = d.cgroup_pids(iid);
        if st.state == State::Running {
            assert_eq!(in_cgroup, vec![st.pid.unwrap()], "{iid}: one process, the recorded one");
            running_pids.insert(st.pid.unwrap());
        } else {
            assert!(in_cgroup.is_empty(), "{iid}: {in_cgroup:?} left");
        }
    }
    // No orphans: every marked sleep on the host is a running instance's main process.
    let marked = marked_processes();
    assert_eq!(marked, running_pids, "orphans: {:?}", marked.difference(&running_pids).collect::<Vec<_>>());

    // No gap in the journal.
    let mut seqs = Vec::new();
    d.client
        .events(0, false, |e| {
            seqs.push(e.seq);
            true
        })
        .await
        .unwrap();
    assert!(!seqs.is_empty());
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "a gap in the event sequence");

    // No leaked port: one per foreground instance, distinct, and all back after deletion.
    let ports: Vec<u16> = settled.values().flat_map(|s| s.ports.values().copied()).collect();
    let distinct: BTreeSet<u16> = ports.iter().copied().collect();
    assert_eq!((ports.len(), distinct.len()), (150, 150), "one distinct port per foreground instance");
    let node = serde_json::to_value(d.client.node().await.unwrap()).unwrap();
    let free_before = node["ports"]["free"].as_u64().unwrap();
    assert!(free_before <= 400 - 150);
    for iid in &all {
        d.client.delete(iid, Some(30.0)).await.unwrap();
    }
    let free_after = serde_json::to_value(d.client.node().await.unwrap()).unwrap()["ports"]["free"].as_u64().unwrap();
    assert_eq!(free_after, free_before + 150, "every port came back");
    assert!(marked_processes().is_empty(), "nothing left running");
    println!(
        "chaos: {kills} workload kills, {daemon_kills} daemon kill -9s, {pauses} SIGSTOP pauses, {calls} API calls, \
         {} events, {:?} in all",
        seqs.len(),
        started.elapsed()
    );
}
