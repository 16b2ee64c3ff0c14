//! A cluster for steward-sched tests: three hosts as network namespaces on a bridge (in a
//! namespace of its own; nothing is added to the machine's own network), each running its own
//! stewardd with its own state, socket, node name, attributes and TLS listener; the scheduler
//! runs in a fourth namespace.

#![allow(dead_code)]

use crate::common::{spec, Daemon};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

pub const TOKEN: &str = "sched-token-0123456789abcdef";
/// A token `steward-sched serve` and the hosts' remote listeners accept for reading only.
pub const READ_TOKEN: &str = "sched-read-token-0123456789";

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// The namespaces; deleting them removes their veths and the bridge.
pub struct Net {
    pub names: Vec<String>,
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

pub struct Host {
    pub name: String,
    pub ip: String,
    pub daemon: Daemon,
}

pub struct Cluster {
    // Dropped in this order: the server, daemons (and their instances), then the network.
    /// With STEWARD_TEST_VIA_SERVE: per cluster file, the `serve --no-run` over it that
    /// commands ask, and its client file.
    pub via_serve: Option<std::sync::Mutex<BTreeMap<PathBuf, (Follower, PathBuf)>>>,
    pub hosts: Vec<Host>,
    pub _net: Net,
    pub hub: String,
    pub ctl: String,
    pub dir: tempfile::TempDir,
    pub file: PathBuf,
}

/// A child process killed when dropped, its stdout lines on a channel.
pub struct Follower {
    pub child: Child,
    pub lines: mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Follower {
    /// Spawns `cmd` and reads its stdout, one JSON value a line.
    pub fn spawn(mut cmd: Command) -> Follower {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines, seen: Vec::new() }
    }

    /// Reads lines until `pred` holds for one (returned), or panics after `secs`.
    pub fn wait_for(&mut self, secs: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(v) = self.seen.iter().find(|v| pred(v)) {
            return v.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(secs);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if pred(&v) {
                        return v;
                    }
                }
                Err(_) => break,
            }
        }
        let tail: Vec<String> = self.seen.iter().rev().take(40).map(|v| v.to_string()).collect();
        panic!("{what}: not seen in {secs}s; last lines (newest first):\n{}", tail.join("\n"));
    }

    /// Every line read so far and whatever is already waiting.
    pub fn drain(&mut self) -> &[Value] {
        while let Ok(v) = self.lines.try_recv() {
            self.seen.push(v);
        }
        &self.seen
    }
}

impl Cluster {
    /// `test` (one letter) keeps two clusters of one test run apart.
    pub fn start(test: &str, idcs: [&str; 3]) -> Cluster {
        Cluster::start_with(test, idcs, ["", "", ""])
    }

    /// As [`Cluster::start`], each host's stewardd.toml given `extra` top-level keys (before
    /// its tables), such as `reserved_cpu`.
    pub fn start_with(test: &str, idcs: [&str; 3], extra_config: [&str; 3]) -> Cluster {
        Cluster::start_with_node(test, idcs, extra_config, ["", "", ""])
    }

