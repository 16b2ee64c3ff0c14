//! The scheduler's operations: deploy, scale, delete, status, and the event follower that
//! `watch` prints and `run` acts on (lost nodes, failed instances, strays, remote checks).
//!
//! Here: the Scheduler, its nodes and store, status, scale and delete. Deploying is in
//! deploy.rs, following the nodes' streams in follow.rs, what `run` does about them in run.rs.

mod deploy;
mod follow;
mod hooks;
mod rollout;
mod run;

pub use hooks::{RunOnNode, TemplateStored};
pub use rollout::{NodeRollout, SchedRolloutStatus};

use super::cluster::Cluster;
use super::placement::NodeView;
use super::store::{App, DesiredStore, LocalStore, PlacementState};
use super::PluginError;
use crate::client::{Client, ClientError};
use crate::protocol::DeployCause;
use crate::spec::{InstanceId, ProcessSpec, SpecErrors};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long reading one node (GET /v1/node, list) may take before it counts as unreachable.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Scheduler {
    pub cluster: Cluster,
    nodes: Vec<(String, Client)>,
    store: Box<dyn DesiredStore>,
}

/// One instance's placement, as deploy and status report it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacedInstance {
    pub instance: String,
    pub node: String,
    pub placement: PlacementState,
    /// What the node reports (`Running`, ...), `unreachable`, or `missing`.
    pub state: String,
    /// Seed 003's Ready condition as the node reports it (false when it reports nothing).
    #[serde(default)]
    pub ready: bool,
    pub message: String,
}

/// Parses and checks a spec document the way the daemons will (everything but the paths,
/// which depend on each daemon's roots and are checked there).
pub fn check_spec(doc: &Value) -> Result<ProcessSpec, SpecErrors> {
    let (spec, mut errors) = crate::spec::decode(doc);
    let Some(spec) = spec else { return Err(SpecErrors(errors)) };
    let mut found = crate::spec::error::Errors::default();
    crate::spec::validate::validate(&spec, &mut found);
    errors.extend(found.0);
    SpecErrors(errors).into_result(spec)
}

fn app_key(spec: &ProcessSpec) -> String {
    format!("{}/{}", spec.metadata.namespace, spec.metadata.name)
}

fn instance_id(key: &str, index: u32) -> InstanceId {
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    InstanceId { namespace: namespace.into(), name: name.into(), index }
}

impl Scheduler {
    /// Opens the cluster's clients and the embedded desired-state store.
    pub fn open(cluster: Cluster) -> Result<Scheduler, PluginError> {
        let store = LocalStore::open(&cluster.state_dir)?;
        Scheduler::with_store(cluster, Box::new(store))
    }

    /// With another [`DesiredStore`] (a distributed one, a test double).
    pub fn with_store(cluster: Cluster, store: Box<dyn DesiredStore>) -> Result<Scheduler, PluginError> {
        let nodes = cluster.clients()?;
        Ok(Scheduler { cluster, nodes, store })
    }

    pub fn client(&self, node: &str) -> Option<&Client> {
        self.nodes.iter().find(|(n, _)| n == node).map(|(_, c)| c)
    }

    pub fn store(&self) -> &dyn DesiredStore {
        self.store.as_ref()
    }

    /// Every node that answers, and why the others do not.
    pub async fn read_nodes(&self) -> (Vec<NodeView>, BTreeMap<String, String>) {
        let reads = self.nodes.iter().map(|(name, client)| async move {
            let r = tokio::time::timeout(NODE_TIMEOUT, client.node()).await;
            (name.clone(), r)
        });
        let mut views = Vec::new();
        let mut down = BTreeMap::new();
        for (name, r) in futures_util::future::join_all(reads).await {
            match r {
                Ok(Ok(v)) => views.push(NodeView::from_node(&name, &v)),
                Ok(Err(e)) => {
                    down.insert(name, e.to_string());
                }
                Err(_) => {
                    down.insert(name, format!("no answer within {} s", NODE_TIMEOUT.as_secs()));
                }
            }
        }
        (views, down)
    }

