//! Durable HookRuns on the real stewardd (issue 19): templates and runs over the CLI and the
//! API, seed 004's example giving Failed then Successful, terminate, and a kill -9 of the
//! daemon in the middle of a run: it resumes on its interval and its measurements are gapless,
//! each taken once (the endpoint counts its calls; the values recorded never repeat).

mod common;

use common::http::serve;
use common::Daemon;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use steward::hooks::{CreateHookRun, MeasurementPhase, MetricPhase};

fn write_template(d: &Daemon, file: &str, doc: &Value) -> String {
    let path = d.path().join(file);
    std::fs::write(&path, doc.to_string()).unwrap();
    path.display().to_string()
}

fn seed_template(metric: Value) -> Value {
    json!({
        "apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookTemplate",
        "metadata": {"name": "seed", "namespace": "test"},
        "spec": {"args": [{"name": "port"}], "metrics": [metric]}
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_seeds_example_fails_on_32_and_passes_on_20_over_the_cli() {
    let d = Daemon::start("hookrun-seed");
    let age = Arc::new(AtomicU64::new(32));
    let served = age.clone();
    let port =
        serve(move || format!(r#"{{"name":"bryan","male":"yes","age":{}}}"#, served.load(Ordering::SeqCst))).await;
    let file = write_template(
        &d,
        "seed.json",
        &seed_template(json!({
            "name": "webtest", "count": 2, "interval": "200ms", "successCondition": "asInt(result) < 30",
            "provider": {"web": {"url": "http://127.0.0.1:{{ args.port }}/", "jsonPath": "{$.age}"}}
        })),
    );
    let (code, out, err) = d.cli(&["hook", "template", "apply", &file]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = d.cli(&["hook", "template", "ls"]);
    assert_eq!(code, 0);
    assert!(out.contains("test/seed") && out.contains("webtest"), "{out}");

    let arg = format!("port={port}");
    let (code, out, err) = d.cli(&["hook", "run", "create", "test/seed", "--name", "old", "--arg", &arg, "-w"]);
    assert_eq!(code, 6, "a Failed run exits 6:\n{out}{err}");
    assert!(out.contains("phase Failed") && out.contains("value 32"), "{out}");
    let run = d.client.hook_run("test", "old", None).await.unwrap();
    let m = &run.status.metric_results[0];
    assert_eq!((m.count, m.failed, m.phase), (1, 1, MetricPhase::Failed), "failureLimit 0: the first failure decides");
    assert_eq!(m.measurements[0].value.as_deref(), Some("32"));
    assert!(m.measurements[0].message.contains(&format!("GET http://127.0.0.1:{port}/")), "{:?}", m.measurements);

    age.store(20, Ordering::SeqCst);
    let (code, out, err) = d.cli(&["hook", "run", "create", "test/seed", "--name", "young", "--arg", &arg, "-w"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("phase Successful"), "{out}");
    let run = d.client.hook_run("test", "young", None).await.unwrap();
    assert_eq!(run.status.metric_results[0].successful, 2);

    // Bad input names what is wrong.
    let (code, _, err) = d.cli(&["hook", "run", "create", "test/seed", "--name", "noarg"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("args.port"), "{err}");
    let (code, _, err) = d.cli(&["hook", "run", "create", "test/none"]);
    assert_eq!(code, 4, "{err}");
    let (code, _, err) = d.cli(&["hook", "run", "create", "test/seed", "--name", "old", "--arg", &arg]);
    assert_ne!(code, 0, "a name in use is refused: {err}");
    let bad = write_template(&d, "bad.toml", &json!(null));
    std::fs::write(&bad, "kind = \"HookTemplate\"\n[metadata]\nname = \"b\"\n[[spec.metrics]]\nname = \"m\"\ncount = 3\n[spec.metrics.provider.web]\nurl = \"http://127.0.0.1:1/\"\n").unwrap();
    let (code, _, err) = d.cli(&["hook", "template", "apply", &bad]);
    assert_eq!(code, 1);
    assert!(err.contains("bad.toml") && err.contains("spec.metrics[0].interval"), "{err}");

    let (code, out, _) = d.cli(&["hook", "run", "ls", "-n", "test"]);
    assert_eq!(code, 0);
    assert!(out.contains("test/old") && out.contains("Failed") && out.contains("test/young"), "{out}");
    let (code, _, err) = d.cli(&["hook", "run", "rm", "test/old"]);
    assert_eq!(code, 0, "{err}");
    assert!(d.client.hook_run("test", "old", None).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn terminate_stops_a_run_that_would_go_on_forever() {
    let d = Daemon::start("hookrun-terminate");
    let port = serve(|| "1".to_string()).await;
    let doc = seed_template(json!({
        "name": "forever", "interval": "100ms", "successCondition": "asInt(result) == 1",
        "provider": {"web": {"url": "http://127.0.0.1:{{ args.port }}/"}}
    }));
    let file = write_template(&d, "forever.json", &doc);
    assert_eq!(d.cli(&["hook", "template", "apply", &file]).0, 0);
    let req = CreateHookRun {
        template: "seed".into(),
        namespace: "test".into(),
        name: Some("f".into()),
        args: [("port".to_string(), port.to_string())].into(),
        labels: Default::default(),
    };
    d.client.create_hook_run(&req).await.unwrap();
    wait_measurements(&d, "f", 3).await;
    let (code, out, err) = d.cli(&["hook", "run", "terminate", "test/f"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("phase Successful") && out.contains("terminated"), "{out}");
    let run = d.client.hook_run("test", "f", None).await.unwrap();
    let taken = run.status.metric_results[0].count;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = d.client.hook_run("test", "f", None).await.unwrap();
    assert_eq!(later.status.metric_results[0].count, taken, "no measurement after terminate");
    assert!(later.spec.terminate);
}

async fn wait_measurements(d: &Daemon, name: &str, n: u32) -> steward::hooks::HookRun {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let run = d.client.hook_run("test", name, None).await.unwrap();
        if run.status.metric_results.iter().map(|m| m.count).sum::<u32>() >= n {
            return run;
        }
        assert!(std::time::Instant::now() < deadline, "{run:#?}\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_survives_kill_9_with_gapless_measurements_each_taken_once() {
    let mut d = Daemon::start("hookrun-kill9");
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    // Each call answers the next number: a measurement recorded twice would repeat one.
    let port = serve(move || format!(r#"{{"n": {}}}"#, counter.fetch_add(1, Ordering::SeqCst) + 1)).await;
    let interval_ms = 700;
    let doc = seed_template(json!({
        "name": "count", "count": 6, "interval": format!("{interval_ms}ms"), "successCondition": "asInt(result) > 0",
        "provider": {"web": {"url": "http://127.0.0.1:{{ args.port }}/", "jsonPath": "{$.n}"}}
    }));
    let file = write_template(&d, "count.json", &doc);
    assert_eq!(d.cli(&["hook", "template", "apply", &file]).0, 0);
    let req = CreateHookRun {
        template: "seed".into(),
        namespace: "test".into(),
        name: Some("k".into()),
        args: [("port".to_string(), port.to_string())].into(),
        labels: Default::default(),
    };
    d.client.create_hook_run(&req).await.unwrap();
    let before = wait_measurements(&d, "k", 2).await;
    d.kill9();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    d.spawn();
    let run = d.client.hook_run("test", "k", Some(Duration::from_secs(30))).await.unwrap();
    assert_eq!(run.status.phase, MetricPhase::Successful, "{run:#?}\n{}", d.log());
    let m = &run.status.metric_results[0];
    assert_eq!((m.count, m.successful, m.measurements.len()), (6, 6, 6), "{m:#?}");
    assert_eq!(
        &m.measurements[..before.status.metric_results[0].measurements.len()],
        &before.status.metric_results[0].measurements[..],
        "what was committed before the kill is kept as it was"
    );
    let values: Vec<u64> = m.measurements.iter().map(|x| x.value.as_deref().unwrap().parse().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "a measurement recorded twice: {values:?}");
    let served = calls.load(Ordering::SeqCst);
    assert!((6..=7).contains(&served), "{served} calls for 6 measurements (one may have been in flight at the kill)");
    for w in m.measurements.windows(2) {
        assert!(w[1].started_at_ms >= w[0].finished_at_ms + interval_ms - 50, "the interval is kept: {w:#?}");
    }
    assert!(m.measurements.iter().all(|x| x.phase == MeasurementPhase::Successful));
    // The journal has each measurement once, and the verdict.
    let mut bodies = Vec::new();
    d.client
        .events(0, false, |e| {
            bodies.push(serde_json::to_value(&e.body).unwrap());
            true
        })
        .await
        .unwrap();
    let of = |kind: &str| bodies.iter().filter(|b| b["type"] == kind && b["name"] == "k").count();
    assert_eq!(of("hookRunMeasured"), 6, "{bodies:#?}");
    assert_eq!(of("hookRunFinished"), 1);
}