    /// As [`Cluster::start_with`], each host's `[node]` table given `node` keys too (its
    /// `zone`, say).
    pub fn start_with_node(test: &str, idcs: [&str; 3], extra_config: [&str; 3], node: [&str; 3]) -> Cluster {
        // Tests run at once: two with one letter would make the same namespaces.
        static TAKEN: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
        assert!(TAKEN.lock().unwrap().insert(test.to_string()), "two tests start clusters with letter {test:?}");
        let tag = format!("s{test}{}", std::process::id() % 100_000);
        let hub = format!("{tag}hub");
        let ctl = format!("{tag}ctl");
        let mut net = Net { names: Vec::new() };
        ip(&["netns", "add", &hub]);
        net.names.push(hub.clone());
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &hub, "link", "set", "br0", "up"]);
        let members = [("ctl", "10.231.0.100"), ("h1", "10.231.0.1"), ("h2", "10.231.0.2"), ("h3", "10.231.0.3")];
        for (name, addr) in members {
            let ns = format!("{tag}{name}");
            ip(&["netns", "add", &ns]);
            net.names.push(ns.clone());
            let veth = format!("v{name}");
            ip(&["link", "add", &veth, "netns", &hub, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
            ip(&["-n", &hub, "link", "set", &veth, "master", "br0", "up"]);
            ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }

        let dir = tempfile::Builder::new().prefix("steward-sched-").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // The hosts' remote listeners take TOKEN, and READ_TOKEN for reading only.
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, format!("{TOKEN}\n{READ_TOKEN} read\n")).unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut hosts = Vec::new();
        let mut nodes = String::new();
        for (i, (name, addr)) in members[1..].iter().enumerate() {
            // The real CLI makes the certificates; the CA is shared.
            let out = Command::new(env!("CARGO_BIN_EXE_steward"))
                .args(["cert", "--dir"])
                .arg(dir.path())
                .args(["--name", name, "--ip", addr])
                .output()
                .unwrap();
            assert!(out.status.success(), "steward cert: {}", String::from_utf8_lossy(&out.stderr));
            let extra = format!(
                "{top}\n[node]\nhostname = \"{name}\"\n{node}\n[node.attributes]\nidc = \"{idc}\"\n\
                 [remote]\nlisten = \"{addr}:7443\"\ncert = \"{d}/{name}.pem\"\nkey = \"{d}/{name}-key.pem\"\n\
                 tokens_file = \"{t}\"\n[events]\nheartbeat_secs = 1\n",
                top = extra_config[i],
                node = node[i],
                idc = idcs[i],
                d = dir.path().display(),
                t = tokens.display()
            );
            let ns = format!("{tag}{name}");
            let daemon = Daemon::start_in(&format!("sched{test}-{name}"), &extra, Some(&ns), addr);
            wait_remote(&daemon, 1);
            hosts.push(Host { name: name.to_string(), ip: addr.to_string(), daemon });
            nodes.push_str(&format!("[[node]]\nname = \"{name}\"\naddress = \"{addr}:7443\"\n"));
        }
        std::fs::write(dir.path().join("sched.token"), format!("{TOKEN}\n")).unwrap();
        let file = dir.path().join("cluster.toml");
        std::fs::write(
            &file,
            format!(
                "state_dir = \"sched\"\nca = \"ca.pem\"\ntoken_file = \"sched.token\"\nheartbeat_timeout_secs = 3\n{nodes}"
            ),
        )
        .unwrap();
        // STEWARD_TEST_VIA_SERVE=1: every command on the cluster's file but run and serve asks
        // a `serve --no-run` over that file instead of acting itself (issue 46: the cluster
        // tests pass through the API).
        let via_serve = std::env::var_os("STEWARD_TEST_VIA_SERVE").map(|_| Default::default());
        Cluster { via_serve, hosts, _net: net, hub, ctl, dir, file }
    }

    /// `steward-sched serve --no-run` over cluster file `file` (it follows its changes) on
    /// 127.0.0.1:`port` of the control namespace: it, and a client's cluster file.
    fn serve_no_run(&self, file: &std::path::Path, port: u16) -> (Follower, PathBuf) {
        let d = self.dir.path();
        self.serve_credentials();
        let client = d.join(format!("via-{port}.toml"));
        std::fs::write(
            &client,
            format!("server = \"127.0.0.1:{port}\"\nca = \"ca.pem\"\ntoken_file = \"sched.token\"\n"),
        )
        .unwrap();
        let mut cmd = self.sched_cmd_here(file, &["serve", "--no-run", "--listen", &format!("127.0.0.1:{port}")]);
        cmd.arg("--cert").arg(d.join("sched.pem")).arg("--key").arg(d.join("sched-key.pem"));
        cmd.arg("--tokens-file").arg(d.join("serve-tokens"));
        let server = Follower::spawn(cmd);
        self.wait_answering(&client, port);
        (server, client)
    }

    /// The server's certificate (for 127.0.0.1) and its tokens file: [`TOKEN`] writes,
    /// [`READ_TOKEN`] only reads.
    fn serve_credentials(&self) {
        let d = self.dir.path();
        if d.join("sched.pem").exists() {
            return;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_steward"))
            .args(["cert", "--dir"])
            .arg(d)
            .args(["--name", "sched", "--ip", "127.0.0.1"])
            .output()
            .unwrap();
        assert!(out.status.success(), "steward cert: {}", String::from_utf8_lossy(&out.stderr));
        let tokens = d.join("serve-tokens");
        std::fs::write(&tokens, format!("{TOKEN} write\n{READ_TOKEN} read\n")).unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(d.join("read.token"), format!("{READ_TOKEN}\n")).unwrap();
    }

    /// Waits until a server answers `engine` through cluster file `client`.
    fn wait_answering(&self, client: &std::path::Path, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self.sched_cmd_here(client, &["engine"]).output().unwrap();
            if out.status.success() {
                return;
            }
            assert!(Instant::now() < deadline, "serve on {port}: {}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn sched_cmd(&self, args: &[&str]) -> Command {
        self.sched_cmd_with(&self.file, args)
    }

    pub fn sched_cmd_with(&self, cluster: &std::path::Path, args: &[&str]) -> Command {
        let acts_here = matches!(args.first(), Some(&"run" | &"serve"));
        match &self.via_serve {
            Some(serves) if cluster == self.file && !acts_here => {
                let mut serves = serves.lock().unwrap();
                let port = 7470 + serves.len() as u16;
                let (_, client) =
                    serves.entry(cluster.to_path_buf()).or_insert_with(|| self.serve_no_run(cluster, port));
                self.sched_cmd_here(client, args)
            }
            _ => self.sched_cmd_here(cluster, args),
        }
    }

    /// steward-sched in the control namespace with cluster file `cluster`, as given.
    fn sched_cmd_here(&self, cluster: &std::path::Path, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.ctl))
            .arg(env!("CARGO_BIN_EXE_steward-sched"))
            .arg("--cluster")
            .arg(cluster)
            .args(["-o", "json"])
            .args(args)
            .env("STEWARD_LOG", "warn")
            .stdin(Stdio::null());
        c
    }

    /// Runs steward-sched in the control namespace: (exit code, stdout, stderr).
    pub fn sched(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.sched_cmd(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    pub fn deploy(&self, name: &str, spec: &Value) -> (i32, String, String) {
        let path = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&path, spec.to_string()).unwrap();
        self.sched(&["deploy", path.to_str().unwrap()])
    }

    /// An etcd in the control namespace, and a cluster file like this one's with it as the
    /// desired store.
    pub fn with_etcd(&self) -> (crate::common::Etcd, PathBuf) {
        let etcd = crate::common::Etcd::start_at("127.0.0.1:2379", "127.0.0.1:2380", "steward", Some(&self.ctl));
        let shared = self.dir.path().join("shared.toml");
        let text = std::fs::read_to_string(&self.file).unwrap();
        std::fs::write(&shared, format!("store = \"{}\"\n{text}", etcd.url)).unwrap();
        (etcd, shared)
    }

    /// `steward-sched serve` on 127.0.0.1:`port` in the control namespace over the store of
    /// cluster file `file`, started and answering: it, and a cluster file whose commands are
    /// its clients (`server`). Its tokens: [`TOKEN`] writes, [`READ_TOKEN`] only reads.
    pub fn serve(&self, file: &std::path::Path, port: u16) -> (Follower, PathBuf) {
        let d = self.dir.path();
        self.serve_credentials();
        let text = std::fs::read_to_string(file).unwrap();
        let served = d.join(format!("serve-{port}.toml"));
        std::fs::write(
            &served,
            format!(
                "{text}\n[serve]\nlisten = \"127.0.0.1:{port}\"\ncert = \"sched.pem\"\nkey = \"sched-key.pem\"\n\
                 tokens_file = \"serve-tokens\"\n"
            ),
        )
        .unwrap();
        let client = d.join(format!("client-{port}.toml"));
        std::fs::write(&client, format!("server = \"https://127.0.0.1:{port}\"\n{text}")).unwrap();
        let server = Follower::spawn(self.sched_cmd_here(&served, &["serve"]));
        self.wait_answering(&client, port);
        (server, client)
    }

    /// Runs steward-sched with cluster file `file`: (exit code, stdout, stderr).
    pub fn sched_with(&self, file: &std::path::Path, args: &[&str]) -> (i32, String, String) {
        let out = self.sched_cmd_with(file, args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    pub fn follow(&self, args: &[&str]) -> Follower {
        Follower::spawn(self.sched_cmd(args))
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts.iter().find(|h| h.name == name).unwrap()
    }

    /// Indexes of app `name` on each host (through the hosts' unix sockets).
    pub async fn spread(&self, name: &str) -> BTreeMap<String, Vec<u32>> {
        let mut out = BTreeMap::new();
        for h in &self.hosts {
            let list = h.daemon.client.list(&[("name", name)]).await.unwrap();
            out.insert(h.name.clone(), list.iter().map(|s| s.id.index).collect());
        }
        out
    }

    /// A webhook receiver on 127.0.0.1:`port` in the scheduler's namespace: each POSTed body
    /// a line of the returned file; it stops when the returned guard is dropped.
    pub fn webhook_receiver(&self, port: u16) -> (PathBuf, Follower) {
        let got = self.dir.path().join(format!("notifications-{port}.jsonl"));
        let script = format!(
            "import http.server\n\
             class H(http.server.BaseHTTPRequestHandler):\n\
             \x20   def do_POST(self):\n\
             \x20       body = self.rfile.read(int(self.headers['Content-Length']))\n\
             \x20       open({got:?}, 'ab').write(body + b'\\n')\n\
             \x20       self.send_response(200); self.end_headers()\n\
             \x20   def log_message(self, *a): pass\n\
             http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n",
            got = got.display().to_string()
        );
        let receiver = Follower {
            child: Command::new("nsenter")
                .arg(format!("--net=/run/netns/{}", self.ctl))
                .args(["python3", "-c", &script])
                .spawn()
                .unwrap(),
            lines: mpsc::channel().1,
            seen: Vec::new(),
        };
        (got, receiver)
    }

    pub fn logs(&self) -> String {
        self.hosts.iter().map(|h| format!("--- {} ---\n{}", h.name, h.daemon.log())).collect()
    }
}

/// Waits until the daemon's log says its remote listener is up `times` times.
pub fn wait_remote(d: &Daemon, times: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.log().matches("remote API listening").count() < times {
        assert!(Instant::now() < deadline, "no remote listener:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process that writes where it runs (`${hostip} ${instanceid}`) and sleeps.
pub fn app(name: &str, instances: u32, top: Value) -> Value {
    spec(
        name,
        instances,
        json!({"procName": "sleep", "startCmd": "echo ${hostip} ${instanceid} > placed; exec sleep 1000"}),
        top,
    )
}

pub fn constraint(rules: Value) -> Value {
    json!({"constraint": {"intersectionItem": rules}})
}

pub async fn wait_running(c: &Cluster, app: &str) {
    for h in &c.hosts {
        for s in h.daemon.client.list(&[("name", app)]).await.unwrap() {
            h.daemon.wait_state(&s.id, Kind::Running, 30).await;
        }
    }
}

/// Where each instance of `app` wrote `${hostip} ${instanceid}`.
pub fn placed_file(h: &Host, app: &str, index: u32) -> String {
    let path = h.daemon.work_dir().join(format!("test.{app}.{index}")).join("placed");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).trim().to_string()
}

pub fn body_type(v: &Value) -> &str {
    v["body"]["type"].as_str().unwrap_or_default()
}
