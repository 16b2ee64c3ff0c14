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
//!
//! The sets are also the host's proof that a scheduler reaches it: an app whose
//! `disconnect.stopAfterSecs` passes without one is fenced — its instances stopped by the host
//! itself, durably noted on its spec — so a partition never runs it twice (the scheduler
//! replaces it only after that, see `Disconnect::replace_after`). The next set naming it
//! lifts the fence and starts what it stopped; one that does not name it drops it.

use crate::protocol::DesiredMark;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// When a scheduler last handed this daemon a desired set (this process's start before any),
/// and how often it said it would.
pub struct Contact {
    last: Mutex<Instant>,
    every_secs: AtomicU64,
}

impl Default for Contact {
    fn default() -> Contact {
        Contact { last: Mutex::new(Instant::now()), every_secs: AtomicU64::new(0) }
    }
}

impl Contact {
    fn heard(&self, every_secs: u64) {
        *self.last.lock().expect("contact lock") = Instant::now();
        self.every_secs.store(every_secs, Ordering::SeqCst);
    }

    /// How long no scheduler has been heard, and the shortest silence that fences: three of
    /// the scheduler's periods, so a short `stopAfterSecs` never fences a healthy host.
    fn silence(&self) -> (Duration, Duration) {
        let silent = self.last.lock().expect("contact lock").elapsed();
        (silent, Duration::from_secs(3 * self.every_secs.load(Ordering::SeqCst)))
    }
}

/// How often the fence watch looks.
const FENCE_WATCH_EVERY: Duration = Duration::from_millis(500);

