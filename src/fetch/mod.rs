//! Fetching an instance's `uris`: download (or copy) each package into a per-URL cache, verify
//! it, and extract it into the uri's `outputDir`, owned by the process's user.
//!
//! - `http`, `https` and `file` URLs; a value like `/prod/app.tar.gz` is a path in the package
//!   repository configured for the daemon. Basic auth from `user`/`pwd`; the password shows up
//!   in no message, log line or `Debug` output.
//! - `pullPolicy: IfNotPresent` reuses the cached copy; `Always` asks the server with
//!   `If-None-Match`/`If-Modified-Since` and reuses it on `304 Not Modified`.
//! - Downloads stream to disk (hashed on the way), with retries and exponential backoff on 5xx,
//!   429, connection errors and stalls; 4xx fail at once.
//! - `.tar.gz`/`.tgz`, `.tar.xz`/`.txz`, `.tar`, `.zip` are extracted; anything else is copied as
//!   one file. Entries that would land outside `outputDir` (absolute paths, `..`, escaping or
//!   traversed symlinks, hard links to anything but an extracted file, devices, fifos) fail the
//!   whole fetch; extraction goes through a temporary directory so a failure changes nothing.
//! - Extraction is bounded in total bytes, entries and bytes per archive byte (config
//!   `fetch_max_extracted_*`, `fetch_max_extraction_ratio`), counted as data is decompressed;
//!   an archive that is refused or damaged also leaves the cache.
//!
//! Here: the options, errors and `Fetcher::fetch`. Resolving a uri is in source.rs, getting the
//! archive into the cache in obtain.rs (bytes: download.rs), extracting it in install.rs.

mod archive;
mod cache;
mod download;
mod install;
mod obtain;
mod sandbox;
mod source;
pub(crate) mod sys;

pub use archive::Format;

/// Opens a directory in a workload's tree without going through a symlink it planted (see
/// [`install::open_output_dir`]); creates what is missing, owned by `owner`, when given.
pub(crate) fn open_dir_walk(path: &std::path::Path, owner: Option<(u32, u32)>) -> Result<std::os::fd::OwnedFd, String> {
    install::open_output_dir(path, owner)
}

use crate::runtime::process::ResolvedUser;
use crate::spec::render::RenderedUri;
use cache::Cache;
use download::Progress;
use sandbox::{EntryError, Limits};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOptions {
    /// Where downloads are kept (created 0700).
    pub cache_dir: PathBuf,
    /// Base URL for `/path` values, e.g. `file:///usr/share/steward/repository` or
    /// `http://repo:8080/packages`.
    pub repository: Option<String>,
    /// Tries per download, the first included.
    pub attempts: u32,
    /// Wait after the first failed attempt; doubled after each further one.
    pub first_backoff: Duration,
    /// No response, or no byte of the body, for this long counts as a failed attempt.
    pub stall_timeout: Duration,
    pub connect_timeout: Duration,
    /// Refuse archives that decompress to more than this (config `fetch_max_extracted_bytes`).
    pub max_extracted_bytes: u64,
    /// Refuse archives with more entries than this (config `fetch_max_extracted_files`).
    pub max_extracted_entries: u64,
    /// Refuse archives that decompress to more than this many times their own size (config
    /// `fetch_max_extraction_ratio`): a bomb is stopped long before the size limit.
    pub max_extraction_ratio: u64,
}

/// Defaults of the extraction limits (also the config's defaults).
pub const DEFAULT_MAX_EXTRACTED_BYTES: u64 = 10 << 30;
pub const DEFAULT_MAX_EXTRACTED_FILES: u64 = 1_000_000;
pub const DEFAULT_MAX_EXTRACTION_RATIO: u64 = 1000;

