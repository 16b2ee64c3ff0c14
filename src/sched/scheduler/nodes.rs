//! Node records: what the leading `run` knows of each node (up, lost, removed from the cluster
//! file, and what its daemon said of itself), written to the desired store at each change, so
//! every scheduler sharing it and `node ls` see the same.

use super::{Scheduler, NODE_TIMEOUT};
pub use crate::protocol::sched_answers::{NodeListing, NodeLive};
use crate::sched::store::{NodeRecord, NodeState};
use crate::sched::SchedError;

impl Scheduler {
    /// Records that `node` became `state` at `since_ms`; going up, with what its daemon says of
    /// itself. Run by the node records controller (records.rs), never inside `run`'s loop: at a
    /// thousand nodes, reading and asking there held every node's news back.
    pub(super) async fn record_node(&self, node: &str, state: NodeState, since_ms: u64) -> Result<(), SchedError> {
        let previous = self.store.node_record(node).await?;
        let client = self.client(node);
        let mut record = NodeRecord {
            name: node.to_string(),
            state,
            since_ms,
            address: client.as_ref().map(|c| c.socket().display().to_string()).unwrap_or_default(),
            hostname: String::new(),
            attributes: Default::default(),
            labels: Default::default(),
        };
        if let Some(p) = previous {
            if record.address.is_empty() {
                record.address = p.address;
            }
            (record.hostname, record.attributes, record.labels) = (p.hostname, p.attributes, p.labels);
        }
        if state == NodeState::Up {
            if let Some(Ok(Ok(doc))) = match &client {
                Some(c) => Some(tokio::time::timeout(NODE_TIMEOUT, c.node()).await),
                None => None,
            } {
                (record.hostname, record.attributes, record.labels) = (doc.hostname, doc.attributes, doc.labels);
            }
        }
        self.store.put_node_record(&record).await
    }

    /// `nodes` / `node ls`: the cluster file's nodes, each as its daemon describes itself now,
    /// and every node the leader recorded.
    pub async fn node_listing(&self) -> Result<Vec<NodeListing>, SchedError> {
        let records = self.store.node_records().await?;
        let settings = self.store.settings().await?;
        let mut live: std::collections::BTreeMap<String, Result<NodeLive, String>> = self
            .node_documents()
            .await
            .into_iter()
            .map(|(name, doc)| {
                let live = doc.map(|doc| NodeLive {
                    topology: doc.topology(),
                    hostname: doc.hostname,
                    host_ip: doc.host_ip,
                    labels: doc.labels,
                    attributes: doc.attributes,
                    resources: doc.resources,
                    instances: doc.instances,
                    free_ports: doc.ports.free,
                });
                (name, live)
            })
            .collect();
        let mut names: Vec<String> = self.nodes().iter().map(|(n, _)| n.clone()).collect();
        for r in &records {
            if !names.contains(&r.name) {
                names.push(r.name.clone());
            }
        }
        Ok(names
            .into_iter()
            .map(|name| NodeListing {
                in_cluster_file: self.client(&name).is_some(),
                record: records.iter().find(|r| r.name == name).cloned(),
                cordon: settings.cordon_of(&name),
                live: live.get(&name).and_then(|r| r.as_ref().ok()).cloned(),
                unreachable: live.remove(&name).and_then(Result::err),
                name,
            })
            .collect())
    }
}
