//! The scheduler's operations: deploy, scale, delete, status, and the event follower that
//! `watch` prints and `run` acts on (lost nodes, failed instances, strays, remote checks).

use super::cluster::Cluster;
use super::placement::{self, NodeView, Request};
use super::store::{App, DesiredStore, LocalStore, Placement, PlacementState};
use super::PluginError;
use crate::client::{Client, ClientError, StreamLine};
use crate::protocol::sched::{Disconnected, Gap, NodeHeartbeat};
use crate::protocol::{
    DeployCause, DesiredChange, Event, EventBody, ExitStatus, InstanceChange, InstanceEvent, Kind, NodeItem, NodeLine,
    SchedEvent, SchedLine, State, WatchLine,
};
use crate::spec::model::RestartPolicyKind;
use crate::spec::{Format, InstanceId, ProcessSpec, SpecErrors};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

    /// `deploy FILE`: places every instance of the spec and applies the placements.
    pub async fn deploy_file(&self, path: &Path) -> Result<Vec<PlacedInstance>, PluginError> {
        let spec_err = |errors: SpecErrors| PluginError::Spec { path: path.to_path_buf(), errors };
        let text = std::fs::read_to_string(path).map_err(|e| PluginError::Spec {
            path: path.to_path_buf(),
            errors: SpecErrors(vec![crate::spec::SpecError::new("", e.to_string())]),
        })?;
        let doc = crate::spec::parse_document(&text, Format::for_path(path, &text)).map_err(spec_err)?;
        check_spec(&doc).map_err(spec_err)?;
        self.deploy_doc(doc, &BTreeSet::new(), DeployCause::Deployed).await
    }

    /// Places and applies `doc`: placements on reachable nodes stay; lost, failed and new
    /// instances are placed on nodes not in `avoid`; instances no longer meant for a node are
    /// deleted there. The desired state is stored before anything is applied.
    pub async fn deploy_doc(
        &self,
        doc: Value,
        avoid: &BTreeSet<String>,
        why: DeployCause,
    ) -> Result<Vec<PlacedInstance>, PluginError> {
        let spec = check_spec(&doc).map_err(|errors| PluginError::Spec { path: "(stored spec)".into(), errors })?;
        let key = app_key(&spec);
        let previous = self.store.app(&key)?;
        let (views, down) = self.read_nodes().await;
        let reachable: BTreeSet<&str> = views.iter().map(|v| v.name.as_str()).collect();
        let total = spec.spec.instance;
        let old = previous.as_ref().map(|a| a.placements.clone()).unwrap_or_default();
        // Stay: applied (or being applied) placements whose node is reachable, or unreachable
        // but not (yet) declared lost: never run an instance twice.
        let keep: BTreeMap<u32, String> = old
            .iter()
            .filter(|(i, _)| **i < total)
            .filter(|(_, p)| matches!(p.state, PlacementState::Placed | PlacementState::Pending { .. }))
            .map(|(i, p)| (*i, p.node.clone()))
            .collect();
        let place: Vec<u32> = (0..total).filter(|i| !keep.contains_key(i)).collect();
        let req = Request {
            app: &key,
            constraint: spec.constraint.as_ref(),
            total,
            keep: keep.clone(),
            place,
            ports_per_instance: spec.random_ports(),
            avoid: avoid.clone(),
        };
        let placed = placement::place(&req, &views).map_err(|e| {
            let mut e = e;
            for (node, why) in &down {
                e.refusals.push(placement::Refusal {
                    node: node.clone(),
                    item: None,
                    reason: format!("unreachable: {why}"),
                });
            }
            PluginError::Placement(e)
        })?;
        let mut placements: BTreeMap<u32, Placement> = BTreeMap::new();
        for i in keep.keys() {
            placements.insert(*i, old[i].clone());
        }
        for (i, node) in &placed {
            let reschedules = old.get(i).map_or(0, |p| p.reschedules + u32::from(p.node != *node));
            let state = PlacementState::Pending { reason: "applying".into() };
            placements.insert(*i, Placement { node: node.clone(), state, reschedules });
        }
        let mut doc = doc;
        doc["spec"]["instance"] = json!(total);
        let mut app = App { key: key.clone(), spec: doc.clone(), placements };
        let placements = app.placements.iter().map(|(i, p)| (i.to_string(), p.node.clone())).collect();
        self.store.put_app(&app, &why.change(&key, placements))?;

        // Apply per node: its selection, or delete what it should no longer run.
        let text = doc.to_string();
        let mut by_node: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (i, p) in &app.placements {
            by_node.entry(p.node.clone()).or_default().push(*i);
        }
        let mut stale: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (i, p) in &old {
            if app.placements.get(i).is_none_or(|n| n.node != p.node) {
                stale.entry(p.node.clone()).or_default().push(*i);
            }
        }
        let mut results: BTreeMap<String, Result<(), String>> = BTreeMap::new();
        let mut work = Vec::new();
        for (node, ids) in &by_node {
            if !reachable.contains(node.as_str()) {
                continue;
            }
            let client = self.client(node).expect("placements name cluster nodes");
            let text = text.clone();
            work.push(async move {
                let r =
                    client.apply_selected(&text, Format::Json, Some(ids)).await.map(|_| ()).map_err(|e| e.to_string());
                (node.clone(), r)
            });
        }
        for (node, r) in futures_util::future::join_all(work).await {
            results.insert(node, r);
        }
        for (node, ids) in &stale {
            if by_node.contains_key(node) || !reachable.contains(node.as_str()) {
                continue; // The apply's selection removed them, or the node is away: reconciled on return.
            }
            if let Some(client) = self.client(node) {
                for i in ids {
                    match client.delete(&instance_id(&key, *i), Some(30.0)).await {
                        Ok(()) | Err(ClientError::Api { status: 404, .. }) => {}
                        Err(e) => tracing::warn!("deleting {key}/{i} on {node}: {e}"),
                    }
                }
            }
        }
        for (i, p) in app.placements.iter_mut() {
            if !placed.contains_key(i) && !matches!(p.state, PlacementState::Pending { .. }) {
                continue;
            }
            p.state = match results.get(&p.node) {
                Some(Ok(())) => PlacementState::Placed,
                Some(Err(e)) => PlacementState::Pending { reason: e.clone() },
                None => PlacementState::Pending { reason: format!("node {} unreachable", p.node) },
            };
        }
        self.store.put_app(&app, &DesiredChange::Applied { app: key.clone() })?;
        let failed: Vec<String> =
            results.iter().filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}"))).collect();
        if !failed.is_empty() {
            return Err(PluginError::Apply { app: key, message: failed.join("; ") });
        }
        Ok(self.describe(&app, &views).await)
    }

    /// Each placement with what its node reports.
    async fn describe(&self, app: &App, views: &[NodeView]) -> Vec<PlacedInstance> {
        let id = instance_id(&app.key, 0);
        let mut actual: BTreeMap<(String, u32), (String, String)> = BTreeMap::new();
        let mut reachable = BTreeSet::new();
        for v in views {
            let Some(client) = self.client(&v.name) else { continue };
            let filters = [("namespace", id.namespace.as_str()), ("name", id.name.as_str())];
            if let Ok(Ok(list)) = tokio::time::timeout(NODE_TIMEOUT, client.list(&filters)).await {
                reachable.insert(v.name.clone());
                for s in list {
                    let kind = serde_json::to_value(s.state.kind()).ok().and_then(|k| k.as_str().map(String::from));
                    actual.insert((v.name.clone(), s.id.index), (kind.unwrap_or_default(), s.message.clone()));
                }
            }
        }
        let mut out = Vec::new();
        for (i, p) in &app.placements {
            let (state, message) = match actual.remove(&(p.node.clone(), *i)) {
                Some(s) => s,
                None if reachable.contains(&p.node) => ("missing".into(), String::new()),
                None => ("unreachable".into(), String::new()),
            };
            out.push(PlacedInstance {
                instance: format!("{}/{i}", app.key),
                node: p.node.clone(),
                placement: p.state.clone(),
                state,
                message,
            });
        }
        // Instances running where the scheduler did not place them (a node back from the dead).
        for ((node, i), (state, message)) in actual {
            out.push(PlacedInstance {
                instance: format!("{}/{i}", app.key),
                node,
                placement: PlacementState::Pending { reason: "stray: not placed here".into() },
                state,
                message,
            });
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

    /// Follows every node's event stream from `since` (per node; None = from now), resuming
    /// after disconnects from the last sequence seen. Items arrive on the returned channel.
    pub fn follow(self: &Arc<Self>, since: Option<u64>) -> tokio::sync::mpsc::UnboundedReceiver<NodeLine> {
        self.follow_noting(since, HeardAt::default())
    }

    /// As [`Scheduler::follow`], noting in `heard` when each node last sent something (an
    /// event or a heartbeat), as it arrives, however busy the receiver is.
    fn follow_noting(&self, since: Option<u64>, heard: HeardAt) -> tokio::sync::mpsc::UnboundedReceiver<NodeLine> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let silence = Duration::from_secs(self.cluster.heartbeat_timeout_secs);
        for (name, client) in &self.nodes {
            tokio::spawn(follow_node(name.clone(), client.clone(), since, silence, tx.clone(), heard.clone()));
        }
        rx
    }

    /// `run`: follows every node and acts: a node silent past the heartbeat timeout is lost
    /// (its instances Lost; rescheduled when their policy is Always), a Failed instance is
    /// rescheduled elsewhere under OnFailure and Always, instances found on a returning node
    /// that were placed elsewhere meanwhile are deleted, and REMOTE_HTTP / REMOTE_TCP checks
    /// run. Every item is passed to `emit`.
    pub async fn run(self: Arc<Self>, emit: impl Fn(&WatchLine) + Send + Sync + 'static) -> Result<(), PluginError> {
        let emit: Emit = Arc::new(emit);
        let heard_at = HeardAt::default();
        let started = Instant::now();
        let mut rx = self.follow_noting(None, heard_at.clone());
        let timeout = Duration::from_secs(self.cluster.heartbeat_timeout_secs);
        let mut lost: BTreeSet<String> = BTreeSet::new();
        let mut heard: BTreeSet<String> = BTreeSet::new();
        let checks = super::checks::RemoteChecks::new(self.clone(), emit.clone());
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut last_sync = Instant::now() - Duration::from_secs(60);
        loop {
            tokio::select! {
                item = rx.recv() => {
                    let Some(item) = item else { return Ok(()) };
                    let node = item.node.clone();
                    // Only what the daemon sends proves it alive; a failed reconnect does not.
                    if let NodeItem::Event(_) | NodeItem::Heartbeat { .. } = &item.item {
                        if heard.insert(node.clone()) {
                            emit(&sched_line(SchedEvent::NodeUp { node: node.clone() }));
                        }
                        if lost.remove(&node) {
                            emit(&sched_line(SchedEvent::NodeBack { node: node.clone() }));
                            self.node_back(&node, &emit).await;
                        }
                    }
                    match &item.item {
                        NodeItem::Event(event) => {
                            emit(&WatchLine::Node(item.clone()));
                            self.on_event(&node, event, &lost, &emit).await;
                        }
                        NodeItem::Gap { .. } | NodeItem::Disconnected { .. } => emit(&WatchLine::Node(item)),
                        NodeItem::Heartbeat { .. } => {}
                    }
                }
                _ = tick.tick() => {
                    // Silence is measured from what the followers received, not from what this
                    // loop got round to: a long reschedule must not make the others look lost.
                    let silent_for: BTreeMap<String, Duration> = {
                        let at = heard_at.lock().expect("heard lock");
                        self.nodes
                            .iter()
                            .map(|(n, _)| (n.clone(), at.get(n).copied().unwrap_or(started).elapsed()))
                            .collect()
                    };
                    let newly: Vec<String> = silent_for
                        .iter()
                        .filter(|(n, silent)| !lost.contains(*n) && **silent > timeout)
                        .map(|(n, _)| n.clone())
                        .collect();
                    for node in newly {
                        lost.insert(node.clone());
                        let silent = silent_for[&node].as_secs_f64();
                        emit(&sched_line(SchedEvent::NodeLost { node: node.clone(), silent_secs: silent }));
                        self.node_lost(&node, &lost, &emit).await;
                    }
                    if last_sync.elapsed() > Duration::from_secs(2) {
                        last_sync = Instant::now();
                        if let Ok(apps) = self.store.apps() {
                            checks.sync(&apps, &lost).await;
                        }
                    }
                }
            }
        }
    }

    /// Marks the node's instances Lost and reschedules those whose policy is Always.
    async fn node_lost(&self, node: &str, lost: &BTreeSet<String>, emit: &Emit) {
        let Ok(apps) = self.store.apps() else { return };
        for mut app in apps {
            let mine: Vec<u32> = app.placements.iter().filter(|(_, p)| p.node == node).map(|(i, _)| *i).collect();
            if mine.is_empty() {
                continue;
            }
            for i in &mine {
                app.placements.get_mut(i).expect("listed").state = PlacementState::Lost;
                let instance = format!("{}/{i}", app.key);
                emit(&sched_line(SchedEvent::InstanceLost { instance, node: node.to_string() }));
            }
            if self
                .store
                .put_app(
                    &app,
                    &DesiredChange::Lost { app: app.key.clone(), node: node.to_string(), instances: mine.clone() },
                )
                .is_err()
            {
                continue;
            }
            let policy = check_spec(&app.spec).map(|s| s.restart_policy.policy).unwrap_or_default();
            if policy != RestartPolicyKind::Always {
                emit(&sched_line(SchedEvent::NotRescheduled {
                    app: Some(app.key.clone()),
                    instance: None,
                    node: node.to_string(),
                    policy,
                    reason: "restartPolicy reschedules on Lost only when Always".into(),
                }));
                continue;
            }
            self.reschedule(&app, &mine, node, lost, "lost", emit).await;
        }
    }

    async fn reschedule(
        &self,
        app: &App,
        indexes: &[u32],
        from: &str,
        avoid: &BTreeSet<String>,
        why: &str,
        emit: &Emit,
    ) {
        let mut avoid = avoid.clone();
        avoid.insert(from.to_string());
        let cause = DeployCause::Rescheduled { reason: why.to_string() };
        match self.deploy_doc(app.spec.clone(), &avoid, cause).await {
            Ok(placed) => {
                for i in indexes {
                    let instance = format!("{}/{i}", app.key);
                    let to = placed.iter().find(|p| p.instance == instance).map(|p| p.node.clone());
                    let (from, reason) = (from.to_string(), why.to_string());
                    emit(&sched_line(SchedEvent::Rescheduled { instance, from, to, reason }));
                }
            }
            Err(e) => emit(&sched_line(SchedEvent::RescheduleFailed {
                app: app.key.clone(),
                from: from.to_string(),
                error: e.to_string(),
            })),
        }
    }

    /// A node answers again: instances placed elsewhere meanwhile are deleted there, its own
    /// Lost placements are Placed again.
    async fn node_back(&self, node: &str, emit: &Emit) {
        let Some(client) = self.client(node) else { return };
        let Ok(apps) = self.store.apps() else { return };
        for mut app in apps {
            let id = instance_id(&app.key, 0);
            let filters = [("namespace", id.namespace.as_str()), ("name", id.name.as_str())];
            let Ok(list) = client.list(&filters).await else { continue };
            let mut changed = false;
            for s in list {
                match app.placements.get_mut(&s.id.index) {
                    Some(p) if p.node == node => {
                        if p.state == PlacementState::Lost {
                            p.state = PlacementState::Placed;
                            changed = true;
                        }
                    }
                    _ => {
                        let r = client.delete(&s.id, Some(60.0)).await;
                        let (instance, node, ok) = (s.id.to_string(), node.to_string(), r.is_ok());
                        emit(&sched_line(SchedEvent::StrayDeleted { instance, node, ok }));
                    }
                }
            }
            if changed {
                let back = DesiredChange::NodeBack { app: app.key.clone(), node: node.to_string() };
                let _ = self.store.put_app(&app, &back);
            }
        }
        emit(&sched_line(SchedEvent::NodeReconciled { node: node.to_string() }));
    }

    /// A daemon gave up on an instance: OnFailure and Always place it elsewhere, Never not.
    async fn on_event(&self, node: &str, ev: &Event, lost: &BTreeSet<String>, emit: &Emit) {
        // Failed: the daemon gave up after its own restarts. Under Never a failed exit
        // (Exited, not 0) is final too; under the others the daemon restarts it itself.
        let EventBody::Instance(InstanceEvent { instance, change: InstanceChange::Transition(t) }) = &ev.body else {
            return;
        };
        let clean_exit = matches!(t.state, Some(State::Exited { status: ExitStatus::Code(0) }));
        let failed_exit = t.to == Kind::Exited && !clean_exit;
        if !(t.to == Kind::Failed || failed_exit) {
            return;
        }
        let Ok(id) = crate::client::parse_instance_id(instance) else { return };
        let key = format!("{}/{}", id.namespace, id.name);
        let Ok(Some(mut app)) = self.store.app(&key) else { return };
        let Some(p) = app.placements.get_mut(&id.index) else { return };
        if p.node != node {
            return;
        }
        let policy = check_spec(&app.spec).map(|s| s.restart_policy.policy).unwrap_or_default();
        if failed_exit && policy != RestartPolicyKind::Never {
            return;
        }
        p.state = PlacementState::Failed;
        let _ = self.store.put_app(&app, &DesiredChange::Failed { instance: id.to_string(), node: node.to_string() });
        if policy == RestartPolicyKind::Never {
            emit(&sched_line(SchedEvent::NotRescheduled {
                app: None,
                instance: Some(id.to_string()),
                node: node.to_string(),
                policy,
                reason: "restartPolicy Never".into(),
            }));
            return;
        }
        self.reschedule(&app, &[id.index], node, lost, "failed", emit).await;
    }
}

