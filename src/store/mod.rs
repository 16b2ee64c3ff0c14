//! Embedded state store and event journal (redb).
//!
//! The store is generic: it keeps string-keyed JSON records in a few [`Table`]s and an
//! append-only journal of JSON events with durable, strictly increasing sequence numbers
//! (no gaps, never reused, across restarts too). It knows nothing of the daemon's types.
//!
//! Writes go through [`Batch`]es. A batch is applied atomically (all of its puts, deletes
//! and events, or none), and [`Store::commit`] returns only once the batch is on disk
//! (redb `Durability::Immediate`: fsync'd). That is what lets the supervisor make a
//! transition durable before acting on it and reporting it (DESIGN §2).
//!
//! **Group commit.** One writer thread owns the write side. Callers queue their batch and
//! wait; the writer takes everything queued, applies it in one write transaction, commits
//! (one fsync) and then publishes the events and answers every caller. Many concurrent
//! transitions therefore cost one fsync per group, not one each. If a group's commit fails,
//! every batch in it fails with the same error and the sequence counter does not move.
//!
//! Reads ([`Store::snapshot`], [`Store::events_since`], [`Store::get`]) use redb read
//! transactions and run concurrently with the writer; each sees one committed state.
//!
//! **Following events without a gap.** Subscribe first, then read (snapshot or
//! `events_since`), then drop received events whose `seq` is not above what was read. A
//! subscriber that falls more than the broadcast buffer behind gets
//! `RecvError::Lagged` and catches up with `events_since`.
//!
//! On disk (`DIR/steward.redb`): tables `instances`, `specs`, `ports`, `meta`
//! (`&str` → JSON bytes), `_events` (`u64` seq → (`u64` unix ms, JSON bytes)) and `_store`
//! (`last_seq`, `journal_bytes`, `schema_version`).

mod compact;
mod error;
mod writer;

pub use compact::MIN_COMPACT_FILE_BYTES;
use error::db_err;
pub use error::StoreError;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;

use redb::{Database, Durability, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use writer::{Reply, Request};

/// Name of the database file inside the store directory.
pub const FILE_NAME: &str = "steward.redb";
/// Default redb cache: small, the daemon's RSS target is 15 MiB at 500 instances. Pages it
/// does not hold are read back from the kernel's page cache (a pread, microseconds), and
/// writes go to the file at every commit anyway. Below the 532 KiB of allocator state redb
/// writes at open, so that is not kept either (1 MiB kept it: 1.1 MiB more RSS at 500).
pub const DEFAULT_CACHE_BYTES: usize = 256 << 10;
/// Default number of events a subscriber may fall behind before it sees `Lagged` (and reads
/// the journal instead). Each held event is a JSON tree of a few KiB, kept until overwritten:
/// 1024 of them were a fifth of the daemon's heap at 500 instances, 256 still a few hundred
/// KiB. A reader that lags reads the journal, losing nothing.
pub const DEFAULT_EVENT_BUFFER: usize = 128;
/// Default cap on the requests (and on the events) folded into one write transaction.
pub const DEFAULT_MAX_GROUP: usize = 96;

/// On-disk layout version, kept in `_store`.
const SCHEMA_VERSION: u64 = 1;
const EVENTS: TableDefinition<u64, (u64, &[u8])> = TableDefinition::new("_events");
const STATE: TableDefinition<&str, u64> = TableDefinition::new("_store");
const LAST_SEQ_KEY: &str = "last_seq";
/// Sum of the stored event bodies' lengths, kept beside `last_seq` in every transaction so the
/// byte bound of the retention needs no scan. Absent in stores written before it: counted at open.
const JOURNAL_BYTES_KEY: &str = "journal_bytes";
/// Most events one prune transaction removes. Small transactions free a few hundred KiB of
/// pages each, which the following commits reuse; the whole backlog in one transaction made
/// redb double the file (issue 32). Each chunk is queued behind the commits already waiting.
pub const PRUNE_CHUNK: usize = 1024;
const SCHEMA_KEY: &str = "schema_version";

/// A table of string-keyed JSON records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    Instances,
    Specs,
    Ports,
    Meta,
    /// Namespace-scoped secrets (values never leave the daemon except into instances).
    Secrets,
    ConfigMaps,
}

