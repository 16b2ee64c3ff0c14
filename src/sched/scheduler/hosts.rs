//! The node-lifecycle controller: each node is brought up to date by a sync of its own — when
//! the leader hears it (new to this leadership, back after it was declared lost, or started
//! over: its journal begun anew), once every reconcile period after that, and soon after an
//! app it runs or is meant to run changes or one of its instances is deleted. A sync reads the
//! node once; hands it its whole desired set (converge.rs); compares it with the desired state
//! (reconcile.rs: strays, missing instances, revisions behind, failures unheard, reschedule
//! counts reset); and reads its endpoints. Nodes are synced several at once, each on its own
//! clock, so a fleet's passes spread over the period instead of reading every node at once.

use super::controller::Controller;
use super::converge::DesiredReads;
use super::endpoints::Endpoints;
use super::reconcile::Unheard;
use super::{Emit, Scheduler};
use crate::sched::store::App;
use crate::spec::AppId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a node is owed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Owed {
    /// Heard for the first time by this leadership: templates stored meanwhile, deletes it
    /// missed.
    pub up: bool,
    /// Back after being lost: besides, strays placed elsewhere meanwhile deleted, its Lost
    /// placements Placed again.
    pub back: bool,
    /// Its daemon started over: every app placed on it applied again.
    pub resync: bool,
}

impl Owed {
    fn with(self, other: Owed) -> Owed {
        Owed { up: self.up || other.up, back: self.back || other.back, resync: self.resync || other.resync }
    }

    fn without(self, done: Owed) -> Owed {
        Owed { up: self.up && !done.up, back: self.back && !done.back, resync: self.resync && !done.resync }
    }

    fn is_empty(self) -> bool {
        self == Owed::default()
    }
}

/// Each node's work owed by its arrival (until done), and what the passes over the nodes
/// share.
pub(super) struct Hosts {
    owed: Mutex<BTreeMap<String, Owed>>,
    endpoints: Arc<Endpoints>,
    /// The reconcile period: how often each node is synced, which the hosts are told with
    /// their desired sets.
    every: Mutex<Duration>,
    /// The desired state, read once for the syncs that read their nodes before it.
    desired: DesiredReads,
    /// Failed instances found still placed with no event about them handled.
    unheard: Unheard,
    /// The apps each node ran at its last pass: a change to one of them (a scale down's
    /// stray) is looked at there soon.
    seen: Mutex<BTreeMap<String, BTreeSet<AppId>>>,
    /// When each node's last pass began: changes pass over a node at most once per
    /// [`CHANGES_GAP`].
    passed: Mutex<BTreeMap<String, Instant>>,
}

/// How soon after a change to an app its nodes are passed over (a burst of changes makes one
/// pass).
const CHANGES_SOON: Duration = Duration::from_secs(1);

/// The least time between two passes over a node that changes ask for: a burst of changes
/// (a lost fleet's reschedules touch every app) must not keep every node's pass running.
const CHANGES_GAP: Duration = Duration::from_secs(5);

impl Hosts {
    pub fn new(endpoints: Arc<Endpoints>, every: Duration) -> Hosts {
        Hosts {
            owed: Default::default(),
            endpoints,
            every: Mutex::new(every),
            desired: Default::default(),
            unheard: Default::default(),
            seen: Default::default(),
            passed: Default::default(),
        }
    }

    /// Notes what `node` is owed; the caller queues it.
    pub fn owe(&self, node: &str, owed: Owed) {
        let mut all = self.owed.lock().expect("hosts lock");
        let now = all.get(node).copied().unwrap_or_default().with(owed);
        all.insert(node.to_string(), now);
    }

    /// Whether `node` has work owed or under way (the pass over the cluster leaves it alone).
    pub fn owes(&self, node: &str) -> bool {
        self.owed.lock().expect("hosts lock").contains_key(node)
    }

    /// Nothing is owed or known any more (the lead lost, or maintenance began).
    pub fn forget(&self) {
        self.owed.lock().expect("hosts lock").clear();
        self.unheard.lock().expect("failures lock").clear();
        self.seen.lock().expect("hosts lock").clear();
        self.passed.lock().expect("hosts lock").clear();
        self.desired.forget();
    }