impl super::Supervisor {
    /// The address ClusterFirst pods ask here (`[services] pod_dns`; GET /v1/node's `podDns`).
    pub fn pod_dns(&self) -> Option<std::net::Ipv4Addr> {
        self.shared.pod_dns.as_ref().map(|r| r.server)
    }

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
        // Refused or not, a scheduler reached this host.
        self.shared.contact.heard(set.every_secs);
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
            // One already deleted at its scaleIn hook's word is on its way out.
            let placed = specs.iter().filter(|(_, e)| e.selection.is_some() && !e.deleting);
            let gone = placed
                .filter(|(key, _)| !named.contains(key.as_str()) && self.shared.applied_marks.known_to(key, as_of))
                .map(|(key, _)| key.clone())
                .collect();
            (gone, specs.keys().cloned().collect())
        };
        outcome.lacking = named.iter().filter(|k| !present.iter().any(|p| p == *k)).map(|k| k.to_string()).collect();
        let fenced: Vec<String> = {
            let specs = self.specs.lock().expect("specs lock");
            named.iter().filter(|k| specs.get(**k).is_some_and(|e| e.fenced.is_some())).map(|k| k.to_string()).collect()
        };
        for key in gone {
            let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
            // An app with a scaleIn hook goes at its word, as an operator's delete of it would.
            match self.gate_delete(&key, "the scheduler's desired set does not name the app").await {
                Ok(true) => {
                    outcome.draining_apps.push(key);
                    continue;
                }
                Ok(false) | Err(super::SupervisorError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(app = %key, "deleting what the desired set does not name: {e}");
                    continue;
                }
            }
            match self.delete_app(namespace, name).await {
                Ok(_) | Err(super::SupervisorError::NotFound(_)) => {
                    tracing::info!(app = %key, "deleted: the scheduler's desired set does not name it");
                    self.shared.applied_marks.forget(&key);
                    outcome.dropped_apps.push(key);
                }
                Err(e) => tracing::warn!(app = %key, "deleting what the desired set does not name: {e}"),
            }
        }
        drop(_applying);
        for key in fenced {
            if let Err(e) = self.lift_fence(&key).await {
                tracing::warn!(app = %key, "lifting its fence: {e}");
            }
        }
        Ok(outcome)
    }

    /// Fences placed apps whose `disconnect.stopAfterSecs` passed with no scheduler heard,
    /// for as long as the daemon runs.
    pub(super) fn spawn_fence_watch(&self) {
        let sup = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(FENCE_WATCH_EVERY).await;
                let (silent, floor) = sup.shared.contact.silence();
                let due: Vec<String> = {
                    let specs = sup.specs.lock().expect("specs lock");
                    specs
                        .iter()
                        .filter(|(_, e)| e.selection.is_some() && e.fenced.is_none())
                        .filter(|(_, e)| {
                            let stop = e.spec.disconnect.as_ref().and_then(|d| d.stop_after_secs);
                            stop.is_some_and(|s| silent >= Duration::from_secs(s).max(floor))
                        })
                        .map(|(k, _)| k.clone())
                        .collect()
                };
                for key in due {
                    if let Err(e) = sup.fence(&key, silent).await {
                        tracing::warn!(app = %key, "fencing it: {e}");
                    }
                }
            }
        });
    }

    /// Stops the app's instances as its fence, noting the fence (and what it stopped) first.
    async fn fence(&self, key: &str, silent: Duration) -> Result<(), super::SupervisorError> {
        let stopping = {
            let _applying = self.applying.lock().await;
            let Some(entry) = self.specs.lock().expect("specs lock").get(key).cloned() else { return Ok(()) };
            if entry.fenced.is_some() {
                return Ok(());
            }
            let running: Vec<u32> = self
                .list(&super::ListFilter {
                    namespace: Some(entry.spec.metadata.namespace.clone()),
                    name: Some(entry.spec.metadata.name.clone()),
                    state: None,
                })
                .iter()
                .filter(|s| !matches!(s.state.kind(), super::state::Kind::Stopped | super::state::Kind::Exited))
                .map(|s| s.id.index)
                .collect();
            let fenced = super::instance::Fenced { since_ms: crate::clock::now_ms(), instances: running.clone() };
            self.put_entry(key, &entry, |e| e.fenced = Some(fenced)).await?;
            tracing::warn!(app = %key, "fenced: no scheduler heard for {:.0} s; stopping {running:?}", silent.as_secs_f64());
            running
        };
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        for index in stopping {
            let id = crate::spec::InstanceId { namespace: namespace.into(), name: name.into(), index };
            if let Err(e) = self.request(&id, super::instance::Command::Fence).await {
                tracing::warn!(instance = %id, "fencing it: {e}");
            }
        }
        Ok(())
    }

    /// A scheduler names a fenced app again: the fence goes, what it stopped starts again.
    async fn lift_fence(&self, key: &str) -> Result<(), super::SupervisorError> {
        let starting = {
            let _applying = self.applying.lock().await;
            let Some(entry) = self.specs.lock().expect("specs lock").get(key).cloned() else { return Ok(()) };
            let Some(fenced) = entry.fenced.clone() else { return Ok(()) };
            self.put_entry(key, &entry, |e| e.fenced = None).await?;
            tracing::info!(app = %key, "fence lifted: a scheduler names it again; starting {:?}", fenced.instances);
            fenced.instances
        };
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        for index in starting {
            let id = crate::spec::InstanceId { namespace: namespace.into(), name: name.into(), index };
            match self.start(&id).await {
                Ok(()) | Err(super::SupervisorError::NotFound(_)) => {}
                Err(e) => tracing::warn!(instance = %id, "starting it after its fence: {e}"),
            }
        }
        Ok(())
    }

    /// Writes `entry` changed by `change` (durably, then in memory). Called holding `applying`.
    async fn put_entry(
        &self,
        key: &str,
        entry: &Arc<super::instance::SpecEntry>,
        change: impl FnOnce(&mut super::instance::SpecEntry),
    ) -> Result<(), super::SupervisorError> {
        let mut next = (**entry).clone();
        change(&mut next);
        let value = serde_json::to_value(&next).map_err(|e| super::SupervisorError::Failed(e.to_string()))?;
        self.commit(crate::store::Batch::new().put(crate::store::Table::Specs, key, &value)).await?;
        self.specs.lock().expect("specs lock").insert(key.to_string(), Arc::new(next));
        Ok(())
    }
}
