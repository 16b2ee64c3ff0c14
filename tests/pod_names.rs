//! Issue 47 part 2, names, against a real Docker Engine and the real stewardd and steward
//! binaries: a pod's seed-003 `dns: ClusterFirst` resolver asks the daemon's responder at
//! `[services] pod_dns` (an address on the host's lo, reached from the docker bridge through the
//! pod's gateway) for a peer stateful-set ordinal, `hostname.subdomain` names and a service, and
//! gets every other name forwarded to the host-side upstream; a HOST pod takes it only with
//! ClusterFirstWithHostNet; a daemon with no `pod_dns` refuses a ClusterFirst pod.
//!
//! The answers come from endpoints handed to the daemon with PUT /v1/endpoints, as steward-sched
//! hands them (tests/sched_endpoints.rs shows the scheduler doing it, and the scheduler's unit
//! tests that they carry `podNames`), for a cluster whose nodes are 192.0.2.10-21: each name is
//! then told from the others by its address. Nothing leaves the machine: the outside name is one
//! only the test's upstream on 127.0.0.1 knows.

mod common;

use common::docker::{self, getent_image, GETENT_IMAGE, SHARED_SOCKET};
use common::{id, Daemon};
use hickory_server::proto::op::{Message, ResponseCode};
use hickory_server::proto::rr::rdata::A;
use hickory_server::proto::rr::{RData, Record, RecordType};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use steward::protocol::{AppEndpoints, Endpoint, OrdinalNames, PodNames, ServiceEntry};
use steward::supervisor::state::Kind;

/// The address the test daemon's pods ask: a private one no test network uses.
const POD_DNS: &str = "10.253.47.53";

/// The name only the test's upstream knows, and its address.
const OUTSIDE: (&str, &str) = ("outside.names.test", "192.0.2.47");

/// A DNS server on 127.0.0.1 answering [`OUTSIDE`] (NXDOMAIN for the rest), counting the
/// queries for it: the host-side resolver a pod cannot reach by itself.
fn upstream() -> (u16, Arc<AtomicUsize>) {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf) else { return };
            let Ok(query) = Message::from_vec(&buf[..n]) else { continue };
            let Some(q) = query.queries.first().cloned() else { continue };
            let mut answer = query.clone().into_response();
            answer.metadata.recursion_available = true;
            let name = q.name().to_string();
            if name.trim_end_matches('.').eq_ignore_ascii_case(OUTSIDE.0) {
                counter.fetch_add(1, Ordering::Relaxed);
                if q.query_type() == RecordType::A {
                    let ip = OUTSIDE.1.parse().unwrap();
                    answer.add_answer(Record::from_rdata(q.name().clone(), 5, RData::A(A(ip))));
                }
            } else {
                answer.metadata.response_code = ResponseCode::NXDomain;
            }
            let _ = socket.send_to(&answer.to_vec().unwrap(), from);
        }
    });
    (port, asked)
}

/// Takes [`POD_DNS`] off lo when the test is done (the daemon leaves it there, as it leaves
/// cluster IPs).
struct Address;

impl Drop for Address {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["addr", "del", &format!("{POD_DNS}/32"), "dev", "lo"]).status();
    }
}

/// A pod of the getent image sleeping, in namespace `names`.
fn pod(name: &str, network: &str, dns: &str, template: Value, top: Value) -> Value {
    let mut c =
        json!({"name": "main", "image": GETENT_IMAGE, "command": {"value": "/bin/sleep", "arguments": ["1000"]}});
    if network != "HOST" {
        c["ports"] = json!([{"name": "http", "containerPort": 80, "hostPort": 0}]);
    }
    let mut spec = docker::pod("names", name, json!([c]), top);
    let t = &mut spec["spec"]["template"]["spec"];
    t["network"] = json!(network);
    t["dns"] = json!(dns);
    for (k, v) in template.as_object().unwrap() {
        t[k] = v.clone();
    }
    spec
}

