//! Hooks against hostile endpoints (issue 51 findings 3, 4 and 11), on the real stewardd: a
//! body flooding the daemon is cut at `hook_max_response_bytes` with the daemon's memory flat,
//! and terminating a run ends a read in flight; redirects are refused unless the template
//! allows them, and then only to the same origin; an interval-only metric keeps its last
//! measurements, not all, and does not journal each one.

mod common;

use common::{Daemon, Rng};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use steward::hooks::{CreateHookRun, HookRun, MeasurementPhase};
use steward::spec::Format;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a test server answers to one request path.
enum Reply {
    /// The whole raw response.
    Text(String),
    /// `head`, then `chunk` again and again (every `every`) until `limit` bytes or the peer
    /// closes.
    Stream { head: String, chunk: Vec<u8>, every: Duration, limit: u64 },
}

/// A test server on 127.0.0.1 and what it saw.
#[derive(Clone)]
struct Server {
    port: u16,
    calls: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
    /// When a write of a stream first failed: the peer closed the connection.
    closed_at: Arc<Mutex<Option<Instant>>>,
}

async fn server(reply: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let s = Server {
        port: listener.local_addr().unwrap().port(),
        calls: Arc::default(),
        sent: Arc::default(),
        closed_at: Arc::default(),
    };
    let (reply, seen) = (Arc::new(reply), s.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else { return };
            let (reply, seen) = (reply.clone(), seen.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
                seen.calls.fetch_add(1, Ordering::SeqCst);
                match reply(&path) {
                    Reply::Text(t) => {
                        let _ = conn.write_all(t.as_bytes()).await;
                    }
                    Reply::Stream { head, chunk, every, limit } => {
                        let _ = conn.write_all(head.as_bytes()).await;
                        while seen.sent.load(Ordering::SeqCst) < limit {
                            if conn.write_all(&chunk).await.is_err() {
                                seen.closed_at.lock().unwrap().get_or_insert_with(Instant::now);
                                return;
                            }
                            seen.sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                            if !every.is_zero() {
                                tokio::time::sleep(every).await;
                            }
                        }
                    }
                }
            });
        }
    });
    s
}

