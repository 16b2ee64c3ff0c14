//! steward-sched's desired state in a real etcd (issue 21): records under the prefix, written by
//! compare-and-swap so two schedulers never overwrite each other's change unseen, a journal of
//! why, a watch that wakes on every change, and the election of the one `run` that acts.

mod common;

use common::Etcd;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use steward::protocol::DesiredChange;
use steward::sched::etcd::EtcdStore;
use steward::sched::store::{
    App, Dependency, DependencyCopy, DesiredStore, NodeRecord, NodeState, Placement, PlacementState,
};
use steward::sched::SchedError;

fn app(key: &str) -> App {
    App {
        key: steward::spec::AppId::from_key(key),
        spec: serde_json::json!({"metadata": {"name": "web", "namespace": "ns"}}),
        placements: BTreeMap::from([(
            0,
            Placement { node: "h1".into(), state: PlacementState::Placed, reschedules: 0 },
        )]),
        previous: None,
        rollout: None,
        stopped: Default::default(),
        deleting: None,
        wait_for_room: false,
        waiting: None,
        version: None,
    }
}

fn deployed(key: &str) -> DesiredChange {
    DesiredChange::Deployed { app: key.into(), placements: BTreeMap::new() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_swapped_by_revision_and_watched() {
    let etcd = Etcd::start("t1");
    let a = EtcdStore::connect(&etcd.url).await.unwrap();
    let b = EtcdStore::connect(&etcd.url).await.unwrap();
    let mut changes = b.changes().unwrap();

    // A new app: written once; a second "new" write of the same key is a conflict.
    let mut web = app("ns/web");
    a.put_app(&mut web, &deployed("ns/web")).await.unwrap();
    assert!(web.version.is_some());
    tokio::time::timeout(Duration::from_secs(5), changes.changed()).await.unwrap().unwrap();
    let mut again = app("ns/web");
    assert!(matches!(a.put_app(&mut again, &deployed("ns/web")).await, Err(SchedError::Conflict { .. })));

    // Both read it; A writes first; B's write over the old version is refused, nothing lost.
    let mut by_a = b.app(&steward::spec::AppId::new("ns", "web")).await.unwrap().unwrap();
    let mut by_b = b.app(&steward::spec::AppId::new("ns", "web")).await.unwrap().unwrap();
    by_a.placements.get_mut(&0).unwrap().state = PlacementState::Lost;
    a.put_app(&mut by_a, &DesiredChange::Lost { app: "ns/web".into(), node: "h1".into(), instances: vec![0] })
        .await
        .unwrap();
    by_b.stopped.insert(0);
    let e = b.put_app(&mut by_b, &DesiredChange::Stopped { app: "ns/web".into(), instances: vec![0] }).await;
    assert!(e.unwrap_err().to_string().contains("changed by another steward-sched"));
    let now = b.app(&steward::spec::AppId::new("ns", "web")).await.unwrap().unwrap();
    assert_eq!((now.placements[&0].state.clone(), now.stopped.len()), (PlacementState::Lost, 0));
    // Read again, written: its version moves on with each write.
    let mut fresh = now.clone();
    fresh.stopped.insert(0);
    b.put_app(&mut fresh, &DesiredChange::Stopped { app: "ns/web".into(), instances: vec![0] }).await.unwrap();
    assert!(fresh.version > now.version);
    assert_eq!(a.apps().await.unwrap().len(), 1);

    // Gone, and its templates' kind too.
    a.delete_app(&steward::spec::AppId::new("ns", "web")).await.unwrap();
    assert!(b.app(&steward::spec::AppId::new("ns", "web")).await.unwrap().is_none());
    assert!(a.apps().await.unwrap().is_empty());

    // A dependency (seed 002) likewise: created once, swapped by revision, its copies kept.
    let mut cache = Dependency {
        key: "infra/cache".into(),
        spec: serde_json::json!({"metadata": {"name": "cache", "namespace": "infra"}}),
        revision: 1,
        grace_secs: 300,
        copies: BTreeMap::new(),
        version: None,
    };
    let stored = DesiredChange::DependencyStored { dependency: "infra/cache".into(), revision: 1 };
    a.put_dependency(&mut cache, &stored).await.unwrap();
    let mut stale = cache.clone();
    cache.copies.insert(
        "h1/infra".into(),
        DependencyCopy {
            node: "h1".into(),
            namespace: "infra".into(),
            revision: 1,
            started_ms: 5,
            updated_ms: None,
            idle_since_ms: Some(9),
        },
    );
    let copies = DesiredChange::DependencyCopies {
        dependency: "infra/cache".into(),
        copy: "h1/infra".into(),
        what: "started".into(),
    };
    a.put_dependency(&mut cache, &copies).await.unwrap();
    assert!(matches!(b.put_dependency(&mut stale, &stored).await, Err(SchedError::Conflict { .. })));
    assert_eq!(b.dependencies().await.unwrap(), vec![cache.clone()]);
    b.delete_dependency("infra/cache").await.unwrap();
    assert!(a.dependencies().await.unwrap().is_empty());

    // Node records: written by the leader, read by any.
    let record = NodeRecord {
        name: "h1".into(),
        state: NodeState::Lost,
        since_ms: 7,
        address: "10.0.0.1:7443".into(),
        hostname: "h1".into(),
        attributes: BTreeMap::from([("idc".into(), "a".into())]),
        labels: BTreeMap::new(),
    };
    a.put_node_record(&record).await.unwrap();
    assert_eq!(b.node_records().await.unwrap(), vec![record]);

    // Every change journaled under the prefix with why; nothing outside the prefix.
    let mut kv = etcd_client::Client::connect([format!("http://{}", etcd.endpoint)], None).await.unwrap();
    let journal = kv.get("/t1/journal/", Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    let kinds: Vec<String> = journal
        .kvs()
        .iter()
        .map(|kv| serde_json::from_slice::<serde_json::Value>(kv.value()).unwrap()["type"].as_str().unwrap().into())
        .collect();
    assert_eq!(
        kinds,
        [
            "deployed",
            "lost",
            "stopped",
            "appDeleted",
            "dependencyStored",
            "dependencyCopies",
            "dependencyDeleted",
            "nodeState"
        ]
    );
    let all = kv.get("/", Some(etcd_client::GetOptions::new().with_prefix().with_keys_only())).await.unwrap();
    assert!(all.kvs().iter().all(|kv| kv.key().starts_with(b"/t1/")), "only under the prefix");

    // An etcd that does not answer: a clear error naming it.
    let e = EtcdStore::connect("etcd://127.0.0.1:1/x").await.err().unwrap().to_string();
    assert!(e.contains("etcd") && e.contains("127.0.0.1:1"), "{e}");
}

/// One leads; the other waits, and leads within the lease's TTL once the first is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leads_and_the_other_takes_over() {
    let etcd = Etcd::start("t2");
    let a = EtcdStore::connect(&etcd.url).await.unwrap();
    let b = EtcdStore::connect(&etcd.url).await.unwrap();
    let first = a.lead("a").await.unwrap();
    let waiting = tokio::spawn(async move {
        let led = b.lead("b").await.unwrap();
        (Instant::now(), led, b)
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!waiting.is_finished(), "b waits while a leads");
    // a stops renewing (as a killed process would).
    let gone = Instant::now();
    drop(first);
    let (led_at, _lead, _b) = tokio::time::timeout(Duration::from_secs(15), waiting).await.unwrap().unwrap();
    let took = led_at - gone;
    assert!(took <= Duration::from_secs(7), "b leads within the lease's TTL: {took:?}");
    eprintln!("failover after the leader stopped renewing: {took:?}");
}

/// A fleet's desired state outgrows one gRPC answer (4 MiB: at 1,000 apps of 100 instances a
/// listing of every app was refused, and with it every deploy that assigns a service address):
/// every app is listed, a page at a time, and the watch names the ones written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_state_larger_than_one_answer_is_listed_whole() {
    let etcd = Etcd::start("t-large");
    let store = EtcdStore::connect(&etcd.url).await.unwrap();
    // Until its watch is set up, the store cannot name what changed: once it names a probe
    // written, it watches.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut probe = app("ns/probe");
    store.put_app(&mut probe, &deployed("ns/probe")).await.unwrap();
    loop {
        assert!(Instant::now() < deadline, "the watch never named the probe");
        let changed = store.apps_changed();
        if let steward::sched::store::AppsChanged::Some(keys) = &changed {
            if keys.contains(&steward::spec::AppId::new("ns", "probe")) {
                break;
            }
        }
        if changed == steward::sched::store::AppsChanged::All {
            // Not yet watching when it was written: again.
            store.put_app(&mut probe, &deployed("ns/probe")).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let placements: BTreeMap<u32, Placement> = (0..400)
        .map(|i| (i, Placement { node: format!("host-{i:04}"), state: PlacementState::Placed, reschedules: 0 }))
        .collect();
    // 300 apps of about 20 KiB: 6 MiB in all.
    for n in 0..300 {
        let key = format!("ns/app{n:03}");
        let mut big = App { key: steward::spec::AppId::from_key(&key), placements: placements.clone(), ..app(&key) };
        store.put_app(&mut big, &deployed(&key)).await.unwrap();
    }
    let apps: Vec<App> = store.apps().await.unwrap().into_iter().filter(|a| a.key.name != "probe").collect();
    assert_eq!(apps.len(), 300);
    assert!(apps.iter().all(|a| a.placements.len() == 400 && a.version.is_some()));
    // The watch named each app written, once asked.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 300 {
        assert!(Instant::now() < deadline, "the watch named {} of 300", seen.len());
        match store.apps_changed() {
            steward::sched::store::AppsChanged::Some(keys) => {
                seen.extend(keys.into_iter().filter(|k| k.name != "probe"))
            }
            steward::sched::store::AppsChanged::All => panic!("the watch, once set up, names what changed"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
