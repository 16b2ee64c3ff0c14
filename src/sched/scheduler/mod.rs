//! The scheduler's operations: deploy, scale, delete, status, and the event follower that
//! `watch` prints and `run` acts on (lost nodes, failed instances, strays, remote checks).
//!
//! Here: the Scheduler, its nodes and store, status, scale and delete. Deploying is in
//! deploy.rs, following the nodes' streams in follow.rs, what `run` does about them in run.rs.

mod board;
mod checks;
mod config;
mod controller;
mod controls;
mod converge;
mod depends;
mod deploy;
mod endpoints;
mod failed;
mod follow;
mod hooks;
mod hosts;
mod intents;
mod leading;
mod liveness;
mod lost;
mod nodes;
mod reconcile;
mod records;
mod restart;
mod rollout;
mod room;
mod run;
mod sets;

pub use config::{ConfigEntry, EngineConfig};
pub use controls::{Drifted, EngineStatus};
pub use depends::{CopyStatus, DependencyStatus, DEFAULT_GRACE_SECS, OWNER_LABEL};
pub use deploy::checked_documents;
pub use hooks::{RunOnNode, TemplateStored};
pub use intents::{Deleted, Intent};
pub use nodes::{NodeListing, NodeLive};
pub use rollout::{NodeRevisions, NodeRollout, SchedRevision, SchedRevisions, SchedRolloutStatus};
pub use run::NodesWatch;

use super::cluster::Cluster;
use super::placement::NodeView;
use super::store::{App, DesiredStore, LocalStore, PlacementState};
use super::SchedError;
use crate::client::Client;
pub use crate::protocol::sched_answers::PlacedInstance;
use crate::protocol::DeployCause;
use crate::spec::{AppId, InstanceId, ProcessSpec, SpecErrors};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Read-modify-write attempts before a change gives up to another writer (see `update_app`).
const UPDATE_TRIES: usize = 8;

use liveness::{Liveness, LATE_NODE_TIMEOUT, NODE_TIMEOUT};

pub struct Scheduler {
    pub cluster: Cluster,
    /// Every node's client, replaced whole when `run` reloads the cluster file.
    nodes: std::sync::RwLock<Nodes>,
    store: Box<dyn DesiredStore>,
    /// Nodes that did not answer this process, and why (the last reason): every command
    /// reports them, success or not (`--strict` makes them an error).
    unreachable: std::sync::Mutex<BTreeMap<String, String>>,
    /// The store is shared (etcd) and this process does not lead: a deploy stores its
    /// placements and leaves applying them to the leading `run`.
    hand_off: std::sync::atomic::AtomicBool,
    /// Where the desired state is, for `status`.
    store_name: String,
    /// What `run` knows of each node's liveness (nothing elsewhere): which are lost, and how
    /// long a read of each may take (liveness.rs).
    live: std::sync::RwLock<Liveness>,
    /// Copies a dependency's rolling update found ready (depends.rs).
    copy_checks: std::sync::Mutex<depends::CopyChecks>,
    /// The nodes as last read, kept until they change (board.rs).
    board: std::sync::Arc<board::Board>,
    /// Apps this process is placing and applying now (a deploy, a scale, a reschedule): their
    /// placements stored Pending are that deploy's to apply, not the pending-placements
    /// controller's, which would apply them a second time beside it.
    applying: std::sync::Arc<std::sync::Mutex<BTreeMap<AppId, usize>>>,
}

/// Marks an app as being applied by this process while held (see `Scheduler::applying`).
pub(super) struct Applying {
    apps: std::sync::Arc<std::sync::Mutex<BTreeMap<AppId, usize>>>,
    key: AppId,
}

impl Drop for Applying {
    fn drop(&mut self) {
        let mut apps = self.apps.lock().expect("applying lock");
        if let Some(n) = apps.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                apps.remove(&self.key);
            }
        }
    }
}

