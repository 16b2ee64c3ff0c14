//! The read side: snapshots, single records and the journal read in redb read transactions,
//! concurrently with the writer, each holding the database lock against compaction.

use super::error::db_err;
use super::{Event, Snapshot, Store, StoreError, Table, EVENTS, LAST_SEQ_KEY, STATE};
use redb::{Database, ReadableTable};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::RwLockReadGuard;
use tokio::sync::broadcast;

impl Store {
    /// Every record and the journal bounds, from one read transaction.
    pub fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let path = self.path();
        let txn = self.read_txn()?;
        let mut records = BTreeMap::new();
        for t in Table::ALL {
            let table = txn.open_table(t.def()).map_err(db_err(path, "open table"))?;
            for entry in table.iter().map_err(db_err(path, "read table"))? {
                let (k, v) = entry.map_err(db_err(path, "read table"))?;
                let key = Snapshot::record_key(t, k.value());
                let value = serde_json::from_slice(v.value()).map_err(|e| StoreError::corrupt(path, key.clone(), e))?;
                records.insert(key, value);
            }
        }
        let (last_seq, first_seq) = journal_bounds(&txn, path)?;
        Ok(Snapshot { records, last_seq, first_seq })
    }

    /// One record, or `None` if absent.
    pub fn get(&self, table: Table, key: &str) -> Result<Option<Value>, StoreError> {
        let path = self.path();
        let txn = self.read_txn()?;
        let t = txn.open_table(table.def()).map_err(db_err(path, "open table"))?;
        let Some(v) = t.get(key).map_err(db_err(path, "read record"))? else {
            return Ok(None);
        };
        serde_json::from_slice(v.value())
            .map(Some)
            .map_err(|e| StoreError::corrupt(path, Snapshot::record_key(table, key), e))
    }

    /// Every record of one table, in key order.
    pub fn records(&self, table: Table) -> Result<Vec<(String, Value)>, StoreError> {
        let path = self.path();
        let txn = self.read_txn()?;
        let t = txn.open_table(table.def()).map_err(db_err(path, "open table"))?;
        let mut out = Vec::new();
        for entry in t.iter().map_err(db_err(path, "read table"))? {
            let (k, v) = entry.map_err(db_err(path, "read table"))?;
            let key = k.value().to_string();
            let value = serde_json::from_slice(v.value())
                .map_err(|e| StoreError::corrupt(path, Snapshot::record_key(table, &key), e))?;
            out.push((key, value));
        }
        Ok(out)
    }

    /// Events with `seq > after_seq`, ascending, at most `limit` of them. Events older than
    /// [`Store::first_seq`] have been pruned: a caller whose `after_seq + 1 < first_seq()`
    /// has missed some.
    pub fn events_since(&self, after_seq: u64, limit: usize) -> Result<Vec<Event>, StoreError> {
        self.events_page(after_seq, limit, usize::MAX)
    }

    /// [`Store::events_since`], also ending the page once its events' stored bytes reach
    /// `max_bytes` (after at least one event): a reader's page is bounded in memory whatever
    /// the events hold.
    pub fn events_page(&self, after_seq: u64, limit: usize, max_bytes: usize) -> Result<Vec<Event>, StoreError> {
        let Some(from) = after_seq.checked_add(1) else { return Ok(Vec::new()) };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let path = self.path();
        let txn = self.read_txn()?;
        let table = txn.open_table(EVENTS).map_err(db_err(path, "open table"))?;
        let (mut out, mut held) = (Vec::new(), 0usize);
        for entry in table.range(from..).map_err(db_err(path, "read events"))? {
            let (k, v) = entry.map_err(db_err(path, "read events"))?;
            let seq = k.value();
            let (at_ms, bytes) = v.value();
            held = held.saturating_add(bytes.len());
            let body =
                serde_json::from_slice(bytes).map_err(|e| StoreError::corrupt(path, format!("event {seq}"), e))?;
            out.push(Event { seq, at_ms, body });
            if out.len() >= limit || held >= max_bytes {
                break;
            }
        }
        Ok(out)
    }

    /// Every event committed from now on, after it is durable, in `seq` order.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.shared.events.subscribe()
    }

    /// Oldest event still in the journal; `last_seq() + 1` when the journal is empty.
    pub fn first_seq(&self) -> u64 {
        self.inner.shared.first_seq.load(Ordering::Acquire)
    }

    /// This journal's identity: another value is another journal (a new state directory).
    pub fn journal_id(&self) -> u64 {
        self.inner.shared.journal_id
    }

    /// Newest committed event's sequence number; 0 if there has never been one.
    pub fn last_seq(&self) -> u64 {
        self.inner.shared.last_seq.load(Ordering::Acquire)
    }

    /// Sum of the lengths of the event bodies the journal holds (JSON bytes, without redb's
    /// own overhead).
    pub fn journal_bytes(&self) -> u64 {
        self.inner.shared.journal_bytes.load(Ordering::Acquire)
    }

    fn read_txn(&self) -> Result<ReadView<'_>, StoreError> {
        let db = self.inner.shared.db();
        let txn = db.begin_read().map_err(|e| StoreError::db(self.path(), "begin read transaction", e))?;
        Ok(ReadView { txn, _db: db })
    }
}

/// A read transaction holding the database lock until it ends, so compaction never meets a
/// live reader. Fields drop in order: the transaction first.
struct ReadView<'a> {
    txn: redb::ReadTransaction,
    _db: RwLockReadGuard<'a, Database>,
}

impl std::ops::Deref for ReadView<'_> {
    type Target = redb::ReadTransaction;
    fn deref(&self) -> &redb::ReadTransaction {
        &self.txn
    }
}

/// `(last_seq, first_seq)` as seen by `txn`.
pub(super) fn journal_bounds(txn: &redb::ReadTransaction, path: &Path) -> Result<(u64, u64), StoreError> {
    let state = txn.open_table(STATE).map_err(db_err(path, "open table"))?;
    let stored = state.get(LAST_SEQ_KEY).map_err(db_err(path, "read last_seq"))?.map(|g| g.value()).unwrap_or(0);
    let events = txn.open_table(EVENTS).map_err(db_err(path, "open table"))?;
    let newest = events.last().map_err(db_err(path, "read events"))?.map(|(k, _)| k.value()).unwrap_or(0);
    // Both are written in the same transaction, so they agree; take the larger anyway so
    // a sequence number can never be handed out twice.
    let last_seq = stored.max(newest);
    let first_seq = match events.first().map_err(db_err(path, "read events"))? {
        Some((k, _)) => k.value(),
        None => last_seq + 1,
    };
    Ok((last_seq, first_seq))
}
