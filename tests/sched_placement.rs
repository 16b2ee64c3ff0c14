//! steward-sched places by requests and preferences and acts on whole apps (issue 25), over
//! three network-namespace hosts each with its own stewardd (tests/cluster): requests that fit
//! one host only, a deploy that fits nowhere refused with each host's reason, two schedulers
//! deploying at once against the daemons' admission, preferred weights, pod affinity and
//! anti-affinity by a node attribute, tolerations of a cordon, `--wait-for-room`, `nodes`,
//! `config`; maxtimes across hosts, scale to 0 and back, a restart-policy change in place and
//! `restart APP`; seed 003's topology keys (zone, os, arch, ...) and the warning for one no node
//! reports.

mod cluster;
mod common;

use cluster::*;
use common::{id, spec};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

/// The cpu every host offers, in thousandths (what the daemons detect here).
fn host_milli_cpu() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as u64 * 1000
}

/// A sleeper requesting `cpu` (a quantity), with `top` over the spec's top level.
fn asking(name: &str, instances: u32, cpu: &str, top: Value) -> Value {
    spec(
        name,
        instances,
        json!({"startCmd": "exec sleep 1000", "resources": {"requests": {"cpu": cpu, "memory": "8Mi"}}}),
        top,
    )
}

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Instance index → host, from the hosts themselves.
async fn hosts_of(c: &Cluster, app: &str) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for (host, indexes) in c.spread(app).await {
        for i in indexes {
            out.insert(i, host.clone());
        }
    }
    out
}

