//! Pods in CNI mode (issue 22, seed 001): stewardd with `network_mode = "cni"` runs in a network
//! namespace the test creates, so Debian's bridge plugin (with host-local addresses) makes its
//! bridge there and the pods' addresses are reachable from there only; the pods' containers run
//! on the real Docker Engine. Nothing touches the machine's own network.

mod common;

use common::docker::{self, sh, IMAGE};
use common::{id, Daemon};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

const PLUGINS: &str = "/usr/lib/cni";

/// A network namespace of the test's own, deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(name: &str) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        let out = Command::new("ip").args(["netns", "add", name]).output().unwrap();
        assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
        let lo = Command::new("ip").args(["-n", name, "link", "set", "lo", "up"]).output().unwrap();
        assert!(lo.status.success());
        Netns(name.to_string())
    }

    /// `curl` from inside the namespace (where the pods' bridge is).
    fn get(&self, url: &str) -> Option<String> {
        let out = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.0))
            .args(["curl", "-sf", "--max-time", "3", url])
            .output()
            .unwrap();
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A daemon in CNI mode in its own namespace: plugins from Debian's package, one network
/// (`pods`, bridge + host-local on `subnet`, leases kept in the daemon's directory).
struct CniHost {
    daemon: Daemon,
    netns: Netns,
    leases: PathBuf,
}

impl CniHost {
    fn start(tag: &str, subnet: &str) -> CniHost {
        CniHost::start_on(tag, subnet, "")
    }

    /// As [`CniHost::start`], the daemon's config ending with `extra`.
    fn start_on(tag: &str, subnet: &str, extra: &str) -> CniHost {
        CniHost::start_routed(tag, subnet, extra, &[])
    }

    /// As [`CniHost::start_on`], host-local giving the pods `routes` (destinations, through the
    /// bridge's gateway) besides their subnet's.
    fn start_routed(tag: &str, subnet: &str, extra: &str, routes: &[&str]) -> CniHost {
        docker::shared_engine();
        let netns = Netns::new(&format!("stwcni{tag}{}", std::process::id() % 10_000));
        let conf = tempfile::Builder::new().prefix("steward-cni-conf-").tempdir().unwrap().keep();
        let leases = conf.join("leases");
        let mut ipam = json!({"type": "host-local", "subnet": subnet, "dataDir": leases});
        if !routes.is_empty() {
            ipam["routes"] = routes.iter().map(|dst| json!({"dst": dst})).collect();
        }
        std::fs::write(
            conf.join("10-pods.conflist"),
            json!({
                "cniVersion": "1.0.0",
                "name": "pods",
                "plugins": [{"type": "bridge", "bridge": "stwcni0", "isGateway": true, "ipam": ipam}]
            })
            .to_string(),
        )
        .unwrap();
        let extra = format!(
            "network_mode = \"cni\"\ncni_bin_dir = \"{PLUGINS}\"\ncni_conf_dir = \"{}\"\n{extra}",
            conf.display()
        );
        let daemon = Daemon::start_in(&format!("cni-{tag}"), &extra, Some(&netns.0), "127.0.0.1");
        CniHost { daemon, netns, leases }
    }

    /// A one-container sleeper pod `test/NAME`, Running: its id and its attachment's CNI id.
    async fn run_sleeper(&self, name: &str) -> (steward::spec::InstanceId, String) {
        let spec = docker::pod("test", name, json!([sh("main", "exec sleep 1000")]), json!({}));
        self.daemon.apply_json(&spec).await;
        let pod0 = id("test", name, 0);
        self.daemon.wait_state(&pod0, Kind::Running, 60).await;
        (pod0, self.attachment_of(&format!("test/{name}/0")).await)
    }

    /// host-local's leases: (address, container id).
    fn leases(&self) -> Vec<(String, String)> {
        steward::cni::leases::leases_in(&self.leases.join("pods"))
            .into_iter()
            .map(|l| (l.address.to_string(), l.container_id))
            .collect()
    }

