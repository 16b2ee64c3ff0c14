//! The scheduler's whole desired set for this host (PUT /v1/desired, issue 43): what a host
//! missed while it was away or cut off — an app deleted, its endpoints gone — it learns from
//! the next set, which names everything it should hold; the rest goes.
//!
//! A set is computed from the scheduler's desired state, read after the scheduler read this
//! daemon's [`DesiredMark`]. Every scheduler write here (a placed apply, an endpoints write)
//! takes the next mark, so a write the set could not know of (made after that read) carries a
//! mark above the set's and is kept. Marks live in memory: the sequence starts over with each
//! daemon process (`boot`), and a set read from another process is refused (the scheduler
//! reads again), so no write made before a restart is judged by a mark it never had.

use crate::protocol::DesiredMark;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// This process's sequence of scheduler writes.
pub struct MarkClock {
    boot: u64,
    last: AtomicU64,
}

impl Default for MarkClock {
    fn default() -> MarkClock {
        // Unique per process: its start in nanoseconds, with the pid against two in one tick.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        MarkClock { boot: (nanos as u64) ^ u64::from(std::process::id()), last: AtomicU64::new(0) }
    }
}

impl MarkClock {
    /// Where the sequence stands: a set as of it knows every write made so far.
    pub fn now(&self) -> DesiredMark {
        DesiredMark { boot: self.boot, mark: self.last.load(Ordering::SeqCst) }
    }

    /// The mark of a write being made now: above every mark read before it.
    pub fn next(&self) -> u64 {
        self.last.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Whether a set as of `as_of` was read from this process.
    pub fn is_ours(&self, as_of: &DesiredMark) -> bool {
        as_of.boot == self.boot && as_of.mark <= self.last.load(Ordering::SeqCst)
    }
}

/// Each key's mark of its last write (none: written before this process, mark 0).
#[derive(Default)]
pub struct Marked(Mutex<BTreeMap<String, u64>>);

impl Marked {
    pub fn set(&self, key: &str, mark: u64) {
        self.0.lock().expect("marks lock").insert(key.to_string(), mark);
    }

    /// Whether the write of `key` is known to a set as of `as_of` (made at or before it).
    pub fn known_to(&self, key: &str, as_of: u64) -> bool {
        self.0.lock().expect("marks lock").get(key).is_none_or(|m| *m <= as_of)
    }

    pub fn forget(&self, key: &str) {
        self.0.lock().expect("marks lock").remove(key);
    }
}

impl super::Supervisor {
    /// Where this daemon's scheduler writes stand (GET /v1/node's `desiredMark`).
    pub fn desired_mark(&self) -> DesiredMark {
        self.shared.marks.now()
    }

    /// Takes a scheduler's whole desired set: its endpoints kept and the rest forgotten,
    /// every placed app it does not name deleted (see the module's comment for what a set
    /// cannot know of and leaves alone). Refused when read from another daemon process.
    pub async fn take_desired(
        &self,
        set: crate::protocol::HostDesired,
    ) -> Result<crate::protocol::DesiredOutcome, super::SupervisorError> {
        if !self.shared.marks.is_ours(&set.as_of) {
            return Err(super::SupervisorError::Conflict(
                "desiredMark: read from another run of this daemon (it restarted since): read GET /v1/node again"
                    .into(),
            ));
        }
        let as_of = set.as_of.mark;
        let named: std::collections::BTreeSet<&str> = set.apps.iter().map(String::as_str).collect();
        let mut outcome = crate::protocol::DesiredOutcome {
            dropped_endpoints: self
                .endpoints
                .retain(set.endpoints.clone(), as_of)
                .await
                .map_err(|e| super::SupervisorError::Failed(format!("endpoints: {e}")))?,
            ..Default::default()
        };
        // Held while the apps go: an apply of one of them now would be undone by its delete.
        let _applying = self.applying.lock().await;
        let (gone, present): (Vec<String>, Vec<String>) = {
            let specs = self.specs.lock().expect("specs lock");
            let placed = specs.iter().filter(|(_, e)| e.selection.is_some());
            let gone = placed
                .filter(|(key, _)| !named.contains(key.as_str()) && self.shared.applied_marks.known_to(key, as_of))
                .map(|(key, _)| key.clone())
                .collect();
            (gone, specs.keys().cloned().collect())
        };
        outcome.lacking = named.iter().filter(|k| !present.iter().any(|p| p == *k)).map(|k| k.to_string()).collect();
        for key in gone {
            let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
            match self.delete_app(namespace, name).await {
                Ok(_) | Err(super::SupervisorError::NotFound(_)) => {
                    tracing::info!(app = %key, "deleted: the scheduler's desired set does not name it");
                    self.shared.applied_marks.forget(&key);
                    outcome.dropped_apps.push(key);
                }
                Err(e) => tracing::warn!(app = %key, "deleting what the desired set does not name: {e}"),
            }
        }
        Ok(outcome)
    }
}