/// The nodes read once for a burst of placements (a lost fleet's apps, several at once): each
/// places on it, one at a time, taking what it placed out of it, instead of reading every node
/// again per app (each instance starting elsewhere makes its node's kept reading stale).
pub(super) struct PassView {
    view: std::sync::Mutex<NodesRead>,
    placing: std::sync::Arc<tokio::sync::Mutex<()>>,
    pub read_at: std::time::Instant,
}

/// The nodes that answered, and why each other did not.
pub(super) type NodesRead = (Vec<NodeView>, BTreeMap<String, String>);

tokio::task_local! {
    /// The burst of placements this task's placements belong to, if any.
    pub(super) static PASS_VIEW: std::sync::Arc<PassView>;
}

tokio::task_local! {
    /// What the API request this task serves is to tell its client besides its answer.
    static REQUEST_TOLD: std::sync::Arc<std::sync::Mutex<Told>>;
}

/// What a command tells its operator besides its result: the nodes that did not answer it, and
/// what it said as it went (a rollout's progress), in order.
#[derive(Debug, Clone, Default)]
pub struct Told {
    pub unreachable: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

/// Tells the operator `line` as a command goes: on this process's stderr, and, in `serve`,
/// to the client of the request being served (which prints it on its own stderr).
pub fn tell(line: &str) {
    eprintln!("{line}");
    let _ = REQUEST_TOLD.try_with(|told| told.lock().expect("told lock").notes.push(line.to_string()));
}

/// The cluster's nodes: name and client, in the cluster file's order.
pub type Nodes = std::sync::Arc<Vec<(String, Client)>>;

/// Where `run` reports what it sees and does.
pub(super) type Emit = std::sync::Arc<dyn Fn(&crate::protocol::WatchLine) + Send + Sync>;

/// What a reload of the cluster file changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodesChanged {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same name, another address, certificate name or token.
    pub changed: Vec<String>,
}

impl NodesChanged {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// What a node runs, by app: each instance's index and state.
type Listings = BTreeMap<AppId, Vec<(u32, Seen)>>;

/// What a node reports of one instance.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    state: String,
    ready: bool,
    restarts: u64,
    message: String,
    /// It has been started at least once.
    started: bool,
}

impl Seen {
    fn of(s: &crate::protocol::InstanceStatus) -> Seen {
        let kind = serde_json::to_value(s.state.kind()).ok().and_then(|k| k.as_str().map(String::from));
        Seen {
            state: kind.unwrap_or_default(),
            ready: s.ready,
            restarts: s.restarts,
            message: s.message.clone(),
            started: s.last_start_ms.is_some(),
        }
    }

    fn none(state: &str, message: &str) -> Seen {
        Seen { state: state.into(), ready: false, restarts: 0, message: message.into(), started: false }
    }
}

/// Parses and checks a spec document the way the daemons will (everything but the paths,
/// which depend on each daemon's roots and are checked there).
pub fn check_spec(doc: &Value) -> Result<ProcessSpec, SpecErrors> {
    crate::spec::check_document(doc, crate::spec::validate::validate)
}

/// The cluster file's node clients, each telling `board` of its own writes to its node that
/// change what runs there (what was read of the node before is stale). The endpoints and
/// desired sets pushed to every node, hook templates and runs, values and files change no
/// instance by themselves; what they lead to comes as events.
fn noting_clients(
    cluster: &Cluster,
    board: &std::sync::Arc<board::Board>,
) -> Result<Vec<(String, Client)>, SchedError> {
    const CHANGE_WHAT_RUNS: [&str; 4] = ["/v1/apply", "/v1/instances/", "/v1/apps/", "/v1/cronjobs/"];
    let clients = cluster.clients()?.into_iter().map(|(name, client)| {
        let (board, node) = (board.clone(), name.clone());
        let noted = move |path: &str| {
            if CHANGE_WHAT_RUNS.iter().any(|p| path.starts_with(p)) && !path.ends_with("/files") {
                board.changed(&node);
            }
        };
        (name, client.noting_writes(noted))
    });
    Ok(clients.collect())
}