/// Endpoints as steward-sched hands them: port `http` of each `(instance, node address)`.
fn endpoints(name: &str, instances: &[(u32, &str)]) -> AppEndpoints {
    let list = instances
        .iter()
        .map(|(i, ip)| Endpoint { ip: ip.to_string(), port: 31000 + *i as u16, node: format!("n-{ip}"), instance: *i })
        .collect();
    AppEndpoints {
        namespace: "names".into(),
        name: name.into(),
        revision: 1,
        updated_ms: 1_700_000_000_000,
        ports: [("http".to_string(), list)].into(),
        ..AppEndpoints::default()
    }
}

/// `getent ahostsv4 NAME` in container `id`: the addresses, or None when it resolves nothing.
fn resolve(id: &str, name: &str) -> Option<BTreeSet<String>> {
    let (code, out, err) = docker::docker(SHARED_SOCKET, &["exec", id, "getent", "ahostsv4", name]);
    match code {
        0 => Some(out.lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect()),
        2 => None,
        _ => panic!("getent ahostsv4 {name}: exit {code}: {err}"),
    }
}

fn set(ips: &[&str]) -> Option<BTreeSet<String>> {
    Some(ips.iter().map(|s| s.to_string()).collect())
}

async fn first_container(d: &Daemon, name: &str, index: u32) -> String {
    let s = d.wait_state(&id("names", name, index), Kind::Running, 60).await;
    s.containers.first().unwrap_or_else(|| panic!("{name}/{index}: no container: {s:?}")).id.clone()
}

fn resolv_conf(id: &str) -> String {
    let (code, out, err) = docker::docker(SHARED_SOCKET, &["exec", id, "cat", "/etc/resolv.conf"]);
    assert_eq!(code, 0, "{err}");
    out
}