/// The cpu each host has admitted and offers, (allocated, allocatable) in thousandths.
async fn cpu_books(c: &Cluster) -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::new();
    for h in &c.hosts {
        let r = h.daemon.client.node().await.unwrap().resources;
        out.insert(h.name.clone(), (r.allocated.milli_cpu, r.allocatable.milli_cpu));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_fit_preferences_steer_and_nothing_overcommits() {
    // h1 offers 1 cpu, h2 and h3 400m each; idc a, b, b.
    let cap = host_milli_cpu();
    let reserve = |left: u64| format!("reserved_cpu = \"{}m\"", cap.saturating_sub(left));
    let (r1, r2) = (reserve(1000), reserve(400));
    let c = Cluster::start_with("p", ["a", "b", "b"], [&r1, &r2, &r2]);

    // Fits only on h1.
    let big = asking("big", 1, "700m", json!({"schedule": {"labels": {"app": "big"}}}));
    let (code, out, err) = c.deploy("big", &big);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(hosts_of(&c, "big").await, BTreeMap::from([(0, "h1".to_string())]));

    // Fits nowhere: refused with each host's reason, nothing placed or stored.
    let (code, out, err) = c.deploy("huge", &asking("huge", 2, "1500m", json!({})));
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("cannot place test/huge/0: not enough resources on any node"), "{err}");
    for h in ["h1", "h2", "h3"] {
        assert!(err.contains(&format!("{h}: not enough cpu: 1.5 cores requested")), "{h}: {err}");
    }
    assert!(hosts_of(&c, "huge").await.is_empty());
    let (_, out, _) = c.sched(&["status"]);
    assert!(!out.contains("test/huge"), "{out}");

    // `nodes`: what each daemon offers and has admitted, its labels and cordon.
    let (code, out, err) = c.sched(&["node", "cordon", "h3", "--reason", "disk"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = c.sched(&["nodes"]);
    assert_eq!(code, 0, "{err}");
    let nodes = json_of(&out);
    let h1 = nodes.as_array().unwrap().iter().find(|n| n["name"] == "h1").unwrap();
    assert_eq!(h1["live"]["resources"]["allocatable"]["milliCpu"], 1000, "{h1:#}");
    assert_eq!(h1["live"]["resources"]["allocated"]["milliCpu"], 700, "{h1:#}");
    assert_eq!(h1["live"]["resources"]["capacity"]["milliCpu"], cap, "{h1:#}");
    assert_eq!(h1["live"]["attributes"]["idc"], "a", "{h1:#}");
    let h3 = nodes.as_array().unwrap().iter().find(|n| n["name"] == "h3").unwrap();
    assert_eq!(h3["cordon"]["preferred"], false, "{h3:#}");
    let text = c.sched_cmd(&["nodes"]).args(["-o", "text"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("700m/1/") && text.contains("required"), "{text}");

    // A cordoned host takes only an app that tolerates its cordon.
    let only_h3 = |tolerate: bool| {
        let mut schedule = json!({"affinity": {"node": {"terms": [{"expressions": [
            {"key": "hostname", "operator": "In", "value": ["h3"]}]}]}}});
        if tolerate {
            schedule["tolerations"] = json!([{"key": "steward/cordon", "operator": "Exists", "effect": "NoScheduler"}]);
        }
        json!({"schedule": schedule})
    };
    let (code, _, err) = c.deploy("intolerant", &asking("intolerant", 1, "10m", only_h3(false)));
    assert_ne!(code, 0);
    assert!(err.contains("h3: cordoned (required): disk"), "{err}");
    let (code, out, err) = c.deploy("tolerant", &asking("tolerant", 1, "10m", only_h3(true)));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(hosts_of(&c, "tolerant").await, BTreeMap::from([(0, "h3".to_string())]));
    let (code, _, err) = c.sched(&["node", "uncordon", "h3"]);
    assert_eq!(code, 0, "{err}");

    // Preferred weights steer: h3 (50 + 20) over h2 (20) over h1 (0), though spreading would
    // put the second instance elsewhere.
    let pref = asking(
        "pref",
        2,
        "0",
        json!({"schedule": {"affinity": {"node": {"type": "Prefered", "terms": [
            {"weight": 20, "expressions": [{"key": "idc", "operator": "In", "value": ["b"]}]},
            {"weight": 50, "expressions": [{"key": "hostname", "operator": "NotIn", "value": ["h1", "h2"]}]}]}}}}),
    );
    let (code, out, err) = c.deploy("pref", &pref);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(hosts_of(&c, "pref").await, BTreeMap::from([(0, "h3".to_string()), (1, "h3".to_string())]));

    // Pod affinity: beside the app labelled app=big, wherever that runs.
    let side = asking(
        "side",
        2,
        "0",
        json!({"schedule": {"affinity": {"pod": {"terms": [{"selector": {"labels": {"app": "big"}}}]}}}}),
    );
    let (code, out, err) = c.deploy("side", &side);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(hosts_of(&c, "side").await, BTreeMap::from([(0, "h1".to_string()), (1, "h1".to_string())]));

    // Anti-affinity by a node attribute: one per idc; a third has no idc left.
    let spread_over_idcs = asking(
        "spread",
        2,
        "0",
        json!({"schedule": {"labels": {"app": "spread"}, "antiaffinity": {"pod": {"terms": [
            {"topologyKey": "idc", "selector": {"labels": {"app": "spread"}}}]}}}}),
    );
    let (code, out, err) = c.deploy("spread", &spread_over_idcs);
    assert_eq!(code, 0, "{out}\n{err}");
    let placed = hosts_of(&c, "spread").await;
    let mut idcs: Vec<&str> = placed.values().map(|h| if h == "h1" { "a" } else { "b" }).collect();
    idcs.sort();
    assert_eq!(idcs, ["a", "b"], "{placed:?}");
    let (code, _, err) = c.sched(&["scale", "test/spread", "3"]);
    assert_ne!(code, 0);
    assert!(err.contains("schedule.antiaffinity.pod.terms[0]: idc b runs 1 instance(s)"), "{err}");
    assert_eq!(hosts_of(&c, "spread").await.len(), 2, "nothing half-placed");

    // Waiting for room: held Pending with the reason, placed by the leading run once room is
    // freed (reconcile every second, set at run time).
    let (code, out, err) = c.sched(&["config", "set", "reconcileSecs", "1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(json_of(&out)[0]["value"], 1, "{out}");
    let (code, _, err) = c.sched(&["config", "set", "reconcileSecs", "0"]);
    assert_eq!(code, 1);
    assert!(err.contains("config: reconcileSecs: 0 is out of range 1-3600"), "{err}");
    let later = asking("later", 1, "500m", json!({}));
    let path = c.dir.path().join("later.json");
    std::fs::write(&path, later.to_string()).unwrap();
    let (code, out, err) = c.sched(&["deploy", path.to_str().unwrap(), "--wait-for-room"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let held = json_of(&out);
    assert_eq!(held[0]["node"], "-", "{held:#}");
    assert_eq!(held[0]["placement"], json!({"state": "Pending", "reason": "waiting for room"}), "{held:#}");
    assert!(held[0]["message"].as_str().unwrap().contains("h1: not enough cpu"), "{held:#}");
    // The held instance and the setting are durable: the leader killed (-9) and started
    // again finds both.
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");
    drop(run);
    let (_, out, _) = c.sched(&["config", "get", "reconcileSecs"]);
    assert_eq!(json_of(&out)[0]["value"], 1, "{out}");
    let (_, out, _) = c.sched(&["status"]);
    assert!(
        json_of(&out).as_array().unwrap().iter().any(|p| p["instance"] == "test/later/0" && p["node"] == "-"),
        "{out}"
    );
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");
    let (code, _, err) = c.sched(&["delete", "test/big"]);
    assert_eq!(code, 0, "{err}");
    let moved =
        run.wait_for(30, "room found", |v| body_type(v) == "rescheduled" && v["body"]["reason"] == "room found");
    assert_eq!(moved["body"]["to"], "h1", "{moved}");
    c.host("h1").daemon.wait_state(&id("test", "later", 0), Kind::Running, 30).await;
    drop(run);

    // A new spec asking for more than its host has free beside what it runs: refused up front,
    // naming the host, before any host takes it.
    let (code, _, err) = c.deploy("later", &asking("later", 1, "1200m", json!({})));
    assert_ne!(code, 0);
    assert!(
        err.contains("the new spec requests more than its nodes have free") && err.contains("h1: not enough cpu"),
        "{err}"
    );
    let s = c.host("h1").daemon.status(&id("test", "later", 0)).await;
    assert_eq!((s.state.kind(), s.revision), (Kind::Running, 1), "{s:?}");

    // Two schedulers (each its own store) deploying at once: the daemons' admission keeps
    // every host within what it offers, whatever each scheduler believed was free.
    let second = c.dir.path().join("cluster2.toml");
    let text = std::fs::read_to_string(&c.file).unwrap().replace("state_dir = \"sched\"", "state_dir = \"sched2\"");
    std::fs::write(&second, text).unwrap();
    let (one, two) = (asking("c1", 4, "150m", json!({})), asking("c2", 4, "150m", json!({})));
    let (p1, p2) = (c.dir.path().join("c1.json"), c.dir.path().join("c2.json"));
    std::fs::write(&p1, one.to_string()).unwrap();
    std::fs::write(&p2, two.to_string()).unwrap();
    let mut first = c.sched_cmd(&["deploy", p1.to_str().unwrap()]).spawn().unwrap();
    let mut other = c.sched_cmd_with(&second, &["deploy", p2.to_str().unwrap()]).spawn().unwrap();
    let (s1, s2) = (first.wait().unwrap(), other.wait().unwrap());
    let books = cpu_books(&c).await;
    for (host, (allocated, allocatable)) in &books {
        assert!(allocated <= allocatable, "{host} overcommitted: {books:?}");
    }
    // Room for at most 1 + 2 + 2 of 150m beside what runs: not all eight.
    let running = hosts_of(&c, "c1").await.len() + hosts_of(&c, "c2").await.len();
    assert!(running < 8, "{running} placed: {books:?}");
    assert!(!s1.success() || !s2.success(), "one of them was refused: {books:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxtimes_scale_to_zero_policy_in_place_and_whole_app_restart() {
    let c = Cluster::start("q", ["a", "a", "a"]);
    let (code, _, err) = c.sched(&["config", "set", "reconcileSecs", "2"]);
    assert_eq!(code, 0, "{err}");
    let (got, _receiver) = c.webhook_receiver(18098);
    let (code, _, err) = c.sched(&["notify", "add", "http://127.0.0.1:18098/hook"]);
    assert_eq!(code, 0, "{err}");
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");

    // Exits at once; maxtimes 3: each host gives up after 3 restarts, the scheduler moves it
    // 3 times, then it stays Failed, notified, and no reconcile revives it.
    let crash = spec(
        "crash",
        1,
        json!({"startCmd": "exit 1"}),
        json!({"restartPolicy": {"policy": "OnFailure", "interval": 0, "backoff": 0, "maxtimes": 3}}),
    );
    let (code, out, err) = c.deploy("crash", &crash);
    assert_eq!(code, 0, "{out}\n{err}");
    let spent = run.wait_for(90, "maxtimes reached", |v| {
        body_type(v) == "notRescheduled"
            && v["body"]["reason"].as_str().is_some_and(|r| r.starts_with("maxtimes reached"))
    });
    let moves =
        run.drain().iter().filter(|v| body_type(v) == "rescheduled" && v["body"]["instance"] == "test/crash/0").count();
    assert_eq!(moves, 3, "{spent}");
    tokio::time::sleep(Duration::from_secs(6)).await; // three reconcile passes
    let moves =
        run.drain().iter().filter(|v| body_type(v) == "rescheduled" && v["body"]["instance"] == "test/crash/0").count();
    assert_eq!(moves, 3, "nothing revived it");
    let last = spent["body"]["node"].as_str().unwrap().to_string();
    let s = c.host(&last).daemon.status(&id("test", "crash", 0)).await;
    assert_eq!(s.state.kind(), Kind::Failed, "{s:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let notes = std::fs::read_to_string(&got).unwrap_or_default();
        let spent: Vec<Value> = notes
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|n| n["kind"] == "maxtimesReached")
            .collect();
        if !spent.is_empty() {
            assert_eq!(spent.len(), 1, "{notes}");
            assert_eq!(spent[0]["instance"], "test/crash/0");
            break;
        }
        assert!(Instant::now() < deadline, "no maxtimesReached notification: {notes}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Scale to 0 and back: the stored spec, its port names, its revision kept.
    let web = |policy: &str| {
        spec(
            "web",
            3,
            json!({"ports": [{"name": "http", "hostPort": 0}], "startCmd": "exec sleep 1000"}),
            json!({"restartPolicy": {"policy": policy, "interval": 0}}),
        )
    };
    let (code, out, err) = c.deploy("web", &web("Always"));
    assert_eq!(code, 0, "{out}\n{err}");
    wait_running(&c, "web").await;
    let (code, out, err) = c.sched(&["scale", "test/web", "0"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(hosts_of(&c, "web").await.is_empty());
    let (code, out, err) = c.sched(&["scale", "test/web", "2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    wait_running(&c, "web").await;
    let mut pids = BTreeMap::new();
    for h in &c.hosts {
        for s in h.daemon.client.list(&[("name", "web")]).await.unwrap() {
            assert!(s.ports.contains_key("http"), "{s:?}");
            pids.insert(s.id.index, (h.name.clone(), s.pid.unwrap()));
        }
    }
    assert_eq!(pids.len(), 2);

    // A restart-policy change reaches every host and restarts nothing.
    let (code, out, err) = c.deploy("web", &{
        let mut w = web("OnFailure");
        w["spec"]["instance"] = json!(2);
        w
    });
    assert_eq!(code, 0, "{out}\n{err}");
    for (i, (host, pid)) in &pids {
        let s = c.host(host).daemon.status(&id("test", "web", *i)).await;
        assert_eq!(s.pid, Some(*pid), "{s:?}");
        let revisions = c.host(host).daemon.client.revisions("test", "web").await.unwrap();
        assert_eq!(revisions.revisions.len(), 1, "{revisions:?}");
    }

    // `restart --instance 1`: that one only; `restart`: every instance on every host.
    let (code, out, err) = c.sched(&["restart", "test/web", "--instance", "1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (h0, pid0) = pids[&0].clone();
    let (h1, pid1) = pids[&1].clone();
    let s1 = c.host(&h1).daemon.wait(&id("test", "web", 1), 30, |s| s.pid.is_some_and(|p| p != pid1)).await;
    assert_eq!(s1.state.kind(), Kind::Running, "{s1:?}");
    assert_eq!(c.host(&h0).daemon.status(&id("test", "web", 0)).await.pid, Some(pid0));
    let before = BTreeMap::from([(0, (h0.clone(), pid0)), (1, (h1.clone(), s1.pid.unwrap()))]);
    let (code, out, err) = c.sched(&["restart", "test/web"]);
    assert_eq!(code, 0, "{out}\n{err}");
    // Rolled out on each host by its strategy (a surge instance first): the app keeps its ids.
    assert_eq!(hosts_of(&c, "web").await.keys().copied().collect::<Vec<_>>(), [0, 1]);
    for (i, (host, was)) in &before {
        let d = &c.host(host).daemon;
        let s = d
            .wait(&id("test", "web", *i), 30, |s| s.state.kind() == Kind::Running && s.pid.is_some_and(|p| p != *was))
            .await;
        assert_eq!((s.revision, s.run_revision), (2, 2), "a new revision on {host}: {s:?}");
    }
    let (_, out, _) = c.sched(&["rollout", "status", "test/web"]);
    assert_eq!(json_of(&out)["rollout"]["phase"], "complete", "{out}");

    // `cp`: a file into instance 1 on whichever host runs it (through that daemon's API).
    let local = c.dir.path().join("motd.txt");
    std::fs::write(&local, "welcome\n").unwrap();
    let (code, out, err) = c.sched(&["cp", local.to_str().unwrap(), "test/web/1:motd.txt", "--mode", "rw"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let host1 = &hosts_of(&c, "web").await[&1];
    let copied = c.host(host1).daemon.work_dir().join("test.web.1/motd.txt");
    assert_eq!(std::fs::read_to_string(&copied).unwrap(), "welcome\n");
    let (code, _, err) = c.sched(&["cp", local.to_str().unwrap(), "test/web/1:/etc/motd-steward"]);
    assert_ne!(code, 0);
    assert!(err.contains("workPath"), "{err}");
    let (code, _, err) = c.sched(&["cp", local.to_str().unwrap(), "test/web/7:x"]);
    assert_ne!(code, 0);
    assert!(err.contains("no instance 7"), "{err}");
}

/// Issue 43, item 9: an instance's reschedule count starts again from zero once it has run
/// healthy for the window (30 minutes; 3 s here through the test-only variable): with maxtimes
/// 1, an instance moved once (it fails on h1) that then runs healthy and fails later is moved
/// again, not left Failed with "maxtimes reached".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reschedule_count_resets_after_healthy_running() {
    let c = Cluster::start("x", ["a", "a", "a"]);
    let (code, _, err) = c.sched(&["config", "set", "reconcileSecs", "1"]);
    assert_eq!(code, 0, "{err}");
    let mut cmd = c.sched_cmd(&["run"]);
    cmd.env("STEWARD_SCHED_TEST_RESCHEDULE_RESET_SECS", "3");
    let mut run = Follower::spawn(cmd);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");

    // Fails at once on h1; elsewhere runs until the marker exists, then fails.
    let marker = c.dir.path().join("fail-now");
    let start = format!(
        "[ \"${{hostip}}\" = 10.231.0.1 ] && exit 1; while [ ! -f {m} ]; do sleep 0.2; done; exit 1",
        m = marker.display()
    );
    let flaky = spec(
        "flaky",
        1,
        json!({"startCmd": start}),
        json!({"restartPolicy": {"policy": "OnFailure", "interval": 0, "backoff": 0, "maxtimes": 1}}),
    );
    let (code, out, err) = c.deploy("flaky", &flaky);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(json_of(&out)[0]["node"], "h1", "{out}");
    let moved = run.wait_for(60, "moved off h1", |v| body_type(v) == "rescheduled");
    let there = moved["body"]["to"].as_str().unwrap().to_string();
    c.host(&there).daemon.wait_state(&id("test", "flaky", 0), Kind::Running, 30).await;
    // Healthy for longer than the window, and a reconcile pass after it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    std::fs::write(&marker, "").unwrap();
    let verdict = run.wait_for(60, "moved again, or not", |v| {
        (body_type(v) == "rescheduled" && v["body"]["from"] == there.as_str()) || body_type(v) == "notRescheduled"
    });
    assert_eq!(body_type(&verdict), "rescheduled", "the count was not reset: {verdict}");
}

/// Seed 003's topology keys (issue 45 item 4): each daemon reports its zone, region and instance
/// type from `[node]`, its os and arch from the host; deploys spread and select by them in the
/// seed's spelling, and a term on a key no node reports is a warning at deploy (text and JSON),
/// not a silent never-match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_003_topology_keys_place_and_an_unreported_key_warns() {
    let node = |zone: &str, extra: &str| format!("zone = \"{zone}\"\nregion = \"r1\"\n{extra}");
    let (h1, h2) = (node("z1", "instance_type = \"big\""), node("z2", ""));
    let c = Cluster::start_with_node("z", ["a", "a", "a"], ["", "", ""], [&h1, &h2, &h2]);
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };

    // What each daemon reports, as steward-sched sees it.
    let (code, out, err) = c.sched(&["nodes"]);
    assert_eq!(code, 0, "{err}");
    let nodes = json_of(&out);
    let topology =
        |name: &str| nodes.as_array().unwrap().iter().find(|n| n["name"] == name).unwrap()["live"]["topology"].clone();
    assert_eq!(
        topology("h1"),
        json!({"arch": arch, "instance-type": "big", "os": "linux", "region": "r1", "zone": "z1"})
    );
    assert_eq!(topology("h2"), json!({"arch": arch, "os": "linux", "region": "r1", "zone": "z2"}));

    // Required anti-affinity by seed 003's zone key: one per zone, a third refused naming it.
    let cache = |n: u32| {
        spec(
            "cache",
            n,
            json!({"startCmd": "exec sleep 1000"}),
            json!({"schedule": {"labels": {"app": "cache"}, "antiaffinity": {"pod": {"terms": [
                {"topologyKey": "failure-domain.beta.kubernetes.io/zone", "selector": {"labels": {"app": "cache"}}}]}}}}),
        )
    };
    let (code, out, err) = c.deploy("cache", &cache(2));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!err.contains("warning"), "{err}");
    let mut zones: Vec<&str> =
        hosts_of(&c, "cache").await.values().map(|h| if h == "h1" { "z1" } else { "z2" }).collect();
    zones.sort();
    assert_eq!(zones, ["z1", "z2"]);
    let (code, _, err) = c.deploy("cache", &cache(3));
    assert_ne!(code, 0);
    assert!(err.contains("zone z2 runs 1 instance(s) of apps matching {app=cache}"), "{err}");

    // Node affinity on the instance type, os and arch: h1 only.
    let big = spec(
        "big",
        2,
        json!({"startCmd": "exec sleep 1000"}),
        json!({"schedule": {"affinity": {"node": {"terms": [{"expressions": [
            {"key": "beta.kubernetes.io/instance-type", "operator": "In", "value": ["big"]},
            {"key": "beta.kubernetes.io/os", "operator": "In", "value": ["linux"]},
            {"key": "kubernetes.io/arch", "operator": "In", "value": [arch]}]}]}}}}),
    );
    let (code, out, err) = c.deploy("big", &big);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(hosts_of(&c, "big").await, BTreeMap::from([(0, "h1".to_string()), (1, "h1".to_string())]));

    // A misspelt key: warned of (a JSON line with -o json, a line of text without), deployed as
    // the term says (a Prefered anti-affinity on it constrains nothing).
    let typo = spec(
        "typo",
        1,
        json!({"startCmd": "exec sleep 1000"}),
        json!({"schedule": {"antiaffinity": {"pod": {"type": "Prefered", "terms": [
            {"weight": 10, "topologyKey": "failure-domain.beta.kubernetes.io/zones", "selector": {}}]}}}}),
    );
    let (code, out, err) = c.deploy("typo", &typo);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(json_of(&out).as_array().map(Vec::len), Some(1), "stdout keeps its shape: {out}");
    let message = "\"failure-domain.beta.kubernetes.io/zones\" is reported by no node \
                   (they report arch, hostname, idc, instance-type, ip, os, region, zone)";
    let warning = err.lines().find_map(|l| serde_json::from_str::<Value>(l).ok()).unwrap_or_else(|| panic!("{err}"));
    assert_eq!(
        warning,
        json!({"warning": {"path": "schedule.antiaffinity.pod.terms[0].topologyKey", "message": message}})
    );
    let path = c.dir.path().join("typo.json");
    let text = c.sched_cmd(&["deploy", path.to_str().unwrap()]).args(["-o", "text"]).output().unwrap();
    let err = String::from_utf8_lossy(&text.stderr);
    assert!(text.status.success(), "{err}");
    assert!(
        err.contains(&format!("steward-sched: warning: schedule.antiaffinity.pod.terms[0].topologyKey: {message}")),
        "{err}"
    );
}

/// One app as YAML, as seed 003's users write it.
fn yaml_app(name: &str, instances: &str) -> String {
    format!(
        "apiVersion: v4\nkind: process\nmetadata:\n  name: {name}\n  namespace: test\nspec:\n  instance: {instances}\n  template:\n    spec:\n      processes:\n        - procName: sh\n          workPath: ${{work_base_dir}}/${{namespace}}.${{processname}}.${{instanceid}}\n          startCmd: exec sleep 1000\n          startGracePeriod: 0\n"
    )
}

#[tokio::test]
async fn deploy_and_depend_apply_read_yaml_streams_and_stdin() {
    let c = Cluster::start("y", ["a", "a", "a"]);
    let write = |name: &str, text: &str| {
        let path = std::env::temp_dir().join(format!("steward-sched-yaml-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    };
    // A stream with one bad document: it is named with its line, and nothing is deployed.
    let bad = write("bad.yaml", &format!("{}---\n{}", yaml_app("ya", "2"), yaml_app("yb", "lots")));
    let (code, out, err) = c.sched(&["deploy", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("bad.yaml (document 2)") && err.contains("spec.instance") && err.contains("(line 22, column 3)"),
        "{err}"
    );
    assert_eq!(json_of(&c.sched(&["status"]).1), json!([]), "nothing deployed while one document is invalid");

    // Both documents, in order.
    let good = write("good.yaml", &format!("{}---\n{}", yaml_app("ya", "2"), yaml_app("yb", "1")));
    let (code, out, err) = c.sched(&["deploy", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(hosts_of(&c, "ya").await.len(), 2);
    assert_eq!(hosts_of(&c, "yb").await.len(), 1);
    wait_running(&c, "yb").await;

    // From stdin.
    let mut deploy = c.sched_cmd(&["deploy", "-"]);
    deploy
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = deploy.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), yaml_app("yc", "1").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(hosts_of(&c, "yc").await.len(), 1);

    // A dependency in YAML is stored as written.
    let dep = write("dep.yaml", &yaml_app("ydep", "1"));
    let (code, out, err) = c.sched(&["depend", "apply", dep.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(json_of(&out)["dependency"], "test/ydep", "{out}");
    for f in [bad, good, dep] {
        let _ = std::fs::remove_file(f);
    }
}

/// Issue 47: a pod app's ordinals with kept (Dynamic) volumes come back to the hosts that hold
/// their data: deleted and deployed again with a preference that would send every instance to
/// h3, each ordinal is placed where its volume is; a drift without --force leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinal_with_a_kept_volume_is_placed_where_its_data_is() {
    common::docker::shared_engine();
    let c = Cluster::start("k", ["a", "b", "c"]);
    let mut main = common::docker::sh("main", "[ -f /data/who ] || echo \"${ORD##*.}\" > /data/who; exec sleep 1000");
    main["env"] = json!([{"name": "ORD", "value": "$BCS_POD_ID"}]);
    main["mounts"] = json!([{"name": "save", "path": "/data"}]);
    let world = |top: Value| {
        let mut p = common::docker::pod("test", "world", json!([main.clone()]), top);
        p["spec"]["instance"] = json!(3);
        p["spec"]["template"]["spec"]["volumes"] = json!([{"name": "save", "type": "Dynamic"}]);
        p
    };
    let (code, out, err) = c.deploy("world", &world(json!({})));
    assert_eq!(code, 0, "{out}\n{err}");
    for i in 0..3 {
        let host = hosts_of(&c, "world").await[&i].clone();
        c.host(&host).daemon.wait_state(&id("test", "world", i), Kind::Running, 60).await;
    }
    let first = hosts_of(&c, "world").await;
    // Each host reports the ordinals whose data it keeps.
    for (i, host) in &first {
        let doc = c.host(host).daemon.client.node().await.unwrap();
        assert!(doc.kept_volumes.contains(&format!("test/world/{i}")), "{host}: {:?}", doc.kept_volumes);
    }
    let (code, _, err) = c.sched(&["delete", "test/world"]);
    assert_eq!(code, 0, "{err}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !hosts_of(&c, "world").await.is_empty() {
        assert!(Instant::now() < deadline, "world still runs");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Deployed again, preferring h3 for everything: each ordinal still goes where its data is.
    let to_h3 = json!({"schedule": {"affinity": {"node": {"type": "Prefered", "terms": [
        {"weight": 50, "expressions": [{"key": "hostname", "operator": "In", "value": ["h3"]}]}]}}}});
    let (code, out, err) = c.deploy("world", &world(to_h3));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(hosts_of(&c, "world").await, first, "{out}");
    // A drift without --force leaves it, saying why.
    let from = first[&0].clone();
    let (_, out, err) = c.sched(&["drift", "--from", &from, "--app", "test/world"]);
    assert!(format!("{out}{err}").contains("a kept volume on its node"), "{out}\n{err}");
    assert_eq!(hosts_of(&c, "world").await, first);
    let (code, _, err) = c.sched(&["delete", "test/world"]);
    assert_eq!(code, 0, "{err}");
}
