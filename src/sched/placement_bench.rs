//! Placement measured (not timed tests): `cargo test --release --lib placement_bench --
//! --ignored --nocapture`. Hosts are records fed through the same placement code the scheduler
//! runs; what one app's round places is taken off its hosts before the next app's, as the
//! scheduler's node views would show it.

use super::placement::*;
use crate::resources::Requests;
use crate::spec::model::{Constraint, Schedule};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Placement throughput (issue 21's closing figure): 1,000 instances over 3 nodes, with no
/// constraint and with MAXPER. A measurement, not a timed test: `cargo test --release --lib
/// placement::throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn place_1000_over_3() {
    let nodes: Vec<NodeView> = (1..=3)
        .map(|i| NodeView {
            name: format!("h{i}"),
            hostname: format!("h{i}"),
            free_ports: 10_000,
            ..Default::default()
        })
        .collect();
    let maxper: Constraint = serde_json::from_value(serde_json::json!({"intersectionItem": [{"unionData": [
        {"name": "hostname", "operate": "MAXPER", "type": 3, "text": {"value": "400"}}]}]}))
    .unwrap();
    for (what, constraint) in [("no constraint", None), ("MAXPER 400", Some(&maxper))] {
        let req = Request { constraint, ports_per_instance: 1, ..Request::bare("ns/many", 1000) };
        let started = std::time::Instant::now();
        let rounds = 20;
        for _ in 0..rounds {
            assert_eq!(place(&req, &nodes).unwrap().len(), 1000);
        }
        let per = started.elapsed() / rounds;
        let rate = 1000.0 / per.as_secs_f64();
        println!("placement, {what}: 1,000 instances over 3 nodes in {per:?} ({rate:.0} instances/s)");
    }
}

/// What [`place_apps`] measured.
struct Placed {
    instances: usize,
    took: Duration,
    /// The most any host's admitted requests exceed its room, in milli-cpu and bytes.
    worst_over: (u64, u64),
}

/// `hosts` hosts over 5 zones, every 7th with a gpu label, rooms of 16-64 cpus and 32-128 GiB;
/// `apps` apps of `per_app` instances, each requesting 100m-500m cpu and 128-512 MiB, preferring
/// one zone (weight 50) and hosts without a gpu (20), spreading its own instances over hosts
/// (anti-affinity, weight 10), every 4th app wanting a host that runs the app before it
/// (preferred pod affinity, 30) and every 9th app kept off the gpu hosts (required, Lt).
fn place_apps(hosts: usize, apps: usize, per_app: u32) -> Placed {
    let mut nodes: Vec<NodeView> = (0..hosts)
        .map(|i| {
            let mut attributes = BTreeMap::from([("zone".to_string(), format!("z{}", i % 5))]);
            attributes.insert("gen".into(), (i % 4).to_string());
            let mut labels = BTreeMap::new();
            if i % 7 == 0 {
                labels.insert("gpu".to_string(), "a100".to_string());
            }
            NodeView {
                name: format!("h{i:03}"),
                hostname: format!("h{i:03}"),
                attributes,
                labels,
                free_ports: 100_000,
                free: Some(Requests {
                    milli_cpu: 16_000 * (1 + (i as u64 % 4)),
                    memory_bytes: (32u64 << 30) * (1 + (i as u64 % 4)),
                }),
                ..Default::default()
            }
        })
        .collect();
    let room: Vec<Requests> = nodes.iter().map(|n| n.free.unwrap()).collect();
    let mut admitted: Vec<Requests> = vec![Requests::default(); hosts];
    let mut took = Duration::ZERO;
    let mut instances = 0;
    for a in 0..apps {
        let key = format!("bench/app{a}");
        let labels = BTreeMap::from([("app".to_string(), format!("app{a}"))]);
        let mut schedule = serde_json::json!({
            "affinity": {"node": {"type": "Prefered", "terms": [
                {"weight": 50, "expressions": [{"key": "zone", "operator": "In", "value": [format!("z{}", a % 5)]}]},
                {"weight": 20, "expressions": [{"key": "gpu", "operator": "DoesNotExist"}]}]}},
            "antiaffinity": {"pod": {"type": "Prefered", "terms": [
                {"weight": 10, "selector": {"labels": {"app": format!("app{a}")}}}]}}
        });
        if a % 4 == 1 {
            schedule["affinity"]["pod"] = serde_json::json!({"type": "Prefered", "terms": [
                {"weight": 30, "selector": {"labels": {"app": format!("app{}", a - 1)}}}]});
        }
        if a % 9 == 0 {
            schedule["affinity"]["node"]["terms"][1] = serde_json::json!(
                {"weight": 20, "expressions": [{"key": "gen", "operator": "Lt", "value": ["3"]}]});
        }
        let schedule: Schedule = serde_json::from_value(schedule).expect("a schedule");
        let requests =
            Requests { milli_cpu: 100 + 100 * (a as u64 % 5), memory_bytes: (128u64 << 20) * (1 + a as u64 % 4) };
        let req = Request {
            ports_per_instance: 1,
            requests,
            schedule: Some(&schedule),
            labels: labels.clone(),
            ..Request::bare(&key, per_app)
        };
        let started = Instant::now();
        let placed = place(&req, &nodes).unwrap_or_else(|e| panic!("{e}"));
        took += started.elapsed();
        instances += placed.len();
        // What the nodes' daemons would report next: the room taken, the app running there.
        for name in placed.values() {
            let i = nodes.iter().position(|n| &n.name == name).expect("a placed node exists");
            admitted[i] = admitted[i].plus(requests);
            let free = nodes[i].free.as_mut().expect("every host has room");
            *free = free.minus(requests);
            nodes[i].apps.entry(key.clone()).or_insert_with(|| (labels.clone(), 0)).1 += 1;
        }
    }
    let worst_over = room.iter().zip(&admitted).fold((0, 0), |(c, m), (room, got)| {
        (c.max(got.milli_cpu.saturating_sub(room.milli_cpu)), m.max(got.memory_bytes.saturating_sub(room.memory_bytes)))
    });
    Placed { instances, took, worst_over }
}

/// Exact at a small scale, run with every test: everything placed, nothing overcommitted.
#[test]
fn requests_and_preferences_never_overcommit() {
    let p = place_apps(10, 40, 25);
    assert_eq!(p.instances, 1000);
    assert_eq!(p.worst_over, (0, 0));
}

/// Issue 25's figure: 10,000 instances with requests and preferences over 100 hosts.
#[test]
#[ignore]
fn place_10000_over_100_hosts() {
    let p = place_apps(100, 200, 50);
    assert_eq!(p.instances, 10_000);
    let rate = p.instances as f64 / p.took.as_secs_f64();
    println!(
        "placement, requests and preferences: {} instances over 100 hosts in {:?} ({rate:.0} instances/s); \
         worst overcommit: {} milli-cpu, {} bytes",
        p.instances, p.took, p.worst_over.0, p.worst_over.1
    );
    assert_eq!(p.worst_over, (0, 0));
}
