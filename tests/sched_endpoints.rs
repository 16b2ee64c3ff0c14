//! Endpoints (issue 27) over three network-namespace hosts, each with its own stewardd
//! (tests/cluster): the leading `steward-sched run` lists per app and port name the Ready
//! instances, stores each revision and hands it to every daemon; a readiness change reaches the
//! daemons within a second (a long poll on a daemon sees it); revisions survive the leader's
//! kill -9 and a daemon's, and a lost node's instances leave the list.

mod cluster;
mod common;

use cluster::*;
use common::{id, spec};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use steward::protocol::AppEndpoints;

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// A sleeper with a random port `http`, Ready while its workPath has no file `notready`.
fn web(instances: u32) -> Value {
    let probe = json!({
        "handler": {"type": "EXEC", "method": {"command": ["sh", "-c", "test ! -e ${workPath}/notready"]}},
        "period": 1,
        "threshold": {"success": 1, "failure": 1}
    });
    spec(
        "web",
        instances,
        json!({"ports": [{"name": "http", "hostPort": 0}], "startCmd": "exec sleep 1000", "probe": {"readiness": probe}}),
        json!({"constraint": {"intersectionItem": [{"unionData": [{"name": "hostname", "operate": "UNIQUE"}]}]}}),
    )
}

/// The stored endpoints of test/web, as `steward-sched endpoints` prints them.
fn sched_endpoints(c: &Cluster) -> AppEndpoints {
    let (code, out, err) = c.sched(&["endpoints", "test/web"]);
    assert_eq!(code, 0, "{out}\n{err}");
    serde_json::from_value(json_of(&out)).unwrap()
}

