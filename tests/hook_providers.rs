//! Hook metrics measured for real (issue 19): a web endpoint on 127.0.0.1 judged by seed 004's
//! own example, an endpoint that is down, and a real Prometheus server (Debian's `prometheus`,
//! started here on 127.0.0.1, scraping a target this test controls) whose value crosses the
//! threshold in the middle of a run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use steward::hooks::metric::{MeasurementPhase, MetricPhase, MetricResult};
use steward::hooks::runner::run_metric;

mod common;
use common::http::serve;
use steward::spec::Format;

fn template(metric: serde_json::Value) -> steward::hooks::HookTemplate {
    let doc = serde_json::json!({
        "kind": "HookTemplate", "metadata": {"name": "t", "namespace": "test"},
        "spec": {"args": [{"name": "host"}], "metrics": [metric]}
    });
    steward::hooks::parse_template(&doc.to_string(), Format::Json).unwrap_or_else(|e| panic!("{e}"))
}

async fn run(t: &steward::hooks::HookTemplate, host: &str) -> MetricResult {
    let http = steward::hooks::provider::Http::new(steward::hooks::provider::DEFAULT_MAX_RESPONSE_BYTES);
    let args = BTreeMap::from([("host".to_string(), host.to_string())]);
    let metric = &t.spec.metrics[0];
    let mut seen = 0;
    let result = run_metric(&http, metric, &args, MetricResult::new(&metric.name), |r| {
        seen += 1;
        assert_eq!(r.measurements.len(), seen, "every measurement is told, in order");
        async {}
    })
    .await;
    result
}

/// Seed 004's example: `{$.age}`, `asInt(result) < 30`, count 2 with an interval: 32 fails it
/// with the value recorded; 20 passes both measurements.
#[tokio::test]
async fn the_seeds_web_example_fails_on_32_and_passes_on_20() {
    let age = Arc::new(AtomicU64::new(32));
    let answer = age.clone();
    let port =
        serve(move || format!("{{\"name\":\"bryan\",\"male\":\"yes\",\"age\":{}}}", answer.load(Ordering::Relaxed)))
            .await;
    let t = template(serde_json::json!({
        "name": "webtest", "count": 2, "interval": "200ms", "failureLimit": 0,
        "successCondition": "asInt(result) < 30",
        "provider": {"web": {"url": "http://{{ args.host }}/age", "jsonPath": "{$.age}"}}
    }));
    let host = format!("127.0.0.1:{port}");
    let r = run(&t, &host).await;
    assert_eq!((r.phase, r.count, r.failed), (MetricPhase::Failed, 1, 1), "{r:#?}");
    let m = &r.measurements[0];
    assert_eq!((m.phase, m.value.as_deref()), (MeasurementPhase::Failed, Some("32")));
    assert!(m.message.starts_with(&format!("GET http://{host}/age: successCondition")), "{}", m.message);
    assert!(m.finished_at_ms >= m.started_at_ms && m.started_at_ms > 0);

    age.store(20, Ordering::Relaxed);
    let started = Instant::now();
    let r = run(&t, &host).await;
    assert_eq!((r.phase, r.count, r.successful), (MetricPhase::Successful, 2, 2), "{r:#?}");
    assert!(started.elapsed() >= Duration::from_millis(200), "the interval between the two");
    assert!(r.measurements.iter().all(|m| m.value.as_deref() == Some("20")));
}

/// failureLimit over real answers 2, 1, 2 (2 fails, 1 passes): limit 1 tolerates the first
/// failure and fails on the second; limit 2 tolerates both and ends Successful; -1 never fails.
#[tokio::test]
async fn failure_limit_counts_failed_measurements() {
    for (limit, phase, count) in
        [(1, MetricPhase::Failed, 3), (2, MetricPhase::Successful, 3), (-1, MetricPhase::Successful, 3)]
    {
        let calls = Arc::new(AtomicU64::new(0));
        let counter = calls.clone();
        let port = serve(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            format!("{{\"v\": {}}}", if n % 2 == 0 { 2 } else { 1 })
        })
        .await;
        let t = template(serde_json::json!({
            "name": "limited", "count": 3, "interval": "20ms", "failureLimit": limit,
            "successCondition": "asInt(result) == 1",
            "provider": {"web": {"url": "http://{{ args.host }}/", "jsonPath": "{$.v}"}}
        }));
        let r = run(&t, &format!("127.0.0.1:{port}")).await;
        assert_eq!((r.phase, r.count, r.failed, r.successful), (phase, count, 2, 1), "limit {limit}: {r:#?}");
    }
}

