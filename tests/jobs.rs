//! Jobs on the real stewardd (issue 20, seed 003 Job): runs up to parallelism at once until
//! completions succeeded; a run past its active deadline is stopped and counts as failed; the
//! backoff limit ends the job Failed, with growing delays between runs; a kill -9 in the
//! middle of a run re-adopts it (never started twice), and a run that ended while the daemon
//! was down is known by the exit code its wrapper recorded.

mod common;

use common::{spec, Daemon};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use steward::protocol::{JobBody, JobPhase, RunPhase};
use steward::spec::Format;
use steward::supervisor::state::Kind;

fn job(name: &str, start: &str, job: Value, policy: &str) -> Value {
    let mut doc = spec(name, 1, json!({"startCmd": start, "startGracePeriod": 0}), json!({}));
    doc["job"] = job;
    doc["restartPolicy"] = json!({"policy": policy, "interval": 0});
    doc
}

async fn wait_job(d: &Daemon, name: &str, secs: u64, pred: impl Fn(&JobBody) -> bool) -> JobBody {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(j) = d.client.job("test", name).await {
            if pred(&j) {
                return j;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {name}: {:#?}\n{}",
            d.client.job("test", name).await,
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn five_completions_two_at_a_time() {
    let d = Daemon::start("job-parallel");
    let marks = d.path().join("marks");
    let start = format!("echo start >> {0}; sleep 0.4; echo end >> {0}", marks.display());
    d.apply_json(&job("batch", &start, json!({"completions": 5, "parallelism": 2}), "Never")).await;
    let stop = Arc::new(AtomicBool::new(false));
    let sampling = {
        let (client, stop) = (d.client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut most = 0;
            while !stop.load(Ordering::Relaxed) {
                let list = client.list(&[("name", "batch")]).await.unwrap();
                most = most.max(list.iter().filter(|s| s.state.has_processes()).count());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            most
        })
    };
    let j = wait_job(&d, "batch", 30, |j| j.status.phase != JobPhase::Running).await;
    stop.store(true, Ordering::Relaxed);
    assert_eq!(j.status.phase, JobPhase::Complete, "{j:#?}");
    let most = sampling.await.unwrap();
    assert!((1..=2).contains(&most), "{most} runs at once");
    assert_eq!((j.status.succeeded, j.status.failed, j.status.runs.len()), (5, 0, 5), "{j:#?}");
    assert!(j.status.runs.iter().all(|r| r.phase == RunPhase::Succeeded && r.exit_code == Some(0)));
    let text = std::fs::read_to_string(&marks).unwrap();
    assert_eq!((text.matches("start").count(), text.matches("end").count()), (5, 5), "{text}");
    let (code, out, err) = d.cli(&["job", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("test/batch") && out.contains("complete") && out.contains("5/5"), "{out}");
    let (code, out, _) = d.cli(&["job", "status", "test/batch"]);
    assert_eq!(code, 0);
    assert!(out.contains("5 of 5 succeeded"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn active_deadline_and_backoff_limit_fail_the_job() {
    let d = Daemon::start("job-limits");
    // Each run would sleep 100 s: stopped at 1 s. Two failures are over backoffLimit 1.
    let limits = json!({"active": 1, "backoffLimit": 1, "backoffSeconds": 0});
    d.apply_json(&job("slow", "echo working; exec sleep 100", limits, "Never")).await;
    let j = wait_job(&d, "slow", 30, |j| j.status.phase != JobPhase::Running).await;
    let JobPhase::Failed { reason } = &j.status.phase else { panic!("{j:#?}") };
    assert!(reason.contains("over its backoffLimit of 1"), "{reason}");
    assert_eq!(j.status.runs.len(), 2, "{j:#?}");
    for r in &j.status.runs {
        assert_eq!(r.phase, RunPhase::Failed);
        assert!(r.reason.contains("active deadline (1 s)"), "{r:?}");
        let took = r.ended_ms.unwrap() - r.started_ms;
        assert!((900..10_000).contains(&took), "stopped at about 1 s: {took} ms");
    }
    // The last failed run's output is there for `job logs`.
    let (code, out, err) = d.cli(&["job", "logs", "test/slow"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("working"), "{out}");

    // Failing runs (exit 3): retried after 1 s, then 2 s, until backoffLimit 2 is passed.
    d.apply_json(&job("failing", "echo no >&2; exit 3", json!({"backoffLimit": 2, "backoffSeconds": 1}), "Never"))
        .await;
    let j = wait_job(&d, "failing", 30, |j| j.status.phase != JobPhase::Running).await;
    assert!(matches!(j.status.phase, JobPhase::Failed { .. }), "{j:#?}");
    let runs = &j.status.runs;
    assert_eq!(runs.len(), 3, "{j:#?}");
    assert!(runs.iter().all(|r| r.exit_code == Some(3) && r.reason == "exited 3"), "{runs:#?}");
    let gap = |a: usize, b: usize| runs[b].started_ms - runs[a].ended_ms.unwrap();
    assert!(gap(0, 1) >= 900 && gap(1, 2) >= 1900, "growing delays: {} ms, {} ms", gap(0, 1), gap(1, 2));
    // Bad input is refused with the field.
    let mut bad = job("bad", "true", json!({"parallelism": 0}), "Always");
    bad["strategy"] = json!({"maxSurge": 2});
    let file = d.path().join("bad.json");
    std::fs::write(&file, bad.to_string()).unwrap();
    let (code, _, err) = d.cli(&["apply", "--file", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    for want in ["job.parallelism", "restartPolicy.policy", "strategy: a job does not roll out"] {
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_9_neither_loses_nor_repeats_a_run() {
    let mut d = Daemon::start("job-kill9");
    let marks = d.path().join("marks");
    let start = format!("echo started >> {}; sleep 1.5", marks.display());
    d.apply_json(&job("steady", &start, json!({"completions": 3}), "Never")).await;
    // Killed while run 0 is going; back before it ends: re-adopted, its end seen after. Killed
    // once its process is recorded: a kill between the spawn and that commit starts it again
    // (docs/design.md, "A crash during a start"), which this test is not about.
    wait_job(&d, "steady", 10, |j| j.active == 1).await;
    d.wait_state(&common::id("test", "steady", 0), Kind::Running, 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    d.kill9();
    tokio::time::sleep(Duration::from_millis(300)).await;
    d.spawn();
    // Killed while run 1 is going; back after it ended: its wrapper's exit code tells how.
    wait_job(&d, "steady", 20, |j| j.status.runs.len() == 2 && j.active == 1).await;
    d.wait_state(&common::id("test", "steady", 1), Kind::Running, 10).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    d.kill9();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    d.spawn();
    let j = wait_job(&d, "steady", 30, |j| j.status.phase != JobPhase::Running).await;
    assert_eq!(j.status.phase, JobPhase::Complete, "{j:#?}\n{}", d.log());
    assert_eq!((j.status.succeeded, j.status.runs.len()), (3, 3), "{j:#?}");
    assert!(j.status.runs.iter().all(|r| r.exit_code == Some(0)), "{j:#?}");
    let text = std::fs::read_to_string(&marks).unwrap();
    assert_eq!(text.lines().count(), 3, "each run started once: {text}\n{}", d.log());
    // And the listing is the same across one more restart.
    let before = d.client.job("test", "steady").await.unwrap();
    d.restart(true);
    assert_eq!(d.client.job("test", "steady").await.unwrap(), before);

    // Deleting a running job's app leaves nothing: no run starts once the delete began.
    d.apply_json(&job("endless", "exec sleep 100", json!({"completions": 50, "parallelism": 3}), "Never")).await;
    wait_job(&d, "endless", 10, |j| j.active == 3).await;
    let (code, _, err) = d.cli(&["delete", "test/endless"]);
    assert_eq!(code, 0, "{err}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(d.client.list(&[("name", "endless")]).await.unwrap().is_empty());
    assert!(d.client.job("test", "endless").await.is_err(), "the app is gone");
}

/// A kill -9 right after a run's spawn, before its record says it started (the failpoint
/// `launch-spawned`): the next daemon takes the run up where it is — still going, or ended
/// with the code its wrapper wrote — and never starts its command again.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_between_a_runs_spawn_and_its_record_does_not_start_it_again() {
    let mut d = Daemon::start("job-spawn-kill");
    // Killed after the spawn: the run is going, or has ended (0 or 3), when the daemon is back.
    // Killed after the start's commit and before the spawn: nothing of the run began.
    for (name, point, script, back_after_end, code) in [
        ("going", "launch-spawned@1", "sleep 1.5", false, 0),
        ("ended", "launch-spawned@1", "exit 0", true, 0),
        ("failed", "launch-spawned@1", "exit 3", true, 3),
        ("unborn", "job-start-committed@1", "exit 0", false, 0),
    ] {
        let marks = d.path().join(format!("{name}.marks"));
        d.env = vec![("STEWARD_FAILPOINTS".into(), point.into())];
        d.restart(true);
        let start = format!("echo started >> {}; {script}", marks.display());
        // Answered before its run's spawn (or cut by the kill): the failpoint decides.
        // backoffLimit 0: a failed run is not retried, so one run is all there may be.
        let doc = job(name, &start, json!({"backoffLimit": 0}), "Never");
        let _ = d.client.apply(&doc.to_string(), Format::Json).await;
        let pid = d.pid();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while common::alive(pid) {
            assert!(std::time::Instant::now() < deadline, "{name}: the failpoint was not reached\n{}", d.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The run's command has begun (and, for the short ones, ended) before the daemon is back;
        // or it never was spawned.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while point.starts_with("launch-spawned") && std::fs::read_to_string(&marks).unwrap_or_default().is_empty() {
            assert!(std::time::Instant::now() < deadline, "{name}: the run never began");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !point.starts_with("launch-spawned") {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!marks.exists(), "{name}: spawned after all");
        }
        if back_after_end {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        d.env.clear();
        d.spawn();
        let j = wait_job(&d, name, 30, |j| j.status.phase != JobPhase::Running).await;
        let text = std::fs::read_to_string(&marks).unwrap();
        assert_eq!(text.lines().count(), 1, "{name}: the run started once: {text}\n{}", d.log());
        assert_eq!(j.status.runs.len(), 1, "{name}: {j:#?}");
        assert_eq!(j.status.runs[0].exit_code, Some(code), "{name}: {j:#?}\n{}", d.log());
        match code {
            0 => assert_eq!(j.status.phase, JobPhase::Complete, "{name}: {j:#?}"),
            _ => assert!(matches!(j.status.phase, JobPhase::Failed { .. }), "{name}: {j:#?}"),
        }
    }
}

/// An OnFailure run that ends while the daemon is away (its status told to another parent):
/// its wrapper's record says how. A success is not restarted as an unknown end would be, and a
/// failure is restarted and counted.
#[tokio::test(flavor = "multi_thread")]
async fn an_on_failure_run_that_ended_while_the_daemon_was_away_ends_by_its_record() {
    let mut d = Daemon::start("job-away");
    for (name, code) in [("good", 0), ("bad", 4)] {
        let marks = d.path().join(format!("{name}.marks"));
        let start = format!("echo started >> {}; sleep 1; exit {code}", marks.display());
        d.apply_json(&job(name, &start, json!({"backoffLimit": 0}), "OnFailure")).await;
        wait_job(&d, name, 10, |j| j.active == 1).await;
        d.wait_state(&common::id("test", name, 0), Kind::Running, 10).await;
        d.kill9();
        // Its run ends (and records its code) while no daemon watches.
        tokio::time::sleep(Duration::from_millis(2000)).await;
        d.spawn();
        let j = wait_job(&d, name, 30, |j| j.status.phase != JobPhase::Running).await;
        let text = std::fs::read_to_string(&marks).unwrap();
        match code {
            0 => {
                assert_eq!(j.status.phase, JobPhase::Complete, "{name}: {j:#?}\n{}", d.log());
                assert_eq!(text.lines().count(), 1, "{name}: a success was run again: {text}\n{}", d.log());
            }
            _ => {
                assert!(matches!(j.status.phase, JobPhase::Failed { .. }), "{name}: {j:#?}");
                assert_eq!(j.status.runs[0].restarts, 1, "{name}: its failure counted: {j:#?}");
            }
        }
    }
}
