//! An instance's journal: its record and its transitions' events, committed to the store
//! before anything acts on them, and the status watch, which shows a record only once it is
//! durable (docs/design.md, "Durability").

use crate::protocol::EventBody;
use crate::store::{Batch, Store, StoreError, Table};
use crate::supervisor::record::InstanceRecord;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// A commit on its way to the store (see [`Journal::begin`]).
pub(crate) struct PendingCommit {
    commit: Pin<Box<dyn Future<Output = Result<Vec<u64>, StoreError>> + Send>>,
    /// What was sent, for a retry: the record's JSON, serialized once.
    record: Vec<u8>,
    events: Vec<serde_json::Value>,
    /// Its number among the journal's commits (see [`DurableMarks`]).
    seq: u64,
}

/// Who waits for what the actor has done so far to be durable: a request answered before it is
/// carried out (the API's 202) is answered only once its transition is, or a kill -9 in between
/// would lose what was answered. Shared by the journal, which counts its commits, and the
/// actor's message loops, which take the waits in the order of the requests.
#[derive(Default)]
pub(crate) struct DurableMarks(Mutex<Marks>);

#[derive(Default)]
struct Marks {
    /// Events are held for the next commit.
    held: bool,
    /// Commits begun, and the last known durable (commits become durable in order: one actor
    /// waits for each before it begins the next).
    begun: u64,
    durable: u64,
    /// Each with the commit it waits for.
    waiting: Vec<(u64, oneshot::Sender<()>)>,
}

impl DurableMarks {
    /// Tells `tx` once everything committed or held so far is durable: at once if it is.
    pub fn when_durable(&self, tx: oneshot::Sender<()>) {
        let mut m = self.0.lock().expect("durable marks lock");
        let needed = m.begun + u64::from(m.held);
        if needed <= m.durable {
            let _ = tx.send(());
        } else {
            m.waiting.push((needed, tx));
        }
    }

    fn hold(&self) {
        self.0.lock().expect("durable marks lock").held = true;
    }

    /// A commit begins, carrying whatever was held: its number.
    fn begin(&self) -> u64 {
        let mut m = self.0.lock().expect("durable marks lock");
        m.held = false;
        m.begun += 1;
        m.begun
    }

    /// Commit `seq` (and every one before it) is durable.
    fn durable(&self, seq: u64) {
        let ready: Vec<_> = {
            let mut m = self.0.lock().expect("durable marks lock");
            m.durable = m.durable.max(seq);
            let durable = m.durable;
            let (ready, waiting) =
                std::mem::take(&mut m.waiting).into_iter().partition(|(needed, _)| *needed <= durable);
            m.waiting = waiting;
            ready
        };
        for (_, tx) in ready {
            let _ = tx.send(());
        }
    }
}

pub(crate) struct Journal {
    /// Events of transitions taken but not yet committed: when staging is local work only
    /// (nothing to fetch), its transitions are committed together with the Starting that
    /// follows it, while the spawn runs. Typed until the commit begins: a respawn builds their
    /// JSON after its clone (see `spawn_committed`), not on the way to it.
    held: Vec<EventBody>,
    status: watch::Sender<InstanceRecord>,
    /// The app's driver's wake-up (supervisor/driver.rs).
    waker: std::sync::Arc<tokio::sync::Notify>,
    marks: Arc<DurableMarks>,
}

impl Journal {
    pub fn new(status: watch::Sender<InstanceRecord>, waker: std::sync::Arc<tokio::sync::Notify>) -> Journal {
        Journal { held: Vec::new(), status, waker, marks: Arc::default() }
    }

    /// Who waits for this journal's commits (shared with the actor's message loops).
    pub fn marks(&self) -> Arc<DurableMarks> {
        self.marks.clone()
    }

    /// Holds `events` for the next commit.
    pub fn hold(&mut self, events: impl IntoIterator<Item = EventBody>) {
        let before = self.held.len();
        self.held.extend(events);
        if self.held.len() > before {
            self.marks.hold();
        }
    }

    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// The held events, taken as the store writes them: by the next commit, or by a delete with
    /// the record's removal.
    pub fn take_held(&mut self) -> Vec<serde_json::Value> {
        std::mem::take(&mut self.held).iter().map(EventBody::to_value).collect()
    }

    /// Shows `rec` to status readers without a commit: for what is not durable by design
    /// (a health result that changes nothing, containers' details).
    pub fn show(&self, rec: &InstanceRecord) {
        self.status.send_replace(rec.clone());
        self.waker.notify_one();
    }

    /// Shows a progress message (a download's) in the status without a commit.
    pub fn show_progress(&self, message: String) {
        self.status.send_modify(|r| r.message = message);
    }

    /// Writes `rec` and the held events with `events` durably, then shows it. A store that keeps
    /// refusing (redb refuses every write after an I/O error) ends the daemon: acting on a
    /// transition the store does not hold could start an instance twice after a crash, while a
    /// restarted daemon (systemd restarts it) re-adopts everything from the last durable state.
    pub async fn commit(&mut self, store: &Store, rec: &InstanceRecord, events: Vec<EventBody>) {
        self.held.extend(events);
        let pending = self.begin(store, rec);
        self.finish(store, rec, pending).await;
    }