impl Table {
    pub const ALL: [Table; 6] =
        [Table::Instances, Table::Specs, Table::Ports, Table::Meta, Table::Secrets, Table::ConfigMaps];

    /// The table's name on disk and in [`Snapshot::records`] keys (`"instances"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Table::Instances => "instances",
            Table::Specs => "specs",
            Table::Ports => "ports",
            Table::Meta => "meta",
            Table::Secrets => "secrets",
            Table::ConfigMaps => "configmaps",
        }
    }

    pub fn from_name(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }

    fn def(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        TableDefinition::new(self.name())
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Sequence number: 1, 2, 3... with no gaps, never reused.
    pub seq: u64,
    /// When the store committed it, unix milliseconds.
    pub at_ms: u64,
    pub body: Value,
}

/// A consistent view of every record, as of `last_seq`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every record, keyed `"table:key"` (e.g. `"instances:web/api/0"`).
    pub records: BTreeMap<String, Value>,
    /// Sequence number of the newest event committed with (or before) these records; 0 if none.
    pub last_seq: u64,
    /// Oldest event still in the journal; `last_seq + 1` if the journal is empty.
    pub first_seq: u64,
}

impl Snapshot {
    /// The `"table:key"` string used in [`Snapshot::records`].
    pub fn record_key(table: Table, key: &str) -> String {
        format!("{}:{key}", table.name())
    }

    pub fn get(&self, table: Table, key: &str) -> Option<&Value> {
        self.records.get(&Snapshot::record_key(table, key))
    }

    /// The records of one table as `(key, value)`, in key order.
    pub fn table(&self, table: Table) -> impl Iterator<Item = (&str, &Value)> + '_ {
        let prefix = Snapshot::record_key(table, "");
        let skip = prefix.len();
        self.records
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
            .map(move |(k, v)| (&k[skip..], v))
    }
}

/// Counters of the writer, for tests, benchmarks and the daemon's own metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Write transactions committed (each is one fsync). Includes the one made by `open`.
    pub write_txns: u64,
    /// Write transactions that failed (all their batches failed).
    pub failed_txns: u64,
    /// Batches committed.
    pub batches: u64,
    /// Events committed.
    pub events: u64,
}

/// Tuning knobs; [`Store::open`] uses the defaults.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// redb page cache, bytes (read + write).
    pub cache_bytes: usize,
    /// Broadcast buffer for [`Store::subscribe`], in events. An event is freed once every
    /// subscriber has received it; this bounds how far a subscriber may fall behind.
    pub event_buffer: usize,
    /// Most requests, and most events, folded into one write transaction (a batch is never
    /// split). Keep it below `event_buffer` so one group cannot make a keeping-up
    /// subscriber lag.
    pub max_group: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_bytes: DEFAULT_CACHE_BYTES,
            event_buffer: DEFAULT_EVENT_BUFFER,
            max_group: DEFAULT_MAX_GROUP,
        }
    }
}

#[derive(Debug)]
pub(crate) enum Op {
    Put { table: Table, key: String, value: Vec<u8> },
    Delete { table: Table, key: String },
    Event { body: Value, bytes: Vec<u8> },
}

/// Operations committed together, atomically, in order.
///
/// ```
/// # use steward::store::{Batch, Table};
/// let b = Batch::new()
///     .put(Table::Instances, "web/api/0", &serde_json::json!({"state": "Starting"}))
///     .event(serde_json::json!({"instance": "web/api/0", "to": "Starting"}));
/// assert_eq!(b.len(), 2);
/// ```
#[derive(Debug, Default)]
#[must_use]
pub struct Batch {
    pub(crate) ops: Vec<Op>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Insert or replace the record `key` of `table`.
    pub fn put(mut self, table: Table, key: &str, value: &Value) -> Batch {
        self.push_put(table, key, value);
        self
    }

    /// Remove the record `key` of `table` (no error if it is absent).
    pub fn delete(mut self, table: Table, key: &str) -> Batch {
        self.push_delete(table, key);
        self
    }

    /// Append an event to the journal; its sequence number is returned by the commit.
    pub fn event(mut self, body: Value) -> Batch {
        self.push_event(body);
        self
    }

    /// [`Batch::put`] for callers that build a batch in a loop.
    pub fn push_put(&mut self, table: Table, key: &str, value: &Value) {
        self.ops.push(Op::Put { table, key: key.to_owned(), value: to_json(value) });
    }

