//! The leader's controllers, each owning its own state, and — while this process leads — the
//! work queue that runs each (controller.rs). `run`'s loop only feeds them: what the store's
//! watch, the nodes' streams and the clock tell.

use super::checks::RemoteChecks;
use super::controller::{PendingApplier, Queue, RolloutDriver};
use super::depends::Dependencies;
use super::endpoints::Endpoints;
use super::failed::Failures;
use super::hosts::{Hosts, Owed};
use super::intents::FinishDeletes;
use super::lost::LostNodes;
use super::records::NodeRecords;
use super::room::Room;
use super::sets::DaemonSets;
use super::{Emit, Scheduler};
use crate::protocol::Event;
use crate::sched::store::{App, NodeState};
use crate::spec::AppId;
use std::sync::Arc;
use std::time::Duration;

/// How many apps' pending placements the leader applies at once.
const PENDING_WORKERS: usize = 8;

/// How many rollouts the leader drives at once (each mostly waits on its nodes' readiness).
const ROLLOUT_WORKERS: usize = 64;

/// How many apps' deletes owed the leader finishes at once.
const DELETE_WORKERS: usize = 8;

/// How many apps' remote checks the leader brings up to date at once (no sync waits long).
const CHECK_WORKERS: usize = 4;

/// How many apps of lost nodes the leader marks and moves at once.
const LOST_WORKERS: usize = 8;

/// How many apps' failed instances the leader acts on at once.
const FAILURE_WORKERS: usize = 8;

/// How many apps' endpoints the leader reads again at once (after their instances' events).
const ENDPOINT_WORKERS: usize = 16;

/// How many daemon sets the leader makes follow the hosts at once.
const DAEMON_SET_WORKERS: usize = 4;

/// How many apps' held instances the leader tries to place at once.
const ROOM_WORKERS: usize = 4;

/// How many dependencies' copies the leader brings up to date at once.
const DEPENDENCY_WORKERS: usize = 4;

/// How many nodes the leader brings up to date at once (heard new, back or started over, or
/// due their pass).
const HOST_WORKERS: usize = 16;

/// How many node records the leader writes at once (each a read and a write of the store, and
/// a node's own description when it comes up).
const RECORD_WORKERS: usize = 8;

/// How soon after an instance is deleted on a node it is passed over, and apps holding
/// instances for room looked at, and after a node is heard daemon sets (a burst makes one).
const HOSTS_SOON: Duration = Duration::from_secs(1);

pub(super) struct Controllers {
    pub endpoints: Arc<Endpoints>,
    pub checks: Arc<RemoteChecks>,
    hosts: Arc<Hosts>,
    dependencies: Arc<Dependencies>,
    daemon_sets: Arc<DaemonSets>,
    room: Arc<Room>,
    lost: Arc<LostNodes>,
    failures: Arc<Failures>,
    records: Arc<NodeRecords>,
    queues: Option<Queues>,
}

/// The queues, while leading.
struct Queues {
    /// Every controller of apps, offered every app that changed (each takes those it wants).
    apps: Vec<Queue<AppId>>,
    /// Two of them also handed apps directly, as events arrive.
    endpoints: Queue<AppId>,
    failures: Queue<AppId>,
    hosts: Queue<String>,
    dependencies: Queue<String>,
    daemon_sets: Queue<AppId>,
    room: Queue<AppId>,
    records: Queue<String>,
}

impl Controllers {
    /// `every`: the reconcile period the hosts are told with their desired sets.
    pub fn new(every: Duration) -> Controllers {
        let endpoints: Arc<Endpoints> = Default::default();
        let hosts = Arc::new(Hosts::new(endpoints.clone(), every));
        Controllers {
            dependencies: Arc::new(Dependencies::new(hosts.clone())),
            daemon_sets: Arc::new(DaemonSets::new(hosts.clone())),
            room: Arc::new(Room::new(hosts.clone())),
            hosts,
            endpoints,
            checks: Arc::new(RemoteChecks::new()),
            lost: Default::default(),
            failures: Default::default(),
            records: Default::default(),
            queues: None,
        }
    }