fn app_key(spec: &ProcessSpec) -> AppId {
    AppId::of(spec)
}

fn instance_id(key: &AppId, index: u32) -> InstanceId {
    key.instance(index)
}

impl Scheduler {
    /// Opens the cluster's clients and the embedded desired-state store.
    /// Opens the cluster's clients and its desired-state store: etcd when `store` (or the
    /// cluster file's `store`) names one, else the embedded store under `state_dir`.
    pub async fn open(cluster: Cluster, store: Option<&str>) -> Result<Scheduler, SchedError> {
        let url = store.or(cluster.store.as_deref()).map(String::from);
        let (store, shared): (Box<dyn DesiredStore>, bool) = match &url {
            Some(url) => (Box::new(crate::sched::etcd::EtcdStore::connect(url).await?), true),
            None => (Box::new(LocalStore::open(&cluster.state_dir)?), false),
        };
        let mut sched = Scheduler::with_store(cluster, store)?;
        if let Some(url) = url {
            sched.store_name = url;
        }
        sched.hand_off.store(shared, std::sync::atomic::Ordering::SeqCst);
        Ok(sched)
    }

    /// With another [`DesiredStore`] (a distributed one, a test double).
    pub fn with_store(cluster: Cluster, store: Box<dyn DesiredStore>) -> Result<Scheduler, SchedError> {
        let board = std::sync::Arc::new(board::Board::default());
        let nodes = std::sync::RwLock::new(std::sync::Arc::new(noting_clients(&cluster, &board)?));
        let store_name = format!("embedded ({})", cluster.state_dir.display());
        Ok(Scheduler {
            cluster,
            nodes,
            store,
            unreachable: Default::default(),
            hand_off: Default::default(),
            store_name,
            live: Default::default(),
            copy_checks: Default::default(),
            board,
            applying: Default::default(),
        })
    }

    /// The nodes as now known (a snapshot: a reload replaces the list, not this one).
    pub fn nodes(&self) -> Nodes {
        self.nodes.read().expect("nodes lock").clone()
    }

    /// Takes the nodes of a reloaded cluster file: what was added, removed, changed (another
    /// address, name checked or token; with `new_roots`, every node kept).
    pub fn set_nodes(&self, cluster: &Cluster, new_roots: bool) -> Result<NodesChanged, SchedError> {
        let fresh = noting_clients(cluster, &self.board)?;
        let mut nodes = self.nodes.write().expect("nodes lock");
        let old: BTreeMap<&str, &Client> = nodes.iter().map(|(n, c)| (n.as_str(), c)).collect();
        let new: BTreeMap<&str, &Client> = fresh.iter().map(|(n, c)| (n.as_str(), c)).collect();
        let changed = NodesChanged {
            added: new.keys().filter(|n| !old.contains_key(*n)).map(|n| n.to_string()).collect(),
            removed: old.keys().filter(|n| !new.contains_key(*n)).map(|n| n.to_string()).collect(),
            changed: new
                .iter()
                .filter(|(n, c)| old.get(*n).is_some_and(|o| new_roots || !o.same_target(c)))
                .map(|(n, _)| n.to_string())
                .collect(),
        };
        *nodes = std::sync::Arc::new(fresh);
        for node in changed.removed.iter().chain(&changed.changed) {
            self.board.forget(node);
        }
        Ok(changed)
    }

    /// Marks `key` as being applied by this process until the guard is dropped.
    pub(super) fn applying(&self, key: &AppId) -> Applying {
        *self.applying.lock().expect("applying lock").entry(key.clone()).or_default() += 1;
        Applying { apps: self.applying.clone(), key: key.clone() }
    }

