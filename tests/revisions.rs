//! An app's revisions (issue 18): every applied spec that changes what runs is a new revision,
//! kept durably and bounded; `steward rollout history` lists them and `undo` goes back to one.
//! Real stewardd and steward binaries, real processes.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use steward::client::ClientError;
use steward::protocol::RevisionList;
use steward::supervisor::state::Kind;

/// A spec whose process writes its VERSION env to a file in its work dir.
fn versioned(version: &str, instances: u32) -> serde_json::Value {
    spec(
        "web",
        instances,
        json!({"env": [{"name": "VERSION", "value": version}],
               "startCmd": "echo $VERSION > version; exec sleep 1000"}),
        json!({}),
    )
}

async fn history(d: &Daemon) -> RevisionList {
    d.client.revisions("test", "web").await.unwrap()
}

/// The history once the last rollout has its outcome: under load it may still be under way when
/// the instances already run the new version, and a later read would then differ from this one.
async fn settled_history(d: &Daemon) -> RevisionList {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut h = history(d).await;
    while h.revisions.last().is_none_or(|r| r.outcome.is_none()) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        h = history(d).await;
    }
    h
}

fn version_of(d: &Daemon, index: u32) -> String {
    std::fs::read_to_string(d.work_dir().join(format!("test.web.{index}")).join("version")).unwrap_or_default()
}

