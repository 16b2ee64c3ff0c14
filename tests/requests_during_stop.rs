//! Requests that come while an instance is stopping wait for the stop and are then served in
//! order, and the daemon keeps answering meanwhile (the stop once re-queued them into the queue
//! it was reading: a loop that never yielded its thread, and the API stopped answering).

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_during_a_slow_stop_waits_for_it_and_the_daemon_answers_meanwhile() {
    let d = Daemon::start("duringstop");
    // Ignores SIGTERM: the stop takes the whole grace period (3 s), then SIGKILL.
    let doc = spec(
        "slow",
        1,
        json!({"startCmd": "trap '' TERM; while true; do sleep 0.1; done"}),
        json!({"killPolicy": {"gracePeriod": 3}}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "slow", 0);
    d.wait_state(&iid, Kind::Running, 20).await;

    let steward = |what: &'static str| {
        let config = d.config.clone();
        tokio::task::spawn_blocking(move || {
            let args = ["--config", config.to_str().unwrap(), what, "test/slow/0"];
            std::process::Command::new(env!("CARGO_BIN_EXE_steward")).args(args).output().unwrap()
        })
    };
    let stop = steward("stop");
    d.wait(&iid, 10, |s| s.state.kind() == Kind::Stopping).await;
    let start = steward("start");
    // While the stop waits out its grace period, the daemon answers at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let asked = Instant::now();
        let list = d.client.list(&[]).await.unwrap();
        assert!(asked.elapsed() < Duration::from_millis(500), "the API answered in {:?}", asked.elapsed());
        assert_eq!(list[0].state.kind(), Kind::Stopping);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The stop finished, then the start was served (the stop command, which waits to see
    // Stopped, may see Running already: the events tell the order).
    drop(stop);
    assert!(start.await.unwrap().status.success());
    // The start came after the stop: it was served once the stop was done.
    let s = d.wait_state(&iid, Kind::Running, 20).await;
    assert!(s.pid.is_some());
    let (_, out, _) = d.cli(&["events", "--since", "0"]);
    let mine: Vec<&str> = out.lines().filter(|l| l.contains("test/slow/0") && l.contains("->")).collect();
    let at =
        |needle: &str| mine.iter().rposition(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}: {mine:#?}"));
    assert!(at("Stopping -> Stopped") < at("Stopped -> Staging"), "{mine:#?}");
    assert!(at("Stopped -> Staging") < at("Starting -> Running"), "{mine:#?}");
}
