//! The writer thread: the only code that writes to the database. It folds every request
//! queued at the time into one write transaction (group commit), commits it durably, then
//! publishes the events and answers each request.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Durability, ReadableTable};
use tokio::sync::oneshot;

use super::error::db_err;
use super::{Batch, Event, Op, Shared, StoreError, Table, EVENTS, JOURNAL_BYTES_KEY, LAST_SEQ_KEY, STATE};

/// Where to send a request's result.
pub(crate) enum Reply<T> {
    Async(oneshot::Sender<Result<T, StoreError>>),
    Blocking(mpsc::SyncSender<Result<T, StoreError>>),
}

impl<T> Reply<T> {
    fn send(self, result: Result<T, StoreError>) {
        // The caller may have given up (dropped future); the work is done either way.
        match self {
            Reply::Async(tx) => {
                let _ = tx.send(result);
            }
            Reply::Blocking(tx) => {
                let _ = tx.send(result);
            }
        }
    }
}

pub(crate) enum Request {
    Commit {
        batch: Batch,
        reply: Reply<Vec<u64>>,
    },
    /// Remove the oldest events while there are more than `keep_last` or they hold more than
    /// `max_bytes`, at most `limit` of them: a prune is cut into small transactions so that
    /// the pages each one frees are reused by the next commits. One transaction deleting tens
    /// of thousands of events made redb grow the file by hundreds of MiB (issue 32).
    Prune {
        keep_last: u64,
        max_bytes: u64,
        limit: usize,
        reply: Reply<u64>,
    },
}

impl Request {
    fn events(&self) -> usize {
        match self {
            Request::Commit { batch, .. } => batch.event_count(),
            Request::Prune { .. } => 0,
        }
    }
}

/// What a successful group commit changed.
struct Outcome {
    last_seq: u64,
    first_seq: u64,
    journal_bytes: u64,
    /// Events removed by each `Prune` request of the group, in order.
    pruned: Vec<u64>,
}

/// While commits follow each other (the last one ended less than this ago), a group waits up
/// to [`GATHER`] for more requests before committing: a burst of starts then shares each commit
/// among more of them (each commit costs a sync and its pages whatever it holds). A request
/// after a quiet moment is committed at once.
const BUSY: std::time::Duration = std::time::Duration::from_millis(2);
const GATHER: std::time::Duration = std::time::Duration::from_micros(500);

pub(crate) fn run(shared: Arc<Shared>, rx: mpsc::Receiver<Request>, max_group: usize) {
    let mut group = Vec::new();
    let mut last_commit: Option<std::time::Instant> = None;
    while let Ok(first) = rx.recv() {
        // Take what is queued, up to `max_group` requests or events, whichever comes first:
        // a subscriber that keeps up between groups then never lags (buffer >= max_group).
        let mut events = first.events();
        group.push(first);
        let busy = last_commit.is_some_and(|at| at.elapsed() < BUSY);
        let gather_until = std::time::Instant::now() + if busy { GATHER } else { std::time::Duration::ZERO };
        while group.len() < max_group && events < max_group {
            let left = gather_until.saturating_duration_since(std::time::Instant::now());
            let next = if left.is_zero() { rx.try_recv().ok() } else { rx.recv_timeout(left).ok() };
            match next {
                Some(request) => {
                    events += request.events();
                    group.push(request);
                }
                None => break,
            }
        }
        let last_seq = shared.last_seq.load(Ordering::Acquire);
        let first_seq = shared.first_seq.load(Ordering::Acquire);
        let bytes = shared.journal_bytes.load(Ordering::Acquire);
        let at_ms = now_ms();
        match write_group(&shared, &group, (last_seq, first_seq, bytes), at_ms) {
            Ok(outcome) => {
                // A prune that ran out of events to remove is done: time to see whether the
                // file is mostly free pages (after a burst) and give them back, before the
                // prune's caller hears it is done.
                let prunes = group.iter().filter(|r| matches!(r, Request::Prune { .. }));
                if prunes.zip(&outcome.pruned).any(|(r, n)| prune_done(r, *n)) {
                    let mut db = shared.db.write().unwrap_or_else(|e| e.into_inner());
                    if let Err(e) = super::compact::maybe(&mut db, &shared.path, outcome.journal_bytes) {
                        tracing::warn!(path = %shared.path.display(), error = %e, "state store compaction failed");
                    }
                }
                finish(&shared, group.drain(..), last_seq, at_ms, outcome);
                last_commit = Some(std::time::Instant::now());
            }
            Err(e) => {
                shared.failed_txns.fetch_add(1, Ordering::Relaxed);
                tracing::error!(path = %shared.path.display(), requests = group.len(), error = %e, "state store commit failed");
                for request in group.drain(..) {
                    match request {
                        Request::Commit { reply, .. } => reply.send(Err(e.clone())),
                        Request::Prune { reply, .. } => reply.send(Err(e.clone())),
                    }
                }
            }
        }
    }
}

