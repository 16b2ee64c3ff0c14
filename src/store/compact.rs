//! Compaction: gives the free pages of the store file back to the file system.
//!
//! redb reuses freed pages but never shrinks the file by itself, so a file that once grew
//! (a burst of events, or a store written by a Steward that pruned in one transaction, issue
//! 32) would keep its size for good. `Database::compact` moves the live pages to the front
//! and truncates the rest; it is crash-safe (two-phase commits) but needs the database to
//! itself (no live transaction), and every commit waits while it runs, so it is done only
//! when most of a sizeable file is free.

use std::path::Path;

use redb::Database;

use super::error::db_err;
use super::StoreError;

/// Files below this are left alone: the saving would not be worth stalling commits.
pub const MIN_COMPACT_FILE_BYTES: u64 = 16 << 20;

/// `(file bytes, bytes in allocated pages)`, when more than half of a file of at least
/// [`MIN_COMPACT_FILE_BYTES`] is free pages; `None` when compaction is not worth it.
///
/// redb's stats walk every page, so they are read only when the file is over three times
/// `journal_bytes` (the events take about twice their JSON in pages): in a steady crash loop
/// the file is not, and the writer does not stop for a walk after every prune.
pub(crate) fn worth_it(db: &Database, path: &Path, journal_bytes: u64) -> Result<Option<(u64, u64)>, StoreError> {
    let file = std::fs::metadata(path)
        .map_err(|e| StoreError::File { path: path.to_path_buf(), source: std::sync::Arc::new(e) })?
        .len();
    if file < MIN_COMPACT_FILE_BYTES || file <= journal_bytes.saturating_mul(3) {
        return Ok(None);
    }
    let txn = db.begin_write().map_err(db_err(path, "begin write transaction"))?;
    let stats = txn.stats().map_err(db_err(path, "read stats"))?;
    txn.abort().map_err(db_err(path, "abort"))?;
    let used = stats.allocated_pages() * stats.page_size() as u64;
    Ok((file.saturating_sub(used) > file / 2).then_some((file, used)))
}

/// Compacts when [`worth_it`]; returns `(file bytes before, after)` if it did. A reader
/// holding a transaction makes redb refuse: that is not an error, the next try does it.
pub(crate) fn maybe(db: &mut Database, path: &Path, journal_bytes: u64) -> Result<Option<(u64, u64)>, StoreError> {
    let Some((before, used)) = worth_it(db, path, journal_bytes)? else { return Ok(None) };
    let started = std::time::Instant::now();
    match db.compact() {
        Ok(_) => {}
        Err(redb::CompactionError::TransactionInProgress) => {
            tracing::debug!(path = %path.display(), "compaction put off: a read is in progress");
            return Ok(None);
        }
        Err(e) => return Err(StoreError::db(path, "compact", e)),
    }
    let after = std::fs::metadata(path)
        .map_err(|e| StoreError::File { path: path.to_path_buf(), source: std::sync::Arc::new(e) })?
        .len();
    tracing::info!(
        path = %path.display(),
        before, after, used, ms = started.elapsed().as_millis() as u64,
        "state store compacted"
    );
    Ok(Some((before, after)))
}

#[cfg(test)]
mod tests {
    use super::super::{Store, FILE_NAME};
    use redb::{Database, TableDefinition};

    /// A file left mostly free (here by a table filled and emptied behind the store's back,
    /// as an older Steward's one-transaction prune left it) shrinks when the store opens.
    #[test]
    fn open_compacts_a_mostly_free_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        drop(Store::open(dir.path()).unwrap());
        let junk: TableDefinition<u64, &[u8]> = TableDefinition::new("junk");
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(junk).unwrap().insert(0, [0u8; 1000].as_slice()).unwrap();
            {
                let mut t = txn.open_table(junk).unwrap();
                for i in 0..40_000u64 {
                    t.insert(i, [7u8; 1000].as_slice()).unwrap();
                }
            }
            txn.commit().unwrap();
            let txn = db.begin_write().unwrap();
            txn.delete_table(junk).unwrap();
            txn.commit().unwrap();
        }
        let before = std::fs::metadata(&path).unwrap().len();
        assert!(before >= 40 << 20, "{before}");
        let store = Store::open(dir.path()).unwrap();
        let after = std::fs::metadata(&path).unwrap().len();
        assert!(after < 8 << 20, "not compacted at open: {before} -> {after}");
        assert_eq!((store.first_seq(), store.last_seq()), (1, 0));
    }
}
