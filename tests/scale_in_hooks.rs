//! Hooks on scaling (issue 47): an app's `strategy.scaleIn` hook decides each removal a
//! scale-in asks for, on the real stewardd with a real HTTP endpoint on 127.0.0.1 that tells
//! each game server's players. A server with players is kept, one without is removed once its
//! run says so; a kill -9 in the middle loses and repeats nothing; resume runs a kept one's hook
//! again; scaling back cancels a removal; the time limit does what onTimeout says.

mod common;

use common::http::serve_targets;
use common::Daemon;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use steward::protocol::{DaemonEvent, EventBody, ScaleIn, ScaleInPhase};

/// Each ordinal's players, as its endpoint tells them.
type Players = Arc<Mutex<BTreeMap<u32, u32>>>;

/// An endpoint answering `/players/K` with `{"players": N}`.
async fn players_endpoint(players: &Players) -> u16 {
    let players = players.clone();
    serve_targets(move |target| {
        let ordinal: u32 = target.rsplit('/').next().and_then(|k| k.parse().ok()).unwrap_or(u32::MAX);
        let n = players.lock().unwrap().get(&ordinal).copied().unwrap_or(99);
        json!({"players": n}).to_string()
    })
    .await
}

/// The template: `count` measurements a second apart, Successful while no one plays.
fn put_template(d: &Daemon, count: u32) {
    let doc = json!({"kind": "HookTemplate", "metadata": {"name": "drained", "namespace": "test"},
        "spec": {"args": [{"name": "port"}, {"name": "ordinal"}],
                 "metrics": [{"name": "players", "count": count, "interval": "1s",
                              "successCondition": "asInt(result) == 0",
                              "provider": {"web": {"url": "http://127.0.0.1:{{ args.port }}/players/{{ args.ordinal }}",
                                                   "jsonPath": "{$.players}"}}}]}});
    let file = d.path().join("drained.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let (code, out, err) = d.cli(&["hook", "template", "apply", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

fn world(instances: u32, port: u16, scale_in: Value) -> Value {
    let mut hook = json!({"hook": {"template": "drained", "args": [
        {"name": "port", "value": port.to_string()}, {"name": "ordinal", "value": "${instanceid}"}]}});
    if let (Some(h), Value::Object(extra)) = (hook.as_object_mut(), scale_in) {
        h.extend(extra);
    }
    common::spec(
        "world",
        instances,
        json!({"startCmd": "exec sleep 1000"}),
        json!({"strategy": {"scaleIn": hook}, "restartPolicy": {"policy": "Always", "interval": 0}}),
    )
}

async fn ordinals(d: &Daemon) -> Vec<u32> {
    let mut list: Vec<u32> = d.client.list(&[("name", "world")]).await.unwrap().iter().map(|s| s.id.index).collect();
    list.sort();
    list
}

async fn scale_in(d: &Daemon) -> Vec<ScaleIn> {
    d.client.rollout_status("test", "world").await.unwrap_or_else(|e| panic!("{e}\n{}", d.log())).scale_in
}

/// Waits until the app's scale-in list is `pred`'s.
async fn wait_scale_in(d: &Daemon, secs: u64, pred: impl Fn(&[ScaleIn]) -> bool) -> Vec<ScaleIn> {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let list = scale_in(d).await;
        if pred(&list) {
            return list;
        }
        assert!(std::time::Instant::now() < deadline, "scale-in: {list:#?}\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The scale-in events journaled, as (ordinal, step).
async fn steps(d: &Daemon) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    d.client
        .events(0, false, |ev| {
            if let EventBody::Daemon(DaemonEvent::ScaleIn { ordinal, step, .. }) = ev.body {
                out.push((ordinal, step));
            }
            true
        })
        .await
        .unwrap();
    out
}

async fn running(d: &Daemon, n: u32) {
    for i in 0..n {
        d.wait_state(&common::id("test", "world", i), steward::supervisor::state::Kind::Running, 30).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_in_removes_a_server_only_when_its_hook_says_its_players_are_gone() {
    let mut d = Daemon::start("scale-in");
    let players: Players = Arc::new(Mutex::new(BTreeMap::from([(0, 7), (1, 0), (2, 5)])));
    let port = players_endpoint(&players).await;
    put_template(&d, 3);
    d.apply_json(&world(3, port, json!({}))).await;
    running(&d, 3).await;

    // 3 → 1: both wait on their runs, still serving.
    d.apply_json(&world(1, port, json!({}))).await;
    let list = scale_in(&d).await;
    // Ordinal 2's first measurement may already have kept it.
    let phases: Vec<(u32, ScaleInPhase)> = list.iter().map(|s| (s.ordinal, s.phase)).collect();
    assert_eq!(phases[0], (1, ScaleInPhase::Waiting), "{list:?}");
    assert!(phases[1] == (2, ScaleInPhase::Waiting) || phases[1] == (2, ScaleInPhase::Kept), "{list:?}");
    assert_eq!(ordinals(&d).await, [0, 1, 2], "nothing removed before its verdict");
    // Ordinal 2's players fail its run at once: kept, and told why.
    let list = wait_scale_in(&d, 20, |l| l.iter().any(|s| s.ordinal == 2 && s.phase == ScaleInPhase::Kept)).await;
    let two = list.iter().find(|s| s.ordinal == 2).unwrap();
    assert!(two.reason.contains("is Failed") && two.reason.contains(&two.run), "{two:?}");
    let (code, out, err) = d.cli(&["rollout", "status", "test/world"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("test/world/2: kept by its scale-in hook"), "{out}");
    // Ordinal 1's run (three measurements, a second apart) is cut by a kill -9 half-way.
    let one = list.iter().find(|s| s.ordinal == 1).unwrap().clone();
    assert_eq!(one.phase, ScaleInPhase::Waiting, "{list:?}");
    d.kill9();
    d.spawn();
    // The same run goes on after the restart, and its verdict removes ordinal 1 only.
    wait_scale_in(&d, 30, |l| !l.iter().any(|s| s.ordinal == 1)).await;
    assert_eq!(ordinals(&d).await, [0, 2], "ordinal 1 removed, the server with players kept");
    let runs = d.client.hook_runs(Some("test"), Some("steward/app=test/world")).await.unwrap();
    let mut names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["world-scale-in-1-g2", "world-scale-in-2-g2"], "one run per removal, none made twice");
    let run = runs.iter().find(|r| r.name == one.run).unwrap();
    assert_eq!(run.measurements, 3, "{run:?}");
    assert_eq!(
        steps(&d).await,
        [(1, "waiting".into()), (2, "waiting".into()), (2, "kept".into()), (1, "removed".into())],
        "each step told once"
    );
    // The kept one keeps running; a restart of the daemon neither removes nor restarts it.
    let before = d.client.status(&common::id("test", "world", 2)).await.unwrap();
    d.restart(true);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = d.client.status(&common::id("test", "world", 2)).await.unwrap();
    assert_eq!((before.pid, before.restarts), (after.pid, after.restarts));
    assert_eq!(scale_in(&d).await.len(), 1);

    // Its players gone, an operator resumes: its hook runs again, and it goes.
    players.lock().unwrap().insert(2, 0);
    let (code, out, err) = d.cli(&["rollout", "resume", "test/world"]);
    assert_eq!(code, 0, "{out}{err}");
    wait_scale_in(&d, 30, |l| l.is_empty()).await;
    assert_eq!(ordinals(&d).await, [0]);

    // Scaled back over a removal that waits: cancelled, its run ended, the instance kept.
    d.apply_json(&world(2, port, json!({}))).await;
    running(&d, 2).await;
    players.lock().unwrap().insert(1, 0);
    d.apply_json(&world(1, port, json!({}))).await;
    let waiting = wait_scale_in(&d, 10, |l| l.len() == 1).await;
    let pid = d.client.status(&common::id("test", "world", 1)).await.unwrap().pid;
    d.apply_json(&world(2, port, json!({}))).await;
    assert!(scale_in(&d).await.is_empty());
    let run = d.client.hook_run("test", &waiting[0].run, Some(Duration::from_secs(10))).await.unwrap();
    assert!(run.is_done(), "{run:?}");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let status = d.client.status(&common::id("test", "world", 1)).await.unwrap();
    assert_eq!(status.pid, pid, "the cancelled removal's instance runs on");
    assert!(steps(&d).await.ends_with(&[(1, "waiting".into()), (1, "cancelled".into())]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_without_a_verdict_in_time_is_kept_or_deleted_as_on_timeout_says() {
    let d = Daemon::start("scale-in-timeout");
    let players: Players = Arc::new(Mutex::new(BTreeMap::from([(1, 0), (2, 0)])));
    let port = players_endpoint(&players).await;
    // Ten measurements a second apart: no verdict within the 2 s limit.
    put_template(&d, 10);
    d.apply_json(&world(3, port, json!({"timeoutSeconds": 2}))).await;
    running(&d, 3).await;
    // Instances older than the limit: it counts from the scale-in, not from their start.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let asked = std::time::Instant::now();
    d.apply_json(&world(2, port, json!({"timeoutSeconds": 2}))).await;
    let list = wait_scale_in(&d, 20, |l| l.iter().all(|s| s.phase == ScaleInPhase::Kept)).await;
    assert!(asked.elapsed() >= Duration::from_millis(1900), "kept after {:?}, before its limit", asked.elapsed());
    assert!(list[0].reason.contains("gave no verdict in 2 s (onTimeout Keep)"), "{list:?}");
    assert_eq!(ordinals(&d).await, [0, 1, 2]);
    let run = d.client.hook_run("test", &list[0].run, None).await.unwrap();
    assert!(run.is_done(), "its run ended at the limit: {run:?}");

    // onTimeout Delete, scaling in further: removed at the limit.
    d.apply_json(&world(1, port, json!({"timeoutSeconds": 2, "onTimeout": "Delete"}))).await;
    wait_scale_in(&d, 20, |l| l.iter().all(|s| s.ordinal != 1)).await;
    assert_eq!(ordinals(&d).await, [0, 2], "ordinal 1 deleted at the limit; ordinal 2 stays kept");
    // Refused by name: a limit out of range, a template that is not stored.
    let mut bad = world(1, port, json!({"timeoutSeconds": 0}));
    bad["strategy"]["scaleIn"]["hook"]["template"] = json!("nowhere");
    let err = d.client.apply(&bad.to_string(), steward::spec::Format::Json).await.unwrap_err().to_string();
    assert!(err.contains("strategy.scaleIn.timeoutSeconds: must be 1 to"), "{err}");
    let mut bad = world(1, port, json!({}));
    bad["strategy"]["scaleIn"]["hook"]["template"] = json!("nowhere");
    let err = d.client.apply(&bad.to_string(), steward::spec::Format::Json).await.unwrap_err().to_string();
    assert!(err.contains("strategy.scaleIn.hook.template: no hook template test/nowhere"), "{err}");
}

/// A kill -9 between the instance's removal and its record's: the restart finds the instance
/// gone and finishes the removal, told once; nothing else is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_removal_and_its_record_finishes_it_once() {
    let mut d = Daemon::start("scale-in-crash");
    let players: Players = Arc::new(Mutex::new(BTreeMap::from([(1, 0)])));
    let port = players_endpoint(&players).await;
    put_template(&d, 1);
    d.apply_json(&world(2, port, json!({}))).await;
    running(&d, 2).await;
    d.env = vec![("STEWARD_FAILPOINTS".into(), "scale-in-deleted@1".into())];
    d.restart(false);
    let client = d.client.clone();
    let _ = client.apply(&world(1, port, json!({})).to_string(), steward::spec::Format::Json).await;
    assert!(common::wait_gone(d.pid(), 20).await, "the failpoint was not reached\n{}", d.log());
    d.env.clear();
    d.kill9();
    d.spawn();
    wait_scale_in(&d, 20, |l| l.is_empty()).await;
    assert_eq!(ordinals(&d).await, [0]);
    let told: Vec<(u32, String)> = steps(&d).await;
    assert_eq!(told, [(1, "waiting".into()), (1, "removed".into())]);
}

/// `steward delete NS/APP` of an app with a scaleIn hook: each instance at its own run's word,
/// the spec once the last has gone (also across a kill -9); one with players keeps the app
/// until it is forced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_delete_waits_for_each_instances_hook_unless_forced() {
    let mut d = Daemon::start("scale-in-delete");
    let players: Players = Arc::new(Mutex::new(BTreeMap::from([(0, 0), (1, 0), (2, 4)])));
    let port = players_endpoint(&players).await;
    put_template(&d, 2);
    d.apply_json(&world(3, port, json!({}))).await;
    running(&d, 3).await;
    let (code, out, err) = d.cli(&["delete", "test/world", "--timeout", "0"]);
    assert_eq!((code, out.trim()), (0, "test/world: deleting"), "{err}");
    assert_eq!(ordinals(&d).await, [0, 1, 2], "nothing removed before its verdict");
    d.kill9();
    d.spawn();
    let list = wait_scale_in(&d, 20, |l| l.len() == 1 && l[0].phase == ScaleInPhase::Kept).await;
    assert_eq!(list[0].ordinal, 2);
    assert_eq!(ordinals(&d).await, [2], "the servers without players went");
    let (code, _, err) = d.cli(&["delete", "test/world", "--timeout", "2"]);
    assert_ne!(code, 0);
    assert!(err.contains("delete did not finish in 2 s"), "{err}");
    // An operator's word: at once.
    let (code, out, err) = d.cli(&["delete", "test/world", "--force", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("test/world: deleted with test/world/2"), "{out}");
    assert!(d.client.rollout_status("test", "world").await.is_err(), "the app is gone");
    let mut removed: Vec<(u32, String)> = steps(&d).await.into_iter().filter(|(_, s)| s == "removed").collect();
    // Each at its own run's verdict, in either order.
    removed.sort();
    assert_eq!(removed, [(0, "removed".into()), (1, "removed".into())], "each told once");
    // An app whose every instance says yes goes by itself, its delete answered when it has.
    d.apply_json(&world(2, port, json!({}))).await;
    running(&d, 2).await;
    let (code, out, err) = d.cli(&["delete", "test/world", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("test/world: deleted with test/world/0, test/world/1"), "{out}");
    assert!(d.client.rollout_status("test", "world").await.is_err(), "the app is gone");
}

/// An app's delete at its hooks' word, answered at once (`--timeout 0`: 202), is recorded
/// before that answer: a kill -9 right after it cannot lose it. A pause before the record holds
/// the window open (the answer used to come first). The restarted daemon goes on with it: the
/// server without players goes, the one with players is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_app_delete_survives_a_kill_9_right_after_the_answer() {
    let mut d = Daemon::start("scale-in-delete-kill");
    d.env = vec![("STEWARD_FAILPOINTS".into(), "app-delete-record~500".into())];
    d.restart(false);
    let players: Players = Arc::new(Mutex::new(BTreeMap::from([(0, 0), (1, 3)])));
    let port = players_endpoint(&players).await;
    put_template(&d, 1);
    d.apply_json(&world(2, port, json!({}))).await;
    running(&d, 2).await;
    let (code, out, err) = d.cli(&["delete", "test/world", "--timeout", "0"]);
    assert_eq!((code, out.trim()), (0, "test/world: deleting"), "{err}");
    d.kill9();
    d.env.clear();
    d.spawn();
    let list = wait_scale_in(&d, 20, |l| l.len() == 1 && l[0].phase == ScaleInPhase::Kept).await;
    assert_eq!(list[0].ordinal, 1);
    assert_eq!(ordinals(&d).await, [1], "the server without players went");
}

/// A rollout's surge instance, done with, goes at the hook's word as well: the rollout
/// completes without it, and it serves until its players are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollouts_surge_instance_goes_at_the_hooks_word() {
    let d = Daemon::start("scale-in-surge");
    let players: Players = Arc::new(Mutex::new(BTreeMap::from([(2, 3)])));
    let port = players_endpoint(&players).await;
    put_template(&d, 1);
    let versioned = |v: &str| {
        let mut s = world(2, port, json!({}));
        s["spec"]["template"]["spec"]["processes"][0]["env"] = json!([{"name": "VERSION", "value": v}]);
        s
    };
    d.apply_json(&versioned("1")).await;
    running(&d, 2).await;
    d.apply_json(&versioned("2")).await;
    // Done: both on revision 2; the surge instance (2) is the hook's, kept for its players.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let body = d.client.rollout_status("test", "world").await.unwrap();
        let done = body.rollout.as_ref().is_some_and(|r| r.phase == steward::protocol::RolloutPhase::Complete);
        if done && body.scale_in.iter().any(|s| s.ordinal == 2 && s.phase == ScaleInPhase::Kept) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{body:#?}\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ordinals(&d).await, [0, 1, 2], "the surge instance serves its players");
    players.lock().unwrap().insert(2, 0);
    let (code, out, err) = d.cli(&["rollout", "resume", "test/world"]);
    assert_eq!(code, 0, "{out}{err}");
    wait_scale_in(&d, 30, |l| l.is_empty()).await;
    assert_eq!(ordinals(&d).await, [0, 1]);
    let list = d.client.list(&[("name", "world")]).await.unwrap();
    assert!(list.iter().all(|s| s.revision == 2), "{list:?}");
}

/// A host that missed a scheduler's delete of an app with a scaleIn hook (issue 43's desired
/// set names it no more) deletes it at its hook's word, as an operator's delete would: the
/// server without players goes, the one with players stays until they are gone and an operator
/// resumes; the same set handed again starts nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_set_without_the_app_deletes_it_at_its_hooks_word() {
    let d = Daemon::start("scale-in-desired");
    let players: Players = Arc::new(Mutex::new(BTreeMap::from([(0, 0), (1, 3)])));
    let port = players_endpoint(&players).await;
    put_template(&d, 1);
    // Placed as steward-sched places it: applied with an instance selection.
    let doc = world(2, port, json!({})).to_string();
    d.client.apply_selected(&doc, steward::spec::Format::Json, Some(&[0, 1])).await.unwrap();
    running(&d, 2).await;
    let set = steward::protocol::HostDesired {
        as_of: d.client.node().await.unwrap().desired_mark,
        apps: vec![],
        endpoints: vec![],
        every_secs: 10,
    };
    let outcome = d.client.put_desired(&set).await.unwrap();
    assert_eq!(outcome.draining_apps, ["test/world"], "{outcome:?}");
    assert!(outcome.dropped_apps.is_empty(), "not deleted at once: {outcome:?}");
    assert_eq!(ordinals(&d).await, [0, 1], "nothing removed before its verdict");
    let list = wait_scale_in(&d, 20, |l| l.len() == 1 && l[0].phase == ScaleInPhase::Kept).await;
    assert_eq!(list[0].ordinal, 1);
    assert_eq!(ordinals(&d).await, [1], "the server without players went");
    let again = d.client.put_desired(&set).await.unwrap();
    assert!(again.draining_apps.is_empty() && again.dropped_apps.is_empty(), "{again:?}");
    assert_eq!(ordinals(&d).await, [1]);
    players.lock().unwrap().insert(1, 0);
    let (code, out, err) = d.cli(&["rollout", "resume", "test/world"]);
    assert_eq!(code, 0, "{out}{err}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while d.client.rollout_status("test", "world").await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "the app did not go\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ordinals(&d).await.is_empty());
    let mut removed: Vec<(u32, String)> = steps(&d).await.into_iter().filter(|(_, s)| s == "removed").collect();
    removed.sort();
    assert_eq!(removed, [(0, "removed".into()), (1, "removed".into())], "each told once");
}

/// A scale-in applied with a new template (fewer instances and a new env at once): the server
/// its hook keeps runs its old revision and generation, untouched by the rollout and by a daemon
/// kill -9 (whose load once took a kept one for an apply cut short, and moved its generation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_server_keeps_its_revision_across_a_kill9() {
    let mut d = Daemon::start("scale-in-revision");
    let players: Players = Arc::new(Mutex::new(BTreeMap::from([(0, 0), (1, 4)])));
    let port = players_endpoint(&players).await;
    put_template(&d, 1);
    let versioned = |n: u32, v: &str| {
        let mut s = world(n, port, json!({}));
        s["spec"]["template"]["spec"]["processes"][0]["env"] = json!([{"name": "V", "value": v}]);
        s["strategy"]["maxUnavailable"] = json!(1);
        s["strategy"]["maxSurge"] = json!(0);
        s
    };
    d.apply_json(&versioned(2, "1")).await;
    running(&d, 2).await;
    d.apply_json(&versioned(1, "2")).await;
    wait_scale_in(&d, 20, |l| l.len() == 1 && l[0].phase == ScaleInPhase::Kept).await;
    let one = common::id("test", "world", 1);
    d.wait(&common::id("test", "world", 0), 20, |s| s.run_revision == 2 && s.ready).await;
    let before = d.client.status(&one).await.unwrap();
    assert_eq!(before.run_revision, 1, "{before:?}");
    d.restart(true);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after = d.client.status(&one).await.unwrap();
    assert_eq!(
        (after.pid, after.restarts, after.run_revision, after.spec_generation),
        (before.pid, before.restarts, 1, before.spec_generation),
        "{after:?}"
    );
    assert_eq!(scale_in(&d).await.len(), 1);
}