fn answer(status: &str, extra: &str, body: &str) -> Reply {
    Reply::Text(format!(
        "HTTP/1.1 {status}\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
}

/// Applies a template `name` of one metric and starts a run `name` of it.
async fn start_run(d: &Daemon, name: &str, metric: Value) {
    let doc = json!({
        "kind": "HookTemplate", "metadata": {"name": name, "namespace": "test"},
        "spec": {"metrics": [metric]}
    });
    d.client
        .put_hook_template("test", name, &doc.to_string(), Format::Json)
        .await
        .unwrap_or_else(|e| panic!("template {name}: {e}"));
    let req = CreateHookRun {
        template: name.into(),
        namespace: "test".into(),
        name: Some(name.into()),
        args: Default::default(),
        labels: Default::default(),
    };
    d.client.create_hook_run(&req).await.unwrap();
}

/// A one-measurement metric's run, once finished.
async fn measure_once(d: &Daemon, name: &str, metric: Value) -> HookRun {
    start_run(d, name, metric).await;
    let run = d.client.hook_run("test", name, Some(Duration::from_secs(60))).await.unwrap();
    assert!(run.is_done(), "{run:#?}\n{}", d.log());
    run
}

fn vm_rss_kb(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap_or("VmRSS: 0 kB");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// The daemon's highest resident size (kB) while `until` is not done.
async fn peak_rss_during<T>(pid: i32, until: impl std::future::Future<Output = T>) -> (T, u64) {
    let peak = Arc::new(AtomicU64::new(vm_rss_kb(pid)));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(vm_rss_kb(pid), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let out = until.await;
    sampler.abort();
    (out, peak.load(Ordering::SeqCst))
}

const FLOOD: u64 = 200 << 20;
const RSS_LIMIT_KB: u64 = 150 << 10;

/// 200 MB with no length, then 200 MB announced: each measurement is an Error naming the cap
/// (the default 1 MiB), the read ends early and the daemon's memory stays under 150 MB.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_is_cut_at_the_cap_and_the_daemon_stays_small() {
    let d = Daemon::start("hookbounds-flood");
    let flood = server(|path| {
        let length = if path == "/announced" { format!("content-length: {FLOOD}\r\n") } else { String::new() };
        Reply::Stream {
            head: format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n{length}connection: close\r\n\r\n"),
            chunk: vec![b'a'; 64 << 10],
            every: Duration::ZERO,
            limit: FLOOD,
        }
    })
    .await;
    for path in ["/endless", "/announced"] {
        let name = path.trim_start_matches('/');
        let metric = json!({"name": "m", "provider": {"web": {
            "url": format!("http://127.0.0.1:{}{path}", flood.port), "timeoutSeconds": 60}}});
        let (run, peak) = peak_rss_during(d.pid(), measure_once(&d, name, metric)).await;
        let m = &run.status.metric_results[0].measurements[0];
        eprintln!(
            "{path}: peak RSS {} MB, served {} MB: {}",
            peak >> 10,
            flood.sent.load(Ordering::SeqCst) >> 20,
            m.message
        );
        assert!(peak < RSS_LIMIT_KB, "{path}: the daemon grew to {} MB reading the flood", peak >> 10);
        assert_eq!(m.phase, MeasurementPhase::Error, "{m:#?}");
        assert!(m.message.contains("the answer is larger than 1048576 bytes"), "{}", m.message);
        assert!(m.value.is_none());
        flood.sent.store(0, Ordering::SeqCst);
    }
}

/// A body trickling in for ever (and a timeout of 300 s): terminating the run closes the
/// connection at once, it does not wait for the read.
#[tokio::test(flavor = "multi_thread")]
async fn terminating_a_run_ends_its_read() {
    let d = Daemon::start("hookbounds-terminate");
    let slow = server(|_| Reply::Stream {
        head: "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n".into(),
        chunk: b"a".to_vec(),
        every: Duration::from_millis(50),
        limit: u64::MAX,
    })
    .await;
    let metric = json!({"name": "m", "interval": "1s", "provider": {"web": {
        "url": format!("http://127.0.0.1:{}/", slow.port), "timeoutSeconds": 300}}});
    start_run(&d, "slow", metric).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while slow.sent.load(Ordering::SeqCst) < 10 {
        assert!(Instant::now() < deadline, "the run never called:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let terminated = Instant::now();
    let run = d.client.terminate_hook_run("test", "slow").await.unwrap();
    assert!(run.is_done() && run.spec.terminate, "{run:#?}");
    let deadline = terminated + Duration::from_secs(3);
    let closed = loop {
        if let Some(at) = *slow.closed_at.lock().unwrap() {
            break Some(at);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let closed = closed.unwrap_or_else(|| panic!("the read went on 3 s after terminate\n{}", d.log()));
    eprintln!("connection closed {:?} after terminate", closed.saturating_duration_since(terminated));
    assert_eq!(slow.calls.load(Ordering::SeqCst), 1);
}

/// A 302 is refused unless followRedirects is set (the server it points at is never called);
/// with it, a same-origin redirect is followed and a cross-origin one still refused.
#[tokio::test(flavor = "multi_thread")]
async fn redirects_are_refused_unless_allowed_and_then_same_origin_only() {
    let d = Daemon::start("hookbounds-redirect");
    let inside = server(|_| answer("200 OK", "", "\"secret\"")).await;
    let to = format!("http://127.0.0.1:{}/internal", inside.port);
    let location = format!("location: {to}\r\n");
    let probed = server(move |path| match path {
        "/final" => answer("200 OK", "", "7"),
        "/same" => answer("302 Found", "location: /final\r\n", ""),
        _ => answer("302 Found", &location, ""),
    })
    .await;
    let metric = |path: &str, follow: Option<bool>| {
        let mut web = json!({"url": format!("http://127.0.0.1:{}{path}", probed.port)});
        if let Some(f) = follow {
            web["followRedirects"] = json!(f);
        }
        json!({"name": "m", "provider": {"web": web}})
    };

    let run = measure_once(&d, "refused", metric("/cross", None)).await;
    let m = &run.status.metric_results[0].measurements[0];
    assert_eq!(m.phase, MeasurementPhase::Error, "{m:#?}");
    assert!(
        m.message.contains(&format!("redirected to {to}")) && m.message.contains("followRedirects"),
        "{}",
        m.message
    );
    let run = measure_once(&d, "same-unset", metric("/same", None)).await;
    assert_eq!(run.status.metric_results[0].measurements[0].phase, MeasurementPhase::Error);

    let run = measure_once(&d, "same", metric("/same", Some(true))).await;
    let m = &run.status.metric_results[0].measurements[0];
    assert_eq!((m.phase, m.value.as_deref()), (MeasurementPhase::Successful, Some("7")), "{m:#?}");

    let run = measure_once(&d, "cross", metric("/cross", Some(true))).await;
    let m = &run.status.metric_results[0].measurements[0];
    assert_eq!(m.phase, MeasurementPhase::Error, "{m:#?}");
    assert!(m.message.contains("not the same origin"), "{}", m.message);
    assert_eq!(inside.calls.load(Ordering::SeqCst), 0, "the internal server was reached");
}

/// An interval-only metric measured 150 times keeps the last 100 (and says how many it
/// dropped), and the journal gets an event when a measurement's phase changes, not for each.
#[tokio::test(flavor = "multi_thread")]
async fn an_interval_only_metric_keeps_its_last_measurements_and_journals_changes() {
    let d = Daemon::start("hookbounds-keep");
    let up = server(|_| answer("200 OK", "", "1")).await;
    let metric = json!({"name": "m", "interval": "10ms", "successCondition": "asInt(result) == 1",
        "provider": {"web": {"url": format!("http://127.0.0.1:{}/", up.port)}}});
    start_run(&d, "often", metric).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.client.hook_run("test", "often", None).await.unwrap().status.metric_results[0].count < 150 {
        assert!(Instant::now() < deadline, "{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = d.client.terminate_hook_run("test", "often").await.unwrap();
    let m = &run.status.metric_results[0];
    let kept = m.measurements.len() as u64;
    eprintln!("{} measurements, {kept} kept", m.count);
    assert!(kept <= 100, "{kept} measurements kept of {}", m.count);
    let shown = serde_json::to_value(&run).unwrap();
    let dropped = shown["status"]["metricResults"][0]["measurementsDropped"].as_u64();
    assert_eq!(dropped, Some(u64::from(m.count) - kept), "{:#}", shown["status"]["metricResults"][0]["count"]);
    let listed = d.client.hook_runs(Some("test"), None).await.unwrap();
    let listed = serde_json::to_value(&listed).unwrap();
    assert_eq!(listed[0]["measurementsDropped"].as_u64(), dropped, "{listed:#}");

    let mut measured = 0;
    d.client
        .events(0, false, |e| {
            let body = serde_json::to_value(&e.body).unwrap();
            measured += usize::from(body["type"] == "hookRunMeasured" && body["name"] == "often");
            true
        })
        .await
        .unwrap();
    assert!(measured <= 3, "{measured} hookRunMeasured events for {} measurements of one phase", m.count);
}

/// The fuzz target of the hook response path (`steward::fuzz::hook_response`, also run by
/// libFuzzer from `fuzz/`), on stable: 4000 inputs mutated from bodies and paths that matter
/// (nested arrays under `$..*`, numbers at their extremes, invalid UTF-8, control bytes);
/// `hook_response` asserts the outcome's size is bounded, and a panic fails the test.
#[test]
fn the_hook_response_fuzz_target_over_mutated_inputs() {
    let deep = format!("{}1{}", "[".repeat(120), "]".repeat(120));
    let wide = format!("[{}0]", "[1,2,3],".repeat(2000));
    let bodies: Vec<Vec<u8>> = [
        r#"{"name":"bryan","age":32,"tags":["a","b"],"n":{"x":[1e308,-0,0.5]}}"#,
        r#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"NaN"]}]}}"#,
        "plain text\u{1}\u{7f}",
        "1e5",
        "",
        &deep,
        &wide,
    ]
    .iter()
    .map(|b| b.as_bytes().to_vec())
    .chain([vec![0xff, 0xfe, b'"', 0x01, 0x80]])
    .collect();
    let paths = ["", "{$.age}", "$..*", "$.n.x[*]", "$[*][*]", "$..[0]", "{$", "$.tags[-1:]", "$[?@.a]"];
    let mut rng = Rng(0x51);
    let (mut values, mut errors) = (0, 0);
    for i in 0..4000 {
        let mut body = bodies[rng.below(bodies.len())].clone();
        // A quarter as written; the rest with bytes flipped, cut, inserted or repeated.
        for _ in 0..if i % 4 == 0 { 0 } else { 1 + rng.below(4) } {
            let at = rng.below(body.len() + 1);
            match rng.below(4) {
                0 if at < body.len() => body[at] = rng.next() as u8,
                1 => body.truncate(at),
                2 => body.insert(at, b"[]{},:\"0\\"[rng.below(9)]),
                _ => {
                    let piece = body[at..].iter().take(64).copied().collect::<Vec<_>>();
                    for _ in 0..rng.below(50) {
                        body.extend_from_slice(&piece);
                    }
                }
            }
        }
        let mut data = paths[rng.below(paths.len())].as_bytes().to_vec();
        data.push(b'\n');
        data.extend_from_slice(&body);
        match steward::fuzz::hook_response(&data) {
            steward::hooks::metric::Outcome::Value(_) => values += 1,
            steward::hooks::metric::Outcome::Error(_) => errors += 1,
            steward::hooks::metric::Outcome::NoData => {}
        }
    }
    eprintln!("4000 inputs: {values} values, {errors} errors");
    assert!(values > 100 && errors > 100, "the inputs reach both sides: {values} values, {errors} errors");
}
