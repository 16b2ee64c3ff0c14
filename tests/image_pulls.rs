//! Image pulls (issue 26; seed 003 `imagePullPolicy`) from a real registry on 127.0.0.1:
//! Debian's `docker-registry`, started here with basic auth (htpasswd), holding the test's own
//! tiny images (made from the busybox test image, pushed by the real engine). Pull credentials
//! come from a Steward secret holding a docker config JSON.

mod common;

use common::docker::{self, docker as dk, pod, IMAGE, SHARED_SOCKET};
use common::{id, Daemon};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

const USER: &str = "puller";
const PASSWORD: &str = "s3cret-pw";

/// The registry, killed when dropped.
struct Registry {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn start() -> Registry {
        // Installed by scripts/install-deps.sh (scripts/test.sh runs it).
        assert!(std::path::Path::new("/usr/bin/docker-registry").exists(), "docker-registry is not installed");
        let dir = tempfile::Builder::new().prefix("steward-registry-").tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // bcrypt, as the registry's htpasswd wants it (Python's crypt: Debian's libcrypt).
        let hash = Command::new("python3")
            .args([
                "-W",
                "ignore",
                "-c",
                "import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
                PASSWORD,
            ])
            .output()
            .unwrap();
        let hash = String::from_utf8_lossy(&hash.stdout).trim().to_string();
        assert!(hash.starts_with("$2"), "no bcrypt hash: {hash:?}");
        std::fs::write(dir.path().join("htpasswd"), format!("{USER}:{hash}\n")).unwrap();
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {d}/data\n\
             http:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: steward-test\n    path: {d}/htpasswd\n",
            d = dir.path().display()
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new("/usr/bin/docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let r = Registry { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the registry did not listen:\n{}", r.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// `127.0.0.1:PORT/steward/NAME:TAG`.
    fn image(&self, name: &str, tag: &str) -> String {
        format!("127.0.0.1:{}/steward/{name}:{tag}", self.port)
    }

    /// Manifest requests the registry answered for `name` (one per pull).
    fn manifest_gets(&self, name: &str) -> usize {
        let needle = format!("GET /v2/steward/{name}/manifests/");
        self.log().lines().filter(|l| l.contains(&needle)).count()
    }

    /// `docker --config DIR ARGS` logged in to this registry.
    fn docker(&self, args: &[&str]) -> (i32, String, String) {
        let config = self.dir.path().join("docker-client");
        let out = Command::new("docker")
            .arg("--config")
            .arg(&config)
            .arg("-H")
            .arg(format!("unix://{SHARED_SOCKET}"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )
    }

    /// Makes a local image from the busybox test image whose /version holds `version`; its id.
    fn make_image(&self, tag: &str, version: &str) -> String {
        let name = format!("steward-make-{}-{version}", self.port);
        let _ = dk(SHARED_SOCKET, &["rm", "-f", &name]);
        let script = format!("echo {version} > /version");
        let (code, _, err) = dk(SHARED_SOCKET, &["run", "--name", &name, IMAGE, "/bin/sh", "-c", &script]);
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = dk(SHARED_SOCKET, &["commit", &name, tag]);
        assert_eq!(code, 0, "{err}");
        let _ = dk(SHARED_SOCKET, &["rm", "-f", &name]);
        out
    }

    fn push(&self, image: &str) {
        let login = Command::new("docker")
            .arg("--config")
            .arg(self.dir.path().join("docker-client"))
            .args([
                "-H",
                &format!("unix://{SHARED_SOCKET}"),
                "login",
                &format!("127.0.0.1:{}", self.port),
                "-u",
                USER,
                "--password-stdin",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(PASSWORD.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        assert!(login.status.success(), "docker login: {}", String::from_utf8_lossy(&login.stderr));
        let (code, _, err) = self.docker(&["push", image]);
        assert_eq!(code, 0, "docker push {image}: {err}\n{}", self.log());
    }
}

/// A docker config JSON for the registry with `password`.
fn docker_config(r: &Registry, password: &str) -> String {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
    json!({"auths": {format!("127.0.0.1:{}", r.port): {"auth": auth}}}).to_string()
}

fn secret(d: &Daemon, name: &str, config: &str) {
    let file = d.dir.path().join(format!("{name}.json"));
    std::fs::write(&file, config).unwrap();
    let from = format!(".dockerconfigjson={}", file.display());
    let (code, _, err) = d.cli(&["secret", "create", &format!("pulls/{name}"), "--from-file", &from]);
    assert_eq!(code, 0, "{err}");
}

/// A pod of one container running `image` (sleeping), its policy and pull secrets.
fn puller(name: &str, image: &str, policy: Option<&str>, secrets: &[&str], instances: u32) -> Value {
    let mut c = json!({"name": "main", "image": image, "command": {"value": "/bin/sleep", "arguments": ["1000"]}});
    if let Some(p) = policy {
        c["imagePullPolicy"] = json!(p);
    }
    let mut p = pod("pulls", name, json!([c]), json!({"restartPolicy": {"policy": "Never"}}));
    p["spec"]["instance"] = json!(instances);
    p["spec"]["template"]["spec"]["imagePullSecrets"] = json!(secrets);
    p
}

async fn image_of(d: &Daemon, name: &str, index: u32) -> String {
    let s = d.wait_state(&id("pulls", name, index), Kind::Running, 60).await;
    docker::inspect(SHARED_SOCKET, &s.containers[0].id, "{{.Image}}")
}

async fn pulled_events(d: &Daemon, instance_prefix: &str) -> Vec<Value> {
    let mut all = Vec::new();
    d.client
        .events(0, false, |e| {
            let v = e.body.to_value();
            if v["type"] == "imagePulled" && v["instance"].as_str().is_some_and(|i| i.starts_with(instance_prefix)) {
                all.push(v);
            }
            true
        })
        .await
        .unwrap();
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_policies_credentials_and_one_pull_for_many_pods() {
    docker::shared_engine();
    let r = Registry::start();
    let mut d = Daemon::start("image-pulls");
    let tiny = r.image("tiny", "v1");
    // The registry holds v2 under tiny:v1; this host's tiny:v1 is the older v1.
    let newer = r.make_image(&tiny, "v2");
    r.push(&tiny);
    let older = r.make_image(&tiny, "v1");
    assert_ne!(newer, older);
    secret(&d, "regcred", &docker_config(&r, PASSWORD));
    secret(&d, "badcred", &docker_config(&r, "wrong"));

    // IfNotPresent: the host's own; Always: the registry's (a changed tag is picked up).
    d.apply_json(&puller("ifnp", &tiny, Some("IfNotPresent"), &[], 1)).await;
    assert_eq!(image_of(&d, "ifnp", 0).await, older);
    assert!(pulled_events(&d, "pulls/ifnp/").await.is_empty());
    d.apply_json(&puller("always", &tiny, Some("Always"), &["regcred"], 1)).await;
    assert_eq!(image_of(&d, "always", 0).await, newer);
    let pulled = pulled_events(&d, "pulls/always/").await;
    assert_eq!(pulled.len(), 1, "{pulled:#?}");
    assert_eq!(
        (pulled[0]["detail"]["image"].as_str(), pulled[0]["detail"]["outcome"].as_str()),
        (Some(tiny.as_str()), Some("pulled"))
    );
    // Re-adoption never pulls: the daemon killed (-9) and started again finds the same container.
    let (gets, running) = (r.manifest_gets("tiny"), d.status(&id("pulls", "always", 0)).await);
    d.restart(true);
    let after = d.wait_state(&id("pulls", "always", 0), Kind::Running, 30).await;
    assert_eq!(after.containers[0].id, running.containers[0].id, "re-adopted");
    assert_eq!(r.manifest_gets("tiny"), gets, "no pull at re-adoption");

    // Never: a missing image fails clearly, with no pull.
    let missing = r.image("missing", "v9");
    d.apply_json(&puller("never", &missing, Some("Never"), &[], 1)).await;
    let s = d.wait_state(&id("pulls", "never", 0), Kind::Failed, 30).await;
    assert!(
        s.message.contains(&format!("image \"{missing}\" is not on this host (imagePullPolicy Never")),
        "{}",
        s.message
    );
    assert_eq!(r.manifest_gets("missing"), 0);

    // Wrong credentials, and none: the registry's own message.
    d.apply_json(&puller("badauth", &tiny, Some("Always"), &["badcred"], 1)).await;
    let s = d.wait_state(&id("pulls", "badauth", 0), Kind::Failed, 60).await;
    assert!(
        s.message.contains(&format!("pulling image \"{tiny}\"")) && s.message.contains("unauthorized"),
        "{}",
        s.message
    );
    d.apply_json(&puller("noauth", &tiny, Some("Always"), &[], 1)).await;
    let s = d.wait_state(&id("pulls", "noauth", 0), Kind::Failed, 60).await;
    assert!(s.message.contains("no basic auth credentials") || s.message.contains("unauthorized"), "{}", s.message);
    // A secret that is not there, or holds no docker config, is named.
    d.apply_json(&puller("nosecret", &tiny, Some("Always"), &["gone"], 1)).await;
    let s = d.wait_state(&id("pulls", "nosecret", 0), Kind::Failed, 30).await;
    assert!(s.message.contains("imagePullSecrets: secret pulls/gone does not exist"), "{}", s.message);

    // Ten pods asking at once for an image the host lacks: one pull.
    let fresh = r.image("fresh", "v1");
    r.make_image(&fresh, "fresh");
    r.push(&fresh);
    let (code, _, err) = dk(SHARED_SOCKET, &["rmi", "-f", &fresh]);
    assert_eq!(code, 0, "{err}");
    let before = r.manifest_gets("fresh");
    d.apply_json(&puller("many", &fresh, Some("IfNotPresent"), &["regcred"], 10)).await;
    for i in 0..10 {
        d.wait_state(&id("pulls", "many", i), Kind::Running, 120).await;
    }
    assert_eq!(r.manifest_gets("fresh") - before, 1, "{}", r.log());
    let events = pulled_events(&d, "pulls/many/").await;
    let pulls = events.iter().filter(|e| e["detail"]["outcome"] == "pulled").count();
    assert_eq!(pulls, 1, "{events:#?}");

    for app in ["ifnp", "always", "never", "badauth", "noauth", "nosecret", "many"] {
        let _ = d.cli(&["delete", &format!("pulls/{app}")]);
    }
    for image in [&tiny, &fresh] {
        let _ = dk(SHARED_SOCKET, &["rmi", "-f", image]);
    }
}

/// A TCP proxy to `upstream` on 127.0.0.1 that sends what comes back at about 2 MiB/s: a pull
/// through it lasts long enough to be watched.
fn slow_proxy(upstream: u16) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else { continue };
            let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_read, &mut s_write);
                let _ = s_write.shutdown(std::net::Shutdown::Write);
            });
            let (mut s_read, mut c_write) = (server, client);
            std::thread::spawn(move || {
                let mut buf = [0u8; 32 * 1024];
                while let Ok(n) = s_read.read(&mut buf) {
                    if n == 0 || c_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(15));
                }
                let _ = c_write.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}

/// A pull's progress shows in the instance's status (and `steward status`) while it runs: an
/// 8 MiB layer pulled through a slow proxy to the registry.
#[tokio::test(flavor = "multi_thread")]
async fn a_pulls_progress_shows_in_status() {
    docker::shared_engine();
    let r = Registry::start();
    let direct = r.image("big", "v1");
    let name = format!("steward-make-big-{}", r.port);
    let _ = dk(SHARED_SOCKET, &["rm", "-f", &name]);
    let (code, _, err) = dk(
        SHARED_SOCKET,
        &["run", "--name", &name, IMAGE, "/bin/sh", "-c", "dd if=/dev/urandom of=/blob bs=1048576 count=8"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = dk(SHARED_SOCKET, &["commit", &name, &direct]);
    assert_eq!(code, 0, "{err}");
    let _ = dk(SHARED_SOCKET, &["rm", "-f", &name]);
    r.push(&direct);
    let _ = dk(SHARED_SOCKET, &["rmi", &direct]);
    let proxy = slow_proxy(r.port);
    let image = format!("127.0.0.1:{proxy}/steward/big:v1");
    let _ = dk(SHARED_SOCKET, &["rmi", &image]);

    let d = Daemon::start("pulls-progress");
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    secret(&d, "slow", &json!({"auths": {format!("127.0.0.1:{proxy}"): {"auth": auth}}}).to_string());
    d.apply_json(&puller("big", &image, Some("IfNotPresent"), &["slow"], 1)).await;
    let iid = id("pulls", "big", 0);
    let mut seen: Vec<String> = Vec::new();
    let mut cli_seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = d.status(&iid).await;
        if s.message.contains("pulling") && !seen.contains(&s.message) {
            if cli_seen.is_empty() {
                cli_seen = d.cli(&["status", "pulls/big/0"]).1;
            }
            seen.push(s.message.clone());
        }
        if s.state.kind() == Kind::Running || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = dk(SHARED_SOCKET, &["rmi", "-f", &image]);
    let downloading: Vec<&String> = seen.iter().filter(|m| m.contains("Downloading")).collect();
    assert!(downloading.len() >= 2, "the pull's progress, as status showed it: {seen:#?}");
    assert!(downloading[0].starts_with(&format!("pulling {image}: ")), "{seen:#?}");
    assert!(cli_seen.contains(&format!("pulling {image}")), "steward status:\n{cli_seen}");
    let pulled = pulled_events(&d, "pulls/big/").await;
    assert_eq!(pulled.len(), 1, "{pulled:?}");
    assert!(pulled[0]["detail"]["secs"].as_f64().unwrap() > 1.0, "{pulled:?}");
}