    /// As [`Scheduler::applying`], unless this process is applying `key` already.
    pub(super) fn try_applying(&self, key: &AppId) -> Option<Applying> {
        let mut apps = self.applying.lock().expect("applying lock");
        if apps.contains_key(key) {
            return None;
        }
        apps.insert(key.clone(), 1);
        Some(Applying { apps: self.applying.clone(), key: key.clone() })
    }

    pub fn client(&self, node: &str) -> Option<Client> {
        self.nodes().iter().find(|(n, _)| n == node).map(|(_, c)| c.clone())
    }

    /// Notes that `node` did not answer (see [`Scheduler::unreachable`]).
    pub fn note_unreachable(&self, node: &str, why: &str) {
        self.unreachable.lock().expect("unreachable lock").insert(node.to_string(), why.to_string());
        // An API request's own: what `serve` answers that request with (its process-wide map
        // holds every request's and the leader loop's).
        let _ = REQUEST_TOLD
            .try_with(|told| told.lock().expect("told lock").unreachable.insert(node.to_string(), why.to_string()));
    }

    /// Runs `request` keeping what it tells (nodes that did not answer, notes) apart from every
    /// other request's: its result, with what it told.
    pub async fn telling<T>(request: impl std::future::Future<Output = T>) -> (T, Told) {
        let told = std::sync::Arc::new(std::sync::Mutex::new(Told::default()));
        let out = REQUEST_TOLD.scope(told.clone(), request).await;
        let told = told.lock().expect("told lock").clone();
        (out, told)
    }

    /// Every node that did not answer this process, and the last reason.
    pub fn unreachable(&self) -> BTreeMap<String, String> {
        self.unreachable.lock().expect("unreachable lock").clone()
    }

    /// Whether applying is left to the leading `run` (a shared store, not leading).
    pub(super) fn hands_off(&self) -> bool {
        self.hand_off.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn store(&self) -> &dyn DesiredStore {
        self.store.as_ref()
    }

    /// Every node that answers, and why the others do not: read now, or as last read when it
    /// has not changed since (board.rs).
    pub async fn read_nodes(&self) -> (Vec<NodeView>, BTreeMap<String, String>) {
        let nodes = self.nodes();
        let mut views = BTreeMap::new();
        let mut asked = Vec::new();
        for (name, client) in nodes.iter() {
            // A node declared lost is not asked (node_documents says why).
            let kept = self.node_timeout(name).map(|_| self.board.kept(name));
            match kept {
                Some(Ok(view)) => {
                    views.insert(name.clone(), view);
                }
                Some(Err(ticket)) => asked.push((name.clone(), client.clone(), Some(ticket))),
                None => asked.push((name.clone(), client.clone(), None)),
            }
        }
        let tickets: BTreeMap<String, Option<board::Ticket>> =
            asked.iter().map(|(name, _, ticket)| (name.clone(), *ticket)).collect();
        let asked: Vec<(String, Client)> = asked.into_iter().map(|(name, client, _)| (name, client)).collect();
        let mut down = BTreeMap::new();
        for (name, doc) in self.documents_of(&asked).await {
            match doc {
                Ok(doc) => {
                    let view = NodeView::from_node(&name, &doc);
                    if let Some(Some(ticket)) = tickets.get(&name) {
                        self.board.store(&name, &view, *ticket);
                    }
                    views.insert(name, view);
                }
                Err(why) => {
                    self.note_unreachable(&name, &why);
                    down.insert(name, why);
                }
            }
        }
        // In the cluster file's order, as read.
        let views = nodes.iter().filter_map(|(name, _)| views.remove(name)).collect();
        (views, down)
    }

    /// Every node's GET /v1/node, asked at once: its document, or why it did not answer.
    /// A node the leading `run` declared lost is not asked (it is silent: a read would only
    /// wait out its timeout, for every app a lost node's pass places); a quiet one briefly.
    pub(super) async fn node_documents(&self) -> Vec<(String, Result<crate::protocol::NodeDocument, String>)> {
        self.documents_of(&self.nodes()).await
    }

    /// [`Scheduler::node_documents`] of `nodes`.
    async fn documents_of(
        &self,
        nodes: &[(String, Client)],
    ) -> Vec<(String, Result<crate::protocol::NodeDocument, String>)> {
        let reads = nodes.iter().map(|(name, client)| {
            let limit = self.node_timeout(name);
            async move {
                let Some(limit) = limit else {
                    return (name.clone(), Err("lost: silent past the heartbeat timeout".to_string()));
                };
                let doc = match tokio::time::timeout(limit, client.node()).await {
                    Ok(Ok(doc)) => Ok(doc),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {:.1} s", limit.as_secs_f64())),
                };
                (name.clone(), doc)
            }
        });
        futures_util::future::join_all(reads).await
    }

    /// How long a read of `node` may take: None when the leading `run` declared it lost (it is
    /// not asked); see [`Liveness::read_limit`].
    pub(super) fn node_timeout(&self, node: &str) -> Option<Duration> {
        self.live().read_limit(node, std::time::Instant::now())
    }

    /// What `run` knows of each node's liveness.
    fn live(&self) -> std::sync::RwLockReadGuard<'_, Liveness> {
        self.live.read().expect("liveness lock")
    }

