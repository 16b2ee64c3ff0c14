//! Seed 004 as written (issue 45 item 3), on the real stewardd through the real CLI, with
//! endpoints this test serves on 127.0.0.1: the seed's HookTemplate in YAML loads unchanged and
//! judges `{"age": 32}` Failed and `{"age": 20}` Successful; a rollout step naming only the
//! template gets the canary's facts (PodName, PodIP, ...) as args; a step whose template needs
//! an arg nothing gives is refused at `steward apply`; a run's status shows its times in
//! RFC 3339 as the seed's HookRun does.

mod common;

use common::http::{serve, serve_targets};
use common::Daemon;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use steward::hooks::MetricPhase;
use steward::protocol::RolloutPhase;
use steward::supervisor::state::Kind;

/// Seed 004's HookTemplate, its indentation (lost in the seed's text) put back.
const SEED_TEMPLATE: &str = r#"apiVersion: tkex.tencent.com/v1alpha1
kind: HookTemplate
metadata:
  name: test
spec:
  args:
  - name: service-name
    value: test-gamedeployment-svc.default.svc.cluster.local
  - name: PodName
  metrics:
  - name: webtest
    count: 2
    interval: 60s
    failureLimit: 0
    successCondition: "asInt(result) < 30"
    provider:
      web:
        url: http://1.1.1.1:9091
        jsonPath: "{$.age}"
"#;

/// The seed's template with only its url (the test's endpoint, not 1.1.1.1) and interval (a
/// second passing measurement in 300 ms, not a minute) changed.
fn seed_template_at(port: u16) -> String {
    let changed = SEED_TEMPLATE
        .replace("url: http://1.1.1.1:9091", &format!("url: http://127.0.0.1:{port}"))
        .replace("interval: 60s", "interval: 300ms");
    assert_eq!(changed.lines().zip(SEED_TEMPLATE.lines()).filter(|(a, b)| a != b).count(), 2);
    changed
}

