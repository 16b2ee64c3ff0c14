//! The node-lifecycle controller: what a node is owed once the leader hears it — new to this
//! leadership, back after it was declared lost, or started over (its journal begun anew) — done
//! in the background, node by node, several at once, instead of holding up `run`'s loop (a
//! node's return lists every app it runs).

use super::controller::Controller;
use super::endpoints::Endpoints;
use super::{Emit, Scheduler};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Each node's work still owed (until done: a pass over the nodes leaves them to it), and the
/// endpoints it refreshes once done.
pub(super) struct Arrivals {
    owed: Mutex<BTreeMap<String, Owed>>,
    endpoints: Arc<Endpoints>,
    /// The reconcile period the hosts are told with their desired sets.
    every: Mutex<Duration>,
}

impl Arrivals {
    pub fn new(endpoints: Arc<Endpoints>, every: Duration) -> Arrivals {
        Arrivals { owed: Default::default(), endpoints, every: Mutex::new(every) }
    }

    /// Notes what `node` is owed; the caller queues it.
    pub fn owe(&self, node: &str, owed: Owed) {
        let mut all = self.owed.lock().expect("arrivals lock");
        let now = all.get(node).copied().unwrap_or_default().with(owed);
        all.insert(node.to_string(), now);
    }

    /// Whether `node` has work owed or under way (a pass over the nodes leaves it alone).
    pub fn owes(&self, node: &str) -> bool {
        self.owed.lock().expect("arrivals lock").contains_key(node)
    }

    /// Nothing is owed any more (the lead lost, or maintenance began).
    pub fn forget(&self) {
        self.owed.lock().expect("arrivals lock").clear();
    }

    pub fn set_every(&self, every: Duration) {
        *self.every.lock().expect("arrivals lock") = every;
    }
}

#[async_trait::async_trait]
impl Controller for Arrivals {
    type Key = String;

    fn name(&self) -> &'static str {
        "node arrivals"
    }

    async fn sync(&self, sched: &Arc<Scheduler>, node: &String, emit: &Emit) -> Option<Duration> {
        let work = self.owed.lock().expect("arrivals lock").get(node).copied()?;
        // Lost again meanwhile: its return owes it all again.
        if sched.live().is_ready(node) {
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
            let every = *self.every.lock().expect("arrivals lock");
            sched.converge(std::slice::from_ref(node), every, emit).await;
            self.endpoints.node_up(sched, node, emit).await;
        }
        // What was owed meanwhile stays (the queue syncs the node again).
        let mut owed = self.owed.lock().expect("arrivals lock");
        if let Some(now) = owed.get(node).copied() {
            let left = now.without(work);
            if left.is_empty() {
                owed.remove(node);
            } else {
                owed.insert(node.clone(), left);
            }
        }
        None
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