    /// The CNI container id a running instance's record names (its holder's, marked).
    async fn attachment_of(&self, instance: &str) -> String {
        let id = instance_id(instance);
        let st = self.daemon.client.status(&id).await.unwrap();
        let ip = st.containers.first().map(|c| c.ip_address.clone()).unwrap_or_default();
        let lease = self.leases().into_iter().find(|(a, _)| *a == ip);
        lease.unwrap_or_else(|| panic!("no lease for {instance} at {ip:?}: {:?}", self.leases())).1
    }

    fn wait_leases(&self, secs: u64, what: &str, pred: impl Fn(&[(String, String)]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let leases = self.leases();
            if pred(&leases) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: leases {leases:?}\n{}", self.daemon.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for CniHost {
    fn drop(&mut self) {
        if let Some(dir) = self.leases.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn instance_id(key: &str) -> steward::spec::InstanceId {
    let parts: Vec<&str> = key.split('/').collect();
    id(parts[0], parts[1], parts[2].parse().unwrap())
}

fn holder_of(daemon: &Daemon, instance: &str) -> String {
    let filter = format!("label=io.steward.instance={instance}");
    let (code, out, err) = docker::docker(
        &daemon.docker_socket,
        &["ps", "-q", "--no-trunc", "--filter", &filter, "--filter", "label=io.steward.index=network"],
    );
    assert_eq!(code, 0, "{err}");
    out.lines().next().unwrap_or_else(|| panic!("no network container of {instance}")).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_containers_share_the_cni_address_and_answer_on_it() {
    let mut host = CniHost::start("a", "10.232.1.0/24");
    let web = sh(
        "web",
        "mkdir -p /www && echo \"web $HOST $BCS_CNI_NAME $MYIP\" > /www/index.html && exec httpd -f -p 8080 -h /www",
    );
    let mut web = web;
    web["env"] = json!([{"name": "MYIP", "value": "$HOST"}]);
    let side = sh(
        "side",
        "mkdir -p /w && echo \"side $(ip -4 -o addr show eth0 | awk '{print $4}')\" > /w/index.html && exec httpd -f -p 9090 -h /w",
    );
    let spec = docker::pod("test", "cnipod", json!([web, side]), json!({}));
    host.daemon.apply_json(&spec).await;
    let pod0 = id("test", "cnipod", 0);
    let st = host.daemon.wait_state(&pod0, Kind::Running, 60).await;
    let ip = st.containers[0].ip_address.clone();
    assert!(ip.starts_with("10.232.1."), "the CNI address shows in status: {:?}", st.containers);
    assert_eq!(st.containers[1].ip_address, ip, "both containers show the pod's address");
    let leases = host.leases();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0].0, ip);
    // Both answer on the one address, from the namespace the bridge is in; HOST and a `$HOST`
    // copy carry the CNI address, BCS_CNI_NAME the interface.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (a, b) = loop {
        let a = host.netns.get(&format!("http://{ip}:8080/"));
        let b = host.netns.get(&format!("http://{ip}:9090/"));
        if let (Some(a), Some(b)) = (&a, &b) {
            break (a.clone(), b.clone());
        }
        assert!(Instant::now() < deadline, "no answer on {ip}: {a:?} {b:?}\n{}", host.daemon.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(a, format!("web {ip} eth0 {ip}"));
    assert_eq!(b, format!("side {ip}/24"));
    // Nothing is published on the host: the holder has no network of Docker's.
    let holder = holder_of(&host.daemon, "test/cnipod/0");
    assert_eq!(docker::inspect(&host.daemon.docker_socket, &holder, "{{.HostConfig.NetworkMode}}"), "none");

    // A daemon restart (SIGTERM, then kill -9) re-adopts the pod with the same address.
    for kill9 in [false, true] {
        host.daemon.restart(kill9);
        let st = host.daemon.wait_state(&pod0, Kind::Running, 30).await;
        assert_eq!(st.restarts, 0, "re-adopted, not restarted");
        assert_eq!(st.containers[0].ip_address, ip, "same address after the restart (kill9 {kill9})");
        assert_eq!(host.leases().len(), 1);
        assert_eq!(host.netns.get(&format!("http://{ip}:8080/")).as_deref(), Some(a.as_str()));
    }
    assert!(host.daemon.log().contains("CHECK passed"), "the re-adopted attachment is checked");

    // Deleted: the address is given back.
    host.daemon.client.delete(&pod0, Some(30.0)).await.unwrap();
    host.wait_leases(20, "lease given back at delete", |l| l.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_pods_started_and_stopped_leave_no_lease() {
    let host = CniHost::start("b", "10.232.2.0/24");
    let mut spec = docker::pod("test", "many", json!([sh("main", "exec sleep 1000")]), json!({}));
    spec["spec"]["instance"] = json!(20);
    host.daemon.apply_json(&spec).await;
    let mut addresses = std::collections::BTreeSet::new();
    for i in 0..20 {
        let st = host.daemon.wait_state(&id("test", "many", i), Kind::Running, 120).await;
        addresses.insert(st.containers[0].ip_address.clone());
    }
    assert_eq!(addresses.len(), 20, "twenty pods, twenty addresses: {addresses:?}");
    assert_eq!(host.leases().len(), 20);
    // Stopped: every address goes back; started again, each gets one again.
    for i in 0..20 {
        host.daemon.client.action(&id("test", "many", i), "stop", Some(30.0)).await.unwrap();
    }
    host.wait_leases(30, "stopped pods hold no lease", |l| l.is_empty());
    for i in 0..20 {
        host.daemon.client.action(&id("test", "many", i), "start", Some(60.0)).await.unwrap();
    }
    host.wait_leases(60, "started again", |l| l.len() == 20);
    assert_eq!(host.daemon.client.delete_app("test", "many", Some(60.0)).await.unwrap().map(|d| d.len()), Some(20));
    host.wait_leases(30, "deleted pods hold no lease", |l| l.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_network_containers_and_daemons_leave_no_lease() {
    let mut host = CniHost::start("c", "10.232.3.0/24");
    let (pod0, first) = host.run_sleeper("leaky").await;

    // The network container killed by hand (seed 001's leak): the pod ends, its address goes
    // back, and OnFailure starts it again with a new one.
    let holder = holder_of(&host.daemon, "test/leaky/0");
    let (code, _, err) = docker::docker(&host.daemon.docker_socket, &["kill", "-s", "KILL", &holder]);
    assert_eq!(code, 0, "{err}");
    host.daemon.wait(&pod0, 60, |s| s.restarts == 1 && s.state.kind() == Kind::Running).await;
    let second = host.attachment_of("test/leaky/0").await;
    assert_ne!(first, second);
    host.wait_leases(20, "only the new attachment's lease", |l| l.len() == 1 && l[0].1 == second);

    // Killed while the daemon is down (kill -9): found at re-adoption, given back, restarted.
    host.daemon.kill9();
    let holder = holder_of(&host.daemon, "test/leaky/0");
    let (code, _, err) = docker::docker(&host.daemon.docker_socket, &["kill", "-s", "KILL", &holder]);
    assert_eq!(code, 0, "{err}");
    host.daemon.spawn();
    host.daemon.wait(&pod0, 60, |s| s.restarts == 2 && s.state.kind() == Kind::Running).await;
    let third = host.attachment_of("test/leaky/0").await;
    host.wait_leases(20, "only the third attachment's lease", |l| l.len() == 1 && l[0].1 == third);

    // The daemon killed right after an ADD, before its result was recorded: the next start
    // gives that lease back and makes a new one.
    host.daemon.env = vec![("STEWARD_FAILPOINTS".into(), "cni-added@1".into())];
    host.daemon.restart(false);
    host.daemon.wait_state(&pod0, Kind::Running, 30).await;
    host.daemon.client.action(&pod0, "restart", None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while host.daemon.child.as_mut().unwrap().try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the failpoint was not hit\n{}", host.daemon.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    host.daemon.child = None;
    assert_eq!(host.leases().len(), 1, "the lease the killed daemon took");
    host.daemon.env.clear();
    host.daemon.spawn();
    host.daemon.wait_state(&pod0, Kind::Running, 60).await;
    let fourth = host.attachment_of("test/leaky/0").await;
    host.wait_leases(20, "only the fourth attachment's lease", |l| l.len() == 1 && l[0].1 == fourth);

    // A lease of this daemon's that no record names (as a kill -9 in the middle of an ADD
    // leaves) is given back at the next start; the live one stays.
    let mark = fourth.rsplit_once('-').unwrap().0.to_string();
    let planted = host.leases.join("pods").join("10.232.3.250");
    std::fs::write(&planted, format!("{mark}-0000000000\r\neth0")).unwrap();
    host.daemon.restart(false);
    host.daemon.wait_state(&pod0, Kind::Running, 30).await;
    host.wait_leases(20, "the unknown lease given back", |l| l.len() == 1 && l[0].1 == fourth);
    assert!(!Path::new(&planted).exists());

    // dockerd's answer is not needed for the DEL: the delete gives the last lease back.
    host.daemon.client.delete(&pod0, Some(30.0)).await.unwrap();
    host.wait_leases(20, "no lease after the delete", |l| l.is_empty());
    let _ = IMAGE;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_del_owed_is_retried_across_dockerd_down_and_a_daemon_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = docker::PrivateEngine::start(dir.path());
    let extra = format!("docker_socket = \"{}\"\n", engine.socket);
    let mut host = CniHost::start_on("d", "10.232.4.0/24", &extra);
    let (pod0, first) = host.run_sleeper("owed").await;

    // dockerd down (live-restore: the pod runs on) and its network container killed meanwhile:
    // once dockerd is back the pod's end is seen, its address given back, and it starts again.
    let holder = holder_of(&host.daemon, "test/owed/0");
    let pid: i32 = docker::inspect(&engine.socket, &holder, "{{.State.Pid}}").parse().unwrap();
    engine.stop();
    host.daemon.wait_state(&pod0, Kind::Lost, 30).await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    engine.spawn();
    host.daemon.wait(&pod0, 60, |s| s.restarts == 1 && s.state.kind() == Kind::Running).await;
    let second = host.attachment_of("test/owed/0").await;
    assert_ne!(first, second);
    host.wait_leases(20, "only the new attachment's lease", |l| l.len() == 1 && l[0].1 == second);

    // A DEL that fails (its network's configuration gone) stays owed, across a kill -9, and is
    // retried until it succeeds.
    let conf = host.leases.parent().unwrap().join("10-pods.conflist");
    let aside = host.leases.parent().unwrap().join("pods.aside");
    std::fs::rename(&conf, &aside).unwrap();
    host.daemon.client.action(&pod0, "stop", Some(30.0)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(host.leases().len(), 1, "the DEL cannot run yet");
    assert!(host.daemon.log().contains("retried every"), "{}", host.daemon.log());
    host.daemon.kill9();
    std::fs::rename(&aside, &conf).unwrap();
    host.daemon.spawn();
    host.wait_leases(20, "the owed DEL done after the restart", |l| l.is_empty());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !host.daemon.log().contains("(it was owed)") {
        assert!(Instant::now() < deadline, "done as an owed DEL:\n{}", host.daemon.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A delete while dockerd is down cannot stop the pod (its containers may run on: live
    // restore), so the address is not given back; once dockerd answers, the delete is.
    host.daemon.client.action(&pod0, "start", Some(60.0)).await.unwrap();
    host.wait_leases(20, "started again", |l| l.len() == 1);
    engine.stop();
    host.daemon.wait_state(&pod0, Kind::Lost, 30).await;
    let refused = host.daemon.client.delete(&pod0, Some(30.0)).await;
    assert!(refused.is_err(), "{refused:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(host.leases().len(), 1, "kept while the pod may run on");
    engine.spawn();
    host.daemon.client.delete(&pod0, Some(30.0)).await.unwrap();
    host.wait_leases(30, "given back by the delete", |l| l.is_empty());
}

/// units/cnipod.json as shipped (the demo runs it on Docker's networking): on CNI its HOST is
/// the pod's own address, its interface eth0, and its readiness probe reaches it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_unit_runs_on_cni() {
    let host = CniHost::start("e", "10.232.5.0/24");
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("units/cnipod.json");
    let spec: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(unit).unwrap()).unwrap();
    host.daemon.apply_json(&spec).await;
    let pod0 = id("demo", "cnipod", 0);
    let st = host.daemon.wait(&pod0, 60, |s| s.state.kind() == Kind::Running && s.ready).await;
    let ip = st.containers[0].ip_address.clone();
    assert!(ip.starts_with("10.232.5."), "{:?}", st.containers);
    let page = host.netns.get(&format!("http://{ip}:8080/"));
    assert_eq!(page.as_deref(), Some(format!("HOST is {ip}, CNI interface eth0").as_str()));
    // Nothing is published: PORT_http is the port at the pod's address.
    let env = docker::inspect(&host.daemon.docker_socket, &st.containers[0].id, "{{json .Config.Env}}");
    let env: Vec<String> = serde_json::from_str(&env).unwrap();
    assert_eq!(env.iter().filter(|e| e.starts_with("PORT_http=")).collect::<Vec<_>>(), ["PORT_http=8080"]);
    // Issue 44: and what `steward ls` lists is that port, not a host port that answers nothing;
    // none is taken from the host's range.
    assert_eq!(st.ports.get("http"), Some(&8080), "{:?}", st.ports);
    let (code, out, err) = host.daemon.cli(&["ls"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("http:8080"), "{out}");
    let ports = host.daemon.client.node().await.unwrap().ports;
    assert_eq!(ports.free as u32, u32::from(ports.range_end - ports.range_start) + 1, "{ports:?}");
    host.daemon.client.delete(&pod0, Some(30.0)).await.unwrap();
    host.wait_leases(20, "given back", |l| l.is_empty());
}

/// Seed 003 `dns: ClusterFirst` on CNI (issue 47): the daemon puts `[services] pod_dns` on the
/// lo of its namespace, and a pod on the CNI bridge reaches it through its gateway (its default
/// route; a network whose pods have no route to it cannot): its own
/// resolver (glibc getent) finds `HOSTNAME.SUBDOMAIN` and an app by their short names, from the
/// endpoints handed to the daemon as steward-sched hands them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_first_pod_on_cni_asks_the_responder_through_its_gateway() {
    // The pods' route to it: a default route through the gateway, as most pod networks give.
    let host = CniHost::start_routed("n", "10.232.6.0/24", "[services]\npod_dns = \"10.96.0.10\"\n", &["0.0.0.0/0"]);
    docker::getent_image();
    let main = json!({"name": "main", "image": docker::GETENT_IMAGE,
        "command": {"value": "/bin/sleep", "arguments": ["1000"]}});
    let mut spec = docker::pod("test", "client", json!([main]), json!({}));
    spec["spec"]["template"]["spec"]["dns"] = json!("ClusterFirst");
    host.daemon.apply_json(&spec).await;
    let st = host.daemon.wait_state(&id("test", "client", 0), Kind::Running, 60).await;
    assert!(st.containers[0].ip_address.starts_with("10.232.6."), "{:?}", st.containers);
    let endpoint = steward::protocol::Endpoint { ip: "192.0.2.30".into(), port: 31000, node: "n1".into(), instance: 0 };
    let web = steward::protocol::AppEndpoints {
        namespace: "test".into(),
        name: "web".into(),
        revision: 1,
        ports: [("http".to_string(), vec![endpoint])].into(),
        pod_names: Some(steward::protocol::PodNames { hostname: "front".into(), subdomain: "edge".into() }),
        ..Default::default()
    };
    host.daemon.client.put_endpoints(&web).await.unwrap();
    let resolve = |name: &str| {
        let (code, out, err) =
            docker::docker(&host.daemon.docker_socket, &["exec", &st.containers[0].id, "getent", "ahostsv4", name]);
        assert_eq!(code, 0, "getent ahostsv4 {name}: {err}\n{}", host.daemon.log());
        out.lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect::<BTreeSet<_>>()
    };
    let node = BTreeSet::from(["192.0.2.30".to_string()]);
    assert_eq!(resolve("front.edge"), node, "hostname.subdomain");
    assert_eq!(resolve("web"), node, "the app");
    host.daemon.client.delete(&id("test", "client", 0), Some(30.0)).await.unwrap();
    host.wait_leases(20, "given back", |l| l.is_empty());
}