    /// What `run` knows of each node's liveness, to change it.
    fn live_mut(&self) -> std::sync::RwLockWriteGuard<'_, Liveness> {
        self.live.write().expect("liveness lock")
    }

    /// The nodes for a placement: the burst's view when this task places in one, else read
    /// now.
    pub(super) async fn nodes_to_place_on(&self) -> NodesRead {
        if let Ok(view) = PASS_VIEW.try_with(|p| p.view.lock().expect("pass view lock").clone()) {
            return view;
        }
        self.read_nodes().await
    }

    /// What a placement took, out of the kept readings and the burst's view (when this task
    /// places in one): the app's instances there, their random ports and their requests.
    pub(super) fn placed_in_pass(&self, key: &AppId, spec: &ProcessSpec, placed: &BTreeMap<u32, String>) {
        self.board.took(key, spec, placed);
        let _ = PASS_VIEW.try_with(|p| {
            let mut view = p.view.lock().expect("pass view lock");
            for node in placed.values() {
                if let Some(v) = view.0.iter_mut().find(|v| v.name == *node) {
                    board::take(v, key, spec);
                }
            }
        });
    }

    /// In a burst: the right to place on its view, until what was placed is taken out of it
    /// (placements made at once on one view would each see the same room).
    pub(super) async fn placing_in_pass(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let placing = PASS_VIEW.try_with(|p| p.placing.clone()).ok()?;
        Some(placing.lock_owned().await)
    }

    /// The nodes read once, for a burst of placements to share (see [`PassView`]).
    pub(super) async fn pass_view(&self) -> std::sync::Arc<PassView> {
        let view = self.read_nodes().await;
        std::sync::Arc::new(PassView {
            view: std::sync::Mutex::new(view),
            placing: Default::default(),
            read_at: std::time::Instant::now(),
        })
    }

    /// Each placement with what its node reports. Asked at once: the nodes it is placed on,
    /// and those whose last reading (`views`) runs any of it (strays); no other. A node's
    /// listing kept since it last changed is not asked again (board.rs).
    pub(super) async fn describe(&self, app: &App, views: &[NodeView]) -> Vec<PlacedInstance> {
        let asked = nodes_to_ask(app, views);
        let lists = asked.into_iter().map(|node| async move {
            let seen = self.listings_on(&node, std::slice::from_ref(&app.key)).await;
            (node, seen.map(|mut by_app| by_app.remove(&app.key).unwrap_or_default()))
        });
        let seen: BTreeMap<String, Option<Vec<(u32, Seen)>>> =
            futures_util::future::join_all(lists).await.into_iter().collect();
        describe_from(app, &seen)
    }

    /// What `node` runs of each of `apps`: kept on the board since it last changed, else
    /// listed (that one app's instances when it is the only one asked, else everything) and
    /// kept. None when it does not answer (noted) or is no longer in the cluster file.
    async fn listings_on(&self, node: &str, apps: &[AppId]) -> Option<Listings> {
        let mut listings = Listings::new();
        let mut tickets = Vec::new();
        for app in apps {
            match self.board.listed(node, app) {
                Ok(seen) => {
                    listings.insert(app.clone(), seen);
                }
                Err(ticket) => tickets.push((app, ticket)),
            }
        }
        if tickets.is_empty() {
            return Some(listings);
        }
        let client = self.client(node)?;
        let filters: Vec<(&str, &str)> = match tickets.as_slice() {
            [(app, _)] => vec![("namespace", app.namespace.as_str()), ("name", app.name.as_str())],
            _ => Vec::new(),
        };
        let limit = self.node_timeout(node).unwrap_or(LATE_NODE_TIMEOUT);
        let Ok(Ok(list)) = tokio::time::timeout(limit, client.list(&filters)).await else {
            self.note_unreachable(node, "no answer to the instance list");
            return None;
        };
        let mut by_app = Listings::new();
        // One a failed rollout kept for its output is no placement, and no stray.
        for s in list.into_iter().filter(|s| !s.kept) {
            by_app.entry(s.id.app()).or_default().push((s.id.index, Seen::of(&s)));
        }
        for (app, ticket) in tickets {
            let seen = by_app.remove(app).unwrap_or_default();
            self.board.store_listing(node, app, &seen, ticket);
            listings.insert(app.clone(), seen);
        }
        Some(listings)
    }
}

