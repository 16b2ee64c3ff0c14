//! A real Docker Engine for the pod tests: the shared one (started by scripts/dockerd-up.sh when
//! none answers) or a private dockerd on its own socket that a test may stop and start.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const IMAGE: &str = "steward-busybox:test";
pub const SHARED_SOCKET: &str = "/var/run/docker.sock";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Set once a test of this binary uses a Docker Engine: daemons then clean up their containers.
pub static USED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A pod spec in `namespace`: OnFailure with no delay, a 1 s grace period, BRIDGE network,
/// one instance; `top` fields replace the spec's own.
pub fn pod(namespace: &str, name: &str, containers: serde_json::Value, top: serde_json::Value) -> serde_json::Value {
    let mut s = serde_json::json!({
        "apiVersion": "v4",
        "kind": "pod",
        "metadata": {"name": name, "namespace": namespace},
        "restartPolicy": {"policy": "OnFailure", "interval": 0, "backoff": 0},
        "killPolicy": {"gracePeriod": 1},
        "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": containers}}}
    });
    if let (Some(s), serde_json::Value::Object(top)) = (s.as_object_mut(), top) {
        for (k, v) in top {
            s.insert(k, v);
        }
    }
    s
}

/// A container of the test image running `script` with /bin/sh.
pub fn sh(name: &str, script: &str) -> serde_json::Value {
    serde_json::json!({"name": name, "image": IMAGE, "command": {"value": "/bin/sh", "arguments": ["-c", script]}})
}

/// An image with busybox and the host's glibc `getent` (busybox has none): what a pod's own
/// resolver library does with its resolv.conf, search domains included.
pub const GETENT_IMAGE: &str = "steward-getent:test";

/// Builds [`GETENT_IMAGE`] on the shared engine once: busybox, getent and the libraries `ldd`
/// names.
pub fn getent_image() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if docker(SHARED_SOCKET, &["image", "inspect", GETENT_IMAGE]).0 == 0 {
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for dir in ["bin", "usr/bin", "etc", "tmp"] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
        }
        let getent = which("getent");
        let mut files = vec![("/bin/busybox".to_string(), "bin/busybox".to_string())];
        files.push((getent.clone(), "usr/bin/getent".into()));
        let ldd = Command::new("ldd").arg(&getent).output().unwrap();
        for lib in String::from_utf8_lossy(&ldd.stdout).split_whitespace().filter(|w| w.starts_with('/')) {
            files.push((lib.to_string(), lib.trim_start_matches('/').to_string()));
        }
        for (from, to) in &files {
            let to = r.join(to);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, &to).unwrap_or_else(|e| panic!("{from}: {e}"));
        }
        for applet in ["sh", "sleep", "cat"] {
            std::os::unix::fs::symlink("busybox", r.join("bin").join(applet)).unwrap();
        }
        let tar = Command::new("tar").arg("-C").arg(r).args(["-c", "."]).output().unwrap();
        let mut import = Command::new("docker")
            .args(["-H", &format!("unix://{SHARED_SOCKET}"), "import", "-", GETENT_IMAGE])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        import.stdin.take().unwrap().write_all(&tar.stdout).unwrap();
        assert!(import.wait().unwrap().success(), "docker import {GETENT_IMAGE}");
    });
}

fn which(program: &str) -> String {
    let out = Command::new("sh").args(["-c", &format!("command -v {program}")]).output().unwrap();
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(Path::new(&path).is_absolute(), "{program} not found");
    path
}

/// Makes sure the shared dockerd answers and has the busybox image (once per test binary).
pub fn shared_engine() {
    USED.store(true, std::sync::atomic::Ordering::Relaxed);
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let status = Command::new("bash").arg(repo().join("scripts/dockerd-up.sh")).status().unwrap();
        assert!(status.success(), "scripts/dockerd-up.sh failed");
    });
}