async fn wait_version(d: &Daemon, index: u32, want: &str) {
    for _ in 0..200 {
        if version_of(d, index).trim() == want {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("instance {index} never ran {want}: {:?}\n{}", version_of(d, index), d.log());
}

#[tokio::test]
async fn changed_specs_are_revisions_and_undo_goes_back() {
    let d = Daemon::start("revisions");
    d.apply_json(&versioned("v1", 1)).await;
    d.wait_state(&id("test", "web", 0), Kind::Running, 20).await;
    d.apply_json(&versioned("v2", 1)).await;
    wait_version(&d, 0, "v2").await;
    // A change of the count alone, and the same spec again, are no new revision.
    d.apply_json(&versioned("v2", 2)).await;
    d.apply_json(&versioned("v2", 2)).await;
    let h = history(&d).await;
    let numbers: Vec<(u64, bool)> = h.revisions.iter().map(|r| (r.revision, r.current)).collect();
    assert_eq!(numbers, [(1, false), (2, true)], "{h:#?}");
    assert_ne!(h.revisions[0].hash, h.revisions[1].hash);
    assert!(h.revisions.iter().all(|r| r.applied_by == "user root (uid 0)"), "{h:#?}");
    assert!(h.revisions[0].created_ms <= h.revisions[1].created_ms);

    let (code, out, err) = d.cli(&["rollout", "history", "test/web"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("REVISION") && lines.len() == 3, "{out}");
    assert!(lines[2].starts_with("*2") && lines[2].contains(&h.revisions[1].hash), "{out}");

    // Undo: the previous revision's spec again, as revision 3, with today's count (2).
    let (code, out, err) = d.cli(&["rollout", "undo", "test/web"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("revision 3 applied"), "{out}");
    wait_version(&d, 0, "v1").await;
    wait_version(&d, 1, "v1").await;
    for i in 0..2 {
        let s = d.wait(&id("test", "web", i), 20, |s| s.run_revision == 3).await;
        assert_eq!(s.revision, 3, "instance {i} is on revision 3");
    }
    let (code, out, _) = d.cli(&["status", "test/web/0"]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l == "revision:  3"), "{out}");
    let h = history(&d).await;
    let last = h.revisions.last().unwrap();
    assert_eq!((last.revision, last.current), (3, true));
    assert_eq!(last.hash, h.revisions[0].hash, "the same spec as revision 1");
    assert_eq!(last.applied_by, "undo to revision 1 by user root (uid 0)");
    // The rollout's surge instance is gone once it completes.
    for _ in 0..200 {
        if d.client
            .rollout("test", "web")
            .await
            .unwrap()
            .is_some_and(|r| r.phase == steward::protocol::RolloutPhase::Complete)
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(d.client.list(&[]).await.unwrap().len(), 2, "the count stays 2");

    let (code, _, err) = d.cli(&["rollout", "undo", "test/web", "--to-revision", "2"]);
    assert_eq!(code, 0, "{err}");
    wait_version(&d, 1, "v2").await;
    assert_eq!(history(&d).await.revisions.last().unwrap().hash, h.revisions[1].hash);
    let (code, _, err) = d.cli(&["rollout", "undo", "test/web", "--to-revision", "99"]);
    assert_eq!(code, 4, "not found: {err}");
    assert!(err.contains("no revision 99 of test/web to go back to (kept: 1, 2, 3, 4)"), "{err}");
    let (code, _, err) = d.cli(&["rollout", "undo", "test/web", "--to-revision", "4"]);
    assert_ne!(code, 0);
    assert!(err.contains("toRevision: 4 is test/web's current revision"), "{err}");
    let (code, _, err) = d.cli(&["rollout", "history", "test/nothing"]);
    assert_eq!(code, 4, "{err}");

    // Deleting the app forgets its revisions: applied again, it starts at 1.
    let (code, _, err) = d.cli(&["delete", "test/web"]);
    assert_eq!(code, 0, "{err}");
    d.apply_json(&versioned("v9", 1)).await;
    let h = history(&d).await;
    assert_eq!(h.revisions.iter().map(|r| r.revision).collect::<Vec<_>>(), [1]);
}

/// GET /v1/apps/{namespace}/{name}/revisions/{revision} (`rollout history --revision N`, the
/// console's diffs): each kept revision with the spec it applied, as applied; one not kept is a
/// 404 naming the app and the revision and listing those kept. A reader may read it.
#[tokio::test]
async fn each_revision_reads_back_the_spec_it_applied() {
    let d = Daemon::start_with("revisions-read", "allow_read_for_all = true\n");
    for v in ["v1", "v2", "v3"] {
        d.apply_json(&versioned(v, 1)).await;
        wait_version(&d, 0, v).await;
    }
    let h = settled_history(&d).await;
    assert_eq!(h.revisions.iter().map(|r| r.revision).collect::<Vec<_>>(), [1, 2, 3], "{h:#?}");
    let mut specs = Vec::new();
    for (n, v) in [(1, "v1"), (2, "v2"), (3, "v3")] {
        let r = d.client.revision("test", "web", n).await.unwrap();
        assert_eq!(r.app, "test/web");
        assert_eq!(r.info, h.revisions[n as usize - 1], "revision {n}: its entry of the history");
        let env = &r.spec["spec"]["template"]["spec"]["processes"][0]["env"];
        assert_eq!(env, &json!([{"name": "VERSION", "value": v}]), "revision {n}: {:#}", r.spec);
        specs.push(r.spec);
    }
    // The specs differ as applied, and in nothing else.
    assert!(specs[0] != specs[1] && specs[1] != specs[2]);
    for s in &mut specs {
        s["spec"]["template"]["spec"]["processes"][0]["env"] = json!(null);
    }
    assert!(specs[0] == specs[1] && specs[1] == specs[2], "{specs:#?}");

    match d.client.revision("test", "web", 7).await {
        Err(ClientError::Api { status: 404, message, .. }) => {
            assert_eq!(message, "no revision 7 of test/web (kept: 1, 2, 3)")
        }
        other => panic!("revision 7: {other:?}"),
    }
    match d.client.revision("test", "none", 1).await {
        Err(ClientError::Api { status: 404, message, .. }) => assert_eq!(message, "no app test/none"),
        other => panic!("an unknown app: {other:?}"),
    }

    // The CLI, as a user who may only read.
    let (code, out, err) = d.cli_as(Some("nobody"), &["rollout", "history", "test/web", "--revision", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("revision:    2\n") && out.contains("\"value\": \"v2\""), "{out}");
    let (code, out, _) = d.cli(&["rollout", "history", "test/web", "--revision", "3"]);
    assert!(code == 0 && out.starts_with("revision:    3 (current)\n"), "{out}");
    let (code, _, err) = d.cli(&["rollout", "history", "test/web", "--revision", "7"]);
    assert_eq!(code, 4, "not found: {err}");
    assert!(err.contains("no revision 7 of test/web (kept: 1, 2, 3)"), "{err}");
}

#[tokio::test]
async fn history_is_bounded_and_survives_kill_9_and_sigterm() {
    let mut d = Daemon::start_with("revisions-bound", "revision_history = 3\n");
    for v in 1..=5 {
        d.apply_json(&versioned(&format!("v{v}"), 1)).await;
    }
    let h = settled_history(&d).await;
    assert_eq!(h.revisions.iter().map(|r| r.revision).collect::<Vec<_>>(), [3, 4, 5], "{h:#?}");
    for kill9 in [true, false] {
        d.restart(kill9);
        assert_eq!(history(&d).await, h, "after a restart (kill -9: {kill9})");
    }
    // The bound holds after a restart too, and undo reaches what is kept only.
    d.apply_json(&versioned("v6", 1)).await;
    let h = history(&d).await;
    assert_eq!(h.revisions.iter().map(|r| r.revision).collect::<Vec<_>>(), [4, 5, 6]);
    let (code, _, err) = d.cli(&["rollout", "undo", "test/web", "--to-revision", "3"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("kept: 4, 5, 6"), "{err}");
}

/// Seed 003 `replica: uint` (DESIGN § 7): an app scaled to 0 keeps its spec and revisions, with
/// nothing running, across a kill -9; scaled up again it runs the same revision.
#[tokio::test]
async fn an_app_scaled_to_zero_keeps_its_spec_and_revisions() {
    let mut d = Daemon::start("revisions-zero");
    d.apply_json(&versioned("v1", 2)).await;
    d.apply_json(&versioned("v2", 2)).await;
    d.wait_state(&id("test", "web", 1), Kind::Running, 20).await;
    let (code, out, err) = d.cli(&["apply", "-f", &write(&d, &versioned("v2", 0))]);
    assert_eq!(code, 0, "{out}{err}");
    let left = d.client.list(&[]).await.unwrap();
    assert!(left.is_empty(), "nothing runs: {left:#?}\n{:#?}", d.client.rollout("test", "web").await);
    assert!(d.cgroup_pids(&id("test", "web", 0)).is_empty());
    // The rollout to revision 2 ends with nothing left to move (its end is in the history).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while d.client.rollout("test", "web").await.unwrap().is_some_and(|r| r.is_active()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the rollout did not end: {:#?}\n{:#?}",
            d.client.rollout("test", "web").await,
            d.client.list(&[]).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let h = history(&d).await;
    assert_eq!(h.revisions.iter().map(|r| (r.revision, r.current)).collect::<Vec<_>>(), [(1, false), (2, true)]);
    d.restart(true);
    assert_eq!(history(&d).await, h, "kept across a kill -9");
    d.apply_json(&versioned("v2", 1)).await;
    wait_version(&d, 0, "v2").await;
    assert_eq!(history(&d).await, h, "scaling is no new revision");
}

fn write(d: &Daemon, spec: &serde_json::Value) -> String {
    let path = d.dir.path().join("spec.json");
    std::fs::write(&path, serde_json::to_string(spec).unwrap()).unwrap();
    path.display().to_string()
}

/// Seed 002 changes a restart policy in place: nothing restarts, no new revision, and the new
/// policy governs the next exit.
#[tokio::test]
async fn a_restart_policy_change_restarts_nothing_and_applies_at_the_next_exit() {
    let mut d = Daemon::start("revisions-policy");
    let mut doc = versioned("v1", 2);
    doc["restartPolicy"] = json!({"policy": "Never"});
    d.apply_json(&doc).await;
    let mut pids = Vec::new();
    for i in 0..2 {
        pids.push(d.wait_state(&id("test", "web", i), Kind::Running, 20).await.pid.unwrap());
    }
    doc["restartPolicy"] = json!({"policy": "Always", "interval": 0});
    d.apply_json(&doc).await;
    for (i, pid) in pids.iter().enumerate() {
        let s = d.status(&id("test", "web", i as u32)).await;
        assert_eq!((s.state.kind(), s.pid), (Kind::Running, Some(*pid)), "instance {i} kept running: {s:?}");
    }
    let h = history(&d).await;
    assert_eq!(h.revisions.len(), 1, "{h:#?}");
    // The process ends: Always brings it back (Never would have left it Exited).
    unsafe { libc::kill(pids[0], libc::SIGKILL) };
    let back = d
        .wait(&id("test", "web", 0), 20, |s| s.state.kind() == Kind::Running && s.pid.is_some_and(|p| p != pids[0]))
        .await;
    assert!(back.restarts >= 1, "{back:?}");
    // The change survives a kill -9 of the daemon: the other instance, killed after, comes back.
    d.restart(true);
    let other = d.wait_state(&id("test", "web", 1), Kind::Running, 20).await;
    assert_eq!(other.pid, Some(pids[1]), "re-adopted, not restarted");
    unsafe { libc::kill(pids[1], libc::SIGKILL) };
    d.wait(&id("test", "web", 1), 20, |s| s.state.kind() == Kind::Running && s.pid.is_some_and(|p| p != pids[1])).await;
}
