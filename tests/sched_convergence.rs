//! Issue 43: the fleet converges from whatever state a host comes back with. A random sequence
//! of operations over three network-namespace hosts — deploy (some with a NodePort service),
//! scale, delete (also while a host's daemon is down), rollout, a host daemon's kill -9, a
//! host's link cut and restored, the
//! leader's kill -9, a host's state wiped — and after each, once the cluster settles, every
//! host holds exactly what the desired state says: each placed instance running on its node
//! and nowhere else, no instance of an app not in it, and the endpoints of every app (with
//! their services' node ports and cluster IPs) as stored, none of a deleted app.
//!
//! `STEWARD_CONVERGE_STEPS` (default 15) and `STEWARD_CONVERGE_SEED` (default 43) reproduce a
//! run; each step is printed.

mod cluster;
mod common;

use cluster::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use steward::protocol::AppEndpoints;
use steward::supervisor::state::Kind;

/// A small, reproducible random source (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

const APPS: [&str; 3] = ["a0", "a1", "a2"];

fn doc(name: &str, instances: u32, version: u32, service: bool) -> Value {
    let mut d = app(name, instances, json!({"restartPolicy": {"policy": "Always"}}));
    d["spec"]["template"]["spec"]["processes"][0]["env"] = json!([{"name": "VERSION", "value": version.to_string()}]);
    d["spec"]["template"]["spec"]["processes"][0]["ports"] = json!([{"name": "http", "hostPort": 0}]);
    if service {
        d["services"] = json!([{"name": format!("{name}-svc"), "type": "NodePort",
                                "ports": [{"protocol": "TCP", "targetPort": "http", "port": 80}]}]);
    }
    d
}

/// What the scheduler holds: app → its placed instances (index → node), and its endpoints.
fn desired(c: &Cluster) -> Option<BTreeMap<String, BTreeMap<u32, String>>> {
    let (code, out, _) = c.sched(&["status"]);
    if code != 0 {
        return None;
    }
    let rows: Vec<Value> = serde_json::from_str(&out).ok()?;
    let mut apps: BTreeMap<String, BTreeMap<u32, String>> = BTreeMap::new();
    for r in rows {
        let instance = r["instance"].as_str()?;
        let (app, index) = instance.rsplit_once('/')?;
        // Anything not settled (pending, lost, stray, being deleted) is not converged yet.
        if r["placement"]["state"] != "Placed" || r["state"] != "Running" {
            return None;
        }
        apps.entry(app.to_string()).or_default().insert(index.parse().ok()?, r["node"].as_str()?.to_string());
    }
    Some(apps)
}

fn stored_endpoints(c: &Cluster, app: &str) -> Option<AppEndpoints> {
    let (code, out, _) = c.sched(&["endpoints", app]);
    (code == 0).then(|| serde_json::from_str(&out).ok()).flatten()
}

/// Why the hosts differ from the desired state (None: they hold exactly it).
async fn difference(
    c: &Cluster,
    apps: &BTreeMap<String, BTreeMap<u32, String>>,
    deployed: &BTreeSet<String>,
) -> Option<String> {
    let mut running: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for h in &c.hosts {
        for s in h.daemon.client.list(&[]).await.unwrap() {
            if s.state.kind() == Kind::Running {
                running.entry(s.id.to_string()).or_default().push(h.name.clone());
            }
        }
    }
    let mut meant: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (app, placed) in apps {
        for (i, node) in placed {
            meant.insert(format!("{app}/{i}"), vec![node.clone()]);
        }
    }
    if running != meant {
        return Some(format!("instances: hosts run {running:?}, the desired state says {meant:?}"));
    }
    // Endpoints: every host holds the stored revision of each app that has one, and nothing else.
    let mut stored: BTreeMap<String, AppEndpoints> = BTreeMap::new();
    for app in deployed {
        if let Some(e) = stored_endpoints(c, app) {
            stored.insert(app.clone(), e);
        }
    }
    for app in APPS {
        let key = format!("test/{app}");
        if !deployed.contains(&key) && stored_endpoints(c, &key).is_some() {
            return Some(format!("the store keeps endpoints of {key}, which is not deployed"));
        }
    }
    for h in &c.hosts {
        let held: BTreeMap<String, AppEndpoints> =
            h.daemon.client.endpoints(None).await.unwrap().into_iter().map(|e| (e.key(), e)).collect();
        if held != stored {
            let (h_keys, s_keys): (BTreeSet<&String>, BTreeSet<&String>) =
                (held.keys().collect(), stored.keys().collect());
            return Some(format!(
                "{} holds endpoints of {h_keys:?} (or other revisions), the store {s_keys:?}",
                h.name
            ));
        }
    }
    None
}

