//! Test fixture: the real stewardd binary with its own roots, state, socket and cgroup parent.
#![allow(dead_code)]

pub mod docker;
pub mod http;
pub mod remote;
pub mod terminal;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use steward::cgroups::{CgroupConfig, Hierarchy};
use steward::client::Client;
use steward::spec::{Format, InstanceId};
use steward::supervisor::record::InstanceStatus;
use steward::supervisor::state::Kind;

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    pub cgroup_parent: String,
    pub client: Client,
    /// Network namespace the daemon runs in (through nsenter, which keeps the mounts).
    pub netns: Option<String>,
    /// The Docker Engine its pods run on: their containers are removed with the daemon.
    pub docker_socket: String,
    /// Environment of the next `spawn` (e.g. `STEWARD_FAILPOINTS`).
    pub env: Vec<(String, String)>,
}

impl Daemon {
    /// Starts a daemon in a fresh directory.
    pub fn start(name: &str) -> Daemon {
        Daemon::start_with(name, "")
    }

    /// Starts a daemon whose config file ends with `extra` (TOML).
    pub fn start_with(name: &str, extra: &str) -> Daemon {
        Daemon::start_in(name, extra, None, "127.0.0.1")
    }

    /// Starts a daemon in network namespace `netns` (when given) with `host_ip`; its config
    /// ends with `extra` (TOML).
    pub fn start_in(name: &str, extra: &str, netns: Option<&str>, host_ip: &str) -> Daemon {
        let dir = tempfile::Builder::new().prefix(&format!("steward-{name}-")).tempdir().unwrap();
        // Workloads run as other users too: they must be able to reach their directories.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.path().join("stewardd.sock");
        let cgroup_parent = format!("steward-test-{name}-{}", std::process::id());
        let config = dir.path().join("stewardd.toml");
        std::fs::write(
            &config,
            format!(
                "work_base_dir = \"{0}/work\"\nrun_base_dir = \"{0}/run\"\nvolume_root = \"{0}/volumes\"\nstate_dir = \"{0}/state\"\nsocket = \"{1}\"\n\
                 cgroup_parent = \"{2}\"\nhost_ip = \"{3}\"\nlog_max_bytes = 4096\nlog_keep = 2\nlog_check_secs = 1\n",
                dir.path().display(),
                socket.display(),
                cgroup_parent,
                host_ip
            ) + extra,
        )
        .unwrap();
        let netns = netns.map(String::from);
        let docker_socket = extra
            .lines()
            .find_map(|l| l.trim().strip_prefix("docker_socket = \"").and_then(|r| r.strip_suffix('"')))
            .unwrap_or(docker::SHARED_SOCKET)
            .to_string();
        let mut d = Daemon {
            child: None,
            client: Client::new(&socket),
            dir,
            socket,
            config,
            cgroup_parent,
            netns,
            docker_socket,
            env: Vec::new(),
        };
        d.spawn();
        d
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn work_dir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    pub fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// Starts the stewardd binary and waits until its socket answers.
    pub fn spawn(&mut self) {
        let previous = socket_identity(&self.socket);
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("stewardd.log")).unwrap();
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}")).arg(env!("CARGO_BIN_EXE_stewardd"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_stewardd")),
        };
        let child = cmd
            .arg("--config")
            .arg(&self.config)
            .env("STEWARD_LOG", "debug")
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        // A fresh client: one pooled connection to the previous daemon would fail the next call.
        self.client = Client::new(&self.socket);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            // The new daemon's socket, not the last one's: a child the last daemon forked and
            // had not exec'd yet when it was killed holds its listener a moment longer, and a
            // request connected to it is lost (the new daemon binds a new socket at the path).
            let bound_anew = previous.is_none() || socket_identity(&self.socket) != previous;
            if bound_anew && std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("stewardd exited with {status}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("stewardd did not open its socket:\n{}", self.log());
    }

    /// Runs the real `steward` CLI against this daemon; returns (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        self.cli_as(None, args)
    }

    /// As [`Daemon::cli`], as another user (through runuser).
    pub fn cli_as(&self, user: Option<&str>, args: &[&str]) -> (i32, String, String) {
        let steward = env!("CARGO_BIN_EXE_steward");
        let mut cmd = match user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--", steward]);
                c
            }
            None => Command::new(steward),
        };
        let out = cmd.arg("--config").arg(&self.config).args(args).stdin(Stdio::null()).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// As [`Daemon::cli`], with `input` on its standard input.
    pub fn cli_stdin(&self, args: &[&str], input: &str) -> (i32, String, String) {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_steward"))
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// kill -9 of the daemon (its instances keep running).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM of the daemon, waiting for it to exit (cleanly: its instances keep running).
    pub fn sigterm(&mut self) {
        if let Some(mut c) = self.child.take() {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM)
                .unwrap();
            let status = c.wait().unwrap();
            assert!(status.success(), "stewardd exits cleanly on SIGTERM: {status}\n{}", self.log());
        }
    }

    /// Stops the daemon by SIGTERM (`kill9` false) or kill -9, then starts it again.
    pub fn restart(&mut self, kill9: bool) {
        if kill9 {
            self.kill9();
        } else {
            self.sigterm();
        }
        self.spawn();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stewardd.log")).unwrap_or_default()
    }

    pub async fn apply_json(&self, spec: &serde_json::Value) -> Vec<String> {
        self.client
            .apply(&spec.to_string(), Format::Json)
            .await
            .unwrap_or_else(|e| panic!("apply: {e}\n{}", self.log()))
    }

    pub async fn status(&self, id: &InstanceId) -> InstanceStatus {
        self.client.status(id).await.unwrap()
    }

    /// Polls the instance until `pred` holds (or panics with its last status after `secs`).
    pub async fn wait(&self, id: &InstanceId, secs: u64, pred: impl Fn(&InstanceStatus) -> bool) -> InstanceStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.status(id).await;
            if pred(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "{id}: condition not reached in {secs}s; last status {s:#?}\n--- daemon log ---\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn wait_state(&self, id: &InstanceId, kind: Kind, secs: u64) -> InstanceStatus {
        self.wait(id, secs, |s| s.state.kind() == kind).await
    }

    pub fn hierarchy(&self) -> Hierarchy {
        Hierarchy::detect(&CgroupConfig { mount_root: "/sys/fs/cgroup".into(), parent: self.cgroup_parent.clone() })
            .unwrap()
    }

    /// Pids in an instance's cgroup.
    pub fn cgroup_pids(&self, id: &InstanceId) -> Vec<i32> {
        let key = format!("{}.{}.{}", id.namespace, id.name, id.index);
        let pids = self.hierarchy().instance(&key).pids().unwrap_or_default();
        pids.into_iter().filter(|p| alive(*p)).collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
        if docker::USED.load(std::sync::atomic::Ordering::Relaxed) {
            docker::remove_owned(&self.docker_socket, &self.dir.path().join("state"));
        }
        // Leave nothing behind: kill every instance's processes and remove the cgroups.
        let h = self.hierarchy();
        for key in h.list_instances() {
            let cg = h.instance(&key);
            for _ in 0..100 {
                // Again each round: a start the killed daemon had forked joins the cgroup a
                // moment later, after a first kill.
                let _ = cg.kill_all();
                if cg.pids().map(|p| p.is_empty()).unwrap_or(true) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = cg.remove();
        }
        let _ = h.remove_parent();
        // A pod's tmpfs volumes and staged mounts: the directory's removal must not reach into
        // what they show.
        steward::runtime::volumes::release(self.dir.path());
    }
}