/// The nodes to ask about `app`: those it is placed on, and those whose last reading (`views`)
/// runs any of it (strays).
fn nodes_to_ask(app: &App, views: &[NodeView]) -> Vec<String> {
    let key = app.key.to_string();
    let placed: BTreeSet<&str> = app.placements.values().map(|p| p.node.as_str()).collect();
    views
        .iter()
        .filter(|v| placed.contains(v.name.as_str()) || v.apps.contains_key(&key))
        .map(|v| v.name.clone())
        .collect()
}

/// Each placement of `app` with what its nodes report (`seen`: node → its instances of the
/// app, None when it did not answer), and the instances found where they are not placed.
fn describe_from(app: &App, seen: &BTreeMap<String, Option<Vec<(u32, Seen)>>>) -> Vec<PlacedInstance> {
    let mut actual: BTreeMap<(String, u32), Seen> = BTreeMap::new();
    let mut reachable = BTreeSet::new();
    for (node, list) in seen {
        if let Some(list) = list {
            reachable.insert(node.clone());
            for (index, s) in list {
                actual.insert((node.clone(), *index), s.clone());
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
        let seen = match actual.remove(&(p.node.clone(), *i)) {
            Some(s) => s,
            None if job_node.is_some() => Seen::none("job", "its runs are listed below"),
            None if reachable.contains(&p.node) => Seen::none("missing", ""),
            None => Seen::none("unreachable", ""),
        };
        let placement = match &app.deleting {
            Some(d) if d.nodes.contains(&p.node) => PlacementState::Deleting,
            Some(_) => continue,
            None => p.state.clone(),
        };
        // Just applied, not yet started: its start is under way (unless it was stopped).
        let state = if seen.state == "Stopped" && !seen.started && !app.stopped.contains(i) {
            "Starting".to_string()
        } else {
            seen.state
        };
        out.push(PlacedInstance {
            instance: format!("{}/{i}", app.key),
            node: p.node.clone(),
            placement,
            state,
            ready: seen.ready,
            restarts: seen.restarts,
            message: seen.message,
        });
    }
    // Held for room (`--wait-for-room`): no node yet.
    for i in app.waiting.iter().flat_map(|w| &w.instances) {
        let reason = app.waiting.as_ref().map(|w| w.reason.as_str()).unwrap_or_default();
        let lines: Vec<&str> = reason.lines().map(str::trim).collect();
        out.push(PlacedInstance {
            instance: format!("{}/{i}", app.key),
            node: "-".into(),
            placement: PlacementState::Pending { reason: "waiting for room".into() },
            state: "Pending".into(),
            ready: false,
            restarts: 0,
            message: lines.join("; "),
        });
    }
    // Instances running where the scheduler did not place them (a node back from the dead).
    for ((node, i), seen) in actual {
        let placement = match &app.deleting {
            _ if job_node.as_deref() == Some(node.as_str()) => PlacementState::Placed,
            Some(_) => PlacementState::Deleting,
            None => PlacementState::Stray,
        };
        out.push(PlacedInstance {
            instance: format!("{}/{i}", app.key),
            node,
            placement,
            state: seen.state,
            ready: seen.ready,
            restarts: seen.restarts,
            message: seen.message,
        });
    }
    out
}

impl Scheduler {
    /// `status`: every app's placements with what the nodes report. Each node is asked once
    /// for all it runs (not once per app), and not at all when every app's listing of it is
    /// kept since it last changed.
    pub async fn status(&self) -> Result<Vec<PlacedInstance>, SchedError> {
        let (views, _) = self.read_nodes().await;
        let apps = self.store.apps().await?;
        let asked: Vec<Vec<String>> = apps.iter().map(|app| nodes_to_ask(app, &views)).collect();
        let mut asks: BTreeMap<&str, Vec<AppId>> = BTreeMap::new();
        for (app, nodes) in apps.iter().zip(&asked) {
            for node in nodes {
                asks.entry(node).or_default().push(app.key.clone());
            }
        }
        let lists = asks.into_iter().map(|(node, keys)| async move { (node, self.listings_on(node, &keys).await) });
        let mut by_node: BTreeMap<&str, Option<Listings>> =
            futures_util::future::join_all(lists).await.into_iter().collect();
        let mut out = Vec::new();
        for (app, nodes) in apps.iter().zip(&asked) {
            let seen = nodes
                .iter()
                .map(|node| {
                    let listed = by_node.get_mut(node.as_str()).and_then(Option::as_mut);
                    (node.clone(), listed.map(|by_app| by_app.remove(&app.key).unwrap_or_default()))
                })
                .collect();
            out.extend(describe_from(app, &seen));
        }
        Ok(out)
    }

    /// Whether app `key` is stored (and not being deleted).
    pub async fn app_exists(&self, key: &AppId) -> Result<bool, SchedError> {
        Ok(self.store.app(key).await?.is_some_and(|a| a.deleting.is_none()))
    }

    /// One app as stored (spec, placements, rollout, stops) with what its nodes report.
    pub async fn app_detail(&self, key: &AppId) -> Result<crate::protocol::AppDetail, SchedError> {
        let app = self.stored_any(key).await?;
        let (views, _) = self.read_nodes().await;
        let instances = self.describe(&app, &views).await;
        Ok(crate::protocol::AppDetail { app, instances })
    }

    /// Reads app `key`, lets `change` modify it and writes it — from a fresh read again when
    /// another writer came between (compare-and-swap), up to [`UPDATE_TRIES`] times. `change`
    /// returns false to write nothing. The app as written, or None when it is gone (or nothing
    /// was written).
    pub(super) async fn update_app(
        &self,
        key: &AppId,
        why: &crate::protocol::DesiredChange,
        change: impl Fn(&mut App) -> bool,
    ) -> Result<Option<App>, SchedError> {
        self.update_app_noting(key, std::slice::from_ref(why), change).await
    }

    /// As [`Scheduler::update_app`], journaling each of `whys` with the one write.
    pub(super) async fn update_app_noting(
        &self,
        key: &AppId,
        whys: &[crate::protocol::DesiredChange],
        change: impl Fn(&mut App) -> bool,
    ) -> Result<Option<App>, SchedError> {
        for _ in 0..UPDATE_TRIES {
            let Some(mut app) = self.store.app(key).await? else { return Ok(None) };
            if !change(&mut app) {
                return Ok(None);
            }
            match self.store.put_app_noting(&mut app, whys).await {
                Ok(()) => return Ok(Some(app)),
                Err(SchedError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(SchedError::Conflict { app: key.to_string() })
    }

    /// App `key` as stored, unless it is being deleted.
    async fn stored(&self, key: &AppId) -> Result<App, SchedError> {
        let app = self.stored_any(key).await?;
        match &app.deleting {
            Some(d) => Err(SchedError::Apply {
                app: key.to_string(),
                message: format!(
                    "it is being deleted (nodes {} have yet to get the delete); deploy it again to bring it back",
                    d.nodes.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
                ),
            }),
            None => Ok(app),
        }
    }

    /// App `key` as stored, being deleted or not; a missing one's error says what was meant.
    async fn stored_any(&self, key: &AppId) -> Result<App, SchedError> {
        if let Some(app) = self.store.app(key).await? {
            return Ok(app);
        }
        let like: Vec<String> = self
            .store
            .apps()
            .await?
            .into_iter()
            .filter(|a| a.key.name == key.name)
            .map(|a| a.key.to_string())
            .collect();
        let hint = match (!key.namespace.is_empty(), like.as_slice()) {
            (_, [one]) => format!("apps are named namespace/name: did you mean {one}?"),
            (_, [_, ..]) => format!("apps are named namespace/name: one of {}?", like.join(", ")),
            (false, []) => "apps are named namespace/name; `steward-sched status` lists them".into(),
            (true, []) => "deploy it first; `steward-sched status` lists the apps".into(),
        };
        // As the operator wrote it: a name alone, when they left the namespace out.
        let asked = if key.namespace.is_empty() { key.name.clone() } else { key.to_string() };
        Err(SchedError::NoApp { app: asked, hint })
    }

    /// `scale APP N`: new instances are placed, ones from N up deleted; the others stay.
    /// `wait_for_room`: as for `deploy` (None: the app's own choice at its deploy).
    pub async fn scale(
        &self,
        key: &AppId,
        instances: u32,
        wait_for_room: Option<bool>,
    ) -> Result<Vec<PlacedInstance>, SchedError> {
        let mut app = self.stored(key).await?;
        let spec = check_spec(&app.spec).map_err(|errors| SchedError::Spec { path: "(stored spec)".into(), errors })?;
        if spec.daemon_set.is_some() {
            let message = "a daemon set runs one instance on every matching host: change its constraint".into();
            return Err(SchedError::Apply { app: key.to_string(), message });
        }
        app.spec["spec"]["instance"] = json!(instances);
        let cause = DeployCause::Scaled { instances };
        let placed = self.deploy_doc_with(app.spec, &BTreeSet::new(), cause, wait_for_room).await?;
        if self.hands_off() {
            return self.wait_applied(key).await;
        }
        if spec.stateful_set.is_some() {
            self.start_in_order(key, &|what: &str| tell(&format!("{key}: {what}"))).await?;
            let (views, _) = self.read_nodes().await;
            return Ok(self.describe(&self.stored(key).await?, &views).await);
        }
        Ok(placed)
    }
}

/// A print of a spec document (a hash of its JSON): cheap enough to take for every app at every
/// offer, where a spec check is not; equal prints, same document.
pub(super) fn spec_print(doc: &serde_json::Value) -> u64 {
    use std::hash::Hasher;
    struct Hashing(std::collections::hash_map::DefaultHasher);
    impl std::io::Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut h = Hashing(Default::default());
    // Writing JSON into a hasher cannot fail.
    let _ = serde_json::to_writer(&mut h, doc);
    h.0.finish()
}
