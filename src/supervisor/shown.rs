//! What status readers see of an instance: the record its actor last showed (see the
//! instance's journal), read by listings and rollouts, and waited on by `wait_for`.
//!
//! A `tokio::sync::watch` did this, but each one holds nine `Notify`s (352 bytes an instance,
//! heaptrack at 2,000, issue 48) for readers that almost never wait: here the record, one
//! `Notify` and a count of writers (~100 bytes).

use super::record::InstanceRecord;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

struct Cell {
    record: Mutex<Arc<InstanceRecord>>,
    changed: Notify,
    /// Writers alive: the actor's journal and the commits it has in flight. None left: the
    /// actor has ended.
    writers: AtomicUsize,
}

/// Shows an instance's record (the actor's side). Cloned into each commit in flight, which
/// shows the record once durable.
pub(crate) struct ShownWriter {
    cell: Arc<Cell>,
}

/// Reads what an instance shows (the supervisor's side).
#[derive(Clone)]
pub(crate) struct Shown {
    cell: Arc<Cell>,
}

/// A new cell showing `record`: its writer and a reader.
pub(crate) fn channel(record: Arc<InstanceRecord>) -> (ShownWriter, Shown) {
    let cell = Arc::new(Cell { record: Mutex::new(record), changed: Notify::new(), writers: AtomicUsize::new(1) });
    (ShownWriter { cell: cell.clone() }, Shown { cell })
}

impl ShownWriter {
    /// Shows `record` from now on, waking whoever waits.
    pub fn show(&self, record: Arc<InstanceRecord>) {
        *self.cell.record.lock().expect("shown record lock") = record;
        self.cell.changed.notify_waiters();
    }

    /// Changes what is shown in place (copied first if someone else holds it).
    pub fn modify(&self, change: impl FnOnce(&mut InstanceRecord)) {
        change(Arc::make_mut(&mut self.cell.record.lock().expect("shown record lock")));
        self.cell.changed.notify_waiters();
    }
}

impl Clone for ShownWriter {
    fn clone(&self) -> ShownWriter {
        self.cell.writers.fetch_add(1, Ordering::SeqCst);
        ShownWriter { cell: self.cell.clone() }
    }
}

impl Drop for ShownWriter {
    fn drop(&mut self) {
        if self.cell.writers.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The last one: waiters learn the actor ended.
            self.cell.changed.notify_waiters();
        }
    }
}

impl Shown {
    /// The record shown now.
    pub fn get(&self) -> Arc<InstanceRecord> {
        self.cell.record.lock().expect("shown record lock").clone()
    }

    /// Whether the actor has ended (deleted, or panicked and about to be replaced).
    pub fn actor_ended(&self) -> bool {
        self.cell.writers.load(Ordering::SeqCst) == 0
    }

    /// Waits until the shown record satisfies `done` (true), or the actor ends (false).
    pub async fn wait_for(&self, done: impl Fn(&InstanceRecord) -> bool) -> bool {
        loop {
            // Registered before looking, so a change between the look and the wait wakes it.
            let changed = self.cell.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(&self.get()) {
                return true;
            }
            if self.actor_ended() {
                return false;
            }
            changed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::InstanceId;
    use std::time::Duration;

    fn record(restarts: u64) -> Arc<InstanceRecord> {
        let id = InstanceId { namespace: "test".into(), name: "web".into(), index: 0 };
        Arc::new(InstanceRecord { restarts, ..InstanceRecord::new(id, 1, 0) })
    }

    /// A reader sees each record shown; a waiter wakes for the change it waits for, and for
    /// the actor's end once every writer (a commit in flight too) is gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_see_each_record_shown_and_waiters_wake_for_changes_and_the_end() {
        let (writer, shown) = channel(record(0));
        assert_eq!(shown.get().restarts, 0);
        let waiting = {
            let shown = shown.clone();
            tokio::spawn(async move { shown.wait_for(|r| r.restarts == 2).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.show(record(1));
        writer.modify(|r| r.restarts += 1);
        assert!(tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap());
        assert_eq!(shown.get().restarts, 2);

        let in_flight = writer.clone();
        let waiting = {
            let shown = shown.clone();
            tokio::spawn(async move { shown.wait_for(|r| r.restarts == 9).await })
        };
        drop(writer);
        assert!(!shown.actor_ended(), "a commit in flight still shows");
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(in_flight);
        assert!(shown.actor_ended());
        assert!(!tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap(), "ended, not done");
        assert!(!shown.wait_for(|_| false).await, "an ended actor's wait returns at once");
    }
}
