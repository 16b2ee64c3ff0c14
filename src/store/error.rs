//! Errors of the state store. Every error names the store file it concerns; the
//! sources are behind `Arc` so one failed group commit can hand the same error to
//! every batch that was in it.

use std::path::PathBuf;
use std::sync::Arc;

/// What went wrong in the state store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store directory could not be created or is not a directory.
    #[error("state store directory {path}: {source}")]
    Dir { path: PathBuf, source: Arc<std::io::Error> },

    /// The store file could not be created or opened.
    #[error("state store file {path}: {source}")]
    File { path: PathBuf, source: Arc<std::io::Error> },

    /// Another handle (another stewardd process, or another `Store::open` of the same
    /// directory in this process) holds the store's exclusive lock.
    #[error(
        "state store {path} is already open (another stewardd, or another handle in this process, \
         holds its exclusive lock)"
    )]
    AlreadyOpen { path: PathBuf },

    /// redb refused to open the file (corrupt, wrong format, I/O error...).
    #[error("cannot open state store {path}: {source}")]
    Open { path: PathBuf, source: Arc<redb::DatabaseError> },

    /// The file was written by a newer Steward with a layout this one does not know.
    #[error("state store {path} has schema version {found}; this stewardd supports up to {supported}")]
    Schema { path: PathBuf, found: u64, supported: u64 },

    /// A read or write transaction failed.
    #[error("state store {path}: {op}: {source}")]
    Db { path: PathBuf, op: &'static str, source: Arc<redb::Error> },

    /// A stored record or event is not valid JSON (should never happen: only the
    /// store writes the file).
    #[error("state store {path}: corrupt {what}: {source}")]
    Corrupt { path: PathBuf, what: String, source: Arc<serde_json::Error> },

    /// The writer thread could not be started.
    #[error("state store {path}: cannot start the writer thread: {source}")]
    Spawn { path: PathBuf, source: Arc<std::io::Error> },

    /// The writer thread is gone (it panicked); nothing more can be committed.
    #[error("state store {path}: the writer thread has stopped")]
    WriterStopped { path: PathBuf },

    /// A commit failed on purpose through [`Store::inject_commit_failure`](super::Store::inject_commit_failure).
    #[error("state store {path}: injected commit failure (test hook)")]
    Injected { path: PathBuf },
}

impl StoreError {
    pub(crate) fn db(path: &std::path::Path, op: &'static str, e: impl Into<redb::Error>) -> StoreError {
        StoreError::Db { path: path.to_path_buf(), op, source: Arc::new(e.into()) }
    }

    pub(crate) fn corrupt(path: &std::path::Path, what: String, e: serde_json::Error) -> StoreError {
        StoreError::Corrupt { path: path.to_path_buf(), what, source: Arc::new(e) }
    }
}

/// `map_err` adapter: `.map_err(db_err(path, "commit"))`.
pub(crate) fn db_err<'a, E: Into<redb::Error>>(
    path: &'a std::path::Path,
    op: &'static str,
) -> impl FnOnce(E) -> StoreError + 'a {
    move |e| StoreError::db(path, op, e)
}