/// A ClusterFirst stateful-set pod on the docker bridge resolves, through its own resolv.conf:
/// its peer ordinal as `db-1.db` and as `1.db` (issue 47's `ORDINAL.NAME.NAMESPACE`), as seed
/// 003's `hostname.subdomain` (`db-1.store`: a stateful set's hostname is the ordinal's name),
/// another app's `api.edge` (both of its instances share the hostname: both addresses), the
/// service `front` and its full name; a name of the zone that names nothing is not found; the
/// outside name is forwarded to the upstream on the host's loopback. Its resolv.conf is the
/// responder, its two searches, then the pod's own `dnsConfig`. A HOST pod asks the responder
/// with ClusterFirstWithHostNet, and keeps the host's resolver with plain ClusterFirst. The
/// stateful set's pod's own host name is its ordinal's (`db-0`).
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_first_pod_resolves_its_peers_services_and_outside_names() {
    docker::shared_engine();
    getent_image();
    let (port, asked) = upstream();
    let _address = Address;
    let config = format!("[services]\npod_dns = \"{POD_DNS}\"\ndns_upstream = [\"127.0.0.1:{port}\"]\n");
    let d = Daemon::start_with("pod-names", &config);
    let mut db = pod(
        "db",
        "BRIDGE",
        "ClusterFirst",
        json!({"subdomain": "store", "dnsConfig": {"searches": ["extra.example"], "options": ["ndots:2"]}}),
        json!({"statefulSet": {}}),
    );
    db["spec"]["instance"] = json!(2);
    d.apply_json(&db).await;
    d.apply_json(&pod("hostnet", "HOST", "ClusterFirstWithHostNet", json!({}), json!({}))).await;
    d.apply_json(&pod("hostplain", "HOST", "ClusterFirst", json!({}), json!({}))).await;

    let mut db_ends = endpoints("db", &[(0, "192.0.2.10"), (1, "192.0.2.11")]);
    db_ends.ordinals = Some(OrdinalNames { name: "db".into(), domain: "db".into() });
    db_ends.pod_names = Some(PodNames { hostname: String::new(), subdomain: "store".into() });
    let mut api = endpoints("api", &[(0, "192.0.2.20"), (1, "192.0.2.21")]);
    api.pod_names = Some(PodNames { hostname: "api".into(), subdomain: "edge".into() });
    api.services = vec![ServiceEntry {
        service: "front".into(),
        kind: steward::spec::model::ServiceType::ClusterIP,
        export: true,
        protocol: steward::spec::model::Protocol::Tcp,
        port: 80,
        node_port: None,
        target: "http".into(),
        // None: a cluster IP would put an address on this host's lo and rules in its nftables.
        cluster_ip: None,
    }];
    d.client.put_endpoints(&db_ends).await.unwrap();
    d.client.put_endpoints(&api).await.unwrap();

    let db0 = first_container(&d, "db", 0).await;
    let conf = resolv_conf(&db0);
    let nameservers: Vec<&str> = conf.lines().filter_map(|l| l.strip_prefix("nameserver ")).collect();
    assert_eq!(nameservers, [POD_DNS], "{conf}");
    assert!(conf.lines().any(|l| l == "search names.steward steward extra.example"), "{conf}");
    assert!(conf.lines().any(|l| l.starts_with("options") && l.contains("ndots:2")), "{conf}");

    // A stateful set's pod is named as its ordinal (Kubernetes' rule), in its subdomain.
    let (_, name, _) = docker::docker(SHARED_SOCKET, &["exec", &db0, "cat", "/etc/hostname"]);
    assert_eq!(name, "db-0");
    let peer = set(&["192.0.2.11"]);
    assert_eq!(resolve(&db0, "db-1.db"), peer, "the peer ordinal's name");
    assert_eq!(resolve(&db0, "1.db"), peer, "ORDINAL.NAME");
    assert_eq!(resolve(&db0, "db-1.store"), peer, "hostname.subdomain of a stateful set");
    assert_eq!(resolve(&db0, "db-1.store.names.steward"), peer);
    let both = set(&["192.0.2.20", "192.0.2.21"]);
    assert_eq!(resolve(&db0, "api.edge"), both, "hostname.subdomain shared by two instances");
    assert_eq!(resolve(&db0, "front"), both, "the service (no cluster IP: its endpoints' hosts)");
    assert_eq!(resolve(&db0, "front.names.steward"), both);
    assert_eq!(resolve(&db0, "db-7.db"), None, "an ordinal that is not there");
    let before = asked.load(Ordering::Relaxed);
    assert_eq!(resolve(&db0, OUTSIDE.0), set(&[OUTSIDE.1]), "the outside name, forwarded");
    assert!(asked.load(Ordering::Relaxed) > before, "the upstream was asked");

    // HOST pods: the responder on lo with ClusterFirstWithHostNet; the host's with ClusterFirst.
    let hostnet = first_container(&d, "hostnet", 0).await;
    assert!(resolv_conf(&hostnet).lines().any(|l| l == format!("nameserver {POD_DNS}")));
    assert_eq!(resolve(&hostnet, "db-0.db"), set(&["192.0.2.10"]));
    let plain = first_container(&d, "hostplain", 0).await;
    let conf = resolv_conf(&plain);
    assert!(!conf.contains(POD_DNS), "a plain ClusterFirst HOST pod keeps the host's resolver:\n{conf}");
}

/// A daemon with no `[services] pod_dns` refuses a ClusterFirst pod at apply, naming the field
/// and the key (before anything of it runs); a HOST pod's plain ClusterFirst (the host's
/// resolver) is taken.
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_first_pod_is_refused_where_no_responder_answers_pods() {
    let d = Daemon::start("pod-names-off");
    let file = d.path().join("db.json");
    std::fs::write(&file, pod("db", "BRIDGE", "ClusterFirst", json!({}), json!({})).to_string()).unwrap();
    let (code, _, err) = d.cli(&["apply", "-f", file.to_str().unwrap()]);
    assert_ne!(code, 0);
    for said in ["spec.template.spec.dns", "ClusterFirst", "[services] pod_dns"] {
        assert!(err.contains(said), "{said} in:\n{err}");
    }
    assert!(d.client.list(&[]).await.unwrap().is_empty(), "nothing was applied");
    // Scaled to 0: taken without running anything (no Docker Engine needed).
    let mut host = pod("plain", "HOST", "ClusterFirst", json!({}), json!({}));
    host["spec"]["instance"] = json!(0);
    std::fs::write(&file, host.to_string()).unwrap();
    let (code, _, err) = d.cli(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}
