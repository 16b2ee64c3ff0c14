//! Instance actors, run and watched: an actor that panics (a bug) must not leave its instance
//! wedged.

use super::instance::{Actor, Hollow, Pod, Processes, Workload};
use super::record::InstanceRecord;
use super::{app_key, Handle, Shared, SpecEntry};
use crate::spec::InstanceId;
use futures_util::FutureExt;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Runs instance actors and watches their tasks: an actor that panics (a bug) must not leave its
/// instance wedged, unstoppable and undeletable, with its processes running unsupervised. The
/// watch starts a new actor on the instance's last record, which first kills what runs and
/// records the instance Failed with the panic's message: a record that does not lead the next
/// actor (or the next daemon start) into the same panic.
pub(super) struct ActorWatch {
    pub shared: Arc<Shared>,
    pub instances: Arc<Mutex<BTreeMap<InstanceId, Handle>>>,
    pub specs: Arc<Mutex<BTreeMap<String, Arc<SpecEntry>>>>,
}

/// Panics of one instance's actors in a row after which it is given up (its handle dropped and
/// the instance left Failed in the store, its processes killed): a bug the Failed state itself
/// trips over must not loop.
const MAX_ACTOR_PANICS: u32 = 3;
const PANICS_IN_A_ROW_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

impl ActorWatch {
    /// Starts an actor for `rec`; `panicked`: the previous actor's panic message and how many
    /// in a row.
    pub fn spawn(
        self,
        rec: InstanceRecord,
        spec: Arc<SpecEntry>,
        panicked: Option<(String, u32)>,
    ) -> oneshot::Receiver<()> {
        // A spec never changes kind (see `Supervisor::apply`): the instance keeps its workload.
        if self.shared.hollow {
            self.spawn_as::<Hollow>(rec, spec, panicked)
        } else if spec.spec.is_pod() {
            self.spawn_as::<Pod>(rec, spec, panicked)
        } else {
            self.spawn_as::<Processes>(rec, spec, panicked)
        }
    }

    fn spawn_as<W: Workload>(
        self,
        rec: InstanceRecord,
        spec: Arc<SpecEntry>,
        panicked: Option<(String, u32)>,
    ) -> oneshot::Receiver<()> {
        let id = rec.id.clone();
        let (mut actor, tx, status) = Actor::<W>::new(self.shared.clone(), rec, spec.clone());
        let resumed = actor.on_resumed();
        let last = status.clone();
        self.instances.lock().expect("instances lock").insert(id.clone(), Handle { tx, status });
        let panics = panicked.as_ref().map_or(0, |(_, n)| *n);
        let started = std::time::Instant::now();
        // One task an instance, its actor boxed outside it (thousands of instances each hold
        // one): the panic is caught in the task, not by a second task watching the first.
        let actor = Box::new(actor);
        tokio::spawn(async move {
            let run = async move {
                let mut actor = actor;
                if let Some((what, _)) = panicked {
                    // Boxed: its future would otherwise size every instance's task.
                    Box::pin(actor.fail_after_panic(&what)).await;
                }
                actor.run().await
            };
            // The actor is dropped when its panic is caught: before a new one takes its place.
            let Err(payload) = AssertUnwindSafe(run).catch_unwind().await else { return };
            let what = panic_message(&*payload);
            let rec = last.borrow().clone();
            tracing::error!(instance = %id, "the instance's actor panicked (a bug in stewardd): {what}");
            // In a row: soon after the previous actor's start.
            let in_a_row = if started.elapsed() < PANICS_IN_A_ROW_WITHIN { panics + 1 } else { 1 };
            if in_a_row >= MAX_ACTOR_PANICS {
                tracing::error!(instance = %id, "its actor panicked {in_a_row} times in a row: given up");
                self.instances.lock().expect("instances lock").remove(&id);
                return;
            }
            let key = app_key(&id.namespace, &id.name);
            let spec = self.specs.lock().expect("specs lock").get(&key).cloned().unwrap_or(spec);
            drop(self.spawn(rec, spec, Some((what, in_a_row))));
        });
        resumed
    }
}

/// A panic's message, as `panic!` and `expect` give it.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}
