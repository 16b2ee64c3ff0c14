//! Level-triggered convergence (issue 43): the leader hands a node its whole desired set —
//! every app placed there and every app's endpoints — and the node drops what the set does
//! not name (supervisor/desired.rs). Whatever a host missed while away (a delete, an
//! endpoints change), the next set it takes corrects: when it is heard again and at every
//! reconcile pass, never only a stream of changes sent once.

use super::{Emit, Scheduler, NODE_TIMEOUT};
use crate::protocol::{DesiredOutcome, HostDesired, SchedEvent};
use std::collections::BTreeSet;

impl Scheduler {
    /// Hands each of `nodes` its desired set, all at once, telling them the reconcile period
    /// `every` (sets come at least that often); reports what changed anywhere.
    /// Each node's mark is read before the desired state is: a set then knows every write
    /// the node has seen (or leaves it alone).
    pub(super) async fn converge(&self, nodes: &[String], every: std::time::Duration, emit: &Emit) {
        let marks = futures_util::future::join_all(nodes.iter().map(|node| async move {
            let client = self.client(node)?;
            match tokio::time::timeout(NODE_TIMEOUT, client.node()).await {
                // A daemon older than desired sets sends no mark: left to the edge-triggered ways.
                Ok(Ok(doc)) if doc.desired_mark.boot != 0 => Some((node.clone(), client, doc.desired_mark)),
                _ => None,
            }
        }))
        .await;
        let (apps, endpoints) = match (self.store.apps().await, self.store.endpoints().await) {
            (Ok(apps), Ok(endpoints)) => (apps, endpoints),
            (Err(e), _) | (_, Err(e)) => return tracing::warn!("reading the desired state for the hosts: {e}"),
        };
        let every_secs = every.as_secs();
        let handed = marks.into_iter().flatten().map(|(node, client, as_of)| {
            let apps = placed_on(&apps, &node);
            let set = HostDesired { as_of, apps, endpoints: endpoints.clone(), every_secs };
            async move {
                let r = match tokio::time::timeout(NODE_TIMEOUT, client.put_desired(&set)).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {} s", NODE_TIMEOUT.as_secs())),
                };
                (node, r)
            }
        });
        for (node, r) in futures_util::future::join_all(handed).await {
            match r {
                Ok(DesiredOutcome { dropped_apps, dropped_endpoints, lacking }) => {
                    if dropped_apps.is_empty() && dropped_endpoints.is_empty() && lacking.is_empty() {
                        continue;
                    }
                    emit(&super::run::sched_line(SchedEvent::DesiredHanded {
                        node,
                        dropped_apps,
                        dropped_endpoints,
                        lacking,
                    }));
                }
                Err(e) => tracing::debug!(node, "handing the desired set: {e}"),
            }
        }
    }
}

/// The apps with an instance placed on `node` (any state: a lost or failed one stays there
/// until moved). An app being deleted is named too: its delete is an intent of its own, given
/// to each node until it is done (intents.rs); a set racing the operator's `delete` would only
/// take its count of what it removed.
fn placed_on(apps: &[crate::sched::store::App], node: &str) -> Vec<String> {
    let keys: BTreeSet<String> =
        apps.iter().filter(|a| a.placements.values().any(|p| p.node == node)).map(|a| a.key.to_string()).collect();
    keys.into_iter().collect()
}
