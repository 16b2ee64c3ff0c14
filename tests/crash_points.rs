//! Badly timed crashes (issue 14): stewardd killed at many points of an apply, a scale-down, a
//! spec change, a stop and a delete — at named failpoints in the daemon (`STEWARD_FAILPOINTS`,
//! where it SIGKILLs itself exactly there) and after a sweep of delays from the request. After
//! each kill a new daemon starts, and every instance must come to what was asked of it:
//!
//! - an app whose spec is stored has every instance of it, each running exactly one process
//!   tree (one process: `exec sleep`), the one its status names, on the stored spec;
//! - an instance stopped is Stopped with nothing in its cgroup; a deleted one is gone with
//!   nothing in its cgroup; no instance of the spec is missing, none is there twice;
//! - no process runs in the cgroup of an instance that is not listed.
//!
//! The figures (points tried, instances checked, lost / duplicated / orphaned) are printed.

mod common;

use common::Daemon;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use steward::protocol::{DaemonEvent, EventBody};
use steward::spec::{Format, InstanceId};
use steward::supervisor::record::InstanceStatus;
use steward::supervisor::state::Kind;

const N: u32 = 12;
const APP: &str = "crash";

/// What a test checked. A lost, duplicated or orphaned instance fails it on the spot, so these
/// are the figures of a run that found none.
#[derive(Default)]
struct Tally {
    points: usize,
    instances: usize,
}

impl Tally {
    fn report(&self, what: &str) {
        eprintln!(
            "{what}: {} points, {} instances checked, lost 0, duplicated 0, orphaned 0",
            self.points, self.instances
        );
    }
}

/// The kills to try: at each failpoint, then after every `step`th delay of the sweep.
fn kills(failpoints: &[&str], step: usize) -> Vec<(String, Option<Duration>)> {
    let at = failpoints.iter().map(|p| (p.to_string(), None));
    let after = delays().into_iter().step_by(step).map(|t| (format!("{} ms", t.as_millis()), Some(t)));
    at.chain(after).collect()
}

fn spec(instances: u32, env: &str) -> serde_json::Value {
    common::spec(
        APP,
        instances,
        serde_json::json!({"startCmd": "exec sleep 1000", "env": [{"name": "MARK", "value": env}]}),
        serde_json::json!({"killPolicy": {"gracePeriod": 1}}),
    )
}

fn ids(n: u32) -> Vec<InstanceId> {
    (0..n).map(|i| common::id("test", APP, i)).collect()
}

/// Every instance cgroup of the daemon's parent, by instance key (`test.crash.3`), with its
/// live pids.
fn cgroups(d: &Daemon) -> BTreeMap<String, Vec<i32>> {
    let h = d.hierarchy();
    h.list_instances()
        .into_iter()
        .map(|k| {
            let pids = h.instance(&k).pids().unwrap_or_default().into_iter().filter(|p| common::alive(*p)).collect();
            (k, pids)
        })
        .collect()
}

/// The environment variable MARK of process `pid`.
fn mark_of(pid: i32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|kv| kv.strip_prefix(b"MARK=")).map(|v| String::from_utf8_lossy(v).into())
}

/// For an instance: the states it may be in and the MARK a running one has; None: gone.
type Expect = dyn Fn(&InstanceId) -> Option<(Vec<Kind>, String)>;

