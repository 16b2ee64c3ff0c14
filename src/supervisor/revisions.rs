//! An app's revisions (issue 18): every applied spec that changes what runs — anything but the
//! instance count — is a new revision: its number, a hash of what runs, the time and who applied
//! it, and the spec itself, kept durably (the store's `revisions` table), the newest
//! `revision_history` of them per app (stewardd.toml; default 10). `undo` applies an earlier
//! revision's spec again, as a new revision, with the app's current instance count.

use super::apply::ApplyOutcome;
use super::*;
use crate::protocol::{RevisionInfo, RevisionList, RevisionSpec};
use sha2::{Digest, Sha256};

/// Revisions kept per app unless stewardd.toml says otherwise.
pub const DEFAULT_HISTORY: usize = 10;

/// A revision as the store keeps it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StoredRevision {
    pub revision: u64,
    pub hash: String,
    pub created_ms: u64,
    pub applied_by: String,
    pub spec: ProcessSpec,
    /// How its rollout ended (see [`RevisionInfo::outcome`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<crate::protocol::RolloutPhase>,
}

impl StoredRevision {
    fn info(&self) -> RevisionInfo {
        RevisionInfo {
            revision: self.revision,
            hash: self.hash.clone(),
            created_ms: self.created_ms,
            applied_by: self.applied_by.clone(),
            current: false,
            outcome: self.outcome.clone(),
        }
    }
}

/// The store key of `app`'s revision `n`: zero-padded, so that the keys sort by number.
pub(super) fn key(app: &str, n: u64) -> String {
    format!("{app}/{n:010}")
}