    /// This process leads: every controller starts afresh (what a former leadership left
    /// is not known to be owed), its queue with it.
    pub async fn lead(&mut self, sched: &Arc<Scheduler>, emit: &Emit) {
        self.forget();
        self.endpoints.lead(sched).await;
        let start = |c: Arc<dyn super::controller::Controller<Key = AppId>>, workers| {
            Queue::start(c, sched.clone(), emit.clone(), workers)
        };
        self.queues = Some(Queues {
            apps: vec![
                start(Arc::new(PendingApplier), PENDING_WORKERS),
                start(Arc::new(RolloutDriver), ROLLOUT_WORKERS),
                start(Arc::new(FinishDeletes), DELETE_WORKERS),
                start(self.checks.clone(), CHECK_WORKERS),
                start(self.lost.clone(), LOST_WORKERS),
            ],
            endpoints: start(self.endpoints.clone(), ENDPOINT_WORKERS),
            failures: start(self.failures.clone(), FAILURE_WORKERS),
            hosts: Queue::start(self.hosts.clone(), sched.clone(), emit.clone(), HOST_WORKERS),
            dependencies: Queue::start(self.dependencies.clone(), sched.clone(), emit.clone(), DEPENDENCY_WORKERS),
            daemon_sets: start(self.daemon_sets.clone(), DAEMON_SET_WORKERS),
            room: start(self.room.clone(), ROOM_WORKERS),
            records: Queue::start(self.records.clone(), sched.clone(), emit.clone(), RECORD_WORKERS),
        });
    }

    /// The lead lost (or maintenance begun): every queue stops with its syncs in flight, and
    /// every remote check (acting on could act twice with the next leader).
    pub fn stop(&mut self) {
        self.queues = None;
        self.forget();
    }

    fn forget(&self) {
        self.hosts.forget();
        self.dependencies.forget();
        self.daemon_sets.forget();
        self.room.forget();
        self.lost.forget();
        self.failures.forget();
        self.records.forget();
        self.checks.stop_all();
    }

    pub fn leading(&self) -> bool {
        self.queues.is_some()
    }

    /// `apps` were written (as now stored): offered to every controller of apps, and their
    /// nodes passed over soon.
    pub fn changed(&self, sched: &Scheduler, apps: &[App]) {
        self.offer(sched, apps);
        if let Some(q) = &self.queues {
            for (node, after) in self.hosts.after_changes(apps) {
                q.hosts.add_after([&node], after);
            }
        }
    }

    /// An instance was deleted on `node`: its pass soon, and the apps holding instances for
    /// room looked at (room was freed).
    pub fn deleted_on(&self, node: &String) {
        if let Some(q) = &self.queues {
            q.hosts.add_after([node], HOSTS_SOON);
            q.room.add_after(&self.room.held(), HOSTS_SOON);
        }
    }

    /// Offers `apps` to every controller of apps.
    pub fn offer(&self, sched: &Scheduler, apps: &[App]) {
        let Some(q) = &self.queues else { return };
        let live = sched.live();
        for queue in q.apps.iter().chain([&q.endpoints, &q.failures, &q.daemon_sets, &q.room]) {
            queue.offer(apps, &live);
        }
    }

    /// Offers `apps`, every app stored, to every controller of apps; those whose endpoints
    /// were published and that are gone have them removed.
    pub fn offer_every(&self, sched: &Scheduler, apps: &[App]) {
        self.offer(sched, apps);
        if let Some(q) = &self.queues {
            q.endpoints.add(&self.endpoints.gone(apps));
        }
    }

    /// Offers every app as now stored to every controller of apps.
    pub async fn offer_all(&self, sched: &Scheduler) {
        match sched.store.apps().await {
            Ok(apps) => self.offer_every(sched, &apps),
            Err(e) => tracing::warn!("reading the apps to offer the controllers: {e}"),
        }
    }

    /// Dependencies to look at now.
    pub fn dependencies<'a>(&self, keys: impl IntoIterator<Item = &'a String>) {
        if let Some(q) = &self.queues {
            q.dependencies.add(keys);
        }
    }

    /// `node` was declared `state` (up, lost, removed): its record is written soon.
    pub fn record(&self, node: &String, state: NodeState) {
        if let Some(q) = &self.queues {
            self.records.owe(node, state);
            q.records.add([node]);
        }
    }

    /// `node` was heard: new to this leadership, back, or started over.
    pub fn node_heard(&self, node: &String, owed: Owed) {
        self.hosts.owe(node, owed);
        if let Some(q) = &self.queues {
            q.hosts.add([node]);
            // A daemon set may be owed an instance there (once its arrival is done).
            q.daemon_sets.add_after(&self.daemon_sets.all(), HOSTS_SOON);
        }
    }

    /// An event from `node`: its app's endpoints there to read again, a failure to act on.
    pub fn node_event(&self, node: &str, event: &Event) {
        let Some(q) = &self.queues else { return };
        if let Some(key) = self.endpoints.on_event(node, event) {
            q.endpoints.add([&key]);
        }
        if let Some(key) = self.failures.note(node, event) {
            q.failures.add([&key]);
        }
    }

    /// The reconcile period is `every` from now: a node due later than that is due then.
    pub fn set_every(&self, every: Duration) {
        let shorter = every < self.hosts.every();
        self.hosts.set_every(every);
        if let (true, Some(q)) = (shorter, &self.queues) {
            q.hosts.add_after(&self.hosts.passed_nodes(), every);
        }
    }
}
