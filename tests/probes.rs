//! Seed 003 probes on real processes, against a real HTTP server on 127.0.0.1 whose answer the
//! test sets: readiness flips Ready without a restart, liveness kills after exactly `failure`
//! failures in a row, the success threshold, delay and timeout are respected, and Ready shows in
//! status, `steward ls`, the event journal, /v1/node and /metrics.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use steward::supervisor::state::Kind;

const OK: u8 = 0;
const FAILING: u8 = 1;
const SLOW: u8 = 2;

/// An HTTP server answering every request 200 (OK), 503 (FAILING) or 200 after 3 s (SLOW), and
/// noting when each request came.
struct Server {
    port: u16,
    mode: Arc<AtomicU8>,
    seen: Arc<Mutex<Vec<Instant>>>,
}

impl Server {
    fn start(mode: u8) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (mode, seen) = (Arc::new(AtomicU8::new(mode)), Arc::new(Mutex::new(Vec::new())));
        let (m, s) = (mode.clone(), seen.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (m, s) = (m.clone(), s.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 2048];
                    let _ = conn.read(&mut buf);
                    s.lock().unwrap().push(Instant::now());
                    let status = match m.load(Ordering::SeqCst) {
                        FAILING => "503 Service Unavailable",
                        SLOW => {
                            std::thread::sleep(Duration::from_secs(3));
                            "200 OK"
                        }
                        _ => "200 OK",
                    };
                    let _ = write!(conn, "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                });
            }
        });
        Server { port, mode, seen }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn first_request(&self) -> Option<Instant> {
        self.seen.lock().unwrap().first().copied()
    }
}

fn http_probe(port: u16, extra: serde_json::Value) -> serde_json::Value {
    let mut p = json!({"handler": {"type": "HTTP", "method": {"port": port, "path": "/ready"}}, "period": 1});
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    p
}

#[tokio::test]
async fn readiness_flips_ready_without_a_restart_and_shows_everywhere() {
    let d = Daemon::start("ready");
    let server = Server::start(FAILING);
    let doc = spec(
        "web",
        1,
        json!({"probe": {"readiness": http_probe(server.port, json!({"threshold": {"success": 1, "failure": 2}}))}}),
        json!({}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "web", 0);
    let s = d.wait_state(&iid, Kind::Running, 20).await;
    let pid = s.pid.unwrap();
    assert!(!s.ready, "not ready before its probe passed");
    // Without a readiness probe (nor any other probe to report), Ready comes with Running.
    d.apply_json(&spec("plain", 1, json!({}), json!({}))).await;
    let plain = d.wait_state(&id("test", "plain", 0), Kind::Running, 20).await;
    assert!(plain.ready || d.wait(&id("test", "plain", 0), 2, |s| s.ready).await.ready);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!d.status(&iid).await.ready, "a failing readiness probe keeps it not ready");

    server.set(OK);
    let s = d.wait(&iid, 10, |s| s.ready).await;
    assert_eq!((s.pid, s.restarts, s.state.kind()), (Some(pid), 0, Kind::Running), "Ready came without a restart");
    let (_, out, _) = d.cli(&["ls"]);
    let row: Vec<&str> =
        out.lines().find(|l| l.starts_with("test") && l.contains(" web ")).unwrap().split_whitespace().collect();
    assert_eq!(&row[3..5], ["Running", "yes"], "{out}");
    let node = d.client.node().await.unwrap();
    let app = node.apps.iter().find(|a| a.name == "web").unwrap();
    assert!(app.instances[0].ready, "/v1/node reports Ready");
    let metrics = scrape_metrics(&d);
    assert!(metrics.contains("steward_instances_ready 2"), "web and plain: {metrics}");

    server.set(FAILING);
    let s = d.wait(&iid, 10, |s| !s.ready).await;
    assert_eq!((s.pid, s.restarts, s.state.kind()), (Some(pid), 0, Kind::Running), "not ready, and not restarted");
    let (_, out, _) = d.cli(&["events", "--since", "0"]);
    let mine: Vec<&str> = out.lines().filter(|l| l.contains("test/web/0")).collect();
    assert!(mine.iter().any(|l| l.ends_with("ready (process 0)")), "Ready journaled:\n{out}");
    assert!(
        mine.iter().any(|l| l.contains("not ready (process 0): GET") && l.contains("503")),
        "not Ready journaled:\n{out}"
    );
}