/// What runs, as a short hash: the spec without its instance count, strategy and restart
/// policy (see [`what_runs`]).
pub fn template_hash(spec: &ProcessSpec) -> String {
    let json = serde_json::to_vec(&what_runs(spec)).unwrap_or_default();
    Sha256::digest(&json).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The spec without what changes nothing that runs: the instance count, the strategy (how a
/// change rolls out, as a Deployment's strategy is not part of its pod template), the
/// restart policy (applied to the next exit, in place: seed 002 changes it without a restart)
/// and the disconnect policy (the scheduler's and the fence's, read when a host is cut off).
pub fn what_runs(spec: &ProcessSpec) -> ProcessSpec {
    let mut template = spec.clone();
    template.spec.instance = 0;
    template.strategy = Default::default();
    template.restart_policy = Default::default();
    // What a lost host's scheduler does with it: nothing that runs changes.
    template.disconnect = None;
    template
}

/// Every app's revisions, oldest first (without their specs, which stay in the store).
#[derive(Default)]
pub(super) struct History {
    apps: BTreeMap<String, Vec<RevisionInfo>>,
}

impl History {
    /// `app`'s revisions, oldest first.
    pub fn revisions_of(&self, app: &str) -> &[RevisionInfo] {
        self.apps.get(app).map_or(&[], Vec::as_slice)
    }

    /// From the store's table, at the daemon's start.
    pub fn load(snapshot: &crate::store::Snapshot) -> History {
        let mut apps: BTreeMap<String, Vec<RevisionInfo>> = BTreeMap::new();
        for (key, value) in snapshot.table(Table::Revisions) {
            let Some((app, _)) = key.rsplit_once('/') else { continue };
            match serde_json::from_value::<StoredRevision>(value.clone()) {
                Ok(r) => apps.entry(app.to_string()).or_default().push(r.info()),
                Err(e) => tracing::error!("stored revision {key} is unreadable: {e}"),
            }
        }
        for list in apps.values_mut() {
            list.sort_by_key(|r| r.revision);
        }
        History { apps }
    }
}

impl Supervisor {
    /// The entry an instance on revision `n` of `current`'s app runs (a rollout has not moved
    /// it yet): that revision's spec from the store, or the current one if it is no longer
    /// kept (the instance then restarts onto it, as after an apply).
    pub(super) fn revision_entry(&self, current: &Arc<SpecEntry>, n: u64) -> Arc<SpecEntry> {
        let app = app_key(&current.spec.metadata.namespace, &current.spec.metadata.name);
        let stored = self.shared.store.get(Table::Revisions, &key(&app, n)).ok().flatten();
        match stored.and_then(|v| serde_json::from_value::<StoredRevision>(v).ok()) {
            Some(r) => Arc::new(SpecEntry {
                spec: r.spec,
                // Below the current: nothing takes it for the newest.
                generation: current.generation.saturating_sub(1),
                selection: current.selection.clone(),
                revision: n,
                rollout: None,
                job: None,
                cron: None,
                fenced: None,
                scale_in: Vec::new(),
                deleting: false,
            }),
            None => {
                tracing::warn!("{app}: revision {n} is no longer kept; its instances take the current one");
                current.clone()
            }
        }
    }

    /// Puts `app`'s revision `n` (of `spec`, applied by `by`) into `batch`, with the deletes of
    /// the revisions beyond the history's bound. Returns the app's list as it is once committed
    /// (see [`Supervisor::keep_revisions`]).
    pub(super) fn add_revision(
        &self,
        app: &str,
        n: u64,
        spec: &ProcessSpec,
        by: &str,
        batch: &mut Batch,
    ) -> Result<Vec<RevisionInfo>, SupervisorError> {
        let stored = StoredRevision {
            revision: n,
            hash: template_hash(spec),
            created_ms: crate::clock::now_ms(),
            applied_by: by.to_string(),
            spec: spec.clone(),
            outcome: None,
        };
        let value = serde_json::to_value(&stored).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        batch.push_put(Table::Revisions, &key(app, n), &value);
        let mut list = self.history.lock().expect("history lock").apps.get(app).cloned().unwrap_or_default();
        list.retain(|r| r.revision < n);
        list.push(stored.info());
        let excess = list.len().saturating_sub(self.revision_history.max(1));
        for old in list.drain(..excess) {
            batch.push_delete(Table::Revisions, &key(app, old.revision));
        }
        Ok(list)
    }

    /// Puts how `app`'s revision `n` rolled out (complete, failed) into `batch`. Returns the
    /// app's list as it is once committed; None when the revision is no longer kept.
    pub(super) fn revision_outcome(
        &self,
        app: &str,
        n: u64,
        outcome: &crate::protocol::RolloutPhase,
        batch: &mut Batch,
    ) -> Result<Option<Vec<RevisionInfo>>, SupervisorError> {
        let Some(stored) = self.shared.store.get(Table::Revisions, &key(app, n))? else { return Ok(None) };
        let mut stored: StoredRevision =
            serde_json::from_value(stored).map_err(|e| SupervisorError::Failed(format!("revision unreadable: {e}")))?;
        stored.outcome = Some(outcome.clone());
        let value = serde_json::to_value(&stored).map_err(|e| SupervisorError::Failed(e.to_string()))?;
        batch.push_put(Table::Revisions, &key(app, n), &value);
        let mut list = self.history.lock().expect("history lock").apps.get(app).cloned().unwrap_or_default();
        for r in list.iter_mut().filter(|r| r.revision == n) {
            r.outcome = Some(outcome.clone());
        }
        Ok(Some(list))
    }

    /// `app`'s revisions once the batch from [`Supervisor::add_revision`] is committed.
    pub(super) fn keep_revisions(&self, app: &str, list: Vec<RevisionInfo>) {
        self.history.lock().expect("history lock").apps.insert(app.to_string(), list);
    }

    /// Deletes of every revision of `app`, for the batch that forgets it.
    pub(super) fn forget_revisions(&self, app: &str, batch: &mut Batch) {
        let mut history = self.history.lock().expect("history lock");
        for r in history.apps.remove(app).unwrap_or_default() {
            batch.push_delete(Table::Revisions, &key(app, r.revision));
        }
    }

    /// An app's revisions, oldest first, the current one marked.
    pub fn revisions(&self, namespace: &str, name: &str) -> Result<RevisionList, SupervisorError> {
        let app = app_key(namespace, name);
        let current = self.specs.lock().expect("specs lock").get(&app).map(|e| e.revision);
        let Some(current) = current else { return Err(SupervisorError::NotFound(format!("app {app}"))) };
        let mut revisions = self.history.lock().expect("history lock").apps.get(&app).cloned().unwrap_or_default();
        for r in &mut revisions {
            r.current = r.revision == current;
        }
        Ok(RevisionList { app, revisions })
    }

    /// Revision `n` of an app with the spec it applied, as kept for `undo`.
    pub fn revision(&self, namespace: &str, name: &str, n: u64) -> Result<RevisionSpec, SupervisorError> {
        let RevisionList { app, revisions } = self.revisions(namespace, name)?;
        let Some(info) = revisions.iter().find(|r| r.revision == n).cloned() else {
            return Err(SupervisorError::NotFound(format!("revision {n} of {app} (kept: {})", kept(&revisions))));
        };
        let unreadable = || SupervisorError::Failed(format!("stored revision {n} of {app} has no spec"));
        let mut stored = self
            .shared
            .store
            .get(Table::Revisions, &key(&app, n))?
            .ok_or_else(|| SupervisorError::NotFound(format!("revision {n} of {app}")))?;
        // The spec as the store keeps it, not parsed and written again.
        let spec = stored.get_mut("spec").map(serde_json::Value::take).ok_or_else(unreadable)?;
        Ok(RevisionSpec { app, info, spec })
    }

    /// Applies an earlier revision's spec again, with the app's current instance count and
    /// host selection: a new revision (its `applied_by` says which it went back to). `to`: the
    /// revision; the newest one before the current when None.
    pub async fn undo(
        &self,
        namespace: &str,
        name: &str,
        to: Option<u64>,
        by: &str,
    ) -> Result<ApplyOutcome, SupervisorError> {
        self.go_back(namespace, name, to, by, None).await
    }

    /// As [`Supervisor::undo`]; `rollback_of`: the failed revision an autoRollback goes back
    /// from (its rollout is then a rollback, which does not roll back again). Without `to`, the
    /// last good revision (the last whose rollout completed), else the newest before the current.
    pub(super) async fn go_back(
        &self,
        namespace: &str,
        name: &str,
        to: Option<u64>,
        by: &str,
        rollback_of: Option<u64>,
    ) -> Result<ApplyOutcome, SupervisorError> {
        let app = app_key(namespace, name);
        let list = self.revisions(namespace, name)?;
        let current = list.revisions.iter().find(|r| r.current).map(|r| r.revision).unwrap_or_default();
        let last_good = {
            let specs = self.specs.lock().expect("specs lock");
            specs.get(&app).and_then(|e| e.rollout.as_ref()).map(|r| r.last_good).filter(|n| *n != 0 && *n != current)
        };
        let target = match to {
            Some(n) if n == current => {
                return Err(SupervisorError::Invalid(format!("toRevision: {n} is {app}'s current revision")))
            }
            Some(n) => list.revisions.iter().find(|r| r.revision == n),
            None => last_good
                .and_then(|n| list.revisions.iter().find(|r| r.revision == n))
                .or_else(|| list.revisions.iter().rev().find(|r| r.revision < current)),
        };
        let Some(target) = target else {
            let what = to.map_or("earlier revision".to_string(), |n| format!("revision {n}"));
            return Err(SupervisorError::NotFound(format!(
                "{what} of {app} to go back to (kept: {})",
                kept(&list.revisions)
            )));
        };
        let stored = self
            .shared
            .store
            .get(Table::Revisions, &key(&app, target.revision))?
            .ok_or_else(|| SupervisorError::NotFound(format!("revision {} of {app}", target.revision)))?;
        let stored: StoredRevision =
            serde_json::from_value(stored).map_err(|e| SupervisorError::Failed(format!("revision unreadable: {e}")))?;
        let (count, strategy, selection) = {
            let specs = self.specs.lock().expect("specs lock");
            let entry = specs.get(&app).ok_or_else(|| SupervisorError::NotFound(format!("app {app}")))?;
            (entry.spec.spec.instance, entry.spec.strategy.clone(), entry.selection.clone())
        };
        // What ran then, rolled out as the app rolls out now (Kubernetes' undo likewise takes
        // the template only).
        let mut spec = stored.spec;
        spec.spec.instance = count;
        spec.strategy = strategy;
        let by = format!("undo to revision {} by {by}", target.revision);
        self.apply_going_back(spec, selection, &by, rollback_of.map(|failed| (failed, target.revision)), false).await
    }
}

/// The numbers of the revisions kept (`1, 2, 3`, or `none`), for a message.
fn kept(revisions: &[RevisionInfo]) -> String {
    let numbers: Vec<String> = revisions.iter().map(|r| r.revision.to_string()).collect();
    if numbers.is_empty() {
        "none".to_string()
    } else {
        numbers.join(", ")
    }
}
