//! The CNI client (issue 22, seed 001's CNI mode) against Debian's real plugins
//! (`containernetworking-plugins`): bridge with host-local addresses, the bridge made in a
//! network namespace the test creates (the plugin runs there through a wrapper), each
//! "container" a namespace of its own. Nothing touches the machine's own network.

use std::path::{Path, PathBuf};
use std::process::Command;
use steward::cni::{Attachment, Cni, CniError, NetworkList};

const PLUGINS: &str = "/usr/lib/cni";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Network namespaces, deleted when dropped.
struct Netns(Vec<String>);

impl Netns {
    fn add(&mut self, name: &str) -> String {
        ip(&["netns", "add", name]);
        self.0.push(name.to_string());
        format!("/run/netns/{name}")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// A bin directory whose `bridge` runs the real one inside `host` (where its bridge is made);
/// host-local, which it calls, is found in the real directory after it.
fn wrapped_plugins(dir: &Path, host: &str) -> Cni {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let wrapper = bin.join("bridge");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec nsenter --net=/run/netns/{host} {PLUGINS}/bridge \"$@\"\n"))
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    Cni { bin_dirs: vec![bin, PathBuf::from(PLUGINS)], reaper: None }
}

fn network(dir: &Path, subnet: &str) -> NetworkList {
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let leases = dir.join("leases");
    std::fs::write(
        conf.join("10-pods.conflist"),
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "pods",
            "plugins": [{
                "type": "bridge", "bridge": "stw0", "isGateway": true,
                "ipam": {"type": "host-local", "subnet": subnet, "dataDir": leases}
            }]
        })
        .to_string(),
    )
    .unwrap();
    NetworkList::find(&conf, "pods").unwrap()
}

/// host-local's lease files: one per address it gave (besides its `last_reserved_ip` and lock).
fn leases(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("leases").join("pods")) else { return Vec::new() };
    let mut out: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect();
    out.sort();
    out
}

