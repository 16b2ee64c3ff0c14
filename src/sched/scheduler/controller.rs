//! The leader's controllers: each owns one concern, implements [`Controller`], and is run by
//! a [`Queue`] of the keys it has work for — apps, or nodes (Kubernetes' controllers: a sync
//! per key, woken by the store's watch or a node's news, requeued when it asks).
//!
//! A queue syncs several keys at once (a sync waits on its nodes, not on the CPU), never one
//! key twice at once: a key offered again while it is synced is synced again after. The queue
//! lives while this process leads; losing the lead aborts it and every sync in flight.

use super::liveness::Liveness;
use super::{Emit, Scheduler};
use crate::sched::store::{App, AppsChanged, PlacementState};
use crate::sched::SchedError;
use crate::spec::AppId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How soon an app whose sync panicked is looked at again.
const PANICKED_AGAIN: Duration = Duration::from_secs(2);

/// One concern of the leader, brought about key by key, acting through `C` (the scheduler).
#[async_trait::async_trait]
pub(super) trait Controller<C = Scheduler>: Send + Sync + 'static {
    /// What it brings about one at a time: an app, a node.
    type Key: Ord + Clone + std::fmt::Display + Send + Sync + 'static;
    /// For logs.
    fn name(&self) -> &'static str;
    /// Whether `app`, as now stored, has work for it (`live`: the nodes as the leader knows
    /// them). A controller of nodes is handed its keys instead ([`Queue::add`]).
    fn wants(&self, _app: &App, _live: &Liveness) -> bool {
        false
    }
    /// Brings `key` toward what is desired, from the store as it is now. Some(d): look again
    /// after d (waiting on something no watch tells).
    async fn sync(&self, sched: &Arc<C>, key: &Self::Key, emit: &Emit) -> Option<Duration>;
}

/// The keys waiting for a controller, and its syncs in flight.
pub(super) struct Queue<K, C = Scheduler> {
    controller: Arc<dyn Controller<C, Key = K>>,
    state: Arc<Mutex<Keys<K>>>,
    wake: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

struct Keys<K> {
    /// Key → when it is due.
    waiting: BTreeMap<K, Instant>,
    /// Being synced now.
    busy: BTreeSet<K>,
    /// Added while busy: synced again once done, by when at the latest.
    again: BTreeMap<K, Instant>,
}

impl<K> Default for Keys<K> {
    fn default() -> Self {
        Keys { waiting: BTreeMap::new(), busy: BTreeSet::new(), again: BTreeMap::new() }
    }
}

impl<K: Ord + Clone + std::fmt::Display + Send + Sync + 'static, C: Send + Sync + 'static> Queue<K, C> {
    /// Starts `controller`'s queue: at most `workers` keys synced at once.
    pub fn start(
        controller: Arc<dyn Controller<C, Key = K>>,
        sched: Arc<C>,
        emit: Emit,
        workers: usize,
    ) -> Queue<K, C> {
        let state: Arc<Mutex<Keys<K>>> = Default::default();
        let wake = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(work(controller.clone(), sched, emit, state.clone(), wake.clone(), workers));
        Queue { controller, state, wake, task }
    }

    /// Queues `keys` now.
    pub fn add<'a>(&self, keys: impl IntoIterator<Item = &'a K>) {
        self.add_after(keys, Duration::ZERO);
    }

    /// Queues `keys` to be synced `after` from now at the latest (one due sooner stays so; one
    /// being synced is synced again once done).
    pub fn add_after<'a>(&self, keys: impl IntoIterator<Item = &'a K>, after: Duration) {
        let mut any = false;
        let mut state = self.state.lock().expect("queue lock");
        let at = Instant::now() + after;
        for key in keys {
            any = true;
            let due = if state.busy.contains(key) { &mut state.again } else { &mut state.waiting };
            let due = due.entry(key.clone()).or_insert(at);
            *due = (*due).min(at);
        }
        drop(state);
        if any {
            self.wake.notify_one();
        }
    }
}

impl<C: Send + Sync + 'static> Queue<AppId, C> {
    /// Queues every app of `apps` the controller wants.
    pub fn offer(&self, apps: &[App], live: &Liveness) {
        self.add(apps.iter().filter(|a| self.controller.wants(a, live)).map(|a| &a.key));
    }
}

