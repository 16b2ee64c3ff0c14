//! Hostile input (issue 14): numbers that would break the daemon's time arithmetic are refused
//! with their field named; records stored before the ranges existed are run with saturating
//! arithmetic; and an instance whose actor panics (a bug) is recorded Failed with its processes
//! killed, stays stoppable, startable and deletable, and does not panic again at the next start.

mod common;

use common::Daemon;
use std::time::Duration;
use steward::store::{Batch, Store, Table};
use steward::supervisor::state::Kind;

const HUGE: u64 = u64::MAX;

fn huge_spec() -> serde_json::Value {
    let mut s = common::spec(
        "huge",
        1,
        serde_json::json!({
            "startGracePeriod": HUGE,
            "resources": {"limits": {"cpu": "1e308", "memory": "1e300"}},
            "healthChecks": [{"type": "TCP", "tcp": {"port": 1}, "intervalSeconds": HUGE, "timeoutSeconds": 5,
                              "delaySeconds": HUGE, "gracePeriodSeconds": HUGE, "consecutiveFailures": 4000000000u64}]
        }),
        serde_json::json!({
            "restartPolicy": {"policy": "Always", "interval": HUGE, "backoff": HUGE, "maxtimes": 4000000000u64},
            "killPolicy": {"gracePeriod": HUGE}
        }),
    );
    s["spec"]["instance"] = serde_json::json!(9);
    s
}