    /// The nodes `apps` (as now stored) concern — those they are placed on, and those that ran
    /// them at their last pass — each with how soon it is to be passed over for them.
    pub fn after_changes(&self, apps: &[App]) -> Vec<(String, Duration)> {
        let mut nodes: BTreeSet<String> =
            apps.iter().flat_map(|a| a.placements.values().map(|p| p.node.clone())).collect();
        for (node, ran) in self.seen.lock().expect("hosts lock").iter() {
            if apps.iter().any(|a| ran.contains(&a.key)) {
                nodes.insert(node.clone());
            }
        }
        let passed = self.passed.lock().expect("hosts lock");
        let now = Instant::now();
        nodes
            .into_iter()
            .map(|node| {
                let gap = passed.get(&node).map_or(Duration::ZERO, |at| CHANGES_GAP.saturating_sub(now - *at));
                (node, gap.max(CHANGES_SOON))
            })
            .collect()
    }

    /// The nodes passed over while this process leads.
    pub fn passed_nodes(&self) -> Vec<String> {
        self.passed.lock().expect("hosts lock").keys().cloned().collect()
    }

    pub fn every(&self) -> Duration {
        *self.every.lock().expect("hosts lock")
    }

    pub fn set_every(&self, every: Duration) {
        *self.every.lock().expect("hosts lock") = every;
    }
}

#[async_trait::async_trait]
impl Controller for Hosts {
    type Key = String;

    fn name(&self) -> &'static str {
        "hosts"
    }

    /// Some(every): synced again a reconcile period from now. A node lost (or gone from the
    /// cluster file) is not: its return queues it again.
    async fn sync(&self, sched: &Arc<Scheduler>, node: &String, emit: &Emit) -> Option<Duration> {
        let work = self.owed.lock().expect("hosts lock").get(node).copied().unwrap_or_default();
        let ready = sched.live().is_ready(node);
        if ready {
            if work.resync {
                sched.resync(node, emit).await;
            }
            if work.back {
                sched.node_back(node, emit).await;
            } else if work.up {
                // New to this leadership: templates stored and deletes made while it was away.
                sched.sync_hook_templates(node).await;
                sched.finish_deletes(node, emit).await;
            }
            self.pass(sched, node, emit).await;
            // Every app it runs, so what its arrival changed is published.
            self.endpoints.refresh(sched, node, None, emit).await;
        }
        // What was owed meanwhile stays (the queue syncs the node again).
        let mut owed = self.owed.lock().expect("hosts lock");
        if let Some(now) = owed.get(node).copied() {
            let left = now.without(work);
            if left.is_empty() {
                owed.remove(node);
            } else {
                owed.insert(node.clone(), left);
            }
        }
        ready.then(|| self.every())
    }
}

impl Hosts {
    /// Reads `node` once, hands it its desired set and reconciles it, both against one
    /// reading of the desired state made after the node's (and, for what it lacks, one made
    /// before).
    async fn pass(&self, sched: &Scheduler, node: &str, emit: &Emit) {
        let (Some(client), Some(limit)) = (sched.client(node), sched.node_timeout(node)) else { return };
        self.passed.lock().expect("hosts lock").insert(node.to_string(), Instant::now());
        // A reading of the desired state finished before the node's: an instance it says
        // Placed there was applied before the node was read (a deploy marks it Placed once
        // applied), so one the node lacks is missing, not on its way.
        let before = self.desired.latest();
        let read_at = Instant::now();
        let doc = match tokio::time::timeout(limit, client.node()).await {
            Ok(Ok(doc)) => doc,
            Ok(Err(e)) => return tracing::debug!(node, "reading the node for its pass: {e}"),
            Err(_) => return tracing::debug!(node, "reading the node for its pass: no answer within {limit:?}"),
        };
        let ran: BTreeSet<AppId> = doc.apps.iter().map(|a| AppId::new(&a.namespace, &a.name)).collect();
        self.seen.lock().expect("hosts lock").insert(node.to_string(), ran);
        let desired = match self.desired.since(sched, read_at).await {
            Ok(desired) => desired,
            Err(e) => return tracing::warn!("reading the desired state for {node}'s pass: {e}"),
        };
        sched.hand_desired(node, doc.desired_mark, &desired, self.every().as_secs(), emit).await;
        let before = before.as_ref().map(|d| d.apps.as_slice());
        sched.reconcile_node(node, &doc, before, &desired.apps, &self.unheard, emit).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_owed_while_a_node_is_synced_is_kept_for_the_next_sync() {
        let up = Owed { up: true, ..Default::default() };
        let back = Owed { back: true, ..Default::default() };
        assert_eq!(up.with(back).without(up), back);
        assert!(up.with(up).without(up).is_empty());
    }
}