impl<K, C> Drop for Queue<K, C> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Syncs what is due, `workers` at once, until aborted (which aborts the syncs with it).
async fn work<K: Ord + Clone + std::fmt::Display + Send + Sync + 'static, C: Send + Sync + 'static>(
    controller: Arc<dyn Controller<C, Key = K>>,
    sched: Arc<C>,
    emit: Emit,
    state: Arc<Mutex<Keys<K>>>,
    wake: Arc<tokio::sync::Notify>,
    workers: usize,
) {
    let mut syncs: tokio::task::JoinSet<(K, Option<Duration>)> = tokio::task::JoinSet::new();
    loop {
        // Start what is due, while a worker is free; note when the next one is due.
        let next_due = {
            let mut keys = state.lock().expect("queue lock");
            let now = Instant::now();
            let due: Vec<K> = keys
                .waiting
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(k, _)| k.clone())
                .take(workers.saturating_sub(syncs.len()))
                .collect();
            for key in due {
                keys.waiting.remove(&key);
                keys.busy.insert(key.clone());
                let (controller, sched, emit) = (controller.clone(), sched.clone(), emit.clone());
                syncs.spawn(async move {
                    // A sync that panics is looked at again later, and its key is no longer
                    // busy (a JoinError would not say which it was).
                    let sync = std::panic::AssertUnwindSafe(controller.sync(&sched, &key, &emit));
                    let again = futures_util::FutureExt::catch_unwind(sync).await.unwrap_or_else(|_| {
                        tracing::warn!("{}: the sync of {key} panicked", controller.name());
                        Some(PANICKED_AGAIN)
                    });
                    (key, again)
                });
            }
            keys.waiting.values().min().copied()
        };
        let sleep = next_due.map_or(Duration::from_secs(3600), |at| at.saturating_duration_since(Instant::now()));
        tokio::select! {
            done = syncs.join_next(), if !syncs.is_empty() => {
                let mut keys = state.lock().expect("queue lock");
                // An Err: aborted with the queue, nothing is left to note.
                if let Some(Ok((key, again))) = done {
                    keys.busy.remove(&key);
                    let asked = keys.again.remove(&key);
                    let requeued = again.map(|after| Instant::now() + after);
                    let at = match (asked, requeued) {
                        (Some(a), Some(r)) => Some(a.min(r)),
                        (a, r) => a.or(r),
                    };
                    if let Some(at) = at {
                        let due = keys.waiting.entry(key).or_insert(at);
                        *due = (*due).min(at);
                    }
                }
            }
            _ = wake.notified() => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

impl Scheduler {
    /// The apps the store's watch saw written since last asked, as now stored (every app when
    /// it cannot tell): what the controllers are offered on a change.
    pub(super) async fn apps_changed(&self) -> Result<Vec<App>, SchedError> {
        let keys = match self.store.apps_changed() {
            AppsChanged::All => return self.store.apps().await,
            AppsChanged::Some(keys) => keys,
        };
        let reads = keys.iter().map(|key| self.store.app(key));
        let mut apps = Vec::new();
        for app in futures_util::future::join_all(reads).await {
            // A deleted one has nothing left for a controller.
            apps.extend(app?);
        }
        Ok(apps)
    }
}

/// Applies placements stored Pending (a deploy on a server that does not lead, an apply that
/// failed, a stateful set's next instance) on their nodes.
pub(super) struct PendingApplier;

#[async_trait::async_trait]
impl Controller for PendingApplier {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "pending placements"
    }

    fn wants(&self, app: &App, live: &Liveness) -> bool {
        app.deleting.is_none()
            && app
                .placements
                .values()
                .any(|p| matches!(p.state, PlacementState::Pending { .. }) && !live.is_lost(&p.node))
    }

    async fn sync(&self, sched: &Arc<Scheduler>, key: &AppId, emit: &Emit) -> Option<Duration> {
        // A deploy of this process applying it now: its own to apply (the store's write of
        // its marks offers the app again).
        let Some(_applying) = sched.try_applying(key) else { return Some(Duration::from_millis(500)) };
        let app = sched.store.app(key).await.ok().flatten()?;
        // A stateful set's instances waiting for an earlier one: only once it is ready.
        if super::sets::waits_in_order(&app) && !sched.can_advance(&app).await {
            return Some(Duration::from_secs(1));
        }
        match sched.apply_pending(app).await {
            Ok(true) => {
                emit(&super::run::sched_line(crate::protocol::sched::SchedEvent::PendingApplied {
                    app: key.to_string(),
                }));
                None
            }
            Ok(false) => None,
            // Changed meanwhile (a deploy): the watch offers it again with the change.
            Err(SchedError::Conflict { .. }) => Some(Duration::from_millis(200)),
            Err(e) => {
                tracing::warn!("applying the pending placements of {key}: {e}");
                // Its node may answer later; the periodic offer looks again too.
                Some(Duration::from_secs(2))
            }
        }
    }
}

/// Drives every progressing rollout (one a killed `deploy` left, one a server that does not
/// lead stored) to its end.
pub(super) struct RolloutDriver;

#[async_trait::async_trait]
impl Controller for RolloutDriver {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "rollouts"
    }

    fn wants(&self, app: &App, _live: &Liveness) -> bool {
        app.rollout.as_ref().is_some_and(|r| r.phase == crate::protocol::RolloutPhase::Progressing)
    }

    async fn sync(&self, sched: &Arc<Scheduler>, key: &AppId, _emit: &Emit) -> Option<Duration> {
        let note = |what: &str| tracing::info!("rollout of {key}: {what}");
        if let Err(e) = sched.drive_rollout(key, &note).await {
            tracing::warn!("rollout of {key}: {e}");
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts syncs per app and how many run at once; app "again" asks to be looked at again
    /// once, after 100 ms.
    #[derive(Default)]
    struct Counting {
        syncs: Mutex<BTreeMap<String, usize>>,
        now: AtomicUsize,
        most: AtomicUsize,
        same_app_at_once: AtomicUsize,
        busy: Mutex<BTreeSet<String>>,
    }

    #[async_trait::async_trait]
    impl Controller<Counting> for Counting {
        type Key = AppId;

        fn name(&self) -> &'static str {
            "counting"
        }
        fn wants(&self, app: &App, _live: &Liveness) -> bool {
            app.key.name != "unwanted"
        }
        async fn sync(&self, c: &Arc<Counting>, key: &AppId, _emit: &Emit) -> Option<Duration> {
            if key.name == "panics" {
                panic!("a sync that panics");
            }
            if !c.busy.lock().unwrap().insert(key.name.clone()) {
                c.same_app_at_once.fetch_add(1, Ordering::SeqCst);
            }
            let now = c.now.fetch_add(1, Ordering::SeqCst) + 1;
            c.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.now.fetch_sub(1, Ordering::SeqCst);
            c.busy.lock().unwrap().remove(&key.name);
            let mut syncs = c.syncs.lock().unwrap();
            let n = syncs.entry(key.name.clone()).or_default();
            *n += 1;
            (key.name == "again" && *n == 1).then_some(Duration::from_millis(100))
        }
    }

    fn app(name: &str) -> App {
        serde_json::from_value(serde_json::json!({"key": format!("ns/{name}"), "spec": {}, "placements": {}})).unwrap()
    }

    #[tokio::test]
    async fn a_queue_syncs_each_app_once_at_a_time_and_again_when_it_changed_or_asked() {
        let c = Arc::new(Counting::default());
        let emit: Emit = Arc::new(|_| {});
        let queue = Queue::start(c.clone(), c.clone(), emit, 3);
        let apps: Vec<App> = ["a", "b", "c", "d", "e", "again", "unwanted", "panics"].iter().map(|n| app(n)).collect();
        queue.offer(&apps, &Liveness::default());
        // Offered again while being synced: synced once more after, never twice at once.
        tokio::time::sleep(Duration::from_millis(10)).await;
        queue.offer(&apps[..1], &Liveness::default());
        tokio::time::sleep(Duration::from_millis(600)).await;
        let syncs = c.syncs.lock().unwrap().clone();
        assert_eq!(syncs.get("a"), Some(&2), "{syncs:?}");
        assert_eq!(syncs.get("again"), Some(&2), "asked to be looked at again: {syncs:?}");
        assert_eq!(syncs.get("b"), Some(&1));
        assert_eq!(syncs.get("unwanted"), None);
        assert_eq!(c.most.load(Ordering::SeqCst), 3, "three workers");
        assert_eq!(c.same_app_at_once.load(Ordering::SeqCst), 0);
        // A sync that panicked held up no other app (all above were synced) and frees its worker.
        assert_eq!(syncs.values().sum::<usize>(), 8, "{syncs:?}");
        // Dropped (the lead lost): nothing more is synced.
        queue.offer(&apps, &Liveness::default());
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(queue);
        let before = c.syncs.lock().unwrap().values().sum::<usize>();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(c.syncs.lock().unwrap().values().sum::<usize>(), before, "aborted with the queue");
    }

    /// `add_after`: a key is synced no sooner than asked, a burst of asks makes one sync, and
    /// one asked while being synced is synced again after, no sooner than asked.
    #[tokio::test]
    async fn a_key_added_after_a_delay_is_synced_then_once_for_a_burst() {
        let c = Arc::new(Counting::default());
        let emit: Emit = Arc::new(|_| {});
        let queue = Queue::start(c.clone(), c.clone(), emit, 2);
        let key = app("soon").key;
        for _ in 0..5 {
            queue.add_after([&key], Duration::from_millis(200));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(c.syncs.lock().unwrap().get("soon"), None, "not due yet");
        // Asked sooner: the sooner stands.
        queue.add_after([&key], Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Busy now (a sync takes 50 ms): asked again for 300 ms from now.
        queue.add_after([&key], Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(c.syncs.lock().unwrap().get("soon"), Some(&1), "one sync for the burst, the next not due");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(c.syncs.lock().unwrap().get("soon"), Some(&2), "synced again once due");
    }
}
