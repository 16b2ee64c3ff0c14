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
//!
//! Here: opening, committing, pruning. The data callers see is in records.rs, the write unit
//! in batch.rs, the read side in read.rs, the group-committing writer in writer.rs.

mod batch;
mod compact;
mod error;
mod read;
mod records;
mod writer;

use batch::Op;
pub use batch::{Batch, MAX_EVENT_BYTES};
pub use compact::MIN_COMPACT_FILE_BYTES;
use error::db_err;
pub use error::StoreError;
pub use records::{Event, Snapshot, Table};

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;

use redb::{Database, Durability, ReadableTable, TableDefinition};
use tokio::sync::{broadcast, oneshot};

use read::journal_bounds;
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
/// This journal's identity: when the store file was made (ns since the epoch). A new state
/// directory is a new journal whose sequence numbers mean nothing to a follower's cursor.
const JOURNAL_ID_KEY: &str = "journal_id";

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
    pub(crate) journal_id: u64,
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

        let (last_seq, first_seq, journal_bytes, journal_id) = init(&db, &path)?;
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
            journal_id,
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
}

impl Shared {
    /// The database, shared (a panic elsewhere while holding the lock leaves redb consistent).
    pub(crate) fn db(&self) -> RwLockReadGuard<'_, Database> {
        self.db.read().unwrap_or_else(|e| e.into_inner())
    }
}
/// Create the tables, check the schema version, and read the journal bounds and size
/// (`(last_seq, first_seq, journal_bytes)`).
/// Tables made, the schema checked: (last_seq, first_seq, journal bytes, journal id).
fn init(db: &Database, path: &Path) -> Result<(u64, u64, u64, u64), StoreError> {
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
        if state.get(JOURNAL_ID_KEY).map_err(db_err(path, "read journal_id"))?.is_none() {
            let made = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let id = u64::try_from(made.as_nanos()).unwrap_or(u64::MAX).max(1);
            state.insert(JOURNAL_ID_KEY, id).map_err(db_err(path, "write journal_id"))?;
        }
    }
    txn.commit().map_err(db_err(path, "commit"))?;
    let rtxn = db.begin_read().map_err(db_err(path, "begin read transaction"))?;
    let (last_seq, first_seq) = journal_bounds(&rtxn, path)?;
    let state = rtxn.open_table(STATE).map_err(db_err(path, "open table"))?;
    let bytes = state.get(JOURNAL_BYTES_KEY).map_err(db_err(path, "read journal_bytes"))?.map(|g| g.value());
    let id = state.get(JOURNAL_ID_KEY).map_err(db_err(path, "read journal_id"))?.map(|g| g.value());
    Ok((last_seq, first_seq, bytes.unwrap_or(0), id.unwrap_or(1)))
}
#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    /// A journal keeps its identity across reopening; a new state directory is another journal.
    #[test]
    fn the_journal_identity_lasts_with_its_directory() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = Store::open(a.path()).unwrap().journal_id();
        assert_eq!(Store::open(a.path()).unwrap().journal_id(), first);
        assert_ne!(Store::open(b.path()).unwrap().journal_id(), first);
        assert_ne!(first, 0);
    }

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
    fn an_event_page_ends_at_its_byte_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut batch = Batch::new();
        for i in 0..10 {
            batch.push_event(serde_json::json!({"n": i, "pad": "x".repeat(10_000)}));
        }
        store.commit_blocking(batch).unwrap();
        let page = store.events_page(0, 100, 25_000).unwrap();
        assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3], "stops once 25,000 bytes are held");
        assert_eq!(store.events_page(3, 100, 1).unwrap().len(), 1, "one event at least");
        assert_eq!(store.events_page(0, 100, usize::MAX).unwrap().len(), 10);
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
