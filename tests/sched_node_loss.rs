//! Issue 43, item 2: a host cut off from the network (its link down, its daemon and instances
//! still running) with many apps on it. The leader declares it lost on time — within the
//! heartbeat timeout and one heartbeat of the cut, its pass not held up by reading the silent
//! host — and places all of its apps elsewhere in one pass, not one per node-read timeout;
//! when the link comes back nothing runs twice.
//!
//! The figures (cut → nodeLost, nodeLost → the last app running elsewhere) are printed; with
//! STEWARD_LOSS_APPS=50 this is the benchmark:
//! `STEWARD_LOSS_APPS=50 cargo test --test sched_node_loss -- --nocapture`.

mod cluster;
mod common;

use cluster::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_host_is_lost_on_time_and_its_apps_move_in_one_pass() {
    let c = Cluster::start("l", ["a", "a", "a"]);
    let file = c.file.clone();
    cut_off(&c, &file).await;
}

/// The same with the desired state in etcd (deploys handed to the leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_host_is_lost_on_time_and_its_apps_move_in_one_pass_on_etcd() {
    let c = Cluster::start("k", ["a", "a", "a"]);
    let (etcd, shared) = c.with_etcd();
    cut_off(&c, &shared).await;
    drop(etcd);
}

async fn cut_off(c: &Cluster, file: &std::path::Path) {
    let apps: usize = std::env::var("STEWARD_LOSS_APPS").ok().and_then(|n| n.parse().ok()).unwrap_or(12);
    let sched = |args: &[&str]| {
        let out = c.sched_cmd_with(file, args).output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
        assert!(out.status.success(), "{args:?}: {}\n{}", text(&out.stdout), text(&out.stderr));
    };
    let mut run = Follower::spawn(c.sched_cmd_with(file, &["run"]));
    for h in ["h1", "h2", "h3"] {
        run.wait_for(30, &format!("{h} up"), |v| body_type(v) == "nodeUp" && v["body"]["node"] == h);
    }
    // Every app on h3: the others cordoned while they are deployed.
    for h in ["h1", "h2"] {
        sched(&["node", "cordon", h]);
    }
    let always = json!({"restartPolicy": {"policy": "Always"}});
    for i in 0..apps {
        let path = c.dir.path().join(format!("a{i}.json"));
        std::fs::write(&path, app(&format!("a{i}"), 1, always.clone()).to_string()).unwrap();
        sched(&["deploy", path.to_str().unwrap()]);
    }
    for h in ["h1", "h2"] {
        sched(&["node", "uncordon", h]);
    }
    assert_eq!(c.host("h3").daemon.client.list(&[]).await.unwrap().len(), apps);
    // A reconcile pass or two with every host answering, as a real cluster would be in.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let cut = Instant::now();
    ip(&["-n", &c.hub, "link", "set", "vh3", "down"]);
    run.wait_for(30, "h3 lost", |v| body_type(v) == "nodeLost" && v["body"]["node"] == "h3");
    let to_lost = cut.elapsed();
    let lost_at = Instant::now();
    let deadline = lost_at + Duration::from_secs(60);
    let moved_at = loop {
        let mut running = 0;
        for h in ["h1", "h2"] {
            let list = c.host(h).daemon.client.list(&[]).await.unwrap();
            running += list.iter().filter(|s| s.state.kind() == Kind::Running).count();
        }
        if running >= apps {
            break Instant::now();
        }
        assert!(Instant::now() < deadline, "{running} of {apps} running elsewhere a minute after nodeLost");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let to_moved = moved_at - lost_at;
    println!(
        "{apps} apps on a cut host: cut -> nodeLost {:.2} s (timeout 3 s, heartbeat 1 s); nodeLost -> the last \
         running elsewhere {:.2} s",
        to_lost.as_secs_f64(),
        to_moved.as_secs_f64()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let rescheduled = loop {
        let n = run.drain().iter().filter(|v| body_type(v) == "rescheduled").count();
        if n >= apps || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(rescheduled, apps, "each app rescheduled once");
    assert!(to_lost < Duration::from_millis(3000 + 1000 + 1500), "lost {to_lost:?} after the cut");
    assert!(to_moved < Duration::from_secs(10), "{apps} apps took {to_moved:?} to move");

    // Back: h3's copies go; every app runs exactly once.
    ip(&["-n", &c.hub, "link", "set", "vh3", "up"]);
    run.wait_for(30, "h3 back", |v| body_type(v) == "nodeBack" && v["body"]["node"] == "h3");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut copies: BTreeMap<String, usize> = BTreeMap::new();
        for h in &c.hosts {
            for s in h.daemon.client.list(&[]).await.unwrap() {
                *copies.entry(s.id.to_string()).or_default() += 1;
            }
        }
        if copies.len() == apps && copies.values().all(|n| *n == 1) {
            break;
        }
        let twice: Vec<&String> = copies.iter().filter(|(_, n)| **n > 1).map(|(k, _)| k).collect();
        assert!(Instant::now() < deadline, "after h3's return: {} instances, twice: {twice:?}", copies.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