/// When each node last sent a line, shared between the followers and `run`.
type HeardAt = Arc<Mutex<BTreeMap<String, Instant>>>;

/// Where `run` reports what it sees and does.
type Emit = Arc<dyn Fn(&WatchLine) + Send + Sync>;

fn sched_line(body: SchedEvent) -> WatchLine {
    WatchLine::Sched(SchedLine::now(body))
}

/// Follows one node forever: reconnects after any end, from the last sequence number seen; a
/// stream silent for `silence` (no event, no heartbeat) is dropped and reopened.
async fn follow_node(
    node: String,
    client: Client,
    since: Option<u64>,
    silence: Duration,
    tx: tokio::sync::mpsc::UnboundedSender<NodeLine>,
    heard: HeardAt,
) {
    let mut cursor = since;
    let mut backoff = Duration::from_millis(200);
    loop {
        let start = match cursor {
            Some(c) => c,
            None => match tokio::time::timeout(NODE_TIMEOUT, client.node()).await {
                Ok(Ok(doc)) => doc.events.last_seq,
                _ => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            },
        };
        let last = Arc::new(Mutex::new((start, Instant::now())));
        let stream = {
            let last = last.clone();
            let tx = tx.clone();
            let node = node.clone();
            let heard = heard.clone();
            client.event_stream(start, true, move |line| {
                let mut l = last.lock().expect("follower lock");
                l.1 = Instant::now();
                heard.lock().expect("heard lock").insert(node.clone(), l.1);
                let item = match line {
                    StreamLine::Event(event) => {
                        l.0 = event.seq;
                        NodeItem::Event(event)
                    }
                    StreamLine::Heartbeat { heartbeat } => {
                        NodeItem::Heartbeat { heartbeat: NodeHeartbeat { last_seq: heartbeat.last_seq } }
                    }
                };
                tx.send(NodeLine { node: node.clone(), item }).is_ok()
            })
        };
        let watchdog = async {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if last.lock().expect("follower lock").1.elapsed() > silence {
                    return;
                }
            }
        };
        let reason = tokio::select! {
            r = stream => match r {
                Ok(()) => "the stream ended".to_string(),
                Err(ClientError::Api { status: 410, .. }) => {
                    // Pruned: say what was missed and go on from the oldest event kept.
                    match client.node().await {
                        Ok(doc) => {
                            let first = doc.events.first_seq.max(start + 1);
                            let gap = NodeItem::Gap { gap: Gap { from: start + 1, to: first - 1 } };
                            if tx.send(NodeLine { node: node.clone(), item: gap }).is_err() {
                                return;
                            }
                            last.lock().expect("follower lock").0 = first - 1;
                            "events were pruned".to_string()
                        }
                        Err(e) => e.to_string(),
                    }
                }
                Err(e) => e.to_string(),
            },
            _ = watchdog => format!("nothing received for {} s", silence.as_secs()),
        };
        let resume_after = last.lock().expect("follower lock").0;
        if resume_after > start {
            backoff = Duration::from_millis(200);
        }
        cursor = Some(resume_after);
        let item = NodeItem::Disconnected { disconnected: Disconnected { reason, resume_after } };
        if tx.send(NodeLine { node: node.clone(), item }).is_err() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{self, Format, Roots};

    /// Placement counts the random ports of a pod's containers as it does a process's: a pod
    /// with two once needed none, and landed on nodes without a free port.
    #[test]
    fn a_pods_random_ports_count_for_placement() {
        let roots = Roots { work_base_dir: "/w".into(), run_base_dir: "/r".into() };
        let pod = serde_json::json!({
            "apiVersion": "v4", "kind": "pod", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": [
                {"name": "main", "image": "busybox", "ports": [
                    {"name": "http", "containerPort": 80, "hostPort": 0},
                    {"name": "admin", "containerPort": 81, "hostPort": 0},
                    {"name": "fixed", "containerPort": 82, "hostPort": 30080}]}]}}}
        });
        let pod = spec::parse(&pod.to_string(), Format::Json, &roots).unwrap();
        assert_eq!(pod.random_ports(), 2);
        // As placement takes it: a node with one free port cannot take an instance.
        let node = |name: &str, free_ports| crate::plugin::placement::NodeView {
            name: name.into(),
            hostname: name.into(),
            free_ports,
            ..Default::default()
        };
        let req = crate::plugin::placement::Request {
            app: "ns/web",
            constraint: None,
            total: 1,
            keep: Default::default(),
            place: vec![0],
            ports_per_instance: pod.random_ports(),
            avoid: Default::default(),
        };
        let e = crate::plugin::placement::place(&req, &[node("small", 1)]).unwrap_err().to_string();
        assert!(e.contains("small: 1 free port(s), an instance needs 2"), "{e}");
        let placed = crate::plugin::placement::place(&req, &[node("small", 1), node("big", 2)]).unwrap();
        assert_eq!(placed.get(&0).map(String::as_str), Some("big"));
        let process = serde_json::json!({
            "apiVersion": "v4", "kind": "process", "metadata": {"name": "svc", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"processes": [{
                "procName": "sh", "workPath": "${work_base_dir}/x", "startCmd": "sleep 1",
                "ports": [{"name": "p", "hostPort": 0}]}]}}}
        });
        assert_eq!(spec::parse(&process.to_string(), Format::Json, &roots).unwrap().random_ports(), 1);
    }
}