    pub fn push_delete(&mut self, table: Table, key: &str) {
        self.ops.push(Op::Delete { table, key: key.to_owned() });
    }

    pub fn push_event(&mut self, body: Value) {
        let bytes = to_json(&body);
        self.ops.push(Op::Event { body, bytes });
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Number of events (= sequence numbers the commit will return).
    pub fn event_count(&self) -> usize {
        self.ops.iter().filter(|op| matches!(op, Op::Event { .. })).count()
    }
}

fn to_json(value: &Value) -> Vec<u8> {
    // A `Value` always serializes: its map keys are strings and it holds no NaN.
    serde_json::to_vec(value).expect("serializing a serde_json::Value cannot fail")
}

/// State shared by the handles and the writer thread.
pub(crate) struct Shared {
    /// Readers and the writer's transactions take it shared; compaction, which needs redb to
    /// itself, exclusive (a reader holds it until its transaction ends).
    pub(crate) db: RwLock<Database>,
    pub(crate) path: PathBuf,
    pub(crate) events: broadcast::Sender<Event>,
    pub(crate) last_seq: AtomicU64,
    pub(crate) first_seq: AtomicU64,
    pub(crate) journal_bytes: AtomicU64,
    pub(crate) write_txns: AtomicU64,
    pub(crate) failed_txns: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) events_committed: AtomicU64,
    pub(crate) fail_next: AtomicBool,
}

struct Inner {
    shared: Arc<Shared>,
    tx: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queue stops the writer once it has answered what was queued; joining
        // it means the database (and its file lock) is released when the last handle goes.
        drop(self.tx.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Handle to the state store: cheap to clone, `Send + Sync`. The database is closed (and
/// its lock released) when the last clone is dropped; that drop waits for the writer to
/// finish the group it is committing, if any (one fsync).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.shared.path)
            .field("last_seq", &self.last_seq())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Open (or create) the store in `dir`, with default options.
    ///
    /// `dir` is created with mode 0700 if missing; the file `dir/steward.redb` with mode
    /// 0600 (never through a symlink). Fails with [`StoreError::AlreadyOpen`] if another
    /// process or another handle in this process has it open.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_with(dir, StoreOptions::default())
    }

    /// As [`Store::open`], waiting up to `wait` while another holds the lock: another process
    /// finishing with the store (the scheduler's CLI), or a start's child that a killed stewardd
    /// left holding a copy of its descriptor for a moment (runtime/spawn.rs).
    pub fn open_waiting(dir: &Path, wait: std::time::Duration) -> Result<Store, StoreError> {
        let started = std::time::Instant::now();
        let mut told = false;
        loop {
            match Store::open(dir) {
                Err(StoreError::AlreadyOpen { .. }) if started.elapsed() < wait => {
                    if !std::mem::replace(&mut told, true) {
                        tracing::debug!("state store {} is locked; waiting up to {} s", dir.display(), wait.as_secs());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => return other,
            }
        }
    }

    pub fn open_with(dir: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        let dir_err = |e: io::Error| StoreError::Dir { path: dir.to_path_buf(), source: Arc::new(e) };
        // Parents are ordinary directories (0755): the work and run roots usually sit beside the
        // state directory, and workloads of other users must be able to reach them. Only the
        // state directory itself is private.
        if let Some(parent) = dir.parent() {
            fs::DirBuilder::new().recursive(true).mode(0o755).create(parent).map_err(dir_err)?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .or_else(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
            .map_err(dir_err)?;
        let meta = fs::metadata(dir).map_err(dir_err)?;
        if !meta.is_dir() {
            return Err(dir_err(io::Error::new(io::ErrorKind::NotADirectory, "not a directory")));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                dir = %dir.display(),
                mode = format_args!("{:o}", meta.permissions().mode() & 0o7777),
                "state store directory is accessible to group or others"
            );
        }

        let path = dir.join(FILE_NAME);
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| StoreError::File { path: path.clone(), source: Arc::new(e) })?;
        let mut db =
            redb::Builder::new().set_cache_size(options.cache_bytes).create_file(file).map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => StoreError::AlreadyOpen { path: path.clone() },
                e => StoreError::Open { path: path.clone(), source: Arc::new(e) },
            })?;

        let (last_seq, first_seq, journal_bytes) = init(&db, &path)?;
        // A file left large by a burst (or by an older Steward, issue 32) shrinks here.
        compact::maybe(&mut db, &path, journal_bytes)?;
        let (events, _) = broadcast::channel(options.event_buffer.max(1));
        let shared = Arc::new(Shared {
            db: RwLock::new(db),
            path,
            events,
            last_seq: AtomicU64::new(last_seq),
            first_seq: AtomicU64::new(first_seq),
            journal_bytes: AtomicU64::new(journal_bytes),
            write_txns: AtomicU64::new(1),
            failed_txns: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            events_committed: AtomicU64::new(0),
            fail_next: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let writer = {
            let shared = shared.clone();
            let max_group = options.max_group.max(1);
            std::thread::Builder::new().name("steward-store".into()).spawn(move || writer::run(shared, rx, max_group))
        };
        let writer = writer.map_err(|e| StoreError::Spawn { path: shared.path.clone(), source: Arc::new(e) })?;
        tracing::debug!(path = %shared.path.display(), last_seq, first_seq, "state store open");
        Ok(Store { inner: Arc::new(Inner { shared, tx: Some(tx), writer: Some(writer) }) })
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.inner.shared.path
    }

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

    /// Commit `batch` atomically; returns once it is durable, with the sequence numbers
    /// given to its events, in order. By then the events have been sent to subscribers.
    ///
    /// If the future is dropped after it was first polled, the batch may still be committed.
    pub async fn commit(&self, batch: Batch) -> Result<Vec<u64>, StoreError> {
        self.submit(batch).await
    }

    /// [`Store::commit`], with the batch handed to the writer now rather than at the first
    /// poll: work done before awaiting the result overlaps the fsync.
    pub fn submit(&self, batch: Batch) -> impl std::future::Future<Output = Result<Vec<u64>, StoreError>> + 'static {
        let stopped = self.stopped();
        let sent = if batch.is_empty() {
            None
        } else {
            let (tx, rx) = oneshot::channel();
            Some(self.send(Request::Commit { batch, reply: Reply::Async(tx) }).map(|()| rx))
        };
        async move {
            match sent {
                None => Ok(Vec::new()),
                Some(Err(e)) => Err(e),
                Some(Ok(rx)) => rx.await.map_err(|_| stopped)?,
            }
        }
    }

    /// [`Store::commit`] for code outside the async runtime (blocks the calling thread).
    pub fn commit_blocking(&self, batch: Batch) -> Result<Vec<u64>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Request::Commit { batch, reply: Reply::Blocking(tx) })?;
        rx.recv().map_err(|_| self.stopped())?
    }