fn count(e: &AppEndpoints) -> usize {
    e.ports.get("http").map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_follow_readiness_on_every_host_and_survive_restarts() {
    let mut c = Cluster::start("e", ["a", "a", "a"]);
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");
    let (code, out, err) = c.deploy("web", &web(3));
    assert_eq!(code, 0, "{out}\n{err}");
    run.wait_for(30, "3 ready", |v| body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 3);

    // One endpoint per instance, at its host's address and its own port; every daemon has it.
    let e = sched_endpoints(&c);
    assert_eq!(count(&e), 3, "{e:?}");
    for h in &c.hosts {
        let s = h.daemon.client.list(&[("name", "web")]).await.unwrap();
        let mine: Vec<_> = e.ports["http"].iter().filter(|p| p.node == h.name).collect();
        assert_eq!(mine.len(), 1, "{e:?}");
        assert_eq!(
            (mine[0].ip.as_str(), mine[0].port, mine[0].instance),
            (h.ip.as_str(), s[0].ports["http"], s[0].id.index)
        );
        let (code, out, err) = h.daemon.cli(&["-o", "json", "endpoints", "test/web"]);
        assert_eq!(code, 0, "{err}");
        let held: AppEndpoints = serde_json::from_str(&out).unwrap();
        assert_eq!(held, e, "{} holds the stored revision", h.name);
    }

    // Readiness off on one instance: a long poll on another daemon returns the next revision,
    // made within a second of the instance's readyChanged.
    let (victim_host, victim) = {
        let p = &e.ports["http"][1];
        (c.host(&p.node).name.clone(), p.instance)
    };
    let watcher = c.hosts.iter().find(|h| h.name != victim_host).unwrap().daemon.client.clone();
    let rev = e.revision;
    let poll = tokio::spawn(async move { watcher.app_endpoints("test", "web", Some((rev, 20.0))).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let vd = &c.host(&victim_host).daemon;
    let since = vd.client.node().await.unwrap().events.last_seq;
    std::fs::write(vd.work_dir().join(format!("test.web.{victim}/notready")), "").unwrap();
    let after = poll.await.unwrap().unwrap().unwrap();
    assert_eq!((after.revision, count(&after)), (rev + 1, 2), "{after:?}");
    assert!(!after.ports["http"].iter().any(|p| p.instance == victim), "{after:?}");
    let mut ready_changed_ms = None;
    vd.client
        .events(since, false, |ev| {
            let v = ev.body.to_value();
            if v["type"] == "readyChanged" && v["instance"] == format!("test/web/{victim}") {
                ready_changed_ms = Some(ev.at_ms);
            }
            true
        })
        .await
        .unwrap();
    let lag = after.updated_ms as i64 - ready_changed_ms.expect("readyChanged journaled") as i64;
    assert!((0..1000).contains(&lag), "endpoints followed readiness after {lag} ms");

    // The leader's kill -9: a new one goes on from the stored revision.
    drop(run);
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading again", |v| body_type(v) == "leading");
    std::fs::remove_file(c.host(&victim_host).daemon.work_dir().join(format!("test.web.{victim}/notready"))).unwrap();
    run.wait_for(30, "ready again", |v| body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 3);
    let e = sched_endpoints(&c);
    assert_eq!((e.revision, count(&e)), (rev + 2, 3), "{e:?}");

    // A daemon's kill -9: it serves the same revision when back (durable in its store).
    let h1 = c.hosts.iter().position(|h| h.name == "h1").unwrap();
    c.hosts[h1].daemon.restart(true);
    wait_remote(&c.hosts[h1].daemon, 2);
    let kept = c.hosts[h1].daemon.client.app_endpoints("test", "web", None).await.unwrap().unwrap();
    assert_eq!(kept, e);

    // A lost node: its instance leaves the list (the others stay).
    let h3 = c.hosts.iter().position(|h| h.name == "h3").unwrap();
    let started = Instant::now();
    c.hosts[h3].daemon.kill9();
    let newer = |v: &Value| v["body"]["revision"].as_u64() > Some(e.revision);
    run.wait_for(30, "h3's instance gone", |v| {
        body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 2 && newer(v)
    });
    // The update that drops h3's: under a loaded machine an earlier one may have been another
    // host's brief change (h1's daemon was just restarted), so the list itself is what counts.
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = loop {
        let e = sched_endpoints(&c);
        if e.ports["http"].iter().all(|p| p.node != "h3") || Instant::now() > deadline {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(e.ports["http"].iter().all(|p| p.node != "h3"), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    let still = c.host("h2").daemon.client.app_endpoints("test", "web", None).await.unwrap().unwrap();
    assert_eq!(still.revision, e.revision);

    // Deleting the app removes its endpoints everywhere it can.
    let (code, out, err) = c.sched(&["delete", "test/web"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let gone = c.host("h2").daemon.client.app_endpoints("test", "web", None).await.unwrap().is_none();
        if gone {
            break;
        }
        assert!(Instant::now() < deadline, "the endpoints of a deleted app stayed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A web server answering its instance id, Ready while it answers and its workPath has no file `notready`,
/// behind a NodePort service whose node port steward-sched chooses.
fn served(instances: u32) -> Value {
    let mut doc = web(instances);
    let p = &mut doc["spec"]["template"]["spec"]["processes"][0];
    p["startCmd"] = json!("echo ${instanceid} > index.html; exec python3 -m http.server $PORT_http");
    // Ready once it answers, too: python listens some time after it starts (longer on a loaded
    // host), and an endpoint handed out before then refuses the requests sent to it.
    p["probe"]["readiness"]["handler"]["method"]["command"][2] =
        json!("test ! -e ${workPath}/notready && curl -s -f -o /dev/null -m 1 http://127.0.0.1:${ports.http}/");
    doc["services"] =
        json!([{"name": "web", "type": "NodePort", "ports": [{"protocol": "TCP", "targetPort": "http", "port": 80}]}]);
    doc
}

/// GET http://ADDR:PORT/ from the control namespace: the body, or None.
fn get_from_ctl(c: &Cluster, addr: &str, port: u16) -> Option<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &c.ctl, "curl", "-s", "-f", "-m", "3"])
        .arg(format!("http://{addr}:{port}/"))
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Host `name`'s network namespace.
fn host_ns(c: &Cluster, name: &str) -> String {
    format!("{}{name}", c.ctl.trim_end_matches("ctl"))
}

/// `nft list table ip steward` in host `name`'s namespace (None: no such table).
fn nft_table(c: &Cluster, name: &str) -> Option<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &host_ns(c, name), "nft", "list", "table", "ip", "steward"])
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// GET http://ADDR:PORT/ from host `name` itself (a cluster IP is local to each host).
fn get_on_host(c: &Cluster, name: &str, addr: &str, port: u16) -> Option<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &host_ns(c, name), "curl", "-s", "-f", "-m", "3"])
        .arg(format!("http://{addr}:{port}/"))
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Steward's cluster IPs on host `name` (its `lo:steward-svc` addresses; None: none).
fn vip_link(c: &Cluster, name: &str) -> Option<String> {
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &host_ns(c, name),
            "ip",
            "-4",
            "-o",
            "addr",
            "show",
            "dev",
            "lo",
            "label",
            "lo:steward-svc",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut addrs: Vec<&str> = text.split_whitespace().filter(|w| w.ends_with("/32")).collect();
    addrs.sort();
    (!addrs.is_empty()).then(|| addrs.join(" "))
}

async fn node_ports_forward(letter: &str, mode: &str) {
    let config = format!("[services]\nnode_ports = \"{mode}\"\n");
    let mut c = Cluster::start_with(letter, ["a", "a", "a"], [config.as_str(), config.as_str(), config.as_str()]);
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");
    let (code, out, err) = c.deploy("web", &served(3));
    assert_eq!(code, 0, "{out}\n{err}");
    run.wait_for(30, "3 ready", |v| body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 3);
    let e = sched_endpoints(&c);
    let np = e.services[0].node_port.expect("a node port was chosen");
    assert_eq!(np, 30000, "the lowest free node port: {e:?}");
    let vip = e.services[0].cluster_ip.clone().expect("a cluster IP was chosen");
    assert_eq!(vip, "10.254.0.1", "the lowest free address of the default service_range: {e:?}");
    // Another app asking for the same node port is refused at deploy, naming the holder.
    let mut other = served(1);
    other["metadata"]["name"] = json!("other");
    other["services"][0]["ports"][0]["nodePort"] = json!(np);
    let (code, out, err) = c.deploy("other", &other);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("services[0].ports[0].nodePort") && err.contains("is test/web's node port"), "{err}");

    // Every host answers on the node port, and the three instances take turns.
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..4 {
        for h in &c.hosts {
            let body = get_from_ctl(&c, &h.ip, np).unwrap_or_else(|| panic!("{mode}: {}:{np} round {round}", h.ip));
            seen.insert(body);
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["0", "1", "2"], "{mode}");
    // The cluster IP answers on every host, on the service's own port, from every instance.
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..4 {
        for h in &c.hosts {
            let body = get_on_host(&c, &h.name, &vip, 80)
                .unwrap_or_else(|| panic!("{mode}: {vip}:80 on {} round {round}", h.name));
            seen.insert(body);
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["0", "1", "2"], "{mode}: through the cluster IP");
    for h in ["h1", "h2", "h3"] {
        assert_eq!(vip_link(&c, h).as_deref(), Some("10.254.0.1/32"), "{mode}: {h}'s cluster IPs");
        if mode == "nftables" {
            let table = nft_table(&c, h).unwrap_or_else(|| panic!("no table on {h}"));
            assert!(table.contains(&format!("tcp dport {np}")) && table.matches("10.231.0.").count() == 6, "{table}");
            assert!(table.contains("ip daddr 10.254.0.1 tcp dport 80"), "{table}");
        }
    }

    // Readiness off on one instance: once the revision is out, no request reaches it and none fails.
    let victim = e.ports["http"][0].clone();
    let vd = &c.host(&victim.node).daemon;
    std::fs::write(vd.work_dir().join(format!("test.web.{}/notready", victim.instance)), "").unwrap();
    let newer = |v: &Value| v["body"]["revision"].as_u64() > Some(e.revision);
    run.wait_for(30, "2 ready", |v| body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 2 && newer(v));
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..30 {
        let h = &c.hosts[i % 3];
        let body = get_from_ctl(&c, &h.ip, np).unwrap_or_else(|| panic!("{mode}: request {i} to {} failed", h.ip));
        let through_vip = get_on_host(&c, &h.name, &vip, 80)
            .unwrap_or_else(|| panic!("{mode}: request {i} to {vip} on {} failed", h.name));
        assert_ne!(through_vip, victim.instance.to_string(), "{mode}: a not-ready instance took request {i} via {vip}");
        if body == victim.instance.to_string() {
            let held = h.daemon.client.app_endpoints("test", "web", None).await.unwrap();
            let s = c.host(&victim.node).daemon.status(&id("test", "web", victim.instance)).await;
            panic!("{mode}: a not-ready instance took request {i} via {}: {held:?}\nvictim {victim:?}: ready {} {:?}\n{:#?}", h.name, s.ready, s.state, run.drain().iter().rev().take(15).collect::<Vec<_>>());
        }
    }

    // The daemon's kill -9 and restart: the node port works again, from the stored endpoints,
    // with nothing stale (the same rules, once).
    let h1 = c.hosts.iter().position(|h| h.name == "h1").unwrap();
    let before = (nft_table(&c, "h1"), vip_link(&c, "h1"));
    c.hosts[h1].daemon.kill9();
    if mode == "nftables" {
        assert!(get_from_ctl(&c, "10.231.0.1", np).is_some(), "the kernel forwards while the daemon is down");
        assert!(get_on_host(&c, "h1", &vip, 80).is_some(), "the cluster IP forwards while the daemon is down");
    }
    c.hosts[h1].daemon.spawn();
    wait_remote(&c.hosts[h1].daemon, 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get_from_ctl(&c, "10.231.0.1", np).is_none() || get_on_host(&c, "h1", &vip, 80).is_none() {
        assert!(Instant::now() < deadline, "{mode}: h1's node port and cluster IP after its daemon's restart");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = (nft_table(&c, "h1"), vip_link(&c, "h1"));
    assert_eq!(after, before, "{mode}: the table and the link are the same after the restart");

    // The app deleted: its node port closes everywhere, and Steward's table goes.
    let (code, out, err) = c.sched(&["delete", "test/web"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let left = |h: &Host| {
        get_from_ctl(&c, &h.ip, np).is_some() || nft_table(&c, &h.name).is_some() || vip_link(&c, &h.name).is_some()
    };
    while c.hosts.iter().any(left) {
        assert!(Instant::now() < deadline, "{mode}: the node port or cluster IP outlived its app");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_port_forwards_in_the_kernel_to_ready_endpoints_on_any_host() {
    node_ports_forward("n", "nftables").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_port_forwards_in_userspace_to_ready_endpoints_on_any_host() {
    node_ports_forward("u", "userspace").await;
}

/// A rollout (`steward-sched restart`) under a steady loop of requests to the node ports loses
/// none: each instance leaves the endpoints as it starts stopping, drains on its preStop while
/// the revision reaches every host, and its replacement joins once Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_under_load_loses_no_request_when_instances_drain_on_pre_stop() {
    let config = "[services]\nnode_ports = \"nftables\"\n";
    let c = Cluster::start_with("r", ["a", "a", "a"], [config, config, config]);
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");
    let mut doc = served(3);
    let p = &mut doc["spec"]["template"]["spec"]["processes"][0];
    p["lifecycle"] = json!({"preStop": {"type": "EXEC", "method": {"command": ["sleep", "2"]}}});
    doc["killPolicy"] = json!({"gracePeriod": 5});
    let (code, out, err) = c.deploy("web", &doc);
    assert_eq!(code, 0, "{out}\n{err}");
    run.wait_for(30, "3 ready", |v| body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 3);
    let np = sched_endpoints(&c).services[0].node_port.unwrap();

    // The loop: a request every 20 ms, to each host in turn, from the control namespace.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ctl, ips) = (c.ctl.clone(), c.hosts.iter().map(|h| h.ip.clone()).collect::<Vec<_>>());
    let looping = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0usize, Vec::new());
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let ip = &ips[i % ips.len()];
                let out = std::process::Command::new("ip")
                    .args(["netns", "exec", &ctl, "curl", "-s", "-f", "-m", "3"])
                    .arg(format!("http://{ip}:{np}/"))
                    .output()
                    .unwrap();
                if out.status.success() {
                    ok += 1;
                } else {
                    failed.push(format!("request {i} to {ip}: exit {:?}", out.status.code()));
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (ok, failed)
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (code, out, err) = c.sched(&["restart", "test/web"]);
    assert_eq!(code, 0, "{out}\n{err}");
    // Every instance was replaced (each stopped once, through its preStop) and all are back.
    for h in &c.hosts {
        let s = h
            .daemon
            .wait(&id("test", "web", h.daemon.client.list(&[("name", "web")]).await.unwrap()[0].id.index), 60, |s| {
                s.ready && s.run_revision == 2
            })
            .await;
        assert!(s.ready, "{s:?}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = looping.join().unwrap();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed during the rollout: {failed:#?}",
        failed.len(),
        ok + failed.len()
    );
    assert!(ok > 100, "the loop ran: {ok}");
}

/// A DNS answer: its code, and each record as `NAME DATA`, sorted, answers then additionals.
type DnsAnswer = (String, Vec<String>, Vec<String>);

/// Asks `server` (from the control namespace, over UDP) for `name`'s `kind` records; Err: no
/// answer within 3 s.
fn try_dns(c: &Cluster, server: &str, name: &str, kind: &str) -> Result<DnsAnswer, String> {
    use hickory_server::proto::op::{Message, Query};
    use hickory_server::proto::rr::{Name, RecordType};
    let ns = std::fs::File::open(format!("/run/netns/{}", c.ctl)).unwrap();
    let (server, name) = (format!("{server}:5353"), name.to_string());
    let qtype: RecordType = kind.parse().unwrap();
    std::thread::spawn(move || {
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut query = Message::query();
        query.add_query(Query::query(Name::from_ascii(&name).unwrap(), qtype));
        query.metadata.id = 4242;
        socket.send_to(&query.to_vec().unwrap(), &server).unwrap();
        let mut buf = [0u8; 4096];
        let (n, _) = socket.recv_from(&mut buf).map_err(|e| format!("no answer from {server} for {name}: {e}"))?;
        let answer = Message::from_vec(&buf[..n]).unwrap();
        assert_eq!(answer.metadata.id, 4242);
        let show = |rs: &[hickory_server::proto::rr::Record]| {
            let mut v: Vec<String> = rs.iter().map(|r| format!("{} {}", r.name, r.data)).collect();
            v.sort();
            v
        };
        Ok((answer.metadata.response_code.to_string(), show(&answer.answers), show(&answer.additionals)))
    })
    .join()
    .unwrap()
}

fn ask_dns(c: &Cluster, server: &str, name: &str, kind: &str) -> DnsAnswer {
    try_dns(c, server, name, kind).unwrap_or_else(|e| panic!("{e}"))
}

/// Every host's DNS responder answers the app's name (A: its hosts; SRV: each Ready instance's
/// port), each instance's name, a stateful set's ordinal names and a service's cluster IP —
/// the same as `steward-sched endpoints` on every host, following readiness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_answers_the_endpoints_steward_sched_lists() {
    let config = "[services]\nnode_ports = \"nftables\"\ndns = \"0.0.0.0:5353\"\n";
    let mut c = Cluster::start_with("d", ["a", "a", "a"], [config, config, config]);
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");
    let mut doc = served(3);
    doc["services"][0]["name"] = json!("front");
    doc["services"][0]["type"] = json!("ClusterIP");
    let (code, out, err) = c.deploy("web", &doc);
    assert_eq!(code, 0, "{out}\n{err}");
    run.wait_for(30, "3 ready", |v| body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 3);
    let e = sched_endpoints(&c);
    let vip = e.services[0].cluster_ip.clone().unwrap();
    let hosts: Vec<String> = {
        let mut v: Vec<String> = e.ports["http"].iter().map(|p| format!("web.test.steward. {}", p.ip)).collect();
        v.sort();
        v.dedup();
        v
    };
    let srv: Vec<String> = {
        let mut v: Vec<String> = e.ports["http"]
            .iter()
            .map(|p| format!("_http._tcp.web.test.steward. 0 1 {} {}.web.test.steward.", p.port, p.instance))
            .collect();
        v.sort();
        v
    };
    for h in &c.hosts {
        let (code, a, _) = ask_dns(&c, &h.ip, "web.test.steward.", "A");
        assert_eq!((code.as_str(), &a), ("No Error", &hosts), "{}'s answer", h.name);
        let (_, got, glue) = ask_dns(&c, &h.ip, "_http._tcp.web.test.steward.", "SRV");
        assert_eq!(got, srv, "{}'s answer", h.name);
        assert_eq!(glue.len(), 3, "each SRV target's address: {glue:?}");
        let one = &e.ports["http"][1];
        let (_, a, _) = ask_dns(&c, &h.ip, &format!("{}.web.test.steward.", one.instance), "A");
        assert_eq!(a, [format!("{}.web.test.steward. {}", one.instance, one.ip)]);
        let (_, a, _) = ask_dns(&c, &h.ip, "front.test.steward.", "A");
        assert_eq!(a, [format!("front.test.steward. {vip}")]);
        let (code, a, _) = ask_dns(&c, &h.ip, "nothing.test.steward.", "A");
        assert_eq!((code.as_str(), a.len()), ("Non-Existent Domain", 0));
        let (code, _, _) = ask_dns(&c, &h.ip, "example.org.", "A");
        assert_eq!(code, "Query Refused");
    }
    // An instance no longer ready leaves every answer within a second of its revision.
    let victim = e.ports["http"][0].clone();
    let vd = &c.host(&victim.node).daemon;
    std::fs::write(vd.work_dir().join(format!("test.web.{}/notready", victim.instance)), "").unwrap();
    let newer = |v: &Value| v["body"]["revision"].as_u64() > Some(e.revision);
    run.wait_for(30, "2 ready", |v| body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 2 && newer(v));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let now = sched_endpoints(&c);
    for h in &c.hosts {
        let (_, got, _) = ask_dns(&c, &h.ip, "_http._tcp.web.test.steward.", "SRV");
        assert_eq!(got.len(), 2, "{}: {got:?}", h.name);
        assert!(!got.iter().any(|r| r.ends_with(&format!(" {}.web.test.steward.", victim.instance))), "{got:?}");
        let (code, _, _) = ask_dns(&c, &h.ip, &format!("{}.web.test.steward.", victim.instance), "A");
        assert_eq!(code, "Non-Existent Domain", "{}", h.name);
        assert_eq!(now.ports["http"].len(), 2);
    }

    // A stateful set: NAME-K.DOMAIN and K.DOMAIN per ordinal, DOMAIN for any of them.
    let mut db = web(2);
    db["metadata"]["name"] = json!("mysql");
    db["statefulSet"] = json!({"name": "db", "domain": "box"});
    let (code, out, err) = c.deploy("mysql", &db);
    assert_eq!(code, 0, "{out}\n{err}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        let (code, out, _) = c.sched(&["endpoints", "test/mysql"]);
        if code == 0 {
            // null: nothing of it was ever ready yet.
            let e: Option<AppEndpoints> = serde_json::from_value(json_of(&out)).unwrap();
            if let Some(e) = e.filter(|e| e.ports.get("http").map_or(0, Vec::len) == 2) {
                break e;
            }
        }
        assert!(Instant::now() < deadline, "the stateful set's 2 instances were never ready");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for p in &ready.ports["http"] {
        // Also as ORDINAL.NAME (issue 47), each answer owned by the name asked.
        for name in [format!("db-{}.box.test.steward.", p.instance), format!("{}.box.test.steward.", p.instance)] {
            let (_, a, _) = ask_dns(&c, &c.hosts[0].ip, &name, "A");
            assert_eq!(a, [format!("{name} {}", p.ip)]);
        }
    }
    let (_, a, _) = ask_dns(&c, &c.hosts[1].ip, "box.test.steward.", "A");
    assert_eq!(a.len(), 2, "{a:?}");
    // A daemon's kill -9 and restart: it answers the same, from its stored endpoints.
    let before = ask_dns(&c, &c.hosts[0].ip, "_http._tcp.web.test.steward.", "SRV");
    c.hosts[0].daemon.kill9();
    c.hosts[0].daemon.spawn();
    wait_remote(&c.hosts[0].daemon, 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(after) = try_dns(&c, &c.hosts[0].ip, "_http._tcp.web.test.steward.", "SRV") {
            assert_eq!(after, before, "the restarted daemon's answer");
            break;
        }
        assert!(Instant::now() < deadline, "no answer from the restarted daemon");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Another app may not take the domain: one name, one meaning in a namespace (seed 003).
    let mut clash = web(1);
    clash["metadata"]["name"] = json!("other");
    clash["statefulSet"] = json!({"domain": "box"});
    let (code, out, err) = c.deploy("other", &clash);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("statefulSet.domain") && err.contains("test/mysql"), "{err}");
}

/// Issue 43, items 1 and 7: a host down while its app is deleted (and the leader killed before
/// it comes back) drops the app's endpoints, node port and cluster IP when it is heard again:
/// the leader hands it its whole desired set, and it keeps nothing else. A later app given the
/// same node port then answers through that host too; no endpoints record of the deleted app
/// stays in the scheduler's store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_missed_a_delete_drops_the_apps_endpoints_when_back() {
    let mut c = Cluster::start("m", ["a", "a", "a"]);
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading", |v| body_type(v) == "leading");
    let (code, out, err) = c.deploy("web", &served(3));
    assert_eq!(code, 0, "{out}\n{err}");
    run.wait_for(30, "3 ready", |v| body_type(v) == "endpointsUpdated" && v["body"]["ready"] == 3);
    let e = sched_endpoints(&c);
    let np = e.services[0].node_port.unwrap();
    let vip = e.services[0].cluster_ip.clone().unwrap();
    let h3 = c.hosts.iter().position(|h| h.name == "h3").unwrap();
    assert!(get_from_ctl(&c, "10.231.0.3", np).is_some(), "h3's node port answers before");

    // h3's daemon down; the app deleted; the other hosts drop its endpoints.
    c.hosts[h3].daemon.kill9();
    let (code, out, err) = c.sched(&["delete", "test/web"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.host("h2").daemon.client.app_endpoints("test", "web", None).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "h2 kept the deleted app's endpoints");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The leader killed; a new one leads when h3 comes back.
    drop(run);
    let mut run = c.follow(&["run"]);
    run.wait_for(30, "leading again", |v| body_type(v) == "leading");
    c.hosts[h3].daemon.spawn();
    wait_remote(&c.hosts[h3].daemon, 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let held = c.hosts[h3].daemon.client.endpoints(None).await.unwrap();
        let node_port = get_from_ctl(&c, "10.231.0.3", np).is_some();
        let cluster_ip = vip_link(&c, "h3").is_some();
        if held.is_empty() && !node_port && !cluster_ip {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "h3 kept the deleted app's endpoints {held:?}, node port {np} answering: {node_port}, \
             cluster IP {vip}: {cluster_ip}\n{:#?}",
            run.drain().iter().rev().take(20).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, out, _) = c.sched(&["endpoints", "test/web"]);
    assert_ne!(code, 0, "the deleted app has no endpoints in the store: {out}");

    // A new app given the same node port answers through every host, h3 included.
    let mut clash = served(1);
    clash["metadata"]["name"] = json!("clash");
    clash["services"][0]["name"] = json!("clash");
    clash["spec"]["template"]["spec"]["processes"][0]["startCmd"] =
        json!("echo clash > index.html; exec python3 -m http.server $PORT_http");
    clash["services"][0]["ports"][0]["nodePort"] = json!(np);
    let (code, out, err) = c.deploy("clash", &clash);
    assert_eq!(code, 0, "{out}\n{err}");
    let deadline = Instant::now() + Duration::from_secs(30);
    for h in ["10.231.0.1", "10.231.0.2", "10.231.0.3"] {
        while get_from_ctl(&c, h, np).as_deref() != Some("clash") {
            assert!(Instant::now() < deadline, "{h}:{np} does not answer for the new app:\n{}", c.logs());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