fn addresses_in(ns: &str) -> String {
    let out = Command::new("ip").args(["-n", ns, "-o", "addr", "show", "dev", "eth0"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_check_and_del_through_real_plugins_leave_no_lease() {
    let tag = format!("cni{}", std::process::id() % 100_000);
    let dir = tempfile::tempdir().unwrap();
    let mut ns = Netns(Vec::new());
    let host = format!("{tag}h");
    ns.add(&host);
    let cni = wrapped_plugins(dir.path(), &host);
    let net = network(dir.path(), "10.199.0.0/24");

    // One pod: an address on its eth0, its lease kept, CHECK passes; DEL gives it back, twice.
    let pod = format!("{tag}p0");
    let at = Attachment {
        container_id: "pod-0".into(),
        netns: ns.add(&pod),
        ifname: "eth0".into(),
        args: vec![("BCS_POD_ID".into(), "demo.web.0".into())],
    };
    let result = cni.add(&net, &at).await.unwrap();
    let address = result.address().expect("an address").to_string();
    assert!(address.starts_with("10.199.0."), "{result:?}");
    assert!(addresses_in(&pod).contains(&format!("{address}/24")), "{}", addresses_in(&pod));
    assert_eq!(leases(dir.path()), vec![address.clone()]);
    cni.check(&net, &at, &result).await.unwrap();
    let prev = serde_json::to_value(&result).unwrap();
    cni.del(&net, &at, Some(&prev)).await.unwrap();
    assert!(leases(dir.path()).is_empty());
    cni.del(&net, &at, Some(&prev)).await.expect("DEL of what is gone succeeds");
    // Its namespace gone: DEL still gives the address back (CNI_NETNS empty).
    cni.add(&net, &at).await.unwrap();
    ip(&["netns", "del", &pod]);
    cni.del(&net, &Attachment { netns: String::new(), ..at.clone() }, None).await.unwrap();
    assert!(leases(dir.path()).is_empty());

    // Twenty pods added, then deleted: twenty addresses, no lease left.
    let mut pods = Vec::new();
    for i in 1..=20 {
        let name = format!("{tag}p{i}");
        let at = Attachment {
            container_id: format!("pod-{i}"),
            netns: ns.add(&name),
            ifname: "eth0".into(),
            args: Vec::new(),
        };
        let r = cni.add(&net, &at).await.unwrap();
        pods.push((at, r));
    }
    let mut given: Vec<String> = pods.iter().map(|(_, r)| r.address().unwrap().to_string()).collect();
    given.sort();
    given.dedup();
    assert_eq!((given.len(), leases(dir.path()).len()), (20, 20));
    for (at, r) in &pods {
        cni.del(&net, at, Some(&serde_json::to_value(r).unwrap())).await.unwrap();
    }
    assert!(leases(dir.path()).is_empty(), "{:?}", leases(dir.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_errors_name_the_plugin_and_a_failed_add_is_undone() {
    let tag = format!("cnie{}", std::process::id() % 100_000);
    let dir = tempfile::tempdir().unwrap();
    let mut ns = Netns(Vec::new());
    let host = format!("{tag}h");
    ns.add(&host);
    let cni = wrapped_plugins(dir.path(), &host);
    // A /30: the gateway and one address.
    let net = network(dir.path(), "10.198.0.0/30");
    let attach = |i: usize, netns: String| Attachment {
        container_id: format!("c{i}"),
        netns,
        ifname: "eth0".into(),
        args: Vec::new(),
    };
    let first = attach(1, ns.add(&format!("{tag}a")));
    cni.add(&net, &first).await.unwrap();
    let second = attach(2, ns.add(&format!("{tag}b")));
    let e = cni.add(&net, &second).await.unwrap_err();
    assert!(matches!(e, CniError::Plugin { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("CNI plugin bridge (ADD)") && text.contains("no IP addresses available"), "{text}");
    assert_eq!(leases(dir.path()).len(), 1, "the failed ADD took nothing");

    let missing = Cni { bin_dirs: vec![dir.path().join("nothing")], reaper: None };
    let e = missing.add(&net, &second).await.unwrap_err().to_string();
    assert!(e.contains("CNI plugin \"bridge\" is in none of") && e.contains("nothing"), "{e}");
}

/// What a runtime lost track of (its network container killed by hand, or itself killed between
/// ADD and its record) is found in host-local's leases and given back; what it knows stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_nobody_knows_are_given_back() {
    let tag = format!("cnil{}", std::process::id() % 100_000);
    let dir = tempfile::tempdir().unwrap();
    let mut ns = Netns(Vec::new());
    let host = format!("{tag}h");
    ns.add(&host);
    let cni = wrapped_plugins(dir.path(), &host);
    let net = network(dir.path(), "10.197.0.0/24");
    let lease_dir = steward::cni::leases::host_local_dir(&net).unwrap();
    assert_eq!(lease_dir, dir.path().join("leases").join("pods"));
    let mut given = Vec::new();
    for i in 0..3 {
        let name = format!("{tag}p{i}");
        let at = Attachment {
            container_id: format!("pod-{i}"),
            netns: ns.add(&name),
            ifname: "eth0".into(),
            args: Vec::new(),
        };
        given.push(cni.add(&net, &at).await.unwrap().address().unwrap());
    }
    let leases = steward::cni::leases::leases_in(&lease_dir);
    let by_container: Vec<(&str, &str)> = leases.iter().map(|l| (l.container_id.as_str(), l.ifname.as_str())).collect();
    assert_eq!(by_container, [("pod-0", "eth0"), ("pod-1", "eth0"), ("pod-2", "eth0")]);
    // pod-1's namespace is gone (its network container killed) and nobody knows it any more.
    ip(&["netns", "del", &format!("{tag}p1")]);
    // pod-0 is another runtime's (not ours): left alone though nobody here knows it.
    let known: std::collections::BTreeSet<String> = ["pod-2".to_string()].into();
    let ours = |id: &str| id != "pod-0";
    let released = cni.release_unknown(&net, &known, &ours).await;
    assert_eq!(released.len(), 1);
    assert_eq!((released[0].0.container_id.as_str(), released[0].0.address), ("pod-1", given[1]));
    assert!(released[0].1.is_ok(), "{:?}", released[0].1);
    let left: Vec<String> = steward::cni::leases::leases_in(&lease_dir).into_iter().map(|l| l.container_id).collect();
    assert_eq!(left, ["pod-0", "pod-2"]);
    assert!(cni.release_unknown(&net, &known, &ours).await.is_empty(), "nothing more to give back");
}