    /// Events with `seq > after_seq`, ascending, at most `limit` of them. Events older than
    /// [`Store::first_seq`] have been pruned: a caller whose `after_seq + 1 < first_seq()`
    /// has missed some.
    pub fn events_since(&self, after_seq: u64, limit: usize) -> Result<Vec<Event>, StoreError> {
        let Some(from) = after_seq.checked_add(1) else { return Ok(Vec::new()) };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let path = self.path();
        let txn = self.read_txn()?;
        let table = txn.open_table(EVENTS).map_err(db_err(path, "open table"))?;
        let mut out = Vec::new();
        for entry in table.range(from..).map_err(db_err(path, "read events"))? {
            let (k, v) = entry.map_err(db_err(path, "read events"))?;
            let seq = k.value();
            let (at_ms, bytes) = v.value();
            let body =
                serde_json::from_slice(bytes).map_err(|e| StoreError::corrupt(path, format!("event {seq}"), e))?;
            out.push(Event { seq, at_ms, body });
            if out.len() >= limit {
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

    /// Newest committed event's sequence number; 0 if there has never been one.
    pub fn last_seq(&self) -> u64 {
        self.inner.shared.last_seq.load(Ordering::Acquire)
    }

    /// Sum of the lengths of the event bodies the journal holds (JSON bytes, without redb's
    /// own overhead).
    pub fn journal_bytes(&self) -> u64 {
        self.inner.shared.journal_bytes.load(Ordering::Acquire)
    }

    /// Retention: delete all but the newest `keep_last` events; returns how many were
    /// removed. See [`Store::prune`].
    pub fn prune_events(&self, keep_last: u64) -> Result<u64, StoreError> {
        self.prune(keep_last, u64::MAX)
    }

    /// Retention: delete the oldest events while more than `keep_last` remain or their bodies
    /// hold more than `max_bytes`; returns how many were removed. Goes through the writer in
    /// transactions of at most [`PRUNE_CHUNK`] events (each durable, possibly shared with
    /// concurrent commits, which run between them) and blocks until it is done. Never moves
    /// `last_seq`.
    pub fn prune(&self, keep_last: u64, max_bytes: u64) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let (tx, rx) = mpsc::sync_channel(1);
            self.send(Request::Prune { keep_last, max_bytes, limit: PRUNE_CHUNK, reply: Reply::Blocking(tx) })?;
            let removed = rx.recv().map_err(|_| self.stopped())??;
            total += removed;
            if removed < PRUNE_CHUNK as u64 {
                return Ok(total);
            }
        }
    }

    pub fn stats(&self) -> StoreStats {
        let s = &self.inner.shared;
        StoreStats {
            write_txns: s.write_txns.load(Ordering::Relaxed),
            failed_txns: s.failed_txns.load(Ordering::Relaxed),
            batches: s.batches.load(Ordering::Relaxed),
            events: s.events_committed.load(Ordering::Relaxed),
        }
    }

    /// Test hook: the next write transaction is aborted after all of its operations were
    /// applied, and every batch in it fails with [`StoreError::Injected`].
    #[doc(hidden)]
    pub fn inject_commit_failure(&self) {
        self.inner.shared.fail_next.store(true, Ordering::SeqCst);
    }

    fn send(&self, request: Request) -> Result<(), StoreError> {
        match &self.inner.tx {
            Some(tx) => tx.send(request).map_err(|_| self.stopped()),
            None => Err(self.stopped()),
        }
    }

    fn stopped(&self) -> StoreError {
        StoreError::WriterStopped { path: self.path().to_path_buf() }
    }

    fn read_txn(&self) -> Result<ReadView<'_>, StoreError> {
        let db = self.inner.shared.db();
        let txn = db.begin_read().map_err(|e| StoreError::db(self.path(), "begin read transaction", e))?;
        Ok(ReadView { txn, _db: db })
    }
}

