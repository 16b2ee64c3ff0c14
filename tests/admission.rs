//! Requests and admission (issue 25): the node document says what the host offers and what
//! its apps request; an apply whose requests do not fit is refused with 409 naming the
//! resource, and nothing of it is made; what fits after another app shrank is admitted; a
//! limit with no request requests the limit. The figures survive a kill -9 of the daemon.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use steward::resources::{HostResources, Requests};
use steward::spec::Format;
use steward::supervisor::state::Kind;

/// A daemon whose allocatable is exactly 1 core and 1024 MiB (the rest reserved).
fn small_host(name: &str) -> Daemon {
    let host = HostResources::detect(Requests::default()).capacity;
    let reserved_cpu = host.milli_cpu - 1000;
    let reserved_mib = host.memory_bytes / 1048576 - 1024;
    assert!(host.memory_bytes % 1048576 == 0 || reserved_mib > 0);
    // Whole MiB reserved: what is left is 1024 MiB and the odd bytes of the host's total.
    Daemon::start_with(name, &format!("reserved_cpu = \"{reserved_cpu}m\"\nreserved_memory = \"{reserved_mib}\"\n"))
}

fn sized(name: &str, instances: u32, resources: serde_json::Value) -> serde_json::Value {
    spec(name, instances, json!({"resources": resources}), json!({}))
}

async fn refusal(d: &Daemon, s: &serde_json::Value) -> String {
    match d.client.apply(&s.to_string(), Format::Json).await {
        Ok(ids) => panic!("applied {ids:?}, expected a refusal\n{}", d.log()),
        Err(steward::client::ClientError::Api { status, code, message, .. }) => {
            assert_eq!((status, code.as_str()), (409, "conflict"), "{message}");
            message
        }
        Err(e) => panic!("{e}"),
    }
}

async fn allocated(d: &Daemon) -> (Requests, Requests) {
    let node = d.client.node().await.unwrap();
    (node.resources.allocatable, node.resources.allocated)
}

#[tokio::test]
async fn applies_are_admitted_by_their_requests() {
    let mut d = small_host("admission");
    let odd_bytes = HostResources::detect(Requests::default()).capacity.memory_bytes % 1048576;
    let (allocatable, used) = allocated(&d).await;
    assert_eq!(allocatable, Requests { milli_cpu: 1000, memory_bytes: (1024 << 20) + odd_bytes });
    assert_eq!(used, Requests::default());

    // Two instances of 300m and 256Mi fit.
    d.apply_json(&sized("a", 2, json!({"requests": {"cpu": "300m", "memory": "256Mi"}}))).await;
    assert_eq!(allocated(&d).await.1, Requests::of(0.6, 512.0));

    // 500m more does not: refused, naming the resource, and nothing of it made.
    let b = |cpu: &str, memory: &str| sized("b", 1, json!({"requests": {"cpu": cpu, "memory": memory}}));
    let why = refusal(&d, &b("500m", "64Mi")).await;
    assert!(why.contains("test/b: not enough cpu: 500m cores requested, 400m cores free"), "{why}");
    let why = refusal(&d, &b("100m", "600Mi")).await;
    assert!(why.contains("test/b: not enough memory: 600 MiB requested"), "{why}");
    assert!(d.client.list(&[("name", "b")]).await.unwrap().is_empty());
    assert_eq!(allocated(&d).await.1, Requests::of(0.6, 512.0));

    // A limit with no request requests the limit: a 1-core limit does not fit either.
    let why = refusal(&d, &sized("c", 1, json!({"limits": {"cpu": 1, "memory": 64}}))).await;
    assert!(why.contains("not enough cpu: 1 core requested, 400m cores free"), "{why}");

    // Once a shrinks to one instance, b fits.
    d.apply_json(&sized("a", 1, json!({"requests": {"cpu": "300m", "memory": "256Mi"}}))).await;
    d.apply_json(&b("500m", "64Mi")).await;
    d.wait_state(&id("test", "b", 0), Kind::Running, 10).await;
    assert_eq!(allocated(&d).await.1, Requests::of(0.8, 320.0));
    // An apply that asks no more than before is admitted even where nothing is free.
    d.apply_json(&sized("a", 1, json!({"requests": {"cpu": "200m", "memory": "256Mi"}}))).await;
    assert_eq!(allocated(&d).await.1, Requests::of(0.7, 320.0));

    // What is allocated is the apps' own: the same after a kill -9 of the daemon.
    d.kill9();
    d.spawn();
    assert_eq!(allocated(&d).await.1, Requests::of(0.7, 320.0));
    let why = refusal(&d, &sized("c", 1, json!({"requests": {"cpu": "400m"}}))).await;
    assert!(why.contains("not enough cpu: 400m cores requested, 300m cores free"), "{why}");

    // `steward node` says it.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
        .arg("--socket")
        .arg(&d.socket)
        .arg("node")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("requests:  cpu 700m cores of 1 core allocatable"), "{text}");
    assert!(text.contains("memory 320 MiB of 1024"), "{text}");
}