#[tokio::test]
async fn huge_numbers_are_refused_naming_each_field_and_nothing_is_created() {
    let d = Daemon::start_with("hugenums", "max_instances_per_app = 8\n");
    let file = d.path().join("huge.json");
    std::fs::write(&file, huge_spec().to_string()).unwrap();
    let (code, out, err) = d.cli(&["apply", "-f", file.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}");
    let p = "spec.template.spec.processes[0]";
    for field in [
        "restartPolicy.interval: 18446744073709551615 is out of range 0-86400".to_string(),
        "restartPolicy.backoff".into(),
        "restartPolicy.maxtimes: 4000000000 is out of range 0-1000000".into(),
        "killPolicy.gracePeriod: 18446744073709551615 is out of range 0-86400".into(),
        format!("{p}.startGracePeriod: 18446744073709551615 is out of range 0-86400"),
        format!("{p}.resources.limits.cpu: \"1e308\" is more than 4096 cores"),
        format!("{p}.resources.limits.memory"),
        format!("{p}.healthChecks[0].intervalSeconds"),
        format!("{p}.healthChecks[0].delaySeconds"),
        format!("{p}.healthChecks[0].gracePeriodSeconds: 18446744073709551615 is out of range 0-604800"),
        format!("{p}.healthChecks[0].consecutiveFailures"),
    ] {
        assert!(err.contains(&field), "{field:?} not named:\n{err}");
    }
    assert!(d.client.list(&[]).await.unwrap().is_empty());

    // Within the static ranges, but not within this host or this daemon's configuration.
    let cores = std::thread::available_parallelism().unwrap().get();
    let mut s = common::spec(
        "big",
        9,
        serde_json::json!({"resources": {"limits": {"cpu": (cores + 1).to_string()}}}),
        serde_json::json!({}),
    );
    s["metadata"]["name"] = "big".into();
    std::fs::write(&file, s.to_string()).unwrap();
    let (code, _, err) = d.cli(&["apply", "-f", file.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("spec.instance: 9 is more than this daemon's max_instances_per_app (8)"), "{err}");
    assert!(
        err.contains(&format!("{p}.resources.limits.cpu: {} is more than this host has ({cores} cores)", cores + 1)),
        "{err}"
    );
    assert!(d.client.list(&[]).await.unwrap().is_empty());
    // `steward validate` knows nothing of the host's capacity: the static ranges only.
    let (code, _, err) = d.cli(&["validate", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}

/// Rewrites the stored spec of `app` with `edit` while the daemon is down: a record stored by a
/// version that had no ranges.
fn edit_stored_spec(d: &Daemon, app: &str, edit: impl Fn(&mut serde_json::Value)) {
    let store = Store::open(&d.path().join("state")).unwrap();
    let snapshot = store.snapshot().unwrap();
    let mut stored = snapshot.table(Table::Specs).find(|(k, _)| *k == app).map(|(_, v)| v.clone()).unwrap();
    edit(&mut stored["spec"]);
    store.commit_blocking(Batch::new().put(Table::Specs, app, &stored)).unwrap();
}

#[tokio::test]
async fn records_stored_with_huge_numbers_run_with_saturating_time_arithmetic() {
    let mut d = Daemon::start("hugestored");
    let spec = common::spec("old", 1, serde_json::json!({"startCmd": "exec sleep 1000"}), serde_json::json!({}));
    d.apply_json(&spec).await;
    let id = common::id("test", "old", 0);
    d.wait_state(&id, Kind::Running, 10).await;
    d.sigterm();
    edit_stored_spec(&d, "test/old", |s| {
        s["restartPolicy"] = serde_json::json!({"policy": "Always", "interval": HUGE, "backoff": HUGE});
        s["killPolicy"] = serde_json::json!({"gracePeriod": HUGE});
        s["spec"]["template"]["spec"]["processes"][0]["startGracePeriod"] = serde_json::json!(HUGE);
    });
    d.spawn();
    let pid = d.wait_state(&id, Kind::Running, 10).await.pid.unwrap();
    // The main process ends: the restart waits "forever" (it does not wrap to no delay).
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let s = d.wait_state(&id, Kind::Backoff, 10).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = d.status(&id).await;
    assert_eq!((later.state.kind(), later.restarts), (Kind::Backoff, s.restarts), "{later:#?}");
    // A start waits out a grace of "forever" (Starting), and a stop still ends it.
    let (code, _, err) = d.cli(&["start", "test/old/0", "--timeout", "1"]);
    assert_ne!(code, 0, "{err}");
    assert_eq!(d.status(&id).await.state.kind(), Kind::Starting);
    let (code, _, err) = d.cli(&["stop", "test/old/0"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(d.status(&id).await.state.kind(), Kind::Stopped);
    assert!(d.cgroup_pids(&id).is_empty());
    assert!(!d.log().contains("panicked"), "{}", d.log());
}

#[tokio::test]
async fn an_actor_that_panics_leaves_its_instance_failed_killed_and_deletable() {
    let mut d = Daemon::start("actorpanic");
    d.env = vec![("STEWARD_FAILPOINTS".into(), "actor-panic=test/boom/0,reload-panic=test/boom/1".into())];
    d.restart(false);
    let spec = common::spec("boom", 2, serde_json::json!({"startCmd": "exec sleep 1000"}), serde_json::json!({}));
    d.apply_json(&spec).await;
    let (zero, one) = (common::id("test", "boom", 0), common::id("test", "boom", 1));
    // A panic at its start: Failed, with the panic's message; its sibling runs on.
    let s = d.wait_state(&zero, Kind::Failed, 10).await;
    assert!(s.message.contains("stewardd internal error") && s.message.contains("failpoint actor-panic"), "{s:#?}");
    let pid = d.wait_state(&one, Kind::Running, 10).await.pid.unwrap();

    // A panic while it runs (a reload): its process is killed, nothing runs unsupervised.
    let (code, _, _) = d.cli(&["reload", "test/boom/1"]);
    assert_ne!(code, 0);
    let s = d.wait_state(&one, Kind::Failed, 10).await;
    assert!(s.message.contains("failpoint reload-panic"), "{s:#?}");
    assert!(common::wait_gone(pid, 10).await, "the process of a panicked actor runs on");
    assert!(d.cgroup_pids(&one).is_empty());
    // Startable again (the failpoint is on reload only), stoppable.
    let (code, _, err) = d.cli(&["start", "test/boom/1"]);
    assert_eq!(code, 0, "{err}");
    d.wait_state(&one, Kind::Running, 10).await;
    let (code, _, err) = d.cli(&["stop", "test/boom/1"]);
    assert_eq!(code, 0, "{err}");

    // The daemon's next start (kill -9, failpoints still set) does not panic on the record again.
    let panics_before = d.log().matches("panicked at").count();
    d.restart(true);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(d.status(&zero).await.state.kind(), Kind::Failed);
    assert_eq!(d.status(&one).await.state.kind(), Kind::Stopped);
    assert_eq!(d.log().matches("panicked at").count(), panics_before, "{}", d.log());
    // Both deletable.
    for i in ["test/boom/0", "test/boom/1"] {
        let (code, _, err) = d.cli(&["delete", i]);
        assert_eq!(code, 0, "{i}: {err}");
    }
    assert!(d.client.list(&[]).await.unwrap().is_empty());
}
