//! What a failed rollout leaves, and its retry (issue 43). A surge instance whose failure
//! failed the rollout is kept — stopped, its ports given back, out of the rollout's spares — so
//! that its last run's logs (`steward logs`) and exit (`steward status`) say why, until the
//! app's next apply replaces it or the app is deleted; deleting it as the other spares are
//! deleted its run directory, and with it the only account of the failure. Applying the spec
//! the failed rollout left again retries it (see `apply.rs`): the kept instances go, and the
//! target revision's failed instances start again.

use super::instance::{Command, SpecEntry};
use super::*;
use crate::store::Batch;

impl Supervisor {
    /// Whether spare `index` of `entry`'s rollout ended on the target revision (what the
    /// planner counts as a failure of the new revision).
    pub(super) fn spare_failed(&self, entry: &SpecEntry, index: u32) -> bool {
        let id = spare_id(entry, index);
        let instances = self.instances.lock().expect("instances lock");
        instances.get(&id).is_some_and(|h| {
            let rec = h.status.borrow();
            rec.revision == entry.revision
                && matches!(rec.state.kind(), state::Kind::Failed | state::Kind::Exited | state::Kind::Backoff)
        })
    }

    /// Stops failed spare `index` for good (its restart policy would run it again), gives its
    /// ports back and moves it from the rollout's spares to its kept instances, in one commit.
    pub(super) async fn keep_failed_spare(&self, entry: &Arc<SpecEntry>, index: u32) -> Result<(), SupervisorError> {
        let id = spare_id(entry, index);
        if let Err(e) = self.request(&id, Command::Stop).await {
            // A Failed instance has nothing to stop: it stays as it is, which is the point.
            tracing::debug!(instance = %id, "stopping the failed spare: {e}");
        }
        let _applying = self.applying.lock().await;
        let mut batch = Batch::new();
        let released = self.shared.ports.lock().expect("ports lock").release(&id.to_string(), &mut batch);
        let updated = self.rollout_put(
            entry,
            |r| {
                r.spares.retain(|s| *s != index);
                r.kept.push(index);
            },
            &mut batch,
        )?;
        // As a deleted instance's ports: released in memory at once (a failed commit is
        // logged by the caller; the next start reads the store again).
        self.commit(batch).await?;
        self.show_rollout(updated);
        tracing::info!(instance = %id, "kept after the failed rollout for its output; released ports {released:?}");
        Ok(())
    }

    /// A retry of `entry`'s failed rollout: the target revision's instances that ended start
    /// again (the planner would see their old end and fail the retry at once).
    pub(super) fn restart_failed(&self, entry: &SpecEntry) {
        let (ns, name) = (&entry.spec.metadata.namespace, &entry.spec.metadata.name);
        let instances = self.instances.lock().expect("instances lock");
        for (id, h) in instances.iter().filter(|(id, _)| &id.namespace == ns && &id.name == name) {
            let ended = {
                let rec = h.status.borrow();
                rec.revision == entry.revision
                    && matches!(rec.state.kind(), state::Kind::Failed | state::Kind::Exited | state::Kind::Backoff)
            };
            if ended {
                let _ = h.tx.send(instance::Msg::Request(Command::Restart, None));
                tracing::info!(instance = %id, "started again: the failed rollout is retried");
            }
        }
    }
}

impl Supervisor {
    /// The instances failed rollouts keep for their output, of every app.
    pub(super) fn kept_ids(&self) -> std::collections::BTreeSet<InstanceId> {
        let specs = self.specs.lock().expect("specs lock");
        specs
            .values()
            .filter_map(|e| e.rollout.as_ref().map(|r| (e, r)))
            .flat_map(|(e, r)| r.kept.iter().map(move |i| spare_id(e, *i)))
            .collect()
    }
}

fn spare_id(entry: &SpecEntry, index: u32) -> InstanceId {
    InstanceId { namespace: entry.spec.metadata.namespace.clone(), name: entry.spec.metadata.name.clone(), index }
}