    /// `rec` and the held events, handed to the store now; [`Self::finish`] waits until they
    /// are durable, so work in between (a spawn) overlaps the fsync.
    pub fn begin(&mut self, store: &Store, rec: &InstanceRecord) -> PendingCommit {
        let events = self.take_held();
        // Straight to JSON: no `Value` tree built only to be serialized again.
        let record = serde_json::to_vec(rec).expect("record serializes");
        let seq = self.marks.begin();
        let commit = Box::pin(store.submit(self.batch(rec, &record, &events, seq)));
        PendingCommit { commit, record, events, seq }
    }

    /// The record and events to commit, `rec` shown by the store once durable and before the
    /// events go out: a reader an event wakes (steward-sched lists the node's instances on one)
    /// finds what it announces.
    fn batch(&self, rec: &InstanceRecord, record: &[u8], events: &[serde_json::Value], seq: u64) -> Batch {
        let (status, waker, shown, marks) = (self.status.clone(), self.waker.clone(), rec.clone(), self.marks.clone());
        batch(rec, record, events).on_durable(move || {
            status.send_replace(shown);
            waker.notify_one();
            marks.durable(seq);
        })
    }

    /// Waits for a commit from [`Self::begin`], retrying it with backoff if the store refuses
    /// (the store shows `rec` once it is durable, see [`Self::batch`]).
    pub async fn finish(&mut self, store: &Store, rec: &InstanceRecord, mut pending: PendingCommit) {
        let mut delay = Duration::from_millis(50);
        for attempt in 1.. {
            match (&mut pending.commit).await {
                // Shown by the store before its events went out (see `batch`).
                Ok(_) => return,
                Err(e) if attempt < 6 => {
                    tracing::error!(instance = %rec.id, "store commit failed (attempt {attempt}), retrying: {e}");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    pending.commit =
                        Box::pin(store.submit(self.batch(rec, &pending.record, &pending.events, pending.seq)));
                }
                Err(e) => {
                    tracing::error!(instance = %rec.id, "store keeps refusing writes: {e}; stewardd exits so it can start clean (instances keep running)");
                    std::process::exit(70);
                }
            }
        }
    }
}

fn batch(rec: &InstanceRecord, record: &[u8], events: &[serde_json::Value]) -> Batch {
    let mut batch = Batch::new().put_json(Table::Instances, &rec.key(), record.to_vec());
    for e in events {
        batch.push_event(e.clone());
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::InstanceId;

    /// A wait for what is done so far to be durable ends at once when nothing is held or in
    /// flight, else with the commit that carries it: not with the one already in flight when
    /// events were held after it began.
    #[test]
    fn a_wait_ends_with_the_commit_that_carries_what_came_before_it() {
        let marks = DurableMarks::default();
        let told = || {
            let (tx, rx) = oneshot::channel();
            marks.when_durable(tx);
            rx
        };
        let mut at_rest = told();
        assert_eq!(at_rest.try_recv(), Ok(()), "nothing pending: at once");
        let first = marks.begin();
        let mut in_flight = told();
        marks.hold();
        let mut held = told();
        assert!(in_flight.try_recv().is_err() && held.try_recv().is_err());
        marks.durable(first);
        assert_eq!(in_flight.try_recv(), Ok(()), "the commit in flight carried what came before");
        assert!(held.try_recv().is_err(), "held after that commit began: not carried by it");
        let second = marks.begin();
        assert!(held.try_recv().is_err());
        marks.durable(second);
        assert_eq!(held.try_recv(), Ok(()));
    }

    /// A reader woken by an event (steward-sched lists the node's instances when it hears one)
    /// must find the status the event announces: it was shown a moment after the event, when
    /// the actor ran again, and a listing in between read the state before (the endpoints then
    /// followed a readiness change only at the next reconcile pass, 9 s late).
    #[tokio::test(flavor = "current_thread")]
    async fn an_event_is_published_only_once_its_record_is_shown() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let id = InstanceId { namespace: "test".into(), name: "web".into(), index: 0 };
        let mut rec = InstanceRecord::new(id, 1, 0);
        let (status, shown) = watch::channel(rec.clone());
        let mut journal = Journal::new(status, Default::default());
        let mut events = store.subscribe();
        rec.ready = true;
        let committer = {
            let (store, rec) = (store.clone(), rec.clone());
            let ready = EventBody::Other(serde_json::json!({"ready": true}));
            tokio::spawn(async move { journal.commit(&store, &rec, vec![ready]).await })
        };
        let event = events.recv().await.unwrap();
        assert_eq!(event.body["ready"], true);
        // Read at once, before the committer runs again (one thread: it has not yet).
        assert!(shown.borrow().ready, "the record the event announces is shown when the event is out");
        committer.await.unwrap();
    }
}
