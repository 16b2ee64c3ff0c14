//! Cron jobs on the real stewardd (issue 20, seed 003 CronJob), on seconds-level rules: Forbid
//! skips a tick while a run lasts, Replace stops the old run, Allow overlaps; a daemon down across
//! ticks starts the latest once on its return within the starting deadline and counts it missed
//! beyond; history limits remove old runs; suspend stops new ticks, trigger starts one.

mod common;

use common::{spec, Daemon};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use steward::protocol::{CronBody, JobPhase, RunPhase};

fn cron(name: &str, start: &str, cron: Value) -> Value {
    let mut doc = spec(name, 1, json!({"startCmd": start, "startGracePeriod": 0}), json!({}));
    doc["cronJob"] = cron;
    doc["restartPolicy"] = json!({"policy": "Never"});
    doc
}

async fn wait_cron(d: &Daemon, name: &str, secs: u64, pred: impl Fn(&CronBody) -> bool) -> CronBody {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(c) = d.client.cron("test", name).await {
            if pred(&c) {
                return c;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cron {name}: {:#?}\n{}",
            d.client.cron("test", name).await,
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many runs of `name` have processes now.
async fn with_processes(d: &Daemon, name: &str) -> usize {
    let list = d.client.list(&[("name", name)]).await.unwrap();
    list.iter().filter(|s| s.state.has_processes()).count()
}

/// The most runs of `name` seen going at once until `stop`.
fn most_at_once(d: &Daemon, name: &'static str, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    let client = d.client.clone();
    tokio::spawn(async move {
        let mut most = 0;
        while !stop.load(Ordering::Relaxed) {
            let list = client.list(&[("name", name)]).await.unwrap();
            most = most.max(list.iter().filter(|s| s.state.has_processes()).count());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        most
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn policies_forbid_replace_and_allow() {
    let d = Daemon::start("cron-policies");
    // Every 2 s, each run 3.5 s long.
    for (name, policy) in [("forbid", "Forbid"), ("replace", "Replace"), ("allow", "Allow")] {
        let doc = cron(
            name,
            "exec sleep 3.5",
            json!({"rule": "*/2 * * * * *", "policy": policy, "history": {"success": 5, "fail": 5}}),
        );
        d.apply_json(&doc).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let samplers: Vec<_> =
        ["forbid", "replace", "allow"].into_iter().map(|n| most_at_once(&d, n, stop.clone())).collect();
    let forbid = wait_cron(&d, "forbid", 30, |c| c.status.started >= 2 && c.status.skipped >= 1).await;
    let replace = wait_cron(&d, "replace", 30, |c| c.status.started >= 3).await;
    let allow = wait_cron(&d, "allow", 30, |c| c.status.started >= 3).await;
    stop.store(true, Ordering::Relaxed);
    let most: Vec<usize> = futures_util::future::join_all(samplers).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(most[0], 1, "Forbid never overlaps: {forbid:#?}");
    assert_eq!(most[1], 1, "Replace never overlaps (it stops the old run): {replace:#?}");
    assert!(most[2] >= 2, "Allow overlaps: {}", most[2]);
    let replaced = replace
        .status
        .executions
        .iter()
        .filter(|e| matches!(&e.job.phase, JobPhase::Failed { reason } if reason.contains("replaced")))
        .count();
    assert!(replaced >= 1, "{replace:#?}");
    assert!(
        replace.status.executions.iter().flat_map(|e| &e.job.runs).any(|r| r.reason.contains("replaced it")),
        "{replace:#?}"
    );
    let (code, out, err) = d.cli(&["cron", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("test/forbid") && out.contains("*/2 * * * * *"), "{out}");
    let _ = allow;
}

#[tokio::test(flavor = "multi_thread")]
async fn ticks_missed_while_down_start_once_or_are_missed_past_the_deadline_and_failed() {
    let mut d = Daemon::start("cron-down");
    let marks = d.path().join("marks");
    let start = format!("echo ran >> {}", marks.display());
    // Ticks 10 s apart: the daemon's restart may take anything from 0 to 7 s without changing
    // what is due when it is back.
    d.apply_json(&cron("lenient", &start, json!({"rule": "*/10 * * * * *"}))).await;
    d.apply_json(&cron("strict", "true", json!({"rule": "*/10 * * * * *", "deadline": 1}))).await;
    // Down right after a tick T, back at T + 23 s: T + 10 and T + 20 fell due; T + 20 is 3 s old.
    let c = wait_cron(&d, "lenient", 30, |c| c.status.started >= 1).await;
    let tick = c.status.last_tick_ms.unwrap();
    let strict_before = wait_cron(&d, "strict", 10, |c| c.status.last_tick_ms == Some(tick)).await.status;
    d.kill9();
    let back_at = tick + 23_000;
    tokio::time::sleep(Duration::from_millis(back_at.saturating_sub(steward::clock::now_ms()))).await;
    d.spawn();
    let c = wait_cron(&d, "lenient", 10, |c| c.status.last_tick_ms == Some(tick + 20_000)).await;
    assert_eq!(c.status.started, 2, "the latest due tick started once: {c:#?}");
    assert_eq!(c.status.missed, 1, "the one before it is missed: {c:#?}");
    let s = wait_cron(&d, "strict", 10, |c| c.status.missed > strict_before.missed).await;
    assert_eq!(s.status.started, strict_before.started, "past its 1 s deadline nothing starts: {s:#?}");
    assert_eq!(s.status.missed - strict_before.missed, 2, "{s:#?}");
    // Seed 003: a tick missed past its starting deadline counts as failed too.
    assert_eq!(s.status.failed - strict_before.failed, 2, "{s:#?}");
    assert!(s.status.last_failure.contains("missed the 1 s starting deadline"), "{s:#?}");
    assert_eq!(c.status.failed, 0, "without a deadline a tick passed over is missed, not failed: {c:#?}");
    // Each start ran once (a later tick may have started meanwhile).
    let c = wait_cron(&d, "lenient", 10, |c| c.status.succeeded >= 2).await;
    let text = std::fs::read_to_string(&marks).unwrap();
    let lines = text.lines().count() as u32;
    assert!(lines >= 2 && lines <= c.status.started + 1, "{lines} runs for {} starts: {text}", c.status.started);
}

#[tokio::test(flavor = "multi_thread")]
async fn history_limits_suspend_and_trigger() {
    let d = Daemon::start("cron-history");
    let doc = cron("tidy", "echo out; exit 0", json!({"rule": "* * * * * *", "history": {"success": 1, "fail": 0}}));
    d.apply_json(&doc).await;
    let c = wait_cron(&d, "tidy", 20, |c| c.status.succeeded >= 4).await;
    let finished = c.status.executions.iter().filter(|e| e.job.phase != JobPhase::Running).count();
    assert!(finished <= 1, "one successful tick kept: {c:#?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let instances = d.client.list(&[("name", "tidy")]).await.unwrap();
    assert!(instances.len() <= 3, "older runs' instances are removed: {instances:#?}");

    let (code, _, err) = d.cli(&["cron", "suspend", "test/tidy"]);
    assert_eq!(code, 0, "{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = d.client.cron("test", "tidy").await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = d.client.cron("test", "tidy").await.unwrap();
    assert!(later.suspended);
    assert_eq!(later.status.started, held.status.started, "no tick starts while suspended");
    let (code, out, err) = d.cli(&["cron", "trigger", "test/tidy"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(triggered)"), "{out}");
    let (code, _, err) = d.cli(&["cron", "resume", "test/tidy"]);
    assert_eq!(code, 0, "{err}");
    wait_cron(&d, "tidy", 10, |c| c.status.started >= later.status.started + 3).await;

    // Bad rules are refused with their field.
    let bad = cron("bad", "true", json!({"rule": "61 * * * *", "timeZone": "Mars/Base"}));
    let file = d.path().join("bad.json");
    std::fs::write(&file, bad.to_string()).unwrap();
    let (code, _, err) = d.cli(&["apply", "--file", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("cronJob.timeZone"), "{err}");
}

/// A Forbid lock is the durable status: killed -9 while a tick's run goes, the daemon comes back
/// to the same run (re-adopted) and skips the ticks that fall during it — never two at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_forbid_lock_holds_across_a_kill_9() {
    let mut d = Daemon::start("cron-forbid-kill9");
    let marks = d.path().join("marks");
    let start = format!("echo started >> {}; sleep 4", marks.display());
    let doc = cron("locked", &start, json!({"rule": "*/2 * * * * *", "policy": "Forbid", "history": {"success": 5}}));
    d.apply_json(&doc).await;
    wait_cron(&d, "locked", 10, |c| c.status.started == 1).await;
    let stop = Arc::new(AtomicBool::new(false));
    d.kill9();
    tokio::time::sleep(Duration::from_millis(300)).await;
    d.spawn();
    let sampling = most_at_once(&d, "locked", stop.clone());
    // Ticks fell during the run: skipped, not started beside it.
    let c = wait_cron(&d, "locked", 20, |c| c.status.skipped >= 1 && c.status.succeeded >= 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    assert_eq!(sampling.await.unwrap(), 1, "never two runs at once: {c:#?}");
    let text = std::fs::read_to_string(&marks).unwrap();
    let first = c.status.executions.first().expect("the first tick is kept");
    assert_eq!(first.job.runs.len(), 1, "the first tick's run was re-adopted, not started again: {c:#?}\n{text}");
}

/// `steward cron trigger` is a tick like the rule's (issue 42, defect 6): it obeys the cron job's
/// concurrencyPolicy while an earlier tick's run goes. Forbid refuses it (exit 1, naming the run
/// going); Replace stops the run going before the new one starts; Allow runs both. `--force`
/// starts one whatever the policy.
#[tokio::test(flavor = "multi_thread")]
async fn trigger_obeys_the_concurrency_policy_unless_forced() {
    let d = Daemon::start("cron-trigger-policy");
    // A rule that does not tick during the test: every run here is a trigger's.
    for (name, policy) in [("forbid", "Forbid"), ("replace", "Replace"), ("allow", "Allow")] {
        let doc =
            cron(name, "exec sleep 1000", json!({"rule": "0 0 0 1 1 *", "policy": policy, "history": {"fail": 5}}));
        d.apply_json(&doc).await;
    }
    let running = |c: &CronBody| c.status.executions.iter().filter(|e| e.job.phase == JobPhase::Running).count();
    let active_runs = |c: &CronBody| {
        c.status.executions.iter().flat_map(|e| &e.job.runs).filter(|r| r.phase == RunPhase::Active).count()
    };
    for name in ["forbid", "replace", "allow"] {
        let (code, _, err) = d.cli(&["cron", "trigger", &format!("test/{name}")]);
        assert_eq!(code, 0, "{name}: {err}");
        wait_cron(&d, name, 20, |c| active_runs(c) == 1).await;
    }

    // Forbid: refused, naming the run that goes; nothing new starts.
    let before = d.client.cron("test", "forbid").await.unwrap();
    let going = before.status.executions[0].job.runs[0].index;
    let (code, out, err) = d.cli(&["cron", "trigger", "test/forbid"]);
    assert_eq!(code, 1, "Forbid refuses a trigger while a run goes: {out}{err}");
    assert!(err.contains(&format!("test/forbid/{going}")) && err.contains("Forbid"), "{err}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = d.client.cron("test", "forbid").await.unwrap();
    assert_eq!((after.status.started, running(&after)), (1, 1), "{after:#?}");
    // --force: a second run beside it.
    let (code, out, err) = d.cli(&["cron", "trigger", "--force", "test/forbid"]);
    assert_eq!(code, 0, "{out}{err}");
    let forced = wait_cron(&d, "forbid", 20, |c| active_runs(c) == 2).await;
    assert_eq!(running(&forced), 2, "{forced:#?}");

    // Replace: the run going is stopped, and only then the new one starts.
    let stop = Arc::new(AtomicBool::new(false));
    let sampling = most_at_once(&d, "replace", stop.clone());
    let (code, out, err) = d.cli(&["cron", "trigger", "test/replace"]);
    assert_eq!(code, 0, "{out}{err}");
    let replaced = wait_cron(&d, "replace", 20, |c| c.status.started == 2 && active_runs(c) == 1).await;
    stop.store(true, Ordering::Relaxed);
    assert_eq!(sampling.await.unwrap(), 1, "Replace never runs both: {replaced:#?}");
    let first = &replaced.status.executions[0];
    assert!(matches!(&first.job.phase, JobPhase::Failed { reason } if reason.contains("replaced")), "{replaced:#?}");
    // The new run is Active from its creation, before its instance has a process: wait for it.
    // Never two meanwhile: the wait keeps the check it replaces.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let going = with_processes(&d, "replace").await;
        let list = || async { d.client.list(&[("name", "replace")]).await };
        assert!(going <= 1, "Replace runs both: {:#?}", list().await);
        if going == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the new run never started: {:#?}", list().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Allow: both go.
    let (code, out, err) = d.cli(&["cron", "trigger", "test/allow"]);
    assert_eq!(code, 0, "{out}{err}");
    let allowed = wait_cron(&d, "allow", 20, |c| active_runs(c) == 2).await;
    assert_eq!(running(&allowed), 2, "{allowed:#?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while with_processes(&d, "allow").await < 2 {
        assert!(std::time::Instant::now() < deadline, "Allow runs both at once");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