/// xorshift64*: deterministic, so a failure is reproduced by running the test again (the
/// fuzz harnesses' mutations).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub fn id(namespace: &str, name: &str, index: u32) -> InstanceId {
    InstanceId { namespace: namespace.into(), name: name.into(), index }
}

/// A minimal process spec; `process` fields are merged over the defaults.
pub fn spec(name: &str, instances: u32, process: serde_json::Value, top: serde_json::Value) -> serde_json::Value {
    let mut p = serde_json::json!({
        "procName": "sh",
        "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}",
        "startCmd": "sleep 1000",
        "startGracePeriod": 0
    });
    merge(&mut p, process);
    let mut s = serde_json::json!({
        "apiVersion": "v4",
        "kind": "process",
        "metadata": {"name": name, "namespace": "test"},
        "spec": {"instance": instances, "template": {"spec": {"processes": [p]}}}
    });
    merge(&mut s, top);
    s
}

fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
    if let (Some(b), serde_json::Value::Object(o)) = (base.as_object_mut(), over) {
        for (k, v) in o {
            b.insert(k, v);
        }
    }
}

pub fn alive(pid: i32) -> bool {
    steward::runtime::procinfo::is_alive(pid)
}

/// Waits until `pid` is gone (or a zombie).
pub async fn wait_gone(pid: i32, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Debian's etcd (package etcd-server) on 127.0.0.1, its data in a temporary directory; killed
/// when dropped. `listen` gives the client address (for a namespace's own loopback, say).
pub struct Etcd {
    child: std::process::Child,
    pub url: String,
    pub endpoint: String,
    dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Etcd {
    /// Started on free loopback ports, answering before this returns. `prefix`: the store URL's.
    pub fn start(prefix: &str) -> Etcd {
        let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (client, peer) = (free(), free());
        Etcd::start_at(&format!("127.0.0.1:{client}"), &format!("127.0.0.1:{peer}"), prefix, None)
    }

    /// On `client` and `peer` (`ADDR:PORT`), run through `wrap` (nsenter into a namespace).
    pub fn start_at(client: &str, peer: &str, prefix: &str, netns: Option<&str>) -> Etcd {
        let dir = tempfile::Builder::new().prefix("steward-etcd-").tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = std::process::Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}")).arg("etcd");
                c
            }
            None => std::process::Command::new("etcd"),
        };
        let child = cmd
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls=http://{client}"))
            .arg(format!("--advertise-client-urls=http://{client}"))
            .arg(format!("--listen-peer-urls=http://{peer}"))
            .arg(format!("--initial-advertise-peer-urls=http://{peer}"))
            .arg(format!("--initial-cluster=test=http://{peer}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("etcd (Debian package etcd-server; scripts/install-deps.sh installs it)");
        let etcd = Etcd { child, url: format!("etcd://{client}/{prefix}"), endpoint: client.to_string(), dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !etcd.log().contains("ready to serve client requests") {
            assert!(Instant::now() < deadline, "etcd did not start:\n{}", etcd.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        etcd
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

/// What tells one socket bound at `path` from the next: its inode and change time.
fn socket_identity(path: &std::path::Path) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.ino(), m.ctime(), m.ctime_nsec()))
}
