//! Hollow hosts (issue 46 item 4): real stewardd binaries with `runtime = "hollow"` on loopback
//! ports, driven by the real steward-sched and steward. Their instances run nothing, yet the
//! scheduler places and sees them, a crash goes through the restart policy, a kill -9 of the
//! daemon re-adopts them without a second start, the remote API's tokens hold, and `steward
//! status` shows simulated use.

mod common;

use common::remote::{cert, free_port, READ_TOKEN, TOKEN};
use common::{id, spec, Daemon};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use steward::client::{Client, ClientError};
use steward::supervisor::state::{ExitStatus, Kind};

const HOSTS: usize = 4;
const INSTANCES: u32 = 240;

struct Hollow {
    daemon: Daemon,
    name: String,
    addr: String,
}

struct Fleet {
    hosts: Vec<Hollow>,
    certs: tempfile::TempDir,
    cluster: PathBuf,
}

/// `n` hollow daemons, one CA (the real `steward cert`), one tokens file with a write and a
/// read token, and a steward-sched cluster file naming them.
fn fleet(test: &str, n: usize) -> Fleet {
    let certs = tempfile::Builder::new().prefix("steward-hollow-").tempdir().unwrap();
    std::fs::set_permissions(certs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tokens = certs.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n{READ_TOKEN} read\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(certs.path().join("sched.token"), format!("{TOKEN}\n")).unwrap();
    let mut hosts = Vec::new();
    let mut nodes = String::new();
    for i in 1..=n {
        let name = format!("h{i}");
        cert(certs.path(), &name);
        let addr = format!("127.0.0.1:{}", free_port());
        let extra = format!(
            "runtime = \"hollow\"\n[hollow]\ncpu = \"8\"\nmemory = \"32Gi\"\n[node]\nhostname = \"{name}\"\n\
             [remote]\nlisten = \"{addr}\"\ncert = \"{d}/{name}.pem\"\nkey = \"{d}/{name}-key.pem\"\n\
             tokens_file = \"{t}\"\n",
            d = certs.path().display(),
            t = tokens.display()
        );
        let daemon = Daemon::start_with(&format!("hollow{test}-{name}"), &extra);
        wait_listening(&daemon, &addr);
        nodes.push_str(&format!("[[node]]\nname = \"{name}\"\naddress = \"{addr}\"\n"));
        hosts.push(Hollow { daemon, name, addr });
    }
    let cluster = certs.path().join("cluster.toml");
    std::fs::write(&cluster, format!("state_dir = \"sched\"\nca = \"ca.pem\"\ntoken_file = \"sched.token\"\n{nodes}"))
        .unwrap();
    Fleet { hosts, certs, cluster }
}

fn wait_listening(d: &Daemon, addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "no remote listener on {addr}:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Fleet {
    fn sched(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_steward-sched"))
            .arg("--cluster")
            .arg(&self.cluster)
            .args(["-o", "json"])
            .args(args)
            .env("STEWARD_LOG", "warn")
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    }

    fn deploy(&self, spec: &Value) {
        let path = self.certs.path().join("app.json");
        std::fs::write(&path, spec.to_string()).unwrap();
        let (code, _, err) = self.sched(&["deploy", path.to_str().unwrap()]);
        assert_eq!(code, 0, "steward-sched deploy: {err}\n{}", self.logs());
    }

    /// steward-sched's view: instance id → (its node, its state).
    fn sched_status(&self) -> BTreeMap<String, (String, String)> {
        let (code, out, err) = self.sched(&["status"]);
        assert_eq!(code, 0, "steward-sched status: {err}");
        let rows: Vec<Value> = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        rows.iter()
            .map(|r| {
                let text = |key: &str| r[key].as_str().unwrap_or_default().to_string();
                (text("instance"), (text("node"), text("state")))
            })
            .collect()
    }

    fn logs(&self) -> String {
        self.hosts.iter().map(|h| format!("--- {} ---\n{}", h.name, h.daemon.log())).collect()
    }

    fn remote_client(&self, host: &Hollow, token: &str) -> Client {
        let tls = steward::tls::client_config(&self.certs.path().join("ca.pem")).unwrap();
        Client::remote(&host.addr, None, tls, token).unwrap()
    }
}

fn app(instances: u32) -> Value {
    spec(
        "wide",
        instances,
        json!({"procName": "p", "startCmd": "exec sleep 1000",
               "resources": {"requests": {"cpu": "20m", "memory": "24Mi"}}}),
        json!({"restartPolicy": {"policy": "Always", "interval": 1}}),
    )
}

async fn wait_all_running(d: &Daemon, name: &str, secs: u64) -> Vec<steward::supervisor::record::InstanceStatus> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let list = d.client.list(&[("name", name)]).await.unwrap();
        if !list.is_empty() && list.iter().all(|s| s.state.kind() == Kind::Running) {
            return list;
        }
        assert!(
            Instant::now() < deadline,
            "not all Running: {:?}",
            list.iter().map(|s| s.state.kind()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hollow_fleet_runs_what_steward_sched_places_there() {
    let mut f = fleet("a", HOSTS);
    f.deploy(&app(INSTANCES));

    // Placed across every host, all Running in steward-sched's view.
    let deadline = Instant::now() + Duration::from_secs(60);
    let view = loop {
        let view = f.sched_status();
        if view.len() == INSTANCES as usize && view.values().all(|(_, state)| state == "Running") {
            break view;
        }
        assert!(Instant::now() < deadline, "steward-sched does not see them all Running: {view:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for h in &f.hosts {
        assert!(view.values().any(|(node, _)| *node == h.name), "nothing placed on {}: {view:?}", h.name);
    }

    // `steward status`: no pid, the simulated use (its memory request, some cpu).
    let h1 = &f.hosts[0].daemon;
    let first = h1.client.list(&[("name", "wide")]).await.unwrap()[0].id.clone();
    let (code, out, err) = h1.cli(&["status", &first.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("memory:    24.0 MiB"), "{out}");
    assert!(out.contains("cpu:") && out.contains("tasks:     1"), "{out}");
    let (code, out, _) = h1.cli(&["-o", "json", "node"]);
    assert_eq!(code, 0);
    let node: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(node["cpus"], 8, "{out}");
    assert_eq!(node["memoryTotalBytes"], 32u64 << 30, "{out}");
    let here = h1.client.list(&[("name", "wide")]).await.unwrap().len() as u64;
    assert_eq!(node["memoryUsedBytes"], here * (24 << 20), "{out}");

    // Told to crash: the restart policy restarts it, as for a real process's exit.
    let before = h1.client.status(&first).await.unwrap();
    let (code, out, err) = h1.cli(&["crash", &first.to_string(), "--exit-code", "3"]);
    assert_eq!(code, 0, "{out}{err}");
    let after = h1.wait(&first, 20, |s| s.restarts == before.restarts + 1 && s.state.kind() == Kind::Running).await;
    assert_eq!(after.last_exit, Some(ExitStatus::Code(3)), "{after:?}");
    assert!(after.last_start_ms > before.last_start_ms);

    // The remote API's tokens hold: a read token may not crash, an unknown one may do nothing.
    let reader = f.remote_client(&f.hosts[0], READ_TOKEN);
    assert!(matches!(reader.crash(&first, 1, None).await, Err(ClientError::Api { status: 403, .. })));
    assert_eq!(reader.status(&first).await.unwrap().state.kind(), Kind::Running);
    let stranger = f.remote_client(&f.hosts[0], "not-a-token-0123456789abcdef");
    assert!(matches!(stranger.status(&first).await, Err(ClientError::Api { status: 401, .. })));

    // kill -9 and a new daemon: every instance re-adopted, none started a second time.
    let victim = &mut f.hosts[1];
    let before: BTreeMap<_, _> = victim
        .daemon
        .client
        .list(&[("name", "wide")])
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.id.clone(), (s.last_start_ms, s.restarts, s.run_generation)))
        .collect();
    assert!(!before.is_empty());
    victim.daemon.restart(true);
    wait_listening(&victim.daemon, &victim.addr);
    let after: BTreeMap<_, _> = wait_all_running(&victim.daemon, "wide", 30)
        .await
        .into_iter()
        .map(|s| (s.id.clone(), (s.last_start_ms, s.restarts, s.run_generation)))
        .collect();
    assert_eq!(before, after, "re-adopted as they were");
    assert!(victim.daemon.log().contains("re-adopted a hollow run"), "{}", victim.daemon.log());
    let view = f.sched_status();
    assert!(view.values().all(|(_, state)| state == "Running"), "{view:?}");
}

/// A daemon that runs real processes refuses to crash one: only hollow instances can be told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_daemon_refuses_a_crash() {
    let d = Daemon::start("hollowb");
    let s = spec("real", 1, json!({}), json!({}));
    let path: &Path = &d.path().join("real.json");
    std::fs::write(path, s.to_string()).unwrap();
    let (code, _, err) = d.cli(&["apply", "-f", path.to_str().unwrap(), "--wait"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = d.cli(&["crash", "test/real/0"]);
    assert_ne!(code, 0);
    assert!(err.contains("only a hollow host's instances can be told to crash"), "{err}");
    let s = d.wait_state(&id("test", "real", 0), Kind::Running, 5).await;
    assert_eq!(s.restarts, 0);
}