impl Shared {
    /// The database, shared (a panic elsewhere while holding the lock leaves redb consistent).
    pub(crate) fn db(&self) -> RwLockReadGuard<'_, Database> {
        self.db.read().unwrap_or_else(|e| e.into_inner())
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

/// Create the tables, check the schema version, and read the journal bounds and size
/// (`(last_seq, first_seq, journal_bytes)`).
fn init(db: &Database, path: &Path) -> Result<(u64, u64, u64), StoreError> {
    let mut txn = db.begin_write().map_err(db_err(path, "begin write transaction"))?;
    txn.set_durability(Durability::Immediate);
    {
        for t in Table::ALL {
            txn.open_table(t.def()).map_err(db_err(path, "create table"))?;
        }
        let events = txn.open_table(EVENTS).map_err(db_err(path, "create table"))?;
        let mut state = txn.open_table(STATE).map_err(db_err(path, "create table"))?;
        let found = state.get(SCHEMA_KEY).map_err(db_err(path, "read schema version"))?.map(|g| g.value());
        match found {
            Some(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::Schema { path: path.to_path_buf(), found: v, supported: SCHEMA_VERSION });
            }
            Some(_) => {}
            None => {
                state.insert(SCHEMA_KEY, SCHEMA_VERSION).map_err(db_err(path, "write schema version"))?;
            }
        }
        if state.get(JOURNAL_BYTES_KEY).map_err(db_err(path, "read journal_bytes"))?.is_none() {
            let mut bytes = 0u64;
            for entry in events.iter().map_err(db_err(path, "read events"))? {
                bytes += entry.map_err(db_err(path, "read events"))?.1.value().1.len() as u64;
            }
            state.insert(JOURNAL_BYTES_KEY, bytes).map_err(db_err(path, "write journal_bytes"))?;
        }
    }
    txn.commit().map_err(db_err(path, "commit"))?;
    let rtxn = db.begin_read().map_err(db_err(path, "begin read transaction"))?;
    let (last_seq, first_seq) = journal_bounds(&rtxn, path)?;
    let state = rtxn.open_table(STATE).map_err(db_err(path, "open table"))?;
    let bytes = state.get(JOURNAL_BYTES_KEY).map_err(db_err(path, "read journal_bytes"))?.map(|g| g.value());
    Ok((last_seq, first_seq, bytes.unwrap_or(0)))
}