/// An endpoint that is down: Error measurements naming why, and the metric is Error once they
/// exceed consecutiveErrorLimit; a JSON path that matches nothing is "no data".
#[tokio::test]
async fn an_endpoint_down_errors_and_a_missing_field_is_no_data() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = template(serde_json::json!({
        "name": "down", "interval": "50ms", "consecutiveErrorLimit": 2, "successCondition": "true",
        "provider": {"web": {"url": "http://{{ args.host }}/", "timeoutSeconds": 2}}
    }));
    let r = run(&t, &format!("127.0.0.1:{closed}")).await;
    assert_eq!((r.phase, r.error, r.consecutive_error), (MetricPhase::Error, 3, 3), "{r:#?}");
    assert!(r.measurements[0].message.to_lowercase().contains("connection refused"), "{}", r.measurements[0].message);

    let port = serve(|| "{\"age\": 3}".to_string()).await;
    let t = template(serde_json::json!({
        "name": "missing", "successCondition": "asInt(result) < 30", "noData": "inconclusive",
        "provider": {"web": {"url": "http://{{ args.host }}/", "jsonPath": "$.height"}}
    }));
    let r = run(&t, &format!("127.0.0.1:{port}")).await;
    assert_eq!(r.phase, MetricPhase::Inconclusive, "{r:#?}");
    assert!(r.measurements[0].message.ends_with("no data"), "{}", r.measurements[0].message);
}

/// A real Prometheus scraping a gauge this test sets: the query's value crosses the failure
/// threshold in the middle of the run, and the metric fails there; an empty vector is no data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_value_crossing_the_threshold_mid_run_fails_the_metric() {
    let ratio = Arc::new(AtomicU64::new(0.1f64.to_bits()));
    let served = ratio.clone();
    let target = serve(move || {
        format!(
            "# TYPE players_error_ratio gauge\nplayers_error_ratio {}\n",
            f64::from_bits(served.load(Ordering::Relaxed))
        )
    })
    .await;
    let prom = Prometheus::start(target);
    let address = format!("http://127.0.0.1:{}", prom.port);
    prom.wait_for_data(&address, "players_error_ratio").await;

    let t = template(serde_json::json!({
        "name": "errors", "count": 30, "interval": "500ms",
        "successCondition": "result[0] < 0.5", "failureCondition": "result[0] >= 0.5",
        "provider": {"prometheus": {"address": "http://{{ args.host }}", "query": "players_error_ratio"}}
    }));
    let crossing = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        ratio.store(0.9f64.to_bits(), Ordering::Relaxed);
    });
    let r = run(&t, &format!("127.0.0.1:{}", prom.port)).await;
    crossing.await.unwrap();
    assert_eq!(r.phase, MetricPhase::Failed, "{r:#?}");
    let first = &r.measurements[0];
    assert_eq!((first.phase, first.value.as_deref()), (MeasurementPhase::Successful, Some("[0.1]")), "{r:#?}");
    let last = r.measurements.last().unwrap();
    assert_eq!((last.phase, last.value.as_deref()), (MeasurementPhase::Failed, Some("[0.9]")), "{r:#?}");
    assert!(last.message.starts_with("query players_error_ratio: failureCondition"), "{}", last.message);
    assert!(r.count < 30 && r.successful >= 2, "it failed mid-run, after passing: {r:#?}");

    let t = template(serde_json::json!({
        "name": "none", "successCondition": "result[0] < 0.5", "noData": "fail",
        "provider": {"prometheus": {"address": "http://{{ args.host }}", "query": "no_such_metric"}}
    }));
    let r = run(&t, &format!("127.0.0.1:{}", prom.port)).await;
    assert_eq!((r.phase, r.measurements[0].message.as_str()), (MetricPhase::Failed, "query no_such_metric: no data"));
}

/// Debian's prometheus on 127.0.0.1, its data in a temporary directory, scraping `target`
/// every second; killed when dropped.
struct Prometheus {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(target: u16) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: players\n    \
                 static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian package prometheus; scripts/install-deps.sh installs it)");
        Prometheus { child, port, _dir: dir }
    }

    /// Until a query for `metric` returns a sample (the first scrape happened).
    async fn wait_for_data(&self, address: &str, metric: &str) {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let url = format!("{address}/api/v1/query");
            if let Ok(r) = http.get(&url).query(&[("query", metric)]).send().await {
                let body = r.bytes().await.unwrap_or_default();
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
                    if v["data"]["result"].as_array().is_some_and(|a| !a.is_empty()) {
                        return;
                    }
                }
            }
            let log = std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "prometheus never had {metric}:\n{log}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