/// GET /metrics on the daemon's socket, as a scraper would.
fn scrape_metrics(d: &Daemon) -> String {
    let mut stream = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    write!(stream, "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

#[tokio::test]
async fn liveness_kills_after_exactly_its_failure_threshold() {
    let d = Daemon::start("live");
    let server = Server::start(FAILING);
    // The new run's first probe comes 2 s after its start: the failures counted are the first run's.
    let live = http_probe(server.port, json!({"delay": 0, "threshold": {"failure": 3}}));
    let doc = spec(
        "stuck",
        1,
        json!({"probe": {"liveness": live}}),
        json!({"restartPolicy": {"policy": "Always", "interval": 3}}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "stuck", 0);
    d.wait_state(&iid, Kind::Running, 20).await;
    let s = d.wait(&iid, 20, |s| s.restarts >= 1).await;
    assert_eq!(server.requests(), 3, "killed at exactly the third failure");
    let why = s.last_exit_reason.clone().unwrap_or_default();
    assert!(why.contains("liveness probe of process 0 failed 3 times in a row"), "{why}");
    assert!(why.contains("HTTP 503"), "{why}");

    // A passing liveness probe never kills.
    server.set(OK);
    let s = d.wait(&iid, 20, |s| s.state.kind() == Kind::Running).await;
    let restarts = s.restarts;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let s = d.status(&iid).await;
    assert_eq!((s.restarts, s.state.kind()), (restarts, Kind::Running));
}

#[tokio::test]
async fn success_threshold_delay_and_timeout_are_respected() {
    let d = Daemon::start("thresh");
    // Success threshold 3: Ready only after three passes in a row.
    let server = Server::start(OK);
    let doc = spec(
        "slowready",
        1,
        json!({"probe": {"readiness": http_probe(server.port, json!({"delay": 2, "threshold": {"success": 3}}))}}),
        json!({}),
    );
    d.apply_json(&doc).await;
    let iid = id("test", "slowready", 0);
    d.wait_state(&iid, Kind::Running, 20).await;
    let running_at = Instant::now();
    d.wait(&iid, 15, |s| s.ready).await;
    assert!(server.requests() >= 3, "Ready after {} passes, of 3", server.requests());
    let first = server.first_request().unwrap();
    assert!(first >= running_at + Duration::from_millis(1500), "the first probe waited out the delay (2 s)");

    // Timeout 1 s against an answer that takes 3 s: a failure (here liveness, one failure kills).
    let slow = Server::start(SLOW);
    let live = http_probe(slow.port, json!({"period": 2, "timeout": 1, "threshold": {"failure": 1}}));
    let doc = spec("timeout", 1, json!({"probe": {"liveness": live}}), json!({"restartPolicy": {"policy": "Never"}}));
    d.apply_json(&doc).await;
    let tid = id("test", "timeout", 0);
    let s = d.wait_state(&tid, Kind::Failed, 20).await;
    let why = s.last_exit_reason.clone().unwrap_or_default();
    assert!(why.contains("no answer within 1s"), "{why}");
}

/// A port declared `HTTPS` (seed 003's port protocol) is probed over TLS without the probe
/// saying so: a real TLS server (python3, with a certificate `steward cert` made) in the
/// instance turns Ready, which a plain-HTTP probe of it never would.
#[tokio::test]
async fn a_port_declared_https_is_probed_over_tls() {
    let d = Daemon::start("ready-https");
    let certs = d.path().join("certs");
    let (code, _, err) = d.cli(&["cert", "--dir", certs.to_str().unwrap(), "--name", "web", "--ip", "127.0.0.1"]);
    assert_eq!(code, 0, "{err}");
    let server = format!(
        "import http.server, ssl, os\n\
         s = http.server.HTTPServer(('127.0.0.1', int(os.environ['PORT_web'])), http.server.SimpleHTTPRequestHandler)\n\
         c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
         c.load_cert_chain('{dir}/web.pem', '{dir}/web-key.pem')\n\
         s.socket = c.wrap_socket(s.socket, server_side=True)\n\
         s.serve_forever()\n",
        dir = certs.display()
    );
    std::fs::write(d.path().join("tls.py"), server).unwrap();
    let probe = json!({"handler": {"type": "HTTP", "method": {"portName": "web", "path": "/"}}, "period": 1});
    let process = json!({
        "ports": [{"name": "web", "hostPort": 0, "protocol": "HTTPS"}],
        "startCmd": format!("exec python3 {}", d.path().join("tls.py").display()),
        "probe": {"readiness": probe}
    });
    d.apply_json(&spec("tls", 1, process, json!({}))).await;
    let s = d.wait(&id("test", "tls", 0), 20, |s| s.ready).await;
    assert!(s.ready, "the HTTPS port's probe never passed: {s:?}\n{}", d.log());
    let port = s.ports["web"];
    let plain = std::process::Command::new("curl")
        .args(["-s", "-m", "2"])
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .unwrap();
    assert!(!plain.status.success() || plain.stdout.is_empty(), "the server speaks plain HTTP too");
}