/// `(last_seq, first_seq)` as seen by `txn`.
fn journal_bounds(txn: &redb::ReadTransaction, path: &Path) -> Result<(u64, u64), StoreError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn store_is_send_sync_and_futures_are_send() {
        assert_send_sync::<Store>();
        fn is_send<T: Send>(_: &T) {}
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let fut = store.commit(Batch::new());
        is_send(&fut);
    }

    #[test]
    fn table_names_round_trip() {
        for t in Table::ALL {
            assert_eq!(Table::from_name(t.name()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), json!(t.name()));
            assert_eq!(Table::ALL[t.index()], t);
        }
        assert_eq!(Table::from_name("_events"), None);
    }

    #[test]
    fn batch_builder_counts_ops_and_events() {
        let b = Batch::new()
            .put(Table::Instances, "a", &json!(1))
            .event(json!({"x": 1}))
            .delete(Table::Ports, "b")
            .event(json!(null));
        assert_eq!(b.len(), 4);
        assert_eq!(b.event_count(), 2);
        assert!(Batch::new().is_empty());
        let mut b = Batch::new();
        b.push_put(Table::Meta, "k", &json!("v"));
        b.push_event(json!(2));
        b.push_delete(Table::Meta, "k");
        assert_eq!((b.len(), b.event_count()), (3, 1));
    }

    #[test]
    fn snapshot_table_view_strips_prefix_and_stays_in_table() {
        let mut s = Snapshot::default();
        s.records.insert("instances:a/b/0".into(), json!(1));
        s.records.insert("instances:a/b/1".into(), json!(2));
        s.records.insert("meta:x".into(), json!(3));
        s.records.insert("ports:a/b/0".into(), json!(4));
        let inst: Vec<_> = s.table(Table::Instances).collect();
        assert_eq!(inst, vec![("a/b/0", &json!(1)), ("a/b/1", &json!(2))]);
        assert_eq!(s.get(Table::Meta, "x"), Some(&json!(3)));
        assert_eq!(s.table(Table::Specs).count(), 0);
    }

    #[test]
    fn empty_store_bounds_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("state");
        let store = Store::open(&sub).unwrap();
        assert_eq!((store.last_seq(), store.first_seq()), (0, 1));
        assert_eq!(fs::metadata(&sub).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(sub.join(FILE_NAME)).unwrap().permissions().mode() & 0o077, 0);
        let snap = store.snapshot().unwrap();
        assert_eq!((snap.last_seq, snap.first_seq, snap.records.len()), (0, 1, 0));
        assert_eq!(store.commit_blocking(Batch::new()).unwrap(), Vec::<u64>::new());
        assert_eq!(store.events_since(0, 10).unwrap(), vec![]);
        assert_eq!(store.events_since(u64::MAX, 10).unwrap(), vec![]);
    }

    #[test]
    fn second_open_in_process_is_refused_then_allowed_after_drop() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let clone = store.clone();
        match Store::open(dir.path()) {
            Err(StoreError::AlreadyOpen { path }) => assert_eq!(path, dir.path().join(FILE_NAME)),
            other => panic!("expected AlreadyOpen, got {other:?}"),
        }
        drop(store);
        // A clone still holds it open.
        assert!(matches!(Store::open(dir.path()), Err(StoreError::AlreadyOpen { .. })));
        drop(clone);
        Store::open(dir.path()).unwrap();
    }

    #[test]
    fn symlinked_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(FILE_NAME)).unwrap();
        assert!(matches!(Store::open(dir.path()), Err(StoreError::File { .. })));
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path()).unwrap());
        {
            let db = Database::create(dir.path().join(FILE_NAME)).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(STATE).unwrap().insert(SCHEMA_KEY, SCHEMA_VERSION + 1).unwrap();
            txn.commit().unwrap();
        }
        match Store::open(dir.path()) {
            Err(StoreError::Schema { found, supported, .. }) => assert_eq!((found, supported), (2, 1)),
            other => panic!("expected Schema, got {other:?}"),
        }
    }
}
