//! Level-triggered convergence (issue 43): the leader hands a node its whole desired set —
//! every app placed there and every app's endpoints — and the node drops what the set does
//! not name (supervisor/desired.rs). Whatever a host missed while away (a delete, an
//! endpoints change), the next set it takes corrects: when it is heard again and at every
//! pass over it (hosts.rs), never only a stream of changes sent once.

use super::{Emit, Scheduler, NODE_TIMEOUT};
use crate::protocol::{AppEndpoints, DesiredMark, DesiredOutcome, HostDesired, SchedEvent};
use crate::sched::store::App;
use crate::sched::SchedError;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

/// The desired state as one read found it: what a pass over a node compares and hands over.
pub(super) struct Desired {
    pub apps: Vec<App>,
    pub endpoints: Vec<AppEndpoints>,
}

/// The desired state read for the passes over the nodes, shared: a pass that read its node at
/// some moment takes a reading begun after that moment, the one in flight or a new one (passes
/// over many nodes at once read the store once or twice, not once each).
#[derive(Default)]
pub(super) struct DesiredReads {
    last: tokio::sync::Mutex<Option<(Instant, Arc<Desired>)>>,
    /// The last reading done (none is under way when this one is taken).
    done: std::sync::Mutex<Option<Arc<Desired>>>,
}

impl DesiredReads {
    /// The desired state as read at `since` or later.
    pub async fn since(&self, sched: &Scheduler, since: Instant) -> Result<Arc<Desired>, SchedError> {
        let mut last = self.last.lock().await;
        if let Some((at, desired)) = last.as_ref() {
            if *at >= since {
                return Ok(desired.clone());
            }
        }
        let at = Instant::now();
        let (apps, endpoints) = futures_util::future::join(sched.store.apps(), sched.store.endpoints()).await;
        let desired = Arc::new(Desired { apps: apps?, endpoints: endpoints? });
        *last = Some((at, desired.clone()));
        *self.done.lock().expect("desired lock") = Some(desired.clone());
        Ok(desired)
    }

    /// The last reading finished by now, if any.
    pub fn latest(&self) -> Option<Arc<Desired>> {
        self.done.lock().expect("desired lock").clone()
    }

    /// Forgets the last reading (the lead changed hands: nothing read before counts).
    pub fn forget(&self) {
        if let Ok(mut last) = self.last.try_lock() {
            *last = None;
        }
        *self.done.lock().expect("desired lock") = None;
    }
}

impl Scheduler {
    /// Hands `node` its desired set out of `desired` (read after the node's mark `as_of`: the
    /// set then knows every write the node has seen), telling it the reconcile period
    /// `every_secs` (sets come at least that often); reports what changed there.
    pub(super) async fn hand_desired(
        &self,
        node: &str,
        as_of: DesiredMark,
        desired: &Desired,
        every_secs: u64,
        emit: &Emit,
    ) {
        // A daemon older than desired sets sends no mark: left to the edge-triggered ways.
        if as_of.boot == 0 {
            return;
        }
        let Some(client) = self.client(node) else { return };
        let apps = placed_on(&desired.apps, node);
        let set = HostDesired { as_of, apps, endpoints: desired.endpoints.clone(), every_secs };
        let r = match tokio::time::timeout(NODE_TIMEOUT, client.put_desired(&set)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {} s", NODE_TIMEOUT.as_secs())),
        };
        match r {
            Ok(DesiredOutcome { dropped_apps, dropped_endpoints, lacking, draining_apps }) => {
                if dropped_apps.is_empty()
                    && dropped_endpoints.is_empty()
                    && lacking.is_empty()
                    && draining_apps.is_empty()
                {
                    return;
                }
                emit(&super::run::sched_line(SchedEvent::DesiredHanded {
                    node: node.to_string(),
                    dropped_apps,
                    dropped_endpoints,
                    lacking,
                    draining_apps,
                }));
            }
            Err(e) => tracing::debug!(node, "handing the desired set: {e}"),
        }
    }
}

/// The apps with an instance placed on `node` (any state: a lost or failed one stays there
/// until moved). An app being deleted is named too: its delete is an intent of its own, given
/// to each node until it is done (intents.rs); a set racing the operator's `delete` would only
/// take its count of what it removed.
fn placed_on(apps: &[App], node: &str) -> Vec<String> {
    let keys: BTreeSet<String> =
        apps.iter().filter(|a| a.placements.values().any(|p| p.node == node)).map(|a| a.key.to_string()).collect();
    keys.into_iter().collect()
}
