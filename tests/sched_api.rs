//! steward-sched as a service (issue 46): `steward-sched serve` answers its HTTP API over the
//! desired store, and every command given `--server` (here the cluster file's `server`) is its
//! client: deploy (create or update, and seed 002's create-only), status, scale, stop, start,
//! restart, endpoints, rollouts, nodes and their controls, seed 002's constraints with `equal`,
//! config, notifications, maintenance and seed 002's engine stop/start, dependencies, hook
//! templates, the merged event stream, drift, drain and delete; over the embedded store and over
//! etcd with two `serve` (either answers, one leads, the other takes over). A read token reads
//! and is refused every change.

mod cluster;
mod common;

use cluster::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Runs a command through `client` and asserts it worked: its JSON output.
fn ok(c: &Cluster, client: &Path, args: &[&str]) -> Value {
    let (code, out, err) = c.sched_with(client, args);
    assert_eq!(code, 0, "{args:?}: {out}\n{err}");
    if out.trim().is_empty() {
        Value::Null
    } else {
        json_of(&out)
    }
}

/// Waits until `status` through `client` shows `n` instances of `app` Running.
fn wait_running(c: &Cluster, client: &Path, app: &str, n: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = ok(c, client, &["status"]);
        let running = status
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["instance"].as_str().unwrap().starts_with(&format!("{app}/")) && p["state"] == "Running")
            .count();
        if running == n {
            return status;
        }
        assert!(Instant::now() < deadline, "{app}: {running} of {n} Running: {status:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn write_spec(c: &Cluster, name: &str, spec: &Value) -> String {
    let path = c.dir.path().join(format!("{name}.json"));
    std::fs::write(&path, spec.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

/// `curl` in the control namespace against the server: (HTTP status, body).
fn curl(c: &Cluster, port: u16, token: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut cmd = std::process::Command::new("nsenter");
    cmd.arg(format!("--net=/run/netns/{}", c.ctl))
        .args(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "--cacert"])
        .arg(c.dir.path().join("ca.pem"))
        .args(["-H", &format!("Authorization: Bearer {token}"), "-X", method])
        .arg(format!("https://127.0.0.1:{port}{path}"));
    if let Some(b) = body {
        cmd.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_works_through_the_api_over_the_embedded_store() {
    let c = Cluster::start("a", ["a", "b", "b"]);
    let (_serve, client) = c.serve(&c.file, 7480);

    // Deploy (create or update), then seed 002's create-only refuses it: NotAllowed.
    let web = write_spec(&c, "web", &app("web", 3, json!({})));
    let placed = ok(&c, &client, &["deploy", &web]);
    assert_eq!(placed.as_array().unwrap().len(), 3, "{placed:#}");
    wait_running(&c, &client, "test/web", 3);
    let (code, _, err) = c.sched_with(&client, &["deploy", "--create-only", &web]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("app test/web exists already"), "{err}");
    let (status, body) =
        curl(&c, 7480, TOKEN, "POST", "/v1/apps", Some(&json!({"spec": app("web", 3, json!({}))}).to_string()));
    assert_eq!(status, 409, "{body}");
    assert_eq!(json_of(&body)["error"]["code"], "not_allowed", "{body}");

    // One app with its spec and live state.
    let (status, body) = curl(&c, 7480, READ_TOKEN, "GET", "/v1/apps/test/web", None);
    assert_eq!(status, 200, "{body}");
    let detail = json_of(&body);
    assert_eq!(detail["app"]["spec"]["metadata"]["name"], "web", "{detail:#}");
    assert_eq!(detail["instances"].as_array().unwrap().len(), 3, "{detail:#}");
    let (status, body) = curl(&c, 7480, READ_TOKEN, "GET", "/v1/apps/test/nothing", None);
    assert_eq!((status, json_of(&body)["error"]["code"].clone()), (404, json!("not_found")), "{body}");

    // Scale, stop one, start it, restart one in place.
    let scaled = ok(&c, &client, &["scale", "test/web", "4"]);
    assert_eq!(scaled.as_array().unwrap().len(), 4, "{scaled:#}");
    wait_running(&c, &client, "test/web", 4);
    ok(&c, &client, &["stop", "test/web", "0"]);
    wait_running(&c, &client, "test/web", 3);
    ok(&c, &client, &["start", "test/web", "0"]);
    wait_running(&c, &client, "test/web", 4);
    ok(&c, &client, &["restart", "test/web", "--instance", "1"]);
    wait_running(&c, &client, "test/web", 4);
    let rollout = ok(&c, &client, &["rollout", "status", "test/web"]);
    assert_eq!(rollout["app"], "test/web", "{rollout:#}");
    ok(&c, &client, &["endpoints", "test/web"]);

    // Nodes, a cordon, seed 002's constraints: `node==h1` (equal) puts a new app on h1 only.
    let nodes = ok(&c, &client, &["nodes"]);
    assert_eq!(nodes.as_array().unwrap().len(), 3, "{nodes:#}");
    let engine = ok(&c, &client, &["node", "cordon", "h3", "--reason", "disk"]);
    assert_eq!(engine["cordons"]["h3"]["preferred"], false, "{engine:#}");
    ok(&c, &client, &["node", "uncordon", "h3"]);
    let set = ok(&c, &client, &["constraint", "set", "--value", "h1", "--equal", "true"]);
    assert_eq!(set[0]["equal"], true, "{set:#}");
    let pinned = write_spec(&c, "pinned", &app("pinned", 2, json!({})));
    let placed = ok(&c, &client, &["deploy", &pinned]);
    assert!(placed.as_array().unwrap().iter().all(|p| p["node"] == "h1"), "{placed:#}");
    let (status, body) = curl(&c, 7480, TOKEN, "DELETE", "/v1/constraints?type=node&value=h1", None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = curl(&c, 7480, TOKEN, "DELETE", "/v1/constraints?type=node", None);
    assert_eq!(status, 404, "{body}");
    // Seed 002's spelling: node != h2, soft (it must hold).
    let (status, body) =
        curl(&c, 7480, TOKEN, "PATCH", "/v1/constraints?type=node&value=h2&equal=false&soft=true", None);
    assert_eq!(status, 200, "{body}");
    let listed = ok(&c, &client, &["node", "ls"]);
    let h2 = listed.as_array().unwrap().iter().find(|n| n["name"] == "h2").unwrap();
    assert_eq!(h2["cordon"]["reason"], "constraint node!=h2", "{listed:#}");
    ok(&c, &client, &["constraint", "rm"]);

    // Settings, notifications, maintenance and seed 002's engine stop/start.
    let config = ok(&c, &client, &["config", "set", "reconcileSecs", "20"]);
    assert!(config.as_array().unwrap().iter().any(|e| e["key"] == "reconcileSecs" && e["value"] == 20), "{config:#}");
    ok(&c, &client, &["config", "set", "reconcileSecs", "default"]);
    ok(&c, &client, &["notify", "add", "http://127.0.0.1:9/hook"]);
    assert_eq!(ok(&c, &client, &["notify", "ls"]), json!(["http://127.0.0.1:9/hook"]));
    ok(&c, &client, &["notify", "rm", "http://127.0.0.1:9/hook"]);
    let (status, body) = curl(&c, 7480, TOKEN, "PATCH", "/v1/status", Some(r#"{"status": "stop"}"#));
    assert_eq!(status, 200, "{body}");
    let (code, _, err) = c.sched_with(&client, &["scale", "test/web", "5"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("maintenance mode is on"), "{err}");
    let (_, body) = curl(&c, 7480, READ_TOKEN, "GET", "/v1/status", None);
    assert_eq!(json_of(&body)["status"], "stop", "{body}");
    ok(&c, &client, &["maintenance", "off"]);

    // A read token reads, and is refused every change.
    let reader = c.dir.path().join("reader.toml");
    let text = std::fs::read_to_string(&client).unwrap();
    std::fs::write(&reader, format!("server_token_file = \"read.token\"\n{text}")).unwrap();
    assert_eq!(ok(&c, &reader, &["status"]).as_array().unwrap().len(), 6);
    for args in [vec!["scale", "test/web", "1"], vec!["delete", "test/web"], vec!["deploy", &web]] {
        let (code, _, err) = c.sched_with(&reader, &args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains("this token may only read"), "{args:?}: {err}");
    }
    let (status, _) = curl(&c, 7480, "not-a-token-0123456789", "GET", "/v1/apps", None);
    assert_eq!(status, 401);
    assert_eq!(ok(&c, &client, &["status"]).as_array().unwrap().len(), 6, "nothing changed");

    // The merged event stream, resumable from the start of every node's journal.
    let mut watch = Follower::spawn(c.sched_cmd_with(&client, &["watch", "--since", "0"]));
    watch.wait_for(20, "a transition of test/web", |v| {
        v["body"]["instance"].as_str().is_some_and(|i| i.starts_with("test/web/"))
    });
    drop(watch);

    // Drift one instance, drain a node, delete both apps.
    let on_h2: Vec<Value> = ok(&c, &client, &["status"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["node"] == "h2" && p["instance"].as_str().unwrap().starts_with("test/web/"))
        .cloned()
        .collect();
    if let Some(one) = on_h2.first() {
        let index = one["instance"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
        let moved =
            ok(&c, &client, &["drift", "--from", "h2", "--to", "h3", "--app", "test/web", "--instance", &index]);
        assert_eq!(moved[0]["to"], "h3", "{moved:#}");
    }
    let drained = ok(&c, &client, &["node", "drain", "h3"]);
    assert!(drained.as_array().unwrap().iter().all(|d| d["to"].is_string()), "{drained:#}");
    ok(&c, &client, &["node", "uncordon", "h3"]);
    assert_eq!(ok(&c, &client, &["delete", "test/web"])["removed"], 4);
    ok(&c, &client, &["delete", "test/pinned"]);
    assert_eq!(ok(&c, &client, &["status"]), json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_and_hook_templates_through_the_api() {
    let c = Cluster::start("b", ["a", "b", "b"]);
    let (_serve, client) = c.serve(&c.file, 7480);
    let mut cache = app("cache", 1, json!({}));
    cache["metadata"]["namespace"] = json!("infra");
    let cache = write_spec(&c, "cache", &cache);
    let stored = ok(&c, &client, &["depend", "apply", &cache, "--grace", "30s"]);
    assert_eq!(stored["dependency"], "infra/cache", "{stored:#}");
    assert_eq!(ok(&c, &client, &["depend", "ls"])[0]["graceSecs"], 30);
    let (status, body) = curl(
        &c,
        7480,
        TOKEN,
        "POST",
        "/v1/dependencies",
        Some(
            &json!({"spec": serde_json::from_str::<Value>(&std::fs::read_to_string(&cache).unwrap()).unwrap()})
                .to_string(),
        ),
    );
    assert_eq!((status, json_of(&body)["error"]["code"].clone()), (409, json!("not_allowed")), "{body}");
    let (code, out, err) = c.sched_with(&client, &["depend", "rm", "infra/cache"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ok(&c, &client, &["depend", "ls"]), json!([]));

    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("units/hooks/gamesvc-check.toml");
    let stored = ok(&c, &client, &["hook", "template", "apply", template.to_str().unwrap()]);
    assert_eq!(stored["nodes"].as_array().unwrap().len(), 3, "{stored:#}");
    assert_eq!(ok(&c, &client, &["hook", "template", "ls"])[0]["name"], "gamesvc-check");
    let (code, out, err) = c.sched_with(&client, &["hook", "template", "rm", "demo/gamesvc-check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(ok(&c, &client, &["hook", "template", "ls"]), json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serves_on_etcd_either_answers_and_one_takes_over() {
    let c = Cluster::start("c", ["a", "b", "b"]);
    let (_etcd, shared) = c.with_etcd();
    let (first, client1) = c.serve(&shared, 7480);
    let (second, client2) = c.serve(&shared, 7481);

    // Either answers: a deploy through each, and both see both apps.
    let one = write_spec(&c, "one", &app("one", 2, json!({})));
    let two = write_spec(&c, "two", &app("two", 2, json!({})));
    ok(&c, &client1, &["deploy", &one]);
    ok(&c, &client2, &["deploy", &two]);
    wait_running(&c, &client1, "test/two", 2);
    wait_running(&c, &client2, "test/one", 2);
    let leader = ok(&c, &client2, &["engine"])["leader"].as_str().unwrap().to_string();
    // Written once: the server that answered placed and stored each app, and the leader only
    // marked what it applied (it placed and stored the one the other server took once more,
    // journaled as a reschedule).
    for app in ["test/one", "test/two"] {
        assert_eq!(journal_of(&c, app), ["deployed", "applied"], "{app}");
    }

    // The leader killed -9: the other leads, and goes on answering and applying.
    let (mut survivor, survivor_client, mut killed) = if leader.ends_with(&format!("-{}", first.child.id())) {
        (second, client2, first)
    } else {
        (first, client1, second)
    };
    let _ = killed.child.kill();
    let _ = killed.child.wait();
    survivor.wait_for(30, "the survivor leading", |v| body_type(v) == "leading");
    let three = write_spec(&c, "three", &app("three", 2, json!({})));
    ok(&c, &survivor_client, &["deploy", &three]);
    let status = wait_running(&c, &survivor_client, "test/three", 2);
    assert_eq!(status.as_array().unwrap().len(), 6, "nothing lost or doubled: {status:#}");
}

/// GET /v1/instances answered by every node so far (their `steward_api_requests_total`).
async fn instance_lists(c: &Cluster) -> u64 {
    let mut total = 0;
    for h in &c.hosts {
        let metrics = h.daemon.client.metrics().await.unwrap();
        let line = metrics
            .lines()
            .find(|l| l.starts_with(r#"steward_api_requests_total{method="GET",route="/v1/instances"}"#));
        total += line.and_then(|l| l.rsplit(' ').next()).map_or(0, |n| n.parse::<u64>().unwrap());
    }
    total
}

/// The leading server keeps what each node runs from the nodes' event streams: `status` asks
/// a node again only once it changed. A change the server makes itself shows at once; one made
/// on the host behind its back shows once the host's event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_asks_a_node_again_only_once_it_changed() {
    let c = Cluster::start("e", ["a", "b", "b"]);
    let (_serve, client) = c.serve(&c.file, 7480);
    ok(&c, &client, &["deploy", &write_spec(&c, "web", &app("web", 3, json!({})))]);
    wait_running(&c, &client, "test/web", 3);
    ok(&c, &client, &["status"]);
    // Settled: the instances' last events (readiness) handled, nothing listing the nodes.
    let mut before = instance_lists(&c).await;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = instance_lists(&c).await;
        if now == before {
            break;
        }
        before = now;
    }
    for _ in 0..5 {
        ok(&c, &client, &["status"]);
    }
    let asked = instance_lists(&c).await - before;
    assert!(asked < 5, "5 status of an unchanged app asked the nodes {asked} times");

    // Stopped through the server: the next status shows it, not what was kept.
    ok(&c, &client, &["stop", "test/web", "0"]);
    let status = ok(&c, &client, &["status"]);
    let zero = status.as_array().unwrap().iter().find(|p| p["instance"] == "test/web/0").unwrap();
    assert_eq!(zero["state"], "Stopped", "{status:#}");
    ok(&c, &client, &["start", "test/web", "0"]);
    wait_running(&c, &client, "test/web", 3);

    // Stopped on its host, behind the server's back: its event makes the listing stale.
    let placed = ok(&c, &client, &["status"]);
    let one = placed.as_array().unwrap().iter().find(|p| p["instance"] == "test/web/1").unwrap();
    let host = c.host(one["node"].as_str().unwrap());
    let id = steward::spec::InstanceId { namespace: "test".into(), name: "web".into(), index: 1 };
    host.daemon.client.action(&id, "stop", None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = ok(&c, &client, &["status"]);
        let one = status.as_array().unwrap().iter().find(|p| p["instance"] == "test/web/1").unwrap().clone();
        if one["state"] == "Stopped" {
            break;
        }
        assert!(Instant::now() < deadline, "the host's stop not shown within 5 s (kept 10 s): {one:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The types of the desired store's journal entries about `app`, oldest first, read from the
/// etcd of [`Cluster::with_etcd`] through its JSON gateway.
fn journal_of(c: &Cluster, app: &str) -> Vec<String> {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let range = json!({"key": b64(b"\0"), "range_end": b64(b"\0")}).to_string();
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", c.ctl))
        .args(["curl", "-sS", "-X", "POST", "http://127.0.0.1:2379/v3/kv/range", "--data-binary", &range])
        .output()
        .unwrap();
    let answer = json_of(&String::from_utf8_lossy(&out.stdout));
    let decode = |v: &Value| base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap();
    answer["kvs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|kv| String::from_utf8_lossy(&decode(&kv["key"])).contains("/journal/"))
        .map(|kv| serde_json::from_slice::<Value>(&decode(&kv["value"])).unwrap())
        .filter(|entry| entry["app"] == app)
        .map(|entry| entry["type"].as_str().unwrap().to_string())
        .collect()
}

/// Everything steward-sched's API can create — an app, a dependency, a hook template, a
/// constraint, a cordon, a notification URL, a setting, maintenance — is the same in every
/// listing after the server's kill -9 and after a SIGTERM, each time started again on its store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_api_made_survives_the_servers_kill_9_and_sigterm() {
    let c = Cluster::start("d", ["a", "b", "b"]);
    let (serve, client) = c.serve(&c.file, 7480);
    ok(&c, &client, &["deploy", &write_spec(&c, "web", &app("web", 2, json!({})))]);
    let mut cache = app("cache", 1, json!({}));
    cache["metadata"]["namespace"] = json!("infra");
    ok(&c, &client, &["depend", "apply", &write_spec(&c, "cache", &cache)]);
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("units/hooks/gamesvc-check.toml");
    ok(&c, &client, &["hook", "template", "apply", template.to_str().unwrap()]);
    ok(&c, &client, &["constraint", "set", "--value", "h3", "--soft", "false"]);
    ok(&c, &client, &["node", "cordon", "h2", "--reason", "disk"]);
    ok(&c, &client, &["notify", "add", "http://127.0.0.1:9/hook"]);
    ok(&c, &client, &["config", "set", "dependencyGraceSecs", "120"]);
    ok(&c, &client, &["maintenance", "on", "--reason", "moving racks"]);
    let listings: [&[&str]; 8] = [
        &["status"],
        &["depend", "ls"],
        &["hook", "template", "ls"],
        &["constraint", "ls"],
        &["node", "ls"],
        &["notify", "ls"],
        &["config", "get"],
        &["engine"],
    ];
    // What a listing says that may change with time or with who leads: the leader's name and
    // the nodes' records' times.
    let stable = |mut v: Value| {
        if let Some(o) = v.as_object_mut() {
            o.remove("leader");
        }
        if let Some(rows) = v.as_array_mut() {
            for r in rows.iter_mut().filter_map(Value::as_object_mut) {
                r.remove("record");
                r.remove("live");
            }
        }
        v
    };
    let take = |c: &Cluster| -> Vec<Value> { listings.iter().map(|args| stable(ok(c, &client, args))).collect() };
    let before = take(&c);
    let mut serve = serve;
    for how in ["kill -9", "SIGTERM"] {
        let pid = serve.child.id() as i32;
        let signal = if how == "kill -9" { nix::sys::signal::SIGKILL } else { nix::sys::signal::SIGTERM };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
        let status = serve.child.wait().unwrap();
        assert!(how == "kill -9" || status.success(), "{how}: {status:?}");
        serve = c.serve(&c.file, 7480).0;
        assert_eq!(take(&c), before, "after {how}");
    }
}