/// Waits until the hosts hold exactly the desired state.
async fn settle(c: &Cluster, run: &mut Follower, step: &str, deployed: &BTreeSet<String>) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut why = String::from("the desired state never settled");
    while Instant::now() < deadline {
        if let Some(apps) = desired(c).filter(|apps| apps.keys().all(|k| deployed.contains(k))) {
            match difference(c, &apps, deployed).await {
                None => return,
                Some(d) => why = d,
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let said: Vec<String> = c
        .hosts
        .iter()
        .flat_map(|h| {
            let log = h.daemon.log();
            let lines: Vec<String> = log
                .lines()
                .filter(|l| l.contains("desired") || l.contains("endpoints") || l.contains("PUT"))
                .map(|l| format!("{}: {l}", h.name))
                .collect();
            lines.into_iter().rev().take(15).collect::<Vec<_>>()
        })
        .collect();
    let sched: Vec<String> = run
        .drain()
        .iter()
        .filter(|v| {
            body_type(v).starts_with("endpoints") || body_type(v) == "desiredHanded" || body_type(v) == "deleteDone"
        })
        .map(|v| v.to_string())
        .collect();
    panic!("after {step}: {why}\n{}\n{}", said.join("\n"), sched.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_converge_host_by_host() {
    let steps: usize = std::env::var("STEWARD_CONVERGE_STEPS").ok().and_then(|n| n.parse().ok()).unwrap_or(15);
    let seed: u64 = std::env::var("STEWARD_CONVERGE_SEED").ok().and_then(|n| n.parse().ok()).unwrap_or(43);
    let mut rng = Rng(seed.max(1));
    let mut c = Cluster::start("v", ["a", "a", "a"]);
    let (code, _, err) = c.sched(&["config", "set", "reconcileSecs", "2"]);
    assert_eq!(code, 0, "{err}");
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");
    // What is deployed: app → (instances, version, service).
    let mut deployed: BTreeMap<&str, (u32, u32, bool)> = BTreeMap::new();
    let mut n = 0;
    while n < steps {
        let app = APPS[rng.below(APPS.len() as u64) as usize];
        let host = rng.below(3) as usize;
        let name = c.hosts[host].name.clone();
        // Deploys are likelier while few apps run: the other operations need something to act on.
        let pick = if deployed.len() < 2 && rng.below(2) == 0 { 0 } else { rng.below(10) };
        let op = match pick {
            0 | 1 if !deployed.contains_key(app) => {
                let spec = (1 + rng.below(3) as u32, 1, rng.below(2) == 0);
                let (code, out, err) = c.deploy(app, &doc(app, spec.0, spec.1, spec.2));
                assert_eq!(code, 0, "deploy {app}: {out}\n{err}");
                deployed.insert(app, spec);
                format!("deploy {app} {spec:?}")
            }
            2 if deployed.contains_key(app) => {
                let to = rng.below(4) as u32;
                let (code, out, err) = c.sched(&["scale", &format!("test/{app}"), &to.to_string()]);
                assert_eq!(code, 0, "scale {app} {to}: {out}\n{err}");
                deployed.get_mut(app).unwrap().0 = to;
                format!("scale {app} {to}")
            }
            3 if deployed.contains_key(app) => {
                let (code, out, err) = c.sched(&["delete", &format!("test/{app}")]);
                assert_eq!(code, 0, "delete {app}: {out}\n{err}");
                deployed.remove(app);
                format!("delete {app}")
            }
            4 if deployed.contains_key(app) => {
                let s = deployed.get_mut(app).unwrap();
                s.1 += 1;
                let (code, out, err) = c.deploy(app, &doc(app, s.0, s.1, s.2));
                assert_eq!(code, 0, "rollout {app}: {out}\n{err}");
                format!("rollout {app} to version {}", s.1)
            }
            5 => {
                c.hosts[host].daemon.kill9();
                c.hosts[host].daemon.spawn();
                wait_remote(&c.hosts[host].daemon, 1);
                format!("kill -9 of {name}'s daemon")
            }
            6 => {
                ip(&["-n", &c.hub, "link", "set", &format!("v{name}"), "down"]);
                tokio::time::sleep(Duration::from_secs(5)).await;
                ip(&["-n", &c.hub, "link", "set", &format!("v{name}"), "up"]);
                format!("{name}'s link cut for 5 s")
            }
            7 => {
                drop(run);
                run = c.follow(&["run"]);
                run.wait_for(30, "leading again", |v| body_type(v) == "leading");
                "kill -9 of the leader".to_string()
            }
            8 => {
                // A host reinstalled: what it ran stopped, its state gone, its daemon new.
                let d = &mut c.hosts[host].daemon;
                for s in d.client.list(&[]).await.unwrap() {
                    let _ = d.client.delete(&s.id, Some(30.0)).await;
                }
                d.kill9();
                std::fs::remove_dir_all(d.path().join("state")).unwrap();
                d.spawn();
                wait_remote(d, 1);
                format!("{name}'s state wiped")
            }
            9 if deployed.contains_key(app) => {
                // The host misses the delete: its daemon is down meanwhile.
                c.hosts[host].daemon.kill9();
                let (code, out, err) = c.sched(&["delete", &format!("test/{app}")]);
                assert_eq!(code, 0, "delete {app}: {out}\n{err}");
                deployed.remove(app);
                c.hosts[host].daemon.spawn();
                wait_remote(&c.hosts[host].daemon, 1);
                format!("delete {app} while {name}'s daemon is down")
            }
            _ => continue,
        };
        println!("step {n}: {op}");
        let keys: BTreeSet<String> = deployed.keys().map(|a| format!("test/{a}")).collect();
        settle(&c, &mut run, &op, &keys).await;
        n += 1;
    }
}