/// `docker -H unix://SOCKET ARGS...`; (exit code, stdout, stderr).
pub fn docker(socket: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("docker").arg("-H").arg(format!("unix://{socket}")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

/// `docker inspect -f FORMAT ID` on the shared engine.
pub fn inspect(socket: &str, id: &str, format: &str) -> String {
    let (code, out, err) = docker(socket, &["inspect", "-f", format, id]);
    assert_eq!(code, 0, "docker inspect {id}: {err}");
    out
}

/// Removes every container a daemon with state dir `state` left behind.
pub fn remove_owned(socket: &str, state: &Path) {
    let filter = format!("label=io.steward.owner={}", state.display());
    // Twice: a create the killed daemon had already sent may land after the first listing.
    for round in 0..2 {
        let (_, ids, _) = docker(socket, &["ps", "-aq", "--filter", &filter]);
        for id in ids.lines().filter(|l| !l.is_empty()) {
            let _ = docker(socket, &["rm", "-f", id]);
        }
        if round == 0 {
            std::thread::sleep(Duration::from_millis(1000));
        }
    }
}

/// A dockerd of the test's own: own socket, data root, exec root, pidfile and bridge.
/// (`--bridge=none` would make it delete the shared engine's docker0.)
pub struct PrivateEngine {
    pub dir: PathBuf,
    pub socket: String,
    child: Option<Child>,
    bridge: String,
}

/// `ip ARGS...`, panicking on failure unless `may_fail`.
fn ip(args: &[&str], may_fail: bool) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(may_fail || out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl PrivateEngine {
    pub fn start(dir: &Path) -> PrivateEngine {
        USED.store(true, std::sync::atomic::Ordering::Relaxed);
        // Unix socket paths are short: keep the exec root (containerd's sockets) under /tmp.
        // A bridge of its own on a test-only subnet (nothing is routed off the machine).
        let bridge = format!("stwdk{}", std::process::id() % 100_000);
        ip(&["link", "del", &bridge], true);
        ip(&["link", "add", &bridge, "type", "bridge"], false);
        ip(&["addr", "add", "10.231.0.1/24", "dev", &bridge], false);
        ip(&["link", "set", &bridge, "up"], false);
        let socket = dir.join("docker.sock").display().to_string();
        let mut e = PrivateEngine { dir: dir.to_path_buf(), socket, child: None, bridge };
        e.spawn();
        let (code, _, err) = docker(&e.socket, &["image", "inspect", IMAGE]);
        if code != 0 {
            let status = Command::new("bash")
                .arg(repo().join("scripts/busybox-image.sh"))
                .arg(&e.socket)
                .arg(IMAGE)
                .status()
                .unwrap();
            assert!(status.success(), "busybox image for the private dockerd: {err}");
        }
        e
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("dockerd.log")).unwrap();
        let child = Command::new("dockerd")
            .arg("--host")
            .arg(format!("unix://{}", self.socket))
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(self.dir.join("exec"))
            .arg("--pidfile")
            .arg(self.dir.join("docker.pid"))
            .arg(format!("--bridge={}", self.bridge))
            .args(["--iptables=false", "--ip-masq=false", "--storage-driver=vfs", "--live-restore"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while docker(&self.socket, &["version"]).0 != 0 {
            assert!(Instant::now() < deadline, "private dockerd did not answer:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM and wait: with --live-restore its containers keep running.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
    }
}

impl Drop for PrivateEngine {
    fn drop(&mut self) {
        if self.child.is_none() {
            self.spawn();
        }
        let (_, ids, _) = docker(&self.socket, &["ps", "-aq"]);
        for id in ids.lines().filter(|l| !l.is_empty()) {
            let _ = docker(&self.socket, &["rm", "-f", id]);
        }
        self.stop();
        ip(&["link", "del", &self.bridge], true);
        // dockerd leaves its data root mounted over itself; without this the dir cannot go.
        let _ = Command::new("umount").arg("-l").arg(self.dir.join("data")).stderr(Stdio::null()).status();
        // Its containerd exits with it; its data root (vfs layers) goes with the test's dir.
    }
}
