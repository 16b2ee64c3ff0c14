//! Seed 003's DaemonSet and StatefulSet as placement modes (DESIGN § 6).
//!
//! A daemon set has one instance on every host that matches its constraint and is not cordoned
//! (required): each host keeps its index while it stays; a host that joins (or comes to match)
//! gets the lowest free index; a host gone from the cluster file, or that no longer matches,
//! loses its instance. A host that stops answering keeps its placement (Lost): its instance is
//! never moved elsewhere, since every other host has its own.
//!
//! A stateful set starts in order: instance k is applied only once instance k-1 reports Ready;
//! the later ones wait as Pending (`deploy` waits for them; the leading `run` goes on with them).

use super::Scheduler;
use crate::sched::placement::{self, NodeView, Request};
use crate::sched::store::{App, Placement, PlacementState, Settings};
use crate::sched::SchedError;
use crate::spec::AppId;
use crate::spec::ProcessSpec;
use std::collections::{BTreeMap, BTreeSet};

/// Why a stateful set's instance is not applied yet.
pub(super) fn waits_for(previous: u32) -> String {
    format!("{WAITS} {previous} is ready (statefulSet)")
}

const WAITS: &str = "waits until instance";

fn is_waiting(p: &Placement) -> bool {
    matches!(&p.state, PlacementState::Pending { reason } if reason.starts_with(WAITS))
}

/// Every placement not applied yet waits for an earlier instance (a stateful set's).
pub(super) fn waits_in_order(app: &App) -> bool {
    let pending = app.placements.values().filter(|p| matches!(p.state, PlacementState::Pending { .. }));
    pending.clone().next().is_some() && pending.into_iter().all(is_waiting)
}

impl Scheduler {
    /// The app's instances their nodes report Ready (on the node they are placed on).
    pub(super) async fn ready_indexes(&self, app: &App) -> BTreeSet<u32> {
        let id = super::instance_id(&app.key, 0);
        let filters = [("namespace", id.namespace.as_str()), ("name", id.name.as_str())];
        let nodes: BTreeSet<&String> = app.placements.values().map(|p| &p.node).collect();
        let mut ready = BTreeSet::new();
        for node in nodes {
            let Some(client) = self.client(node) else { continue };
            let Ok(Ok(list)) = tokio::time::timeout(super::NODE_TIMEOUT, client.list(&filters)).await else { continue };
            for s in list.iter().filter(|s| s.ready) {
                if app.placements.get(&s.id.index).is_some_and(|p| &p.node == node) {
                    ready.insert(s.id.index);
                }
            }
        }
        ready
    }

    /// Whether a stateful set's waiting instance may go now (the one it waits for is ready).
    pub(super) async fn can_advance(&self, app: &App) -> bool {
        let held = held_back(&app.placements, &self.ready_indexes(app).await);
        app.placements.iter().any(|(i, p)| is_waiting(p) && !held.contains_key(i))
    }