impl FetchOptions {
    pub fn new(cache_dir: impl Into<PathBuf>) -> FetchOptions {
        FetchOptions {
            cache_dir: cache_dir.into(),
            repository: None,
            attempts: 5,
            first_backoff: Duration::from_millis(500),
            stall_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_extracted_bytes: DEFAULT_MAX_EXTRACTED_BYTES,
            max_extracted_entries: DEFAULT_MAX_EXTRACTED_FILES,
            max_extraction_ratio: DEFAULT_MAX_EXTRACTION_RATIO,
        }
    }
}

impl Default for FetchOptions {
    fn default() -> FetchOptions {
        FetchOptions::new("/var/cache/steward/fetch")
    }
}

/// What a fetch produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Of the downloaded file (the archive, not its contents).
    pub sha256: String,
    pub bytes: u64,
    /// False when the cached copy was used (`IfNotPresent` hit, or `304 Not Modified`).
    pub downloaded: bool,
}

/// Every message names the URL without credentials (and without its query string, which may
/// carry a token) and says what failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot set up fetching: {0}")]
    Setup(String),
    #[error("uris[].value {value:?}: {reason}")]
    InvalidUri { value: String, reason: String },
    #[error("{url}: a /path value needs a package repository, and none is configured")]
    NoRepository { url: String },
    #[error("{url}: {status}: check uris[].user/pwd")]
    Unauthorized { url: String, status: String },
    #[error("{url}: {status}")]
    NotFound { url: String, status: String },
    #[error("{url}: the server answered {status}")]
    Status { url: String, status: String },
    #[error("{url}: failed after {attempts} attempts; the last one: {last}")]
    GaveUp { url: String, attempts: u32, last: String },
    #[error("{url}: sha256 mismatch: expected {expected}, got {actual}; nothing was extracted")]
    Sha256Mismatch { url: String, expected: String, actual: String },
    #[error("{url}: archive entry {entry:?} refused: {reason}; nothing was installed")]
    Refused { url: String, entry: String, reason: String },
    #[error("{url}: {message}; nothing was installed")]
    Corrupt { url: String, message: String },
    #[error("{url}: {message}; nothing was installed")]
    Limit { url: String, message: String },
    #[error("{url}: output directory {dir}: {message}")]
    OutputDir { url: String, dir: PathBuf, message: String },
    #[error("{url}: {what}: {message}")]
    Io { url: String, what: String, message: String },
}

impl FetchError {
    /// The URL as shown in the message (empty for setup errors).
    pub fn url(&self) -> &str {
        match self {
            FetchError::Setup(_) => "",
            FetchError::InvalidUri { value, .. } => value,
            FetchError::NoRepository { url }
            | FetchError::Unauthorized { url, .. }
            | FetchError::NotFound { url, .. }
            | FetchError::Status { url, .. }
            | FetchError::GaveUp { url, .. }
            | FetchError::Sha256Mismatch { url, .. }
            | FetchError::Refused { url, .. }
            | FetchError::Corrupt { url, .. }
            | FetchError::Limit { url, .. }
            | FetchError::OutputDir { url, .. }
            | FetchError::Io { url, .. } => url,
        }
    }
}

/// One per daemon; cheap to clone. Concurrent fetches of one URL share a single download, and
/// concurrent extractions into one directory take turns.
#[derive(Clone)]
pub struct Fetcher {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").field("options", &self.inner.options).finish_non_exhaustive()
    }
}

struct Inner {
    options: FetchOptions,
    client: reqwest::Client,
    cache: Cache,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Distinguishes this run's temporary directories from a crashed run's leftovers.
    token: String,
    seq: AtomicU64,
}