    /// Each placement with what its node reports.
    pub(super) async fn describe(&self, app: &App, views: &[NodeView]) -> Vec<PlacedInstance> {
        let id = instance_id(&app.key, 0);
        let mut actual: BTreeMap<(String, u32), (String, bool, String)> = BTreeMap::new();
        let mut reachable = BTreeSet::new();
        for v in views {
            let Some(client) = self.client(&v.name) else { continue };
            let filters = [("namespace", id.namespace.as_str()), ("name", id.name.as_str())];
            if let Ok(Ok(list)) = tokio::time::timeout(NODE_TIMEOUT, client.list(&filters)).await {
                reachable.insert(v.name.clone());
                for s in list {
                    let kind = serde_json::to_value(s.state.kind()).ok().and_then(|k| k.as_str().map(String::from));
                    let seen = (kind.unwrap_or_default(), s.ready, s.message.clone());
                    actual.insert((v.name.clone(), s.id.index), seen);
                }
            }
        }
        // A job's (or cron job's) runs on its node are its own, whatever their ids.
        let job_node = check_spec(&app.spec)
            .is_ok_and(|s| s.runs_to_completion())
            .then(|| app.placements.get(&0).map(|p| p.node.clone()))
            .flatten();
        let mut out = Vec::new();
        for (i, p) in &app.placements {
            let (state, ready, message) = match actual.remove(&(p.node.clone(), *i)) {
                Some(s) => s,
                None if job_node.is_some() => ("job".into(), false, "its runs are listed below".into()),
                None if reachable.contains(&p.node) => ("missing".into(), false, String::new()),
                None => ("unreachable".into(), false, String::new()),
            };
            out.push(PlacedInstance {
                instance: format!("{}/{i}", app.key),
                node: p.node.clone(),
                placement: p.state.clone(),
                state,
                ready,
                message,
            });
        }
        // Instances running where the scheduler did not place them (a node back from the dead).
        for ((node, i), (state, ready, message)) in actual {
            let placement = if job_node.as_deref() == Some(node.as_str()) {
                PlacementState::Placed
            } else {
                PlacementState::Pending { reason: "stray: not placed here".into() }
            };
            out.push(PlacedInstance { instance: format!("{}/{i}", app.key), node, placement, state, ready, message });
        }
        out
    }

    /// `status`: every app's placements with what the nodes report.
    pub async fn status(&self) -> Result<Vec<PlacedInstance>, PluginError> {
        let (views, _) = self.read_nodes().await;
        let mut out = Vec::new();
        for app in self.store.apps()? {
            out.extend(self.describe(&app, &views).await);
        }
        Ok(out)
    }

    fn stored(&self, key: &str) -> Result<App, PluginError> {
        self.store.app(key)?.ok_or_else(|| PluginError::NoApp(key.to_string()))
    }

    /// `scale APP N`: new instances are placed, ones from N up deleted; the others stay.
    pub async fn scale(&self, key: &str, instances: u32) -> Result<Vec<PlacedInstance>, PluginError> {
        let mut app = self.stored(key)?;
        app.spec["spec"]["instance"] = json!(instances);
        self.deploy_doc(app.spec, &BTreeSet::new(), DeployCause::Scaled { instances }).await
    }

    /// `delete APP`: every instance of the app on every node, then the desired state.
    pub async fn delete(&self, key: &str) -> Result<usize, PluginError> {
        let app = self.stored(key)?;
        let (views, down) = self.read_nodes().await;
        let id = instance_id(key, 0);
        let mut deleted = 0;
        for v in &views {
            let client = self.client(&v.name).expect("views come from cluster nodes");
            let filters = [("namespace", id.namespace.as_str()), ("name", id.name.as_str())];
            let list = client
                .list(&filters)
                .await
                .map_err(|e| PluginError::Node { node: v.name.clone(), message: e.to_string() })?;
            for s in list {
                match client.delete(&s.id, Some(60.0)).await {
                    Ok(()) | Err(ClientError::Api { status: 404, .. }) => deleted += 1,
                    Err(e) => {
                        return Err(PluginError::Node {
                            node: v.name.clone(),
                            message: format!("deleting {}: {e}", s.id),
                        })
                    }
                }
            }
        }
        let away: Vec<&String> = app.placements.values().map(|p| &p.node).filter(|n| down.contains_key(*n)).collect();
        if !away.is_empty() {
            let names: BTreeSet<&String> = away.into_iter().collect();
            let names: Vec<&str> = names.into_iter().map(String::as_str).collect();
            return Err(PluginError::Apply {
                app: key.to_string(),
                message: format!(
                    "nodes {} are unreachable; their instances remain, the app is kept (retry)",
                    names.join(", ")
                ),
            });
        }
        self.store.delete_app(key)?;
        Ok(deleted)
    }
}
