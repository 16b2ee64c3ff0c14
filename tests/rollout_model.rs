//! A model-based test of the rollout engine (issue 42), over the real stewardd and real
//! processes: proptest draws a strategy and a sequence of operations — apply a good or a bad
//! revision (possibly pausing it part-way), undo, resume, crash an instance, flip an instance's
//! readiness, let time pass beyond the progress deadline and minReadySeconds, restart stewardd by
//! SIGTERM or kill -9, kill it at a failpoint inside a rollout — and after every step checks what
//! must hold:
//!
//! - while an operation runs, never more instances unready than the strategy allows (beyond those
//!   already unready when it began) and never more running than the count plus the surge;
//! - once settled, exactly `spec.instance` instances (no spare, the ports of none held), every one
//!   on the revision the record says when its rollout completed; a rollout of a good revision
//!   with every instance ready completes; a failed one with autoRollback goes back to the last
//!   revision whose rollout completed, which then runs;
//! - `rollout status -w` exits 0 when the revision last applied rolled out, 6 when it failed;
//! - a daemon restart changes no pid of an instance running its revision, and no listing.
//!
//! `STEWARD_MODEL_CASES` (default 3) sets how many sequences run, `STEWARD_MODEL_SEED` the seed
//! (default fixed, printed, so that a failure can be run again); `STEWARD_MODEL_STEPS` the
//! longest sequence (default 7). `STEWARD_MODEL_SKIP` (`spares,status,...`) leaves checks out,
//! to look past a first finding for the next: `budget`, `spares`, `lastgood`, `completes`,
//! `status`, `restart`.

mod common;

use common::Daemon;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use steward::protocol::RolloutPhase;
use steward::supervisor::state::Kind;

const N: u32 = 3;

/// Whether the check `name` runs (see `STEWARD_MODEL_SKIP`).
fn checks(name: &str) -> bool {
    !std::env::var("STEWARD_MODEL_SKIP").unwrap_or_default().split(',').any(|s| s.trim() == name)
}
const DEADLINE_SECS: u64 = 4;
const MIN_READY_SECS: u64 = 1;

#[derive(Debug, Clone)]
enum Op {
    /// A new revision, with autoRollback or not (`apply --auto-rollback`); `pause_after_ms`:
    /// paused by an operator that long after the apply.
    Apply {
        good: bool,
        auto_rollback: bool,
        pause_after_ms: Option<u64>,
    },
    Undo,
    Resume,
    /// kill -9 of instance k's process.
    Crash(u32),
    /// Instance k's readiness probe starts failing, or passes again.
    Flip(u32),
    /// The app ages beyond the progress deadline and minReadySeconds.
    Age,
    /// stewardd stopped by SIGTERM (false) or kill -9 (true) and started again.
    Restart(bool),
    /// A good revision applied with stewardd set to die at a point inside its rollout.
    KillAt(&'static str, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), any::<bool>(), prop::option::weighted(0.25, 0u64..1500))
            .prop_map(|(good, auto_rollback, pause_after_ms)| Op::Apply { good, auto_rollback, pause_after_ms }),
        2 => Just(Op::Undo),
        1 => Just(Op::Resume),
        1 => (0..N).prop_map(Op::Crash),
        1 => (0..N).prop_map(Op::Flip),
        2 => Just(Op::Age),
        2 => any::<bool>().prop_map(Op::Restart),
        2 => (prop::sample::select(vec!["rollout-batch-recorded", "rollout-step-taken", "rollout-failed-recorded"]), 1u64..3)
            .prop_map(|(point, n)| Op::KillAt(point, n)),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    max_unavailable: u32,
    ops: Vec<Op>,
}

fn case(max_steps: usize) -> impl Strategy<Value = Case> {
    (0u32..2, prop::collection::vec(op(), 2..=max_steps))
        .prop_map(|(max_unavailable, ops)| Case { max_unavailable, ops })
}

/// What the test knows of the app: which versions it applied, which instance is flipped, which
/// version last rolled out.
struct Model {
    case: Case,
    dir: std::path::PathBuf,
    next_version: u32,
    /// Version (the VERSION env) by template hash, for every revision applied.
    good_hash: BTreeMap<String, bool>,
    flipped: BTreeSet<u32>,
    /// The hash of the last revision whose rollout completed (or the first).
    last_good: String,
    paused: bool,
    /// The app's spec has autoRollback (an undo keeps the strategy in force).
    auto_rollback: bool,
    free_ports: usize,
}

impl Model {
    fn spec(&mut self, good: bool, auto_rollback: bool) -> Value {
        self.auto_rollback = auto_rollback;
        self.next_version += 1;
        let start = if good { "exec sleep 1000" } else { "echo 'bad config' >&2; exit 2" };
        let unready = self.dir.join("unready-${instanceid}");
        let probe = format!("test ! -e {}", unready.display());
        let mut s = common::spec(
            "m",
            N,
            json!({"env": [{"name": "VERSION", "value": format!("v{}", self.next_version)}], "startCmd": start,
                   // A start takes a moment, as a real server's does: the old run's start time is
                   // the record's while the new one is under way.
                   "startGracePeriod": 1,
                   "ports": [{"name": "p"}],
                   "probe": {"readiness": {"handler": {"type": "EXEC", "method": {"command": ["sh", "-c", probe]}}, "period": 1}}}),
            json!({"restartPolicy": {"policy": "Always", "interval": 0},
                   "strategy": {"maxUnavailable": self.case.max_unavailable, "maxSurge": 1,
                                "minReadySeconds": MIN_READY_SECS, "progressDeadlineSeconds": DEADLINE_SECS,
                                "autoRollback": auto_rollback}}),
        );
        s["metadata"]["name"] = json!("m");
        s
    }
}

/// What the sampler saw while an operation ran.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    max_unready: usize,
    max_running: usize,
}