struct LockGuard {
    inner: Arc<Inner>,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let mut locks = self.inner.locks.lock().unwrap_or_else(|e| e.into_inner());
        self.guard.take();
        // Clones are made under this lock: a count of one means nobody else waits.
        if locks.get(&self.key).is_some_and(|m| Arc::strong_count(m) == 1) {
            locks.remove(&self.key);
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Fetcher {
    pub fn new(options: FetchOptions) -> Result<Fetcher, FetchError> {
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("steward/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::limited(10))
            .tcp_keepalive(Some(Duration::from_secs(30)))
            .build()
            .map_err(|e| FetchError::Setup(format!("HTTP client: {}", download::describe(e))))?;
        let cache = Cache::open(&options.cache_dir)
            .map_err(|e| FetchError::Setup(format!("cache directory {}: {e}", options.cache_dir.display())))?;
        let token = format!("{:x}{:x}", std::process::id(), now_ms() ^ (&client as *const _ as u64));
        Ok(Fetcher {
            inner: Arc::new(Inner {
                options,
                client,
                cache,
                locks: Mutex::new(HashMap::new()),
                token,
                seq: AtomicU64::new(0),
            }),
        })
    }

    pub fn options(&self) -> &FetchOptions {
        &self.inner.options
    }

    /// Obtains the archive (from the cache, revalidated for `Always`) and extracts it into
    /// `uri.output_dir`, owned by `owner`. `progress(bytes_so_far, total)` is called as bytes
    /// arrive (at most every 100 ms, and once at the end).
    pub async fn fetch(
        &self,
        uri: &RenderedUri,
        owner: &ResolvedUser,
        progress: Progress<'_>,
    ) -> Result<Fetched, FetchError> {
        let src = self.resolve(uri)?;
        let key = Cache::key(src.url.as_str(), src.user.as_deref());
        let (file, fetched) = {
            let _g = self.lock(format!("cache {key}")).await;
            self.obtain(&src, &key, uri, progress).await?
        };
        // Held by the extraction itself, so it is kept even if this future is dropped meanwhile.
        let dir_lock = self.lock(format!("dir {}", uri.output_dir.display())).await;
        let output_dir = uri.output_dir.clone();
        let (uid, gid) = (owner.uid, owner.gid);
        let token = self.inner.token.clone();
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        let format = src.format.clone();
        let limits = Limits {
            max_bytes: self.inner.options.max_extracted_bytes,
            max_entries: self.inner.options.max_extracted_entries,
            max_ratio: self.inner.options.max_extraction_ratio,
        };
        let result = tokio::task::spawn_blocking(move || {
            let _held = dir_lock;
            let job = install::Job { output_dir: &output_dir, uid, gid, token: &token, seq, format: &format, limits };
            install::install(&job, file)
        })
        .await
        .map_err(|e| FetchError::Io {
            url: src.shown.clone(),
            what: "extracting".into(),
            message: e.to_string(),
        })?;
        if let Err(install::InstallError::Entry(_)) = &result {
            // An archive that cannot be installed (a bomb, a hostile or damaged one) is no use to
            // anyone: it does not stay in the cache (unless another fetch replaced it meanwhile).
            let _g = self.lock(format!("cache {key}")).await;
            if self.inner.cache.load(&key).is_some_and(|m| m.sha256 == fetched.sha256) {
                self.inner.cache.forget(&key);
            }
        }
        let url = src.shown.clone();
        let dir = uri.output_dir.clone();
        result.map_err(|e| match e {
            install::InstallError::Dir(message) | install::InstallError::Move(message) => {
                FetchError::OutputDir { url, dir, message }
            }
            install::InstallError::Entry(EntryError::Refused { entry, reason }) => {
                FetchError::Refused { url, entry, reason }
            }
            install::InstallError::Entry(EntryError::Corrupt(message)) => FetchError::Corrupt { url, message },
            install::InstallError::Entry(EntryError::Limit(message)) => FetchError::Limit { url, message },
            install::InstallError::Entry(EntryError::Io { entry, error }) => FetchError::Io {
                url,
                what: format!("writing entry {entry:?} for {}", dir.display()),
                message: error.to_string(),
            },
        })?;
        Ok(fetched)
    }

    async fn lock(&self, key: String) -> LockGuard {
        let m = {
            let mut locks = self.inner.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(key.clone()).or_default().clone()
        };
        let guard = m.lock_owned().await;
        LockGuard { inner: self.inner.clone(), key, guard: Some(guard) }
    }
}