/// The listing once no instance is Staging, Starting or Stopping and the app's rollout (a spec
/// change rolls out in batches) is no longer progressing.
async fn settle(d: &Daemon, point: &str) -> Vec<InstanceStatus> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = d.client.list(&[]).await.unwrap_or_else(|e| {
            let ss = std::process::Command::new("ss").args(["-xlpn"]).output().unwrap();
            let ss = String::from_utf8_lossy(&ss.stdout)
                .lines()
                .filter(|l| l.contains(d.socket.to_str().unwrap()))
                .collect::<Vec<_>>()
                .join("\n");
            let state = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap_or_default();
            let state = state.lines().find(|l| l.starts_with("State")).unwrap_or("gone").to_string();
            panic!("{point}: list: {e}\nSS {ss}\nDAEMON {} {state}\n{}", d.pid(), d.log())
        });
        let rolling = match d.client.rollout("test", APP).await {
            Ok(Some(r)) => r.phase == steward::protocol::RolloutPhase::Progressing,
            _ => false,
        };
        let busy =
            rolling || listed.iter().any(|s| matches!(s.state.kind(), Kind::Staging | Kind::Starting | Kind::Stopping));
        // A delete shows the instance Stopped for a moment before it is gone: the same listing
        // twice, a moment apart, is settled.
        let states = |l: &[InstanceStatus]| l.iter().map(|s| (s.id.to_string(), s.state.kind())).collect::<Vec<_>>();
        if !busy {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let again = d.client.list(&[]).await.unwrap();
            if states(&again) == states(&listed) {
                return again;
            }
            continue;
        }
        assert!(Instant::now() < deadline, "{point}: instances did not settle: {listed:#?}\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for the daemon to settle, then checks what the module's doc says. `expect`: for each
/// instance the states it may be in, and the MARK a running one must have; None: it must be
/// gone, and have left nothing running.
async fn check(d: &Daemon, point: &str, expect: &Expect, tally: &mut Tally) {
    let listed = settle(d, point).await;
    tally.points += 1;
    let by_id: BTreeMap<String, _> = listed.iter().map(|s| (s.id.to_string(), s)).collect();
    assert_eq!(by_id.len(), listed.len(), "{point}: an instance is listed twice: {listed:#?}");
    let groups = cgroups(d);
    for id in ids(N) {
        tally.instances += 1;
        let key = format!("{}.{}.{}", id.namespace, id.name, id.index);
        let pids = groups.get(&key).cloned().unwrap_or_default();
        match (expect(&id), by_id.get(&id.to_string())) {
            (None, None) => {
                if !pids.is_empty() {
                    panic!("{point}: {id} is gone but {pids:?} run in its cgroup\n{}", d.log());
                }
            }
            (None, Some(s)) => panic!("{point}: {id} should be gone, is {:?}\n{}", s.state, d.log()),
            (Some(_), None) => {
                panic!("{point}: {id} is lost: not listed\n{}", d.log());
            }
            (Some((kinds, mark)), Some(s)) => {
                let kind = s.state.kind();
                assert!(kinds.contains(&kind), "{point}: {id} is {:?}, want one of {kinds:?}\n{}", s.state, d.log());
                if kind == Kind::Running {
                    if pids.len() != 1 {
                        panic!(
                            "{point}: {id} runs {pids:?} in its cgroup, want exactly its main {:?}\n{}",
                            s.pid,
                            d.log()
                        );
                    }
                    assert_eq!(Some(pids[0]), s.pid, "{point}: {id}: the process in its cgroup is not its main");
                    assert_eq!(mark_of(pids[0]).as_deref(), Some(mark.as_str()), "{point}: {id} runs an old spec");
                } else if !pids.is_empty() {
                    panic!("{point}: {id} is {kind} but {pids:?} run in its cgroup\n{}", d.log());
                }
            }
        }
    }
    // Nothing runs in the cgroup of an instance not listed (other apps included).
    for (key, pids) in &groups {
        let listed_here = listed.iter().any(|s| format!("{}.{}.{}", s.id.namespace, s.id.name, s.id.index) == *key);
        if !listed_here && !pids.is_empty() {
            panic!("{point}: {pids:?} run in the cgroup {key} of no listed instance\n{}", d.log());
        }
    }
}

/// Restarts the daemon without failpoints after it died (by a failpoint or a kill -9).
fn revive(d: &mut Daemon) {
    d.kill9();
    d.env.clear();
    d.spawn();
}

/// Waits up to `secs` for the daemon to die at its failpoint; whether it did.
async fn died(d: &Daemon, secs: u64) -> bool {
    let pid = d.pid();
    let deadline = Instant::now() + Duration::from_secs(secs);
    while common::alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    !common::alive(pid)
}

/// Deletes the app and waits until nothing of it is left, for the next point.
async fn clean(d: &Daemon) {
    let _ = d.client.delete_app("test", APP, Some(30.0)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !d.client.list(&[]).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "cleanup: {:#?}", d.client.list(&[]).await.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Applies `doc` and kills the daemon `delay` after the request went out (the answer, if any,
/// is ignored: both sides of it are valid points).
async fn apply_then_kill(d: &mut Daemon, doc: &serde_json::Value, delay: Duration) {
    let client = d.client.clone();
    let text = doc.to_string();
    let request = tokio::spawn(async move { client.apply(&text, Format::Json).await });
    tokio::time::sleep(delay).await;
    d.kill9();
    let _ = request.await;
}

async fn running(d: &Daemon, n: u32, mark: &str) {
    d.apply_json(&spec(n, mark)).await;
    for id in ids(n) {
        d.wait_state(&id, Kind::Running, 30).await;
    }
}

/// May the stored app be there or not? If it is, every instance runs on it.
fn whole_app_or_nothing(d_listed: bool, n: u32, mark: &str) -> impl Fn(&InstanceId) -> Option<(Vec<Kind>, String)> {
    let mark = mark.to_string();
    move |id| (d_listed && id.index < n).then(|| (vec![Kind::Running], mark.clone()))
}

fn delays() -> Vec<Duration> {
    [0u64, 1, 2, 4, 8, 15, 30, 60, 120, 250].into_iter().map(Duration::from_millis).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_any_point_of_an_apply_loses_and_duplicates_nothing() {
    let mut d = Daemon::start("crashapply");
    let mut tally = Tally::default();
    // Creating the app: the spec's commit, the actors' spawn, the first, a middle and the last
    // instance's process spawn.
    let points =
        ["apply-spec-committed@1", "apply-created@1", "launch-spawned@1", "launch-spawned@6", "launch-spawned@12"];
    for (point, delay) in kills(&points, 1) {
        match delay {
            None => {
                d.env = vec![("STEWARD_FAILPOINTS".into(), point.clone())];
                d.restart(true);
                let _ = d.client.apply(&spec(N, "one").to_string(), Format::Json).await;
                // The failpoint killed it (or the apply finished first): wait for its end.
                assert!(died(&d, 20).await, "{point}: the failpoint was not reached\n{}", d.log());
            }
            Some(t) => apply_then_kill(&mut d, &spec(N, "one"), t).await,
        }
        revive(&mut d);
        let stored = !settle(&d, &point).await.is_empty();
        check(&d, &format!("create, {point}"), &whole_app_or_nothing(stored, N, "one"), &mut tally).await;
        clean(&d).await;
    }
    tally.report("apply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_spec_change_or_a_scale_down_finishes_it_after_the_restart() {
    let mut d = Daemon::start("crashchange");
    let mut tally = Tally::default();
    let kills = kills(&["apply-spec-committed@1", "stop-recorded@1", "stop-recorded@6", "launch-spawned@3"], 2);
    for (change, new_count, mark) in [("change", N, "two"), ("scale-down", N / 2, "one")] {
        for (point, delay) in &kills {
            running(&d, N, "one").await;
            let doc = spec(new_count, mark);
            match delay {
                None => {
                    d.env = vec![("STEWARD_FAILPOINTS".into(), point.clone())];
                    // The failpoints apply to the daemon that runs the apply: restart it first.
                    d.restart(false);
                    let _ = d.client.apply(&doc.to_string(), Format::Json).await;
                    // A scale-down spawns nothing: a launch point may never come (still a point).
                    died(&d, 20).await;
                }
                Some(t) => apply_then_kill(&mut d, &doc, *t).await,
            }
            revive(&mut d);
            // The new spec is stored if the apply got as far as its commit: then all of it holds.
            let listed = settle(&d, point).await;
            let took = listed.iter().any(|s| s.spec_generation >= 2);
            let (count, mark) = if took { (new_count, mark) } else { (N, "one") };
            let expect = move |id: &InstanceId| (id.index < count).then(|| (vec![Kind::Running], mark.to_string()));
            check(&d, &format!("{change}, {point}"), &expect, &mut tally).await;
            clean(&d).await;
        }
    }
    tally.report("change and scale-down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_stops_and_deletes_leaves_no_process_unsupervised() {
    let mut d = Daemon::start("crashstop");
    let mut tally = Tally::default();
    let points = [
        "stop-recorded@1",
        "stop-recorded@7",
        "delete-record@1",
        "delete-record@5",
        "delete-committed@1",
        "delete-committed@9",
    ];
    let kills = kills(&points, 2);
    for (op, point, delay) in kills
        .iter()
        .flat_map(|(p, t)| [("stop", p.clone(), *t), ("delete", p.clone(), *t)])
        .filter(|(op, p, _)| !(*op == "stop" && p.starts_with("delete")))
    {
        running(&d, N, "one").await;
        if delay.is_none() {
            d.env = vec![("STEWARD_FAILPOINTS".into(), point.clone())];
            d.restart(false);
        }
        let client = d.client.clone();
        let request = tokio::spawn(async move {
            match op {
                "stop" => {
                    let stops = ids(N).into_iter().map(|id| {
                        let c = client.clone();
                        async move { c.action(&id, "stop", Some(30.0)).await.map(|_| ()) }
                    });
                    futures_util::future::join_all(stops).await;
                }
                _ => {
                    let _ = client.delete_app("test", APP, Some(30.0)).await;
                }
            }
        });
        match delay {
            Some(t) => {
                tokio::time::sleep(t).await;
                d.kill9();
            }
            None => {
                assert!(died(&d, 30).await, "{op}, {point}: the failpoint was not reached\n{}", d.log());
            }
        }
        let _ = request.await;
        revive(&mut d);
        // Each instance either took the stop (delete) or did not: both are fine, half-way is not.
        let expect = move |_: &InstanceId| match op {
            "stop" => Some((vec![Kind::Running, Kind::Stopped], "one".to_string())),
            _ => Some((vec![Kind::Running, Kind::Stopped], "one".to_string())),
        };
        let listed = settle(&d, &point).await;
        let present: Vec<u32> = listed.iter().map(|s| s.id.index).collect();
        let expect_present = move |id: &InstanceId| if present.contains(&id.index) { expect(id) } else { None };
        if op == "stop" {
            assert_eq!(listed.len() as u32, N, "stop, {point}: a stop deleted an instance: {listed:#?}");
        }
        check(&d, &format!("{op}, {point}"), &expect_present, &mut tally).await;
        clean(&d).await;
    }
    tally.report("stop and delete");
}

/// The kept volumes listed, as `namespace/name/ordinal/volume`.
async fn volumes(d: &Daemon) -> Vec<String> {
    let listed = d.client.volumes(None).await.unwrap();
    listed.iter().map(|v| format!("{}/{}/{}/{}", v.namespace, v.name, v.ordinal, v.volume)).collect()
}

/// How many `volumeRemoved` events the journal holds.
async fn removals(d: &Daemon) -> usize {
    let mut n = 0;
    d.client
        .events(0, false, |ev| {
            let removed = matches!(ev.body, EventBody::Daemon(DaemonEvent::VolumeRemoved { .. }));
            n += usize::from(removed);
            true
        })
        .await
        .unwrap();
    n
}

/// `steward volume rm` is exactly once across a kill -9 (issue 47): killed after the volume was
/// moved aside and before its removal was journaled, the volume is back, whole, after the
/// restart and no removal is told; killed after the journal and before the delete, the restart
/// finishes it (the data gone from the disk, one removal told). Either way a second `rm` is
/// answered as the state says, and the journal tells each removal once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_kept_volume_removal_neither_loses_nor_repeats_it() {
    for (point, journaled) in [("volume-aside", false), ("volume-journaled", true)] {
        let mut d = Daemon::start(&format!("kept-rm-{journaled}"));
        // Made as an ordinal's first start makes them (the daemon lists what is on disk).
        let ordinal = d.path().join("volumes/test/world/1");
        std::fs::create_dir_all(ordinal.join("save/maps")).unwrap();
        std::fs::write(ordinal.join("save/maps/one.dat"), "the world as the players left it").unwrap();
        std::fs::create_dir_all(d.path().join("volumes/test/world/2/save")).unwrap();
        d.restart(false);
        assert_eq!(volumes(&d).await, ["test/world/1/save", "test/world/2/save"], "{point}");
        d.env = vec![("STEWARD_FAILPOINTS".into(), format!("{point}@1"))];
        d.restart(false);
        let id = InstanceId { namespace: "test".into(), name: "world".into(), index: 1 };
        let answer = d.client.delete_volume(&id, "save").await;
        assert!(answer.is_err(), "{point}: the daemon answered {answer:?} instead of dying at the point");
        assert!(died(&d, 20).await, "{point}: the failpoint was not reached\n{}", d.log());
        revive(&mut d);
        let listed = volumes(&d).await;
        if journaled {
            assert_eq!(listed, ["test/world/2/save"], "{point}: the journaled removal is finished");
            assert!(!ordinal.join("save").exists(), "{point}");
            let leftovers: Vec<_> = walkdir(d.path().join("volumes"));
            assert!(leftovers.iter().all(|p| !p.contains("one.dat")), "{point}: {leftovers:?}");
            assert_eq!(removals(&d).await, 1, "{point}");
            let again = d.client.delete_volume(&id, "save").await;
            assert!(again.is_err(), "{point}: a second rm of a removed volume: {again:?}");
        } else {
            assert_eq!(listed, ["test/world/1/save", "test/world/2/save"], "{point}: not removed, back in place");
            let kept = std::fs::read_to_string(ordinal.join("save/maps/one.dat")).unwrap();
            assert_eq!(kept, "the world as the players left it", "{point}");
            assert_eq!(removals(&d).await, 0, "{point}: a removal that did not happen is not told");
            d.client.delete_volume(&id, "save").await.unwrap();
            assert_eq!(volumes(&d).await, ["test/world/2/save"], "{point}");
            assert_eq!(removals(&d).await, 1, "{point}");
        }
        // The node's kept ordinals follow (what a scheduler pins ordinals by).
        let node = d.client.node().await.unwrap();
        assert_eq!(node.kept_volumes, ["test/world/2"], "{point}");
        d.restart(true);
        assert_eq!(volumes(&d).await, ["test/world/2/save"], "{point}: after a kill -9 and restart");
        assert_eq!(removals(&d).await, 1, "{point}: told once");
    }
}

/// Every path below `dir`.
fn walkdir(dir: std::path::PathBuf) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            out.push(e.path().display().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
        }
    }
    out
}
