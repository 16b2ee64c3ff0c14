//! Issue 43: an app's `disconnect` policy over network-namespace hosts, a host cut off by its
//! link (`ip link set down`: its daemon and instances go on running). With `stopAfterSecs` the
//! host stops the app's instance itself once no scheduler has reached it that long, and the
//! scheduler places it elsewhere only after that (plus the kill grace and a margin): at no
//! moment do two copies run. Back, the host's stopped copy goes and the replacement stays. A
//! host back before the replacement starts its own copy again (the fence lifted), a fence its
//! daemon's kill -9 does not lift.

mod cluster;
mod common;

use cluster::*;
use serde_json::json;
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

/// Running copies of test/game on each host, read through the hosts' own sockets.
async fn running(c: &Cluster) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for h in &c.hosts {
        for s in h.daemon.client.list(&[("name", "game")]).await.unwrap() {
            if s.state.kind() == Kind::Running {
                out.push((h.name.clone(), s.id.index));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_host_stops_its_copy_before_another_starts() {
    let mut c = Cluster::start("f", ["a", "a", "a"]);
    let (code, _, err) = c.sched(&["config", "set", "reconcileSecs", "1"]);
    assert_eq!(code, 0, "{err}");
    let mut run = c.follow(&["run"]);
    for h in ["h1", "h2", "h3"] {
        run.wait_for(30, &format!("{h} up"), |v| body_type(v) == "nodeUp" && v["body"]["node"] == h);
    }
    let top =
        json!({"restartPolicy": {"policy": "Always"}, "disconnect": {"stopAfterSecs": 5, "replaceAfterSecs": 20}});
    let (code, out, err) = c.deploy("game", &app("game", 1, top.clone()));
    assert_eq!(code, 0, "{out}\n{err}");
    wait_running(&c, "game").await;
    let first = running(&c).await;
    assert_eq!(first.len(), 1, "{first:?}");
    let home = first[0].0.clone();

    // Cut: the host fences itself, the scheduler waits, then places it elsewhere; never two.
    let cut = Instant::now();
    ip(&["-n", &c.hub, "link", "set", &format!("v{home}"), "down"]);
    let (mut fenced_at, mut moved_at) = (None, None);
    while moved_at.is_none() {
        let now = running(&c).await;
        assert!(now.len() <= 1, "two copies at {:?} after the cut: {now:?}", cut.elapsed());
        if fenced_at.is_none() && !now.iter().any(|(h, _)| *h == home) {
            fenced_at = Some(cut.elapsed());
        }
        if now.iter().any(|(h, _)| *h != home) {
            moved_at = Some(cut.elapsed());
        }
        assert!(cut.elapsed() < Duration::from_secs(60), "not replaced a minute after the cut: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (fenced_at, moved_at) = (fenced_at.unwrap(), moved_at.unwrap());
    println!("cut -> the host's copy stopped {fenced_at:?}; cut -> the replacement running {moved_at:?}");
    let cut_ms = steward::clock::now_ms() - cut.elapsed().as_millis() as u64;
    // A line that reached the scheduler before the cut and was read after the loss is no
    // proof the host is back (it was taken as one, and the pass then waited on the cut host).
    let back = run.drain().iter().any(|v| body_type(v) == "nodeBack");
    assert!(!back, "a cut host was taken as back: {:#?}", run.drain());
    for v in run.drain() {
        if let Some(at) = v["at_ms"].as_u64().filter(|at| *at >= cut_ms) {
            println!("+{:.1} s {}", (at - cut_ms) as f64 / 1000.0, v["body"]);
        }
    }
    assert!(fenced_at >= Duration::from_secs(4), "fenced too soon: {fenced_at:?}");
    let home_status = c.host(&home).daemon.client.list(&[("name", "game")]).await.unwrap();
    assert_eq!(home_status[0].state.kind(), Kind::Stopped, "{home_status:?}");
    let log = c.host(&home).daemon.log();
    assert!(log.contains("fenced: no scheduler heard"), "the host says why it stopped");

    // Back: its stopped copy goes (the set no longer names the app there), the replacement stays.
    ip(&["-n", &c.hub, "link", "set", &format!("v{home}"), "up"]);
    run.wait_for(30, "back", |v| body_type(v) == "nodeBack" && v["body"]["node"] == home.as_str());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.host(&home).daemon.client.list(&[("name", "game")]).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the returning host kept its copy");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(running(&c).await.len(), 1);

    // A short cut (back before the replacement): the host's fence lifts and its copy runs again.
    let now = running(&c).await;
    let home = now[0].0.clone();
    let cut = Instant::now();
    ip(&["-n", &c.hub, "link", "set", &format!("v{home}"), "down"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while running(&c).await.iter().any(|(h, _)| *h == home) {
        assert!(Instant::now() < deadline, "not fenced");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fenced = cut.elapsed();
    // The fence is durable: the host's daemon killed -9 and started again (still cut off) keeps
    // the copy stopped.
    let at = c.hosts.iter().position(|h| h.name == home).unwrap();
    c.hosts[at].daemon.restart(true);
    wait_remote(&c.hosts[at].daemon, 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = c.hosts[at].daemon.client.list(&[("name", "game")]).await.unwrap();
    assert_eq!(after[0].state.kind(), Kind::Stopped, "fenced across kill -9: {after:?}");
    ip(&["-n", &c.hub, "link", "set", &format!("v{home}"), "up"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = running(&c).await;
        assert!(now.len() <= 1, "two copies after a short cut: {now:?}");
        if now.iter().any(|(h, _)| *h == home) {
            break;
        }
        assert!(Instant::now() < deadline, "the fence was not lifted ({fenced:?} after the cut): {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(running(&c).await, [(home, 0)], "one copy, on the host it never left");
}