    /// Applies a stateful set's waiting instances as the earlier ones become ready, within the
    /// spec's progress deadline (the leading `run` goes on with what is left).
    pub(super) async fn start_in_order(&self, key: &AppId, note: &(dyn Fn(&str) + Sync)) -> Result<(), SchedError> {
        let started = std::time::Instant::now();
        loop {
            let app = self.stored(key).await?;
            if !app.placements.values().any(is_waiting) {
                return Ok(());
            }
            if self.can_advance(&app).await {
                let why = crate::protocol::DeployCause::Rescheduled { reason: "statefulSet: the next instance".into() };
                self.deploy_doc(app.spec.clone(), &BTreeSet::new(), why).await?;
                note("the next instance applied");
                continue;
            }
            let deadline = super::check_spec(&app.spec).map_or(600, |s| s.strategy.progress_deadline_secs());
            if started.elapsed().as_secs() >= deadline {
                let waiting: Vec<String> =
                    app.placements.iter().filter(|(_, p)| is_waiting(p)).map(|(i, _)| i.to_string()).collect();
                return Err(SchedError::Apply {
                    app: key.to_string(),
                    message: format!(
                        "instances {} still wait for an earlier one to be ready after {deadline} s \
                         (strategy.progressDeadlineSeconds); the leading run goes on with them",
                        waiting.join(", ")
                    ),
                });
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    }
}

/// The daemon set's placements: (kept: index → node, new: index → node). `nodes` is every node
/// of the cluster file; `views` those that answered.
pub(super) fn daemon_set_placements(
    key: &str,
    spec: &ProcessSpec,
    old: &BTreeMap<u32, Placement>,
    nodes: &BTreeSet<String>,
    views: &[NodeView],
    settings: &Settings,
) -> (BTreeMap<u32, String>, BTreeMap<u32, String>) {
    let fits = |view: &NodeView| {
        // A required cordon keeps it off unless tolerated (seed 003 tolerations).
        let closed =
            settings.cordon_of(&view.name).is_some_and(|c| !c.preferred && !spec.schedule.tolerates_cordon(true));
        !closed && fits_one(key, spec, view, spec.random_ports())
    };
    let answering: BTreeMap<&str, &NodeView> = views.iter().map(|v| (v.name.as_str(), v)).collect();
    let mut keep = BTreeMap::new();
    for (i, p) in old {
        let stays = match answering.get(p.node.as_str()) {
            // An instance runs there already: the constraint is checked without counting it
            // again, so only the node's attributes (not its ports) decide.
            Some(view) => constraint_holds(key, spec, view),
            None => nodes.contains(&p.node),
        };
        if stays && !keep.values().any(|n| n == &p.node) {
            keep.insert(*i, p.node.clone());
        }
    }
    let mut placed = BTreeMap::new();
    let mut next = 0u32;
    for view in views {
        if keep.values().any(|n| n == &view.name) || !fits(view) {
            continue;
        }
        while keep.contains_key(&next) || placed.contains_key(&next) {
            next += 1;
        }
        placed.insert(next, view.name.clone());
    }
    (keep, placed)
}

/// Whether the node's attributes meet the constraint (its free ports left aside).
fn constraint_holds(key: &str, spec: &ProcessSpec, view: &NodeView) -> bool {
    // Its own instance is not counted against it (MAXPER and the like).
    let mut view = view.clone();
    view.apps.remove(key);
    fits_one(key, spec, &view, 0)
}

/// Whether one instance of the app, needing `ports` random ports, can be placed on `view`.
fn fits_one(key: &str, spec: &ProcessSpec, view: &NodeView, ports: usize) -> bool {
    let req = Request { total: 1, place: vec![0], ports_per_instance: ports, ..Request::new(key, spec) };
    placement::place(&req, std::slice::from_ref(view)).is_ok()
}

/// Whether the daemon set's placements differ from what the answering nodes call for: a node
/// that matches without an instance, or one with an instance that no longer matches.
pub(super) fn daemon_set_drifted(
    app: &App,
    spec: &ProcessSpec,
    nodes: &BTreeSet<String>,
    views: &[NodeView],
    settings: &Settings,
) -> bool {
    let (keep, placed) = daemon_set_placements(&app.key.to_string(), spec, &app.placements, nodes, views, settings);
    !placed.is_empty() || keep.len() != app.placements.len()
}

/// The stateful set's instances that may not be applied yet: walking up from 0, the first that
/// is not applied is applied (and those after it wait), and one applied that is not ready
/// holds back every later one not applied yet. `ready`: indexes their nodes report Ready.
pub(super) fn held_back(placements: &BTreeMap<u32, Placement>, ready: &BTreeSet<u32>) -> BTreeMap<u32, u32> {
    let mut held = BTreeMap::new();
    let mut blocker: Option<u32> = None;
    for (i, p) in placements {
        let applied = !matches!(p.state, PlacementState::Pending { .. });
        match blocker {
            Some(b) if !applied => {
                held.insert(*i, b);
            }
            Some(_) => {}
            None if !applied => blocker = Some(*i),
            None if !ready.contains(i) => blocker = Some(*i),
            None => {}
        }
    }
    held
}

/// The daemon sets controller: a daemon set's placements follow the hosts — a node that
/// matches without an instance gets one, one that no longer matches (or left the cluster) loses
/// it. An app is looked at when it changes, soon after a node comes up or back (one lost or
/// removed is offered with its apps), and once a reconcile period (labels may change with no
/// word of it). Only nodes that answer are placed on, as last kept (board.rs).
pub(super) struct DaemonSets {
    /// Each app's spec print and whether it is a daemon set (a spec is checked once a change).
    kinds: std::sync::Mutex<BTreeMap<AppId, (u64, bool)>>,
    /// For the reconcile period.
    hosts: std::sync::Arc<super::hosts::Hosts>,
}

impl DaemonSets {
    pub fn new(hosts: std::sync::Arc<super::hosts::Hosts>) -> DaemonSets {
        DaemonSets { kinds: Default::default(), hosts }
    }

    /// The apps known to be daemon sets.
    pub fn all(&self) -> Vec<AppId> {
        let kinds = self.kinds.lock().expect("daemon sets lock");
        kinds.iter().filter(|(_, (_, set))| *set).map(|(k, _)| k.clone()).collect()
    }

    pub fn forget(&self) {
        self.kinds.lock().expect("daemon sets lock").clear();
    }
}

#[async_trait::async_trait]
impl super::controller::Controller for DaemonSets {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "daemon sets"
    }

    fn wants(&self, app: &App, _live: &super::liveness::Liveness) -> bool {
        let print = super::spec_print(&app.spec);
        let mut kinds = self.kinds.lock().expect("daemon sets lock");
        match kinds.get(&app.key) {
            Some((p, set)) if *p == print => *set,
            _ => {
                let set = super::check_spec(&app.spec).is_ok_and(|s| s.daemon_set.is_some());
                kinds.insert(app.key.clone(), (print, set));
                set
            }
        }
    }

    async fn sync(
        &self,
        sched: &std::sync::Arc<Scheduler>,
        key: &AppId,
        emit: &super::Emit,
    ) -> Option<std::time::Duration> {
        use crate::protocol::{DeployCause, SchedEvent};
        let app = match sched.store.app(key).await {
            Ok(Some(app)) => app,
            Ok(None) => {
                self.kinds.lock().expect("daemon sets lock").remove(key);
                return None;
            }
            Err(_) => return Some(std::time::Duration::from_secs(2)),
        };
        let spec = super::check_spec(&app.spec).ok()?;
        spec.daemon_set.as_ref()?;
        // Being changed (a rollout, an apply): looked at once that is done.
        if !super::reconcile::is_settled(&app) {
            return Some(std::time::Duration::from_secs(2));
        }
        let Ok(settings) = sched.store.settings().await else { return Some(std::time::Duration::from_secs(2)) };
        let (views, _) = sched.read_nodes().await;
        let nodes: BTreeSet<String> = sched.nodes().iter().map(|(n, _)| n.clone()).collect();
        if daemon_set_drifted(&app, &spec, &nodes, &views, &settings) {
            let why = DeployCause::Rescheduled { reason: "daemon set: the hosts changed".into() };
            if let Err(e) = sched.deploy_doc(app.spec.clone(), &BTreeSet::new(), why).await {
                emit(&super::run::sched_line(SchedEvent::RescheduleFailed {
                    app: app.key.to_string(),
                    from: String::new(),
                    error: format!("daemon set: {e}"),
                }));
            }
        }
        Some(self.hosts.every())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(states: &[(u32, bool)]) -> BTreeMap<u32, Placement> {
        states
            .iter()
            .map(|(i, applied)| {
                let state =
                    if *applied { PlacementState::Placed } else { PlacementState::Pending { reason: "new".into() } };
                (*i, Placement { node: "h1".into(), state, reschedules: 0 })
            })
            .collect()
    }

    #[test]
    fn a_stateful_set_applies_one_instance_past_the_last_ready_one() {
        // Nothing applied: 0 goes, 1.. wait for it.
        let all_new = placed(&[(0, false), (1, false), (2, false)]);
        assert_eq!(held_back(&all_new, &BTreeSet::new()), BTreeMap::from([(1, 0), (2, 0)]));
        // 0 ready: 1 goes, 2 waits for 1.
        let one = placed(&[(0, true), (1, false), (2, false)]);
        assert_eq!(held_back(&one, &BTreeSet::from([0])), BTreeMap::from([(2, 1)]));
        // 0 applied, not ready: 1 and 2 wait for 0.
        assert_eq!(held_back(&one, &BTreeSet::new()), BTreeMap::from([(1, 0), (2, 0)]));
        // Applied ones are never held back (a later one restarting holds nothing applied).
        let applied = placed(&[(0, true), (1, true), (2, true)]);
        assert!(held_back(&applied, &BTreeSet::from([0, 2])).is_empty());
    }

    #[test]
    fn a_daemon_set_keeps_its_hosts_indexes_and_fills_the_lowest_free_one() {
        let spec = crate::sched::scheduler::check_spec(&serde_json::json!({
            "apiVersion": "v4", "kind": "process", "metadata": {"name": "agent", "namespace": "ns"},
            "daemonSet": {},
            "constraint": {"intersectionItem": [{"unionData": [
                {"name": "idc", "operate": "CLUSTER", "type": 4, "set": {"item": ["a"]}}]}]},
            "spec": {"instance": 1, "template": {"spec": {"processes": [{
                "procName": "sh", "workPath": "${work_base_dir}/x", "startCmd": "sleep 1"}]}}}
        }))
        .unwrap();
        let view = |name: &str, idc: &str| NodeView {
            name: name.into(),
            hostname: name.into(),
            attributes: BTreeMap::from([("idc".to_string(), idc.to_string())]),
            free_ports: 10,
            ..Default::default()
        };
        let old = BTreeMap::from([
            (0, Placement { node: "h1".into(), state: PlacementState::Placed, reschedules: 0 }),
            (1, Placement { node: "h2".into(), state: PlacementState::Lost, reschedules: 0 }),
            (2, Placement { node: "gone".into(), state: PlacementState::Placed, reschedules: 0 }),
            (3, Placement { node: "h3".into(), state: PlacementState::Placed, reschedules: 0 }),
        ]);
        let nodes: BTreeSet<String> = ["h1", "h2", "h3", "h4", "h5", "h6"].iter().map(|s| s.to_string()).collect();
        // h2 does not answer (kept), h3 no longer matches, h4 and h6 join, h5 is cordoned.
        let views = [view("h1", "a"), view("h3", "b"), view("h4", "a"), view("h5", "a"), view("h6", "a")];
        let mut settings = Settings::default();
        settings
            .cordons
            .insert("h5".into(), crate::sched::store::Cordon { preferred: false, since_ms: 0, reason: String::new() });
        let (keep, new) = daemon_set_placements("ns/agent", &spec, &old, &nodes, &views, &settings);
        assert_eq!(keep, BTreeMap::from([(0, "h1".to_string()), (1, "h2".to_string())]));
        assert_eq!(new, BTreeMap::from([(2, "h4".to_string()), (3, "h6".to_string())]));
    }
}