fn sampler(d: &Daemon, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> tokio::task::JoinHandle<Seen> {
    let client = d.client.clone();
    tokio::spawn(async move {
        let mut seen = Seen::default();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            // A daemon restart's gap answers nothing: no samples then, not false ones.
            let Ok(list) = client.list(&[]).await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let ready = list.iter().filter(|s| s.ready && s.state.kind() == Kind::Running).count();
            let running = list.iter().filter(|s| s.state.has_processes()).count();
            seen.max_unready = seen.max_unready.max((N as usize).saturating_sub(ready));
            seen.max_running = seen.max_running.max(running);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen
    })
}

/// Instances unready now among the app's own ids.
async fn unready_now(d: &Daemon) -> usize {
    let list = d.client.list(&[]).await.unwrap();
    let ready = list.iter().filter(|s| s.id.index < N && s.ready && s.state.kind() == Kind::Running).count();
    (N as usize).saturating_sub(ready)
}

async fn rollout(d: &Daemon) -> Option<steward::protocol::Rollout> {
    d.client.rollout("test", "m").await.unwrap()
}

/// Waits until the app's rollout is no longer under way (complete, failed with any rollback
/// applied, or paused) and no instance is between states.
async fn settle(d: &Daemon, model: &Model, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_SECS * 4 + 30);
    loop {
        let r = rollout(d).await;
        let list = d.client.list(&[]).await.unwrap();
        // Starting and Backoff are left out: a bad revision's instance loops through them.
        let moving = list.iter().any(|s| matches!(s.state.kind(), Kind::Staging | Kind::Stopping));
        let rolling = match &r {
            Some(r) => match &r.phase {
                RolloutPhase::Progressing => true,
                // Failed with autoRollback: the rollback is applied right after.
                RolloutPhase::Failed { .. } => model.auto_rollback && !r.rollback,
                _ => false,
            },
            None => false,
        };
        if !rolling && !moving {
            // Probes run every second: a readiness change shows within two.
            tokio::time::sleep(Duration::from_millis(2500)).await;
            if rollout(d).await == r {
                return;
            }
            continue;
        }
        assert!(Instant::now() < deadline, "{what}: did not settle: {r:?}\n{list:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The app's newest revision.
async fn newest(d: &Daemon) -> u64 {
    d.client.revisions("test", "m").await.unwrap().revisions.last().map_or(0, |r| r.revision)
}

async fn hash_of(d: &Daemon, revision: u64) -> String {
    let h = d.client.revisions("test", "m").await.unwrap();
    h.revisions.iter().find(|r| r.revision == revision).map(|r| r.hash.clone()).unwrap_or_default()
}

/// The invariants of a settled app.
async fn check_settled(d: &Daemon, model: &mut Model, what: &str) {
    let r = rollout(d).await;
    let list = d.client.list(&[]).await.unwrap();
    let ids: Vec<u32> = list.iter().map(|s| s.id.index).collect();
    let paused = r.as_ref().is_some_and(|r| r.phase == RolloutPhase::Paused);
    if paused {
        // A paused rollout keeps its spares (at most the surge) until it goes on.
        assert!(ids.len() <= N as usize + 1, "{what}: more than the surge: {list:#?}\n{r:?}");
        return;
    }
    let Some(r) = r else { return };
    if checks("spares") {
        // A failed rollout keeps the surge instances that failed it, stopped, for their logs
        // (issue 43): nothing else beside the app's instances, and nothing of them running.
        let own: Vec<u32> = ids.iter().copied().filter(|i| !r.kept.contains(i)).collect();
        assert_eq!(own, (0..N).collect::<Vec<_>>(), "{what}: exactly the app's instances, no spare: {list:#?}\n{r:?}");
        for s in list.iter().filter(|s| r.kept.contains(&s.id.index)) {
            assert!(s.pid.is_none() && s.state.kind() != Kind::Running, "{what}: a kept instance runs: {s:?}");
        }
        assert!(r.spares.is_empty(), "{what}: spares left: {r:?}");
        let free = d.client.node().await.unwrap().ports.free;
        assert_eq!(free, model.free_ports, "{what}: a port is held by nothing (spares gone)");
    }
    let current_hash = hash_of(d, r.target).await;
    let before = model.last_good.clone();
    if r.phase == RolloutPhase::Complete {
        for s in &list {
            assert_eq!(
                (s.revision, s.run_revision),
                (r.target, r.target),
                "{what}: {} not on {}: {r:?}",
                s.id,
                r.target
            );
        }
        model.last_good = current_hash.clone();
    }
    if r.rollback && checks("lastgood") {
        assert_eq!(current_hash, before, "{what}: autoRollback went elsewhere than the last good revision: {r:?}");
    }
}

/// After an apply of a good revision with every instance able to be ready: it completes.
async fn check_good_completes(d: &Daemon, model: &Model, revision: u64, what: &str) {
    let r = rollout(d).await.unwrap();
    if model.flipped.is_empty() && !model.paused && checks("completes") {
        assert!(
            r.target == revision && r.phase == RolloutPhase::Complete,
            "{what}: a good revision on a healthy app did not roll out: {r:?}\n{}",
            d.log()
        );
    }
}

/// `rollout status -w` against the revision the last change concerns.
fn check_status_exit(d: &Daemon, model: &Model, applied: u64, completed: bool, what: &str) {
    if model.paused || !checks("status") {
        return;
    }
    let (code, out, err) = d.cli(&["rollout", "status", "test/m", "-w", "--timeout", "5"]);
    let want = if completed { 0 } else { 6 };
    assert_eq!(code, want, "{what}: rollout status -w of revision {applied}: {out}{err}");
}

/// The listings a daemon restart must leave as they are, and the pids of the instances running
/// their revision.
async fn listings(d: &Daemon) -> (Value, BTreeMap<u32, Option<i32>>) {
    let list = d.client.list(&[]).await.unwrap();
    let steady: BTreeMap<u32, Option<i32>> = list
        .iter()
        .filter(|s| s.state.kind() == Kind::Running && s.run_revision == s.revision)
        .map(|s| (s.id.index, s.pid))
        .collect();
    let ls: Vec<Value> = list.iter().map(|s| json!([s.id.index, s.revision, s.run_revision])).collect();
    let mut r = serde_json::to_value(rollout(d).await).unwrap();
    if let Some(o) = r.as_object_mut() {
        o.remove("updatedMs");
    }
    let history = serde_json::to_value(d.client.revisions("test", "m").await.unwrap()).unwrap();
    (json!({"ls": ls, "rollout": r, "history": history}), steady)
}

async fn run_case(case: Case, seed_note: &str) {
    // Every revision kept: autoRollback's target is never pruned in a long sequence.
    let mut d = Daemon::start_with("rollout-model", "revision_history = 100\n");
    let mut model = Model {
        case: case.clone(),
        dir: d.path().to_path_buf(),
        next_version: 0,
        good_hash: BTreeMap::new(),
        flipped: BTreeSet::new(),
        last_good: String::new(),
        paused: false,
        auto_rollback: false,
        free_ports: 0,
    };
    let first = model.spec(true, false);
    d.apply_json(&first).await;
    model.good_hash.insert(hash_of(&d, 1).await, true);
    model.last_good = hash_of(&d, 1).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while unready_now(&d).await > 0 {
        assert!(Instant::now() < deadline, "the first revision never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    model.free_ports = d.client.node().await.unwrap().ports.free;
    println!("case {seed_note}: {case:?}");
    for (step, op) in case.ops.iter().enumerate() {
        let what = format!("{seed_note} step {step} {op:?} of {:?}", case.ops);
        println!("{what}");
        let unready_before = unready_now(&d).await;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampling = sampler(&d, stop.clone());
        // The revision this op asks for, whether good, to check after settling.
        let mut asked: Option<(u64, bool)> = None;
        match op {
            Op::Apply { good, auto_rollback, pause_after_ms } => {
                let spec = model.spec(*good, *auto_rollback);
                // The revision it makes (an autoRollback may make the next one at once).
                let revision = newest(&d).await + 1;
                d.apply_json(&spec).await;
                let r = rollout(&d).await;

                model.good_hash.insert(hash_of(&d, revision).await, *good);
                if let Some(ms) = pause_after_ms {
                    tokio::time::sleep(Duration::from_millis(*ms)).await;
                    let (code, _, _) = d.cli(&["rollout", "pause", "test/m"]);
                    model.paused = code == 0 && rollout(&d).await.is_some_and(|r| r.phase == RolloutPhase::Paused);
                } else {
                    model.paused = model.paused && r.is_some_and(|r| r.phase == RolloutPhase::Paused);
                }
                asked = Some((revision, *good));
            }
            Op::Undo => {
                let before = newest(&d).await;
                let (code, out, err) = d.cli(&["rollout", "undo", "test/m"]);
                // The revision it made, if any (an autoRollback may make the next one at once).
                let revision = before + 1;
                if code == 0 && newest(&d).await == before {
                    println!("  undo changed nothing: {out}");
                } else if code == 0 {
                    let hash = hash_of(&d, revision).await;
                    let good = model.good_hash.get(&hash).copied().unwrap_or(false);
                    model.good_hash.insert(hash, good);
                    model.paused = model.paused && rollout(&d).await.is_some_and(|r| r.phase == RolloutPhase::Paused);
                    asked = Some((revision, good));
                } else {
                    println!("  undo refused: {out}{err}");
                }
            }
            Op::Resume => {
                let (code, _, _) = d.cli(&["rollout", "resume", "test/m"]);
                if code == 0 {
                    model.paused = false;
                    let r = rollout(&d).await.unwrap();
                    let good = model.good_hash.get(&hash_of(&d, r.target).await).copied().unwrap_or(false);
                    asked = Some((r.target, good));
                }
            }
            Op::Crash(k) => {
                let list = d.client.list(&[]).await.unwrap();
                if let Some(pid) = list.iter().find(|s| s.id.index == *k).and_then(|s| s.pid) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                }
            }
            Op::Flip(k) => {
                let file = model.dir.join(format!("unready-{k}"));
                if model.flipped.remove(k) {
                    std::fs::remove_file(&file).unwrap();
                } else {
                    std::fs::write(&file, "").unwrap();
                    model.flipped.insert(*k);
                }
                // Until its probe has seen it (a few failures in a row make it unready), unless
                // it does not run (a bad revision's).
                let want = !model.flipped.contains(k);
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline {
                    let list = d.client.list(&[]).await.unwrap();
                    let s = list.iter().find(|s| s.id.index == *k);
                    if s.is_none_or(|s| s.state.kind() != Kind::Running || s.ready == want) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Op::Age => tokio::time::sleep(Duration::from_secs(DEADLINE_SECS.max(MIN_READY_SECS) + 1)).await,
            Op::Restart(kill9) => {
                settle(&d, &model, &what).await;
                let (before, steady) = listings(&d).await;
                d.restart(*kill9);
                tokio::time::sleep(Duration::from_secs(2)).await;
                settle(&d, &model, &what).await;
                let (after, now) = listings(&d).await;
                for (id, pid) in steady.iter().filter(|_| checks("restart")) {
                    assert_eq!(
                        now.get(id),
                        Some(pid),
                        "{what}: instance {id} on its revision was restarted\n{}",
                        d.log()
                    );
                }
                if checks("restart") {
                    assert_eq!(before, after, "{what}: a listing changed across the restart");
                }
            }
            Op::KillAt(point, n) => {
                d.env = vec![("STEWARD_FAILPOINTS".into(), format!("{point}@{n}"))];
                d.restart(false);
                // Bad when the point is the failure's: only a failing rollout passes it.
                let good = *point != "rollout-failed-recorded";
                // The failure's point: with autoRollback, whose rollback the kill cuts short.
                let spec = model.spec(good, !good);
                let revision = newest(&d).await + 1;
                let _ = d.client.apply(&spec.to_string(), steward::spec::Format::Json).await;
                let pid = d.pid();
                let deadline = Instant::now() + Duration::from_secs(DEADLINE_SECS * 3);
                while common::alive(pid) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                d.env.clear();
                d.kill9();
                d.spawn();
                model.good_hash.insert(hash_of(&d, revision).await, good);
                model.paused = false;
                asked = Some((revision, good));
            }
        }
        settle(&d, &model, &what).await;
        model.paused = rollout(&d).await.is_some_and(|r| r.phase == RolloutPhase::Paused);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = sampling.await.unwrap();
        // A restart's own gap (the daemon answering nothing) leaves no samples, not false ones.
        let allowed = case.max_unavailable as usize + unready_before;
        let crashed = matches!(op, Op::Crash(_) | Op::Flip(_));
        if !crashed && checks("budget") {
            assert!(seen.max_unready <= allowed, "{what}: {} unready, {allowed} allowed: {seen:?}", seen.max_unready);
        }
        assert!(seen.max_running <= (N + 1) as usize, "{what}: more running than the count and the surge: {seen:?}");
        check_settled(&d, &mut model, &what).await;
        if let Some((revision, good)) = asked {
            if good {
                check_good_completes(&d, &model, revision, &what).await;
            }
            let r = rollout(&d).await.unwrap();
            // Rolled back (the app's rollout is then a later revision's): it failed.
            let completed = r.target == revision && r.phase == RolloutPhase::Complete;
            check_status_exit(&d, &model, revision, completed, &what);
        }
    }
}

#[test]
fn the_rollout_engine_keeps_its_invariants() {
    let cases: u32 = std::env::var("STEWARD_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let steps: usize = std::env::var("STEWARD_MODEL_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(7);
    let seed: u64 = std::env::var("STEWARD_MODEL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(42);
    println!("STEWARD_MODEL_SEED={seed} STEWARD_MODEL_CASES={cases} STEWARD_MODEL_STEPS={steps}");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config { cases, max_shrink_iters: 0, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let n = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&case(steps), |c| {
        let note = format!("seed {seed} case {}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(run_case(c, &note))));
        match outcome {
            Ok(()) => Ok(()),
            Err(e) => {
                let msg =
                    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
                Err(TestCaseError::fail(msg.unwrap_or_default()))
            }
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
