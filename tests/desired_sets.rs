//! PUT /v1/desired (issue 43): a scheduler's whole desired set for one host. The daemon keeps
//! the endpoints given and forgets the rest, deletes every placed app (applied with an
//! instance selection) the set does not name, leaves alone what it applied on its own and
//! what was written after the mark the set was read at, and refuses a mark of an earlier run.

mod common;

use common::{spec, Daemon};
use serde_json::json;
use std::collections::BTreeMap;
use steward::protocol::{AppEndpoints, HostDesired};
use steward::spec::Format;

fn endpoints(name: &str, revision: u64) -> AppEndpoints {
    AppEndpoints {
        namespace: "test".into(),
        name: name.into(),
        revision,
        updated_ms: 1,
        ports: BTreeMap::new(),
        services: Vec::new(),
        port_protocols: BTreeMap::new(),
        ordinals: None,
        pod_names: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_set_drops_what_it_does_not_name_and_nothing_it_could_not_know() {
    let mut d = Daemon::start("desired");
    let c = d.client.clone();
    // Placed (a selection, as steward-sched applies): gone, kept; applied by hand: kept.
    for name in ["gone", "kept"] {
        c.apply_selected(&spec(name, 2, json!({}), json!({})).to_string(), Format::Json, Some(&[1])).await.unwrap();
    }
    d.apply_json(&spec("local", 1, json!({}), json!({}))).await;
    for name in ["gone", "kept", "old"] {
        c.put_endpoints(&endpoints(name, 3)).await.unwrap();
    }
    let as_of = c.node().await.unwrap().desired_mark;
    assert_ne!(as_of.boot, 0, "the node document carries the mark");
    // Written after the mark was read: the set could not know of them; they stay.
    c.apply_selected(&spec("late", 1, json!({}), json!({})).to_string(), Format::Json, Some(&[0])).await.unwrap();
    c.put_endpoints(&endpoints("late", 1)).await.unwrap();

    let set = HostDesired {
        as_of,
        apps: vec!["test/kept".into(), "test/missing".into()],
        endpoints: vec![endpoints("kept", 4), endpoints("old", 2)],
        every_secs: 10,
    };
    let outcome = c.put_desired(&set).await.unwrap();
    assert_eq!(outcome.dropped_apps, ["test/gone"]);
    assert_eq!(outcome.dropped_endpoints, ["test/gone"]);
    assert_eq!(outcome.lacking, ["test/missing"]);
    let mut apps: Vec<String> = c.list(&[]).await.unwrap().iter().map(|s| s.id.to_string()).collect();
    apps.sort();
    assert_eq!(apps, ["test/kept/1", "test/late/0", "test/local/0"]);
    let held: BTreeMap<String, u64> =
        c.endpoints(None).await.unwrap().into_iter().map(|e| (e.key(), e.revision)).collect();
    // A newer revision taken; an older one than kept is no error and changes nothing.
    let want: BTreeMap<String, u64> =
        [("test/kept", 4), ("test/late", 1), ("test/old", 3)].into_iter().map(|(k, r)| (k.to_string(), r)).collect();
    assert_eq!(held, want);

    // The same set again changes nothing.
    let again = c.put_desired(&set).await.unwrap();
    assert!(again.dropped_apps.is_empty() && again.dropped_endpoints.is_empty(), "{again:?}");

    // After a restart (kill -9) a mark of the earlier run is refused, naming why; read anew,
    // the set applies, and what it does not name goes (the stored endpoints included).
    d.restart(true);
    let c = d.client.clone();
    let e = c.put_desired(&set).await.unwrap_err().to_string();
    assert!(e.contains("desiredMark") && e.contains("restarted"), "{e}");
    let set = HostDesired { as_of: c.node().await.unwrap().desired_mark, ..set };
    let outcome = c.put_desired(&set).await.unwrap();
    assert_eq!(outcome.dropped_apps, ["test/late"]);
    assert_eq!(outcome.dropped_endpoints, ["test/late"]);
    let mut apps: Vec<String> = c.list(&[]).await.unwrap().iter().map(|s| s.id.to_string()).collect();
    apps.sort();
    assert_eq!(apps, ["test/kept/1", "test/local/0"]);
}