fn write(d: &Daemon, file: &str, text: &str) -> String {
    let path = d.path().join(file);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn apply_template(d: &Daemon, file: &str, yaml: &str) {
    let path = write(d, file, yaml);
    let (code, out, err) = d.cli(&["hook", "template", "apply", &path]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Every field `written` has, `stored` has with the same value (it may add defaults).
fn assert_holds(stored: &Value, written: &Value, at: &str) {
    match (stored, written) {
        (Value::Object(s), Value::Object(w)) => {
            for (k, v) in w {
                assert_holds(s.get(k).unwrap_or(&Value::Null), v, &format!("{at}.{k}"));
            }
        }
        (Value::Array(s), Value::Array(w)) => {
            assert_eq!(s.len(), w.len(), "{at}");
            for (i, (s, w)) in s.iter().zip(w).enumerate() {
                assert_holds(s, w, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(stored, written, "{at}"),
    }
}

/// `steward hook run status NS/NAME -o json`, as the CLI prints it.
fn run_json(d: &Daemon, run: &str) -> Value {
    let (code, out, err) = d.cli(&["hook", "run", "status", run, "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_seeds_template_loads_unchanged_and_fails_on_32_and_passes_on_20() {
    let d = Daemon::start("hookseed-seed");
    // As written, 1.1.1.1 and all: storing it calls nothing.
    apply_template(&d, "seed.yaml", SEED_TEMPLATE);
    let (code, out, err) = d.cli(&["hook", "template", "show", "defaultGroup/test"]);
    assert_eq!(code, 0, "{out}{err}");
    let stored: Value = serde_json::from_str(&out).unwrap();
    let written = steward::spec::parse_document(SEED_TEMPLATE, steward::spec::Format::Yaml).unwrap();
    assert_holds(&stored, &written, "");
    assert_eq!(stored["apiVersion"], "tkex.tencent.com/v1alpha1");
    let metric = &stored["spec"]["metrics"][0];
    assert_eq!(metric["provider"]["web"]["jsonPath"], "{$.age}");
    assert_eq!(
        (metric["successCondition"].as_str(), metric["interval"].as_str()),
        (Some("asInt(result) < 30"), Some("60s"))
    );

    let age = Arc::new(AtomicU64::new(32));
    let answer = age.clone();
    let port =
        serve(move || format!(r#"{{"name":"bryan","male":"yes","age":{}}}"#, answer.load(Ordering::SeqCst))).await;
    apply_template(&d, "seed-here.yaml", &seed_template_at(port));
    // PodName is declared without a value: whoever makes the run gives it.
    let (code, out, err) =
        d.cli(&["hook", "run", "create", "defaultGroup/test", "--name", "old", "--arg", "PodName=p-0", "-w"]);
    assert_eq!(code, 6, "a Failed run exits 6:\n{out}{err}");
    let run = d.client.hook_run("defaultGroup", "old", None).await.unwrap();
    assert_eq!(run.api_version, "tkex.tencent.com/v1alpha1", "the run is the template's kind of document");
    let m = &run.status.metric_results[0];
    assert_eq!((run.status.phase, m.count, m.failed), (MetricPhase::Failed, 1, 1), "failureLimit 0: 32 decides");
    assert_eq!(m.measurements[0].value.as_deref(), Some("32"));

    age.store(20, Ordering::SeqCst);
    let (code, out, err) =
        d.cli(&["hook", "run", "create", "defaultGroup/test", "--name", "new", "--arg", "PodName=p-0", "-w"]);
    assert_eq!(code, 0, "a Successful run exits 0:\n{out}{err}");
    let run = d.client.hook_run("defaultGroup", "new", None).await.unwrap();
    let m = &run.status.metric_results[0];
    assert_eq!((run.status.phase, m.count, m.successful), (MetricPhase::Successful, 2, 2));
    assert!(m.measurements.iter().all(|x| x.value.as_deref() == Some("20")), "{m:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_shows_its_times_in_rfc_3339_as_the_seed_does() {
    let d = Daemon::start("hookseed-times");
    let port = serve(|| r#"{"age": 32}"#.to_string()).await;
    apply_template(&d, "seed.yaml", &seed_template_at(port));
    let (code, out, err) =
        d.cli(&["hook", "run", "create", "defaultGroup/test", "--name", "r", "--arg", "PodName=p-0", "-w"]);
    assert_eq!(code, 6, "{out}{err}");
    let run = run_json(&d, "defaultGroup/r");
    let status = &run["status"];
    let measurement = &status["metricResults"][0]["measurements"][0];
    for (shown, at) in [
        (&status["startedAt"], &status["startedAtMs"]),
        (&status["finishedAt"], &status["finishedAtMs"]),
        (&measurement["startedAt"], &measurement["startedAtMs"]),
        (&measurement["finishedAt"], &measurement["finishedAtMs"]),
    ] {
        let shown = shown.as_str().unwrap_or_else(|| panic!("no RFC 3339 time beside {at} in {run:#}"));
        // `2020-11-09T10:08:49Z`: UTC, to the second.
        let parsed = chrono::DateTime::parse_from_rfc3339(shown).unwrap();
        assert!(shown.ends_with('Z') && shown.len() == 20, "{shown}");
        assert_eq!(parsed.timestamp(), at.as_i64().unwrap() / 1000, "{shown} is {at} ms");
    }
    assert_eq!(measurement["value"], "32");
}

/// The canary's facts the template asks for; the endpoint records what it was called with.
const FACTS_TEMPLATE: &str = r#"apiVersion: tkex.tencent.com/v1alpha1
kind: HookTemplate
metadata:
  name: pod-check
  namespace: test
spec:
  args:
  - name: PodName
  - name: PodIP
  - name: PodNamespace
  - name: PodIndex
  - name: AppName
  - name: HostIP
  - name: Revision
  - name: PORT_http
  - name: path
    value: check
  metrics:
  - name: webtest
    successCondition: "asInt(result) < 30"
    provider:
      web:
        url: "http://{{ args.PodIP }}:ENDPOINT/{{ args.path }}?pod={{ args.PodName }}&ip={{ args.PodIP }}&port={{ args.PORT_http }}&rev={{ args.Revision }}"
        jsonPath: "{$.age}"
"#;

fn app(version: &str, strategy: Value) -> Value {
    common::spec(
        "facts",
        2,
        json!({"env": [{"name": "VERSION", "value": version}], "startCmd": "exec sleep 1000",
               "ports": [{"name": "http", "hostPort": 0}]}),
        json!({"strategy": strategy, "restartPolicy": {"policy": "Always", "interval": 0}}),
    )
}

async fn wait_complete(d: &Daemon, target: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = d.client.rollout("test", "facts").await.unwrap();
        if r.as_ref().is_some_and(|r| r.target == target && r.phase == RolloutPhase::Complete) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "rollout: {r:?}\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_naming_only_the_template_gets_the_canarys_facts() {
    let d = Daemon::start("hookseed-facts");
    let called = Arc::new(Mutex::new(Vec::new()));
    let port = {
        let called = called.clone();
        serve_targets(move |target| {
            called.lock().unwrap().push(target.to_string());
            r#"{"age": 20}"#.to_string()
        })
        .await
    };
    apply_template(&d, "facts.yaml", &FACTS_TEMPLATE.replace("ENDPOINT", &port.to_string()));
    let strategy = json!({"steps": [{"partition": 1}, {"hook": {"template": "pod-check"}}]});
    d.apply_json(&app("v1", strategy.clone())).await;
    // Both running first: an update replaces an old instance that is not yet serving before one
    // that is, so updating while instance 0 serves and 1 still starts would make 1 the canary.
    for index in 0..2 {
        d.wait_state(&common::id("test", "facts", index), Kind::Running, 30).await;
    }
    d.apply_json(&app("v2", strategy)).await;
    wait_complete(&d, 2).await;

    let runs = d.client.hook_runs(Some("test"), Some("steward/app=test/facts")).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let run = d.client.hook_run("test", &runs[0].name, None).await.unwrap();
    assert_eq!(run.status.phase, MetricPhase::Successful);
    // The canary: the lowest-numbered instance on revision 2.
    let canary = d.client.status(&common::id("test", "facts", 0)).await.unwrap();
    let http = canary.ports["http"].to_string();
    let args: BTreeMap<&str, &str> =
        run.spec.args.iter().map(|a| (a.name.as_str(), a.value.as_deref().unwrap_or_default())).collect();
    let want = BTreeMap::from([
        ("PodName", "test.facts.0"),
        ("PodIP", "127.0.0.1"),
        ("PodNamespace", "test"),
        ("PodIndex", "0"),
        ("AppName", "facts"),
        ("HostIP", "127.0.0.1"),
        ("Revision", "2"),
        ("PORT_http", http.as_str()),
        ("path", "check"),
    ]);
    assert_eq!(args, want, "the controller's facts, and the template's own value");
    assert_eq!(*called.lock().unwrap(), [format!("/check?pod=test.facts.0&ip=127.0.0.1&port={http}&rev=2")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_whose_template_needs_an_arg_nothing_gives_is_refused_at_apply() {
    let d = Daemon::start("hookseed-refused");
    let template = r#"kind: HookTemplate
metadata:
  name: needs-token
  namespace: test
spec:
  args:
  - name: PodIP
  - name: token
  metrics:
  - name: m
    provider:
      web:
        url: "http://{{ args.PodIP }}:1/?token={{ args.token }}"
"#;
    apply_template(&d, "needs-token.yaml", template);
    let steps = |hook: Value| json!({"steps": [{"partition": 1}, {"pause": 1}, {"hook": hook}]});
    let file = write(&d, "app.json", &app("v1", steps(json!({"template": "needs-token"}))).to_string());
    let (code, out, err) = d.cli(&["apply", "--file", &file]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(
            "\n  strategy.steps[2].hook.args: template test/needs-token needs arg \"token\", which neither the \
             template, the step nor the controller gives"
        ),
        "one error a line, naming the step and the arg: {err}"
    );
    assert!(!err.contains("\"PodIP\""), "PodIP is the controller's: {err}");
    assert!(d.client.list(&[("name", "facts")]).await.unwrap().is_empty(), "nothing applied");

    // Given by the step, it is applied.
    let given = steps(json!({"template": "needs-token", "args": [{"name": "token", "value": "t"}]}));
    let file = write(&d, "app.json", &app("v1", given).to_string());
    let (code, out, err) = d.cli(&["apply", "--file", &file]);
    assert_eq!(code, 0, "{out}{err}");
}
