//! The node records controller: each node's state as the leader declared it (up, lost,
//! removed from the cluster file) written to the store, node by node, off `run`'s loop. The
//! loop only notes what is owed; a node declared twice before its record is written has only
//! its latest state written, with the time it was declared.

use super::controller::Controller;
use super::{Emit, Scheduler};
use crate::sched::store::NodeState;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How soon a record the store refused is written again.
const RECORD_AGAIN: Duration = Duration::from_secs(2);

#[derive(Default)]
pub(super) struct NodeRecords {
    /// Node → the state it was declared in, and when (ms since the epoch).
    owed: Mutex<BTreeMap<String, (NodeState, u64)>>,
}

impl NodeRecords {
    /// `node` was declared `state` now: its record is owed.
    pub fn owe(&self, node: &str, state: NodeState) {
        self.owed.lock().expect("records lock").insert(node.to_string(), (state, crate::clock::now_ms()));
    }

    /// A new leadership: it records what it declares itself.
    pub fn forget(&self) {
        self.owed.lock().expect("records lock").clear();
    }
}

#[async_trait::async_trait]
impl Controller for NodeRecords {
    type Key = String;

    fn name(&self) -> &'static str {
        "node records"
    }

    async fn sync(&self, sched: &Arc<Scheduler>, node: &String, _emit: &Emit) -> Option<Duration> {
        let (state, since_ms) = self.owed.lock().expect("records lock").remove(node)?;
        match sched.record_node(node, state, since_ms).await {
            Ok(()) => None,
            Err(e) => {
                tracing::warn!(node, "recording the node as {state:?}: {e}");
                // Owed again, unless it was declared anew meanwhile.
                self.owed.lock().expect("records lock").entry(node.clone()).or_insert((state, since_ms));
                Some(RECORD_AGAIN)
            }
        }
    }
}
