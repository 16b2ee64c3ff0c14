//! Rollouts gated by hooks (issue 19): `strategy.steps` with partitions, hooks and pauses, and
//! pre/post hooks, on the real stewardd with a real HTTP endpoint on 127.0.0.1 that the hooks
//! ask. A failing hook stops the rollout after its canary and rolls back; a passing one goes
//! through every step, also across a kill -9 at the hook; an inconclusive one pauses for an
//! operator; a failing pre hook moves nothing.

mod common;

use common::http::serve;
use common::Daemon;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use steward::protocol::{Rollout, RolloutPhase};

fn app(version: &str, strategy: Value) -> Value {
    common::spec(
        "gated",
        4,
        json!({"env": [{"name": "VERSION", "value": version}], "startCmd": "exec sleep 1000",
               "ports": [{"name": "http", "hostPort": 0}]}),
        json!({"strategy": strategy, "restartPolicy": {"policy": "Always", "interval": 0}}),
    )
}

/// A template asking `http://HOST:PORT/` for `{"value": N}`: Successful at 1, Failed at 2,
/// Inconclusive at anything else; `count` measurements `interval` apart.
fn put_template(d: &Daemon, count: u32, interval: &str) {
    let doc = json!({"kind": "HookTemplate", "metadata": {"name": "gate", "namespace": "test"},
        "spec": {"args": [{"name": "host"}, {"name": "port"}, {"name": "canary"}],
                 "metrics": [{"name": "value", "count": count, "interval": interval,
                              "successCondition": "asInt(result) == 1", "failureCondition": "asInt(result) == 2",
                              "provider": {"web": {"url": "http://{{ args.host }}:{{ args.port }}/{{ args.canary }}",
                                                   "jsonPath": "{$.value}"}}}]}});
    let file = d.path().join("gate.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let (code, out, err) = d.cli(&["hook", "template", "apply", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

fn hook(port: u16) -> Value {
    json!({"template": "gate", "args": [{"name": "host", "value": "${hostip}"}, {"name": "port", "value": port.to_string()},
                                         {"name": "canary", "value": "${instanceid}-${ports.http}"}]})
}

async fn wait_rollout(d: &Daemon, pred: impl Fn(&Rollout) -> bool, secs: u64) -> Rollout {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(r) = d.client.rollout("test", "gated").await.unwrap().filter(|r| pred(r)) {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rollout: {:?}\n{}",
            d.client.rollout("test", "gated").await,
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn all_on(d: &Daemon, revision: u64, secs: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let list = d.client.list(&[("name", "gated")]).await.unwrap();
        if list.len() == 4 && list.iter().all(|s| s.revision == revision && s.run_revision == revision && s.ready) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "not all on {revision}: {list:#?}\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Samples the most of the app's own instances (ids below 4: not the surge instance that covers
/// for the one being replaced) ever running revision 2 until `stop`.
fn most_on_2(d: &Daemon, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    let client = d.client.clone();
    tokio::spawn(async move {
        let mut most = 0;
        while !stop.load(Ordering::Relaxed) {
            let list = client.list(&[("name", "gated")]).await.unwrap();
            let on_2 = list.iter().filter(|s| s.id.index < 4 && s.run_revision == 2 && s.state.has_processes());
            most = most.max(on_2.count());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        most
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_hook_stops_the_rollout_after_its_canary_and_rolls_back() {
    let d = Daemon::start("gated-fail");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let port = {
        let seen = seen.clone();
        serve(move || {
            seen.lock().unwrap().push(());
            r#"{"value": 2}"#.to_string()
        })
        .await
    };
    put_template(&d, 1, "1s");
    let strategy =
        json!({"autoRollback": true, "steps": [{"partition": 1}, {"hook": hook(port)}, {"partition": "100%"}]});
    d.apply_json(&app("v1", strategy.clone())).await;
    all_on(&d, 1, 30).await;
    let stop = Arc::new(AtomicBool::new(false));
    let sampling = most_on_2(&d, stop.clone());
    d.apply_json(&app("v2", strategy)).await;
    // Failed at the hook, then rolled back as revision 3 (revision 1's spec).
    all_on(&d, 3, 60).await;
    stop.store(true, Ordering::Relaxed);
    assert_eq!(sampling.await.unwrap(), 1, "only the canary ever ran revision 2");
    let runs = d.client.hook_runs(Some("test"), Some("steward/app=test/gated")).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let run = d.client.hook_run("test", &runs[0].name, None).await.unwrap();
    assert_eq!(run.status.phase, steward::hooks::MetricPhase::Failed);
    // The canary's own values reached the URL: the lowest id on revision 2, and its port.
    let canary = d.client.status(&common::id("test", "gated", 0)).await.unwrap();
    let url = &run.status.metric_results[0].measurements[0].message;
    assert!(url.contains(&format!("GET http://127.0.0.1:{port}/0-")), "{url}");
    let _ = canary;
    let mut events = Vec::new();
    d.client
        .events(0, false, |e| {
            events.push(serde_json::to_value(&e.body).unwrap());
            true
        })
        .await
        .unwrap();
    let failed = events.iter().find(|e| e["type"] == "rolloutFailed").expect("a rolloutFailed event");
    assert!(failed["reason"].as_str().unwrap().contains("Failed"), "{failed}");
    assert!(events.iter().any(|e| e["type"] == "rolloutRolledBack" && e["to"] == 1));
    assert!(!seen.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_passing_hook_lets_every_step_through_also_across_a_kill_9() {
    let mut d = Daemon::start("gated-pass");
    let calls = Arc::new(AtomicU64::new(0));
    let port = {
        let calls = calls.clone();
        serve(move || {
            calls.fetch_add(1, Ordering::SeqCst);
            r#"{"value": 1}"#.to_string()
        })
        .await
    };
    put_template(&d, 3, "700ms");
    let strategy = json!({"steps": [{"partition": 1}, {"hook": hook(port)}, {"pause": 1}, {"partition": "50%"}],
                          "postHook": hook(port)});
    d.apply_json(&app("v1", strategy.clone())).await;
    all_on(&d, 1, 30).await;
    d.apply_json(&app("v2", strategy)).await;
    // At the hook (gate 1) with a measurement taken: the daemon is killed there.
    let r = wait_rollout(&d, |r| r.target == 2 && r.gate == 1 && calls.load(Ordering::SeqCst) >= 1, 30).await;
    assert!(r.message.starts_with("hook run test/gated-2-1-gate"), "{r:?}");
    let list = d.client.list(&[("name", "gated")]).await.unwrap();
    assert_eq!(list.iter().filter(|s| s.revision == 2).count(), 1, "the partition holds at 1: {list:#?}");
    d.kill9();
    d.spawn();
    let r = wait_rollout(&d, |r| r.phase == RolloutPhase::Complete, 90).await;
    assert_eq!(r.target, 2);
    all_on(&d, 2, 10).await;
    let runs = d.client.hook_runs(Some("test"), Some("steward/app=test/gated")).await.unwrap();
    assert_eq!(runs.len(), 2, "the step's hook and the post hook, the step's kept across the kill: {runs:#?}");
    for r in &runs {
        assert_eq!(r.phase, steward::hooks::MetricPhase::Successful, "{r:?}");
        assert_eq!(r.measurements, 3, "each run took its 3 measurements once: {r:?}");
    }
    let mut gates = Vec::new();
    d.client
        .events(0, false, |e| {
            let b = serde_json::to_value(&e.body).unwrap();
            if b["type"] == "rolloutGate" {
                gates.push(b["what"].as_str().unwrap().to_string());
            }
            true
        })
        .await
        .unwrap();
    assert_eq!(gates, ["hook gate", "pause 1 s", "partition 2", "partition 4", "hook gate"], "{gates:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inconclusive_hook_pauses_for_an_operator_and_a_failing_pre_hook_moves_nothing() {
    let d = Daemon::start("gated-inconclusive");
    let answer = Arc::new(AtomicU64::new(3));
    let port = {
        let answer = answer.clone();
        serve(move || format!(r#"{{"value": {}}}"#, answer.load(Ordering::SeqCst))).await
    };
    put_template(&d, 1, "1s");
    let strategy = json!({"steps": [{"partition": 2}, {"hook": hook(port)}]});
    d.apply_json(&app("v1", strategy.clone())).await;
    all_on(&d, 1, 30).await;
    d.apply_json(&app("v2", strategy)).await;
    let r = wait_rollout(&d, |r| r.phase == RolloutPhase::Paused, 30).await;
    assert!(r.message.contains("Inconclusive") && r.message.contains("resume"), "{r:?}");
    let list = d.client.list(&[("name", "gated")]).await.unwrap();
    assert_eq!(list.iter().filter(|s| s.revision == 2).count(), 2, "two moved, two wait: {list:#?}");
    let (code, out, err) = d.cli(&["rollout", "resume", "test/gated"]);
    assert_eq!(code, 0, "{out}{err}");
    wait_rollout(&d, |r| r.phase == RolloutPhase::Complete, 30).await;
    all_on(&d, 2, 10).await;

    // A pre hook that fails: nothing moves to revision 3.
    answer.store(2, Ordering::SeqCst);
    let strategy = json!({"preHook": hook(port)});
    d.apply_json(&app("v3", strategy)).await;
    let r = wait_rollout(&d, |r| r.target == 3 && matches!(r.phase, RolloutPhase::Failed { .. }), 30).await;
    assert!(matches!(&r.phase, RolloutPhase::Failed { reason } if reason.contains("Failed")), "{r:?}");
    let list = d.client.list(&[("name", "gated")]).await.unwrap();
    assert!(list.iter().all(|s| s.run_revision == 2), "no instance moved: {list:#?}");

    // A step naming a template that does not exist is refused at the apply, by its field.
    let doc = app("v4", json!({"steps": [{"hook": {"template": "nope"}}]}));
    let file = d.path().join("nope.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let (code, _, err) = d.cli(&["apply", "--file", file.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("strategy.steps[0].hook.template") && err.contains("no hook template test/nope"), "{err}");
}