/// Whether `request` is a prune that removed fewer events than it was allowed (`removed`).
fn prune_done(request: &Request, removed: u64) -> bool {
    matches!(request, Request::Prune { limit, .. } if removed < *limit as u64)
}

/// Apply every request of the group in one write transaction and commit it.
fn write_group(
    shared: &Shared,
    group: &[Request],
    (mut seq, mut first_seq, mut bytes): (u64, u64, u64),
    at_ms: u64,
) -> Result<Outcome, StoreError> {
    let path: &Path = &shared.path;
    let db = shared.db();
    let mut txn = db.begin_write().map_err(db_err(path, "begin write transaction"))?;
    txn.set_durability(Durability::Immediate);
    let mut pruned = Vec::new();
    {
        let mut records = Vec::with_capacity(Table::ALL.len());
        for t in Table::ALL {
            records.push(txn.open_table(t.def()).map_err(db_err(path, "open table"))?);
        }
        let mut events = txn.open_table(EVENTS).map_err(db_err(path, "open table"))?;
        let mut state = txn.open_table(STATE).map_err(db_err(path, "open table"))?;
        for request in group {
            match request {
                Request::Commit { batch, .. } => {
                    for op in &batch.ops {
                        match op {
                            Op::Put { table, key, value } => {
                                records[table.index()]
                                    .insert(key.as_str(), value.as_slice())
                                    .map_err(db_err(path, "write record"))?;
                            }
                            Op::Delete { table, key } => {
                                records[table.index()].remove(key.as_str()).map_err(db_err(path, "delete record"))?;
                            }
                            Op::Event { bytes: body, .. } => {
                                seq += 1;
                                events.insert(seq, (at_ms, body.as_slice())).map_err(db_err(path, "write event"))?;
                                bytes += body.len() as u64;
                            }
                        }
                    }
                }
                Request::Prune { keep_last, max_bytes, limit, .. } => {
                    let cutoff = seq.saturating_sub(*keep_last);
                    let mut removed = 0u64;
                    while removed < *limit as u64 {
                        let due = match events.first().map_err(db_err(path, "read events"))? {
                            Some((k, _)) => k.value() <= cutoff || bytes > *max_bytes,
                            None => false,
                        };
                        if !due {
                            break;
                        }
                        let Some((k, v)) = events.pop_first().map_err(db_err(path, "prune events"))? else { break };
                        bytes = bytes.saturating_sub(v.value().1.len() as u64);
                        first_seq = k.value() + 1;
                        removed += 1;
                    }
                    pruned.push(removed);
                }
            }
        }
        state.insert(LAST_SEQ_KEY, seq).map_err(db_err(path, "write last_seq"))?;
        state.insert(JOURNAL_BYTES_KEY, bytes).map_err(db_err(path, "write journal_bytes"))?;
    }
    if shared.fail_next.swap(false, Ordering::SeqCst) {
        txn.abort().map_err(db_err(path, "abort"))?;
        return Err(StoreError::Injected { path: path.to_path_buf() });
    }
    // A test's slow disk (`store-commit~MS`): every group's fsync takes that long.
    crate::failpoint::pause("store-commit");
    txn.commit().map_err(db_err(path, "commit"))?;
    Ok(Outcome { last_seq: seq, first_seq, journal_bytes: bytes, pruned })
}

/// After a durable commit: publish counters, events, then answer the callers.
fn finish(shared: &Shared, group: impl Iterator<Item = Request>, start: u64, at_ms: u64, outcome: Outcome) {
    let mut seq = start;
    shared.last_seq.store(outcome.last_seq, Ordering::Release);
    shared.first_seq.store(outcome.first_seq, Ordering::Release);
    shared.journal_bytes.store(outcome.journal_bytes, Ordering::Release);
    shared.write_txns.fetch_add(1, Ordering::Relaxed);
    let mut pruned = outcome.pruned.into_iter();
    let mut batches = 0;
    let mut replies = Vec::new();
    for request in group {
        match request {
            Request::Commit { batch, reply } => {
                batches += 1;
                if let Some(hook) = batch.on_durable {
                    (hook.0)();
                }
                let mut seqs = Vec::new();
                for op in batch.ops {
                    if let Op::Event { body, .. } = op {
                        seq += 1;
                        seqs.push(seq);
                        // Err only means nobody is subscribed.
                        let _ = shared.events.send(Event { seq, at_ms, body });
                    }
                }
                replies.push((reply, seqs));
            }
            Request::Prune { reply, .. } => reply.send(Ok(pruned.next().unwrap_or(0))),
        }
    }
    debug_assert_eq!(seq, outcome.last_seq);
    shared.batches.fetch_add(batches, Ordering::Relaxed);
    shared.events_committed.fetch_add(seq - start, Ordering::Relaxed);
    for (reply, seqs) in replies {
        reply.send(Ok(seqs));
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
