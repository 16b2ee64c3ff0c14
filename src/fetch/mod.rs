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

mod archive;
mod cache;
mod download;
mod install;
mod sandbox;
pub(crate) mod sys;

pub use archive::Format;

/// Opens a directory in a workload's tree without going through a symlink it planted (see
/// [`install::open_output_dir`]); creates what is missing, owned by `owner`, when given.
pub(crate) fn open_dir_walk(path: &std::path::Path, owner: Option<(u32, u32)>) -> Result<std::os::fd::OwnedFd, String> {
    install::open_output_dir(path, owner)
}

use crate::runtime::process::ResolvedUser;
use crate::spec::model::PullPolicy;
use crate::spec::render::RenderedUri;
use cache::{Cache, Meta, TempPath};
use download::{Attempt, Progress, Spool};
use sandbox::{EntryError, Limits};
use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use url::Url;

/// Backoff between attempts never grows beyond this.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

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

/// A uri, resolved. Deliberately not `Debug`: it holds the password.
struct Source {
    url: Url,
    /// For messages: no credentials, no query.
    shown: String,
    user: Option<String>,
    password: Option<String>,
    /// For `file:` URLs.
    local: Option<PathBuf>,
    format: Format,
}

enum Downloaded {
    NotModified,
    Body { temp: TempPath, sha256: String, size: u64, etag: Option<String>, last_modified: Option<String> },
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

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A value that failed to parse, with anything that looks like `user:password@` hidden.
fn redact_text(value: &str) -> String {
    if let Some(scheme_end) = value.find("://") {
        let rest = &value[scheme_end + 3..];
        let authority_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            return format!("{}://***@{}", &value[..scheme_end], &rest[at + 1..]);
        }
    }
    value.to_string()
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

    fn resolve(&self, uri: &RenderedUri) -> Result<Source, FetchError> {
        let value = uri.value.trim();
        let full = if value.starts_with('/') {
            let repo = self
                .inner
                .options
                .repository
                .as_deref()
                .ok_or_else(|| FetchError::NoRepository { url: value.to_string() })?;
            format!("{}{value}", repo.trim_end_matches('/'))
        } else {
            value.to_string()
        };
        let invalid = |reason: String| FetchError::InvalidUri { value: redact_text(&full), reason };
        let mut url = Url::parse(&full).map_err(|e| invalid(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https" | "file") {
            return Err(invalid(format!("unsupported scheme {:?}: use http, https or file", url.scheme())));
        }
        let url_user = percent_decode(url.username());
        let url_password = url.password().map(percent_decode);
        let _ = url.set_username("");
        let _ = url.set_password(None);
        url.set_fragment(None);
        let user = uri.user.clone().or((!url_user.is_empty()).then_some(url_user));
        let password = uri.password.as_ref().map(|p| p.0.clone()).or(url_password);
        let shown = format!("{}{}", &url[..url::Position::AfterPath], if url.query().is_some() { "?…" } else { "" });
        let file_name = url.path_segments().and_then(|mut s| s.next_back()).map(percent_decode).unwrap_or_default();
        let format = Format::of(&file_name);
        if let Format::Plain(name) = &format {
            if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
                return Err(invalid("the URL does not end in a file name".into()));
            }
        }
        let local = if url.scheme() == "file" {
            Some(
                url.to_file_path()
                    .map_err(|()| invalid("not a local file path (file://host/ is not supported)".into()))?,
            )
        } else {
            None
        };
        Ok(Source { url, shown, user, password, local, format })
    }

    /// The archive, from the cache or downloaded into it, opened, with what it is.
    async fn obtain(
        &self,
        src: &Source,
        key: &str,
        uri: &RenderedUri,
        progress: Progress<'_>,
    ) -> Result<(File, Fetched), FetchError> {
        let cache = &self.inner.cache;
        let want = uri.sha256.as_deref().map(str::to_ascii_lowercase);
        // A cached file with another hash than the spec names is stale, whatever the policy.
        let cached = cache.load(key).filter(|m| want.as_ref().is_none_or(|w| *w == m.sha256));
        let conditional = match (&cached, uri.pull_policy) {
            (Some(meta), PullPolicy::IfNotPresent) => {
                if let Some(hit) = self.open_hit(src, key, meta, want.is_some()).await? {
                    progress(meta.size, Some(meta.size));
                    return Ok(hit);
                }
                None
            }
            (Some(meta), PullPolicy::Always) => Some(meta),
            (None, _) => None,
        };
        let downloaded = self.download(src, key, conditional, progress).await?;
        let Downloaded::Body { temp, sha256, size, etag, last_modified } = downloaded else {
            let meta = conditional.expect("NotModified only answers a conditional request");
            if let Some(hit) = self.open_hit(src, key, meta, want.is_some()).await? {
                progress(meta.size, Some(meta.size));
                return Ok(hit);
            }
            // The cached copy turned out damaged: fetch it whole.
            return Box::pin(self.obtain(src, key, uri, progress)).await;
        };
        if let Some(expected) = want {
            if expected != sha256 {
                return Err(FetchError::Sha256Mismatch { url: src.shown.clone(), expected, actual: sha256 });
            }
        }
        let meta = Meta { url: src.shown.clone(), etag, last_modified, sha256, size, fetched_at_ms: now_ms() };
        let io = |what: &str, e: std::io::Error| FetchError::Io {
            url: src.shown.clone(),
            what: what.to_string(),
            message: download::io_message(&e),
        };
        cache.commit(key, temp, &meta).map_err(|e| io("saving into the cache", e))?;
        let file = File::open(cache.data_path(key)).map_err(|e| io("opening the cached copy", e))?;
        Ok((file, Fetched { sha256: meta.sha256, bytes: meta.size, downloaded: true }))
    }

    /// Opens a cache entry; when the spec names a hash, the file is hashed again (a damaged
    /// entry is forgotten and `None` returned).
    async fn open_hit(
        &self,
        src: &Source,
        key: &str,
        meta: &Meta,
        verify: bool,
    ) -> Result<Option<(File, Fetched)>, FetchError> {
        let cache = &self.inner.cache;
        let path = cache.data_path(key);
        let Ok(file) = File::open(&path) else {
            cache.forget(key);
            return Ok(None);
        };
        if verify {
            let p = path.clone();
            let actual = tokio::task::spawn_blocking(move || cache::sha256_file(&p)).await.ok().and_then(|r| r.ok());
            if actual.as_deref() != Some(meta.sha256.as_str()) {
                tracing::warn!(url = %src.shown, "cached copy is damaged; downloading again");
                cache.forget(key);
                return Ok(None);
            }
        }
        Ok(Some((file, Fetched { sha256: meta.sha256.clone(), bytes: meta.size, downloaded: false })))
    }

    async fn download(
        &self,
        src: &Source,
        key: &str,
        conditional: Option<&Meta>,
        progress: Progress<'_>,
    ) -> Result<Downloaded, FetchError> {
        if let Some(path) = &src.local {
            return self.copy_local(src, path, key, conditional, progress).await;
        }
        let o = &self.inner.options;
        let attempts = o.attempts.max(1);
        let mut backoff = o.first_backoff;
        let mut last = String::new();
        for attempt in 1..=attempts {
            match self.http_attempt(src, key, conditional, progress).await {
                Attempt::Done(d) => return Ok(d),
                Attempt::Fatal(e) => return Err(e),
                Attempt::Retry { why, after } => {
                    if attempt < attempts {
                        let wait = after.map_or(backoff, |a| a.max(backoff));
                        tracing::warn!(url = %src.shown, attempt, "fetch failed: {why}; trying again in {wait:?}");
                        tokio::time::sleep(wait).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    last = why;
                }
            }
        }
        Err(FetchError::GaveUp { url: src.shown.clone(), attempts, last })
    }

    async fn http_attempt(
        &self,
        src: &Source,
        key: &str,
        conditional: Option<&Meta>,
        progress: Progress<'_>,
    ) -> Attempt<Downloaded> {
        use reqwest::header;
        use reqwest::StatusCode;
        let stall = self.inner.options.stall_timeout;
        let url = || src.shown.clone();
        let mut req = self.inner.client.get(src.url.clone());
        if let Some(user) = &src.user {
            req = req.basic_auth(user, src.password.as_deref());
        }
        if let Some(meta) = conditional {
            if let Some(etag) = &meta.etag {
                req = req.header(header::IF_NONE_MATCH, etag);
            }
            if let Some(lm) = &meta.last_modified {
                req = req.header(header::IF_MODIFIED_SINCE, lm);
            }
        }
        let mut resp = match tokio::time::timeout(stall, req.send()).await {
            Err(_) => return Attempt::Retry { why: format!("no response within {stall:?}"), after: None },
            Ok(Err(e)) if e.is_builder() || e.is_redirect() => {
                return Attempt::Fatal(FetchError::Status { url: url(), status: download::describe(e) })
            }
            Ok(Err(e)) => return Attempt::Retry { why: download::describe(e), after: None },
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        match status {
            StatusCode::NOT_MODIFIED if conditional.is_some() => return Attempt::Done(Downloaded::NotModified),
            s if s.is_success() => {}
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::PROXY_AUTHENTICATION_REQUIRED => {
                return Attempt::Fatal(FetchError::Unauthorized { url: url(), status: status.to_string() })
            }
            StatusCode::NOT_FOUND | StatusCode::GONE => {
                return Attempt::Fatal(FetchError::NotFound { url: url(), status: status.to_string() })
            }
            s if s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error() => {
                return Attempt::Retry { why: format!("the server answered {s}"), after: download::retry_after(&resp) }
            }
            s => return Attempt::Fatal(FetchError::Status { url: url(), status: s.to_string() }),
        }
        let header_text =
            |name: header::HeaderName| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let etag = header_text(header::ETAG);
        let last_modified = header_text(header::LAST_MODIFIED);
        let total = resp.content_length();
        let (temp, file) = match self.inner.cache.temp(key) {
            Ok(t) => t,
            Err(e) => return Attempt::Fatal(self.io_error(src, "creating a file in the cache", &e)),
        };
        let mut spool = Spool::new(temp, file, total);
        progress(0, total);
        loop {
            match tokio::time::timeout(stall, resp.chunk()).await {
                Err(_) => {
                    return Attempt::Retry {
                        why: format!("stalled: no data for {stall:?} after {} bytes", spool.received()),
                        after: None,
                    }
                }
                Ok(Err(e)) => return Attempt::Retry { why: download::describe(e), after: None },
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) => {
                    if let Err(e) = spool.write(chunk, progress).await {
                        return Attempt::Fatal(self.io_error(src, "writing into the cache", &e));
                    }
                }
            }
        }
        if let Some(t) = total {
            if spool.received() != t {
                return Attempt::Retry {
                    why: format!("the body ended after {} of {t} bytes", spool.received()),
                    after: None,
                };
            }
        }
        match spool.finish(progress).await {
            Ok((temp, sha256, size)) => Attempt::Done(Downloaded::Body { temp, sha256, size, etag, last_modified }),
            Err(e) => Attempt::Fatal(self.io_error(src, "writing into the cache", &e)),
        }
    }

    /// A `file:` URL: copied into the cache like a download; its "ETag" is made of the file's
    /// mtime, size and inode, so `Always` copies it again only when it changed.
    async fn copy_local(
        &self,
        src: &Source,
        path: &std::path::Path,
        key: &str,
        conditional: Option<&Meta>,
        progress: Progress<'_>,
    ) -> Result<Downloaded, FetchError> {
        use std::os::unix::fs::MetadataExt;
        use tokio::io::AsyncReadExt;
        let md = match tokio::fs::metadata(path).await {
            Ok(md) => md,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(FetchError::NotFound { url: src.shown.clone(), status: "no such file".into() })
            }
            Err(e) => return Err(self.io_error(src, "reading", &e)),
        };
        if !md.is_file() {
            return Err(FetchError::NotFound { url: src.shown.clone(), status: "not a regular file".into() });
        }
        let validator = format!("{}.{:09}-{}-{}", md.mtime(), md.mtime_nsec(), md.len(), md.ino());
        if conditional.is_some_and(|m| m.etag.as_deref() == Some(validator.as_str())) {
            return Ok(Downloaded::NotModified);
        }
        let mut input = tokio::fs::File::open(path).await.map_err(|e| self.io_error(src, "opening", &e))?;
        let (temp, file) =
            self.inner.cache.temp(key).map_err(|e| self.io_error(src, "creating a file in the cache", &e))?;
        let mut spool = Spool::new(temp, file, Some(md.len()));
        progress(0, Some(md.len()));
        loop {
            let mut buf = Vec::with_capacity(256 * 1024);
            let n = (&mut input)
                .take(256 * 1024)
                .read_to_end(&mut buf)
                .await
                .map_err(|e| self.io_error(src, "reading", &e))?;
            if n == 0 {
                break;
            }
            spool.write(buf.into(), progress).await.map_err(|e| self.io_error(src, "writing into the cache", &e))?;
        }
        let (temp, sha256, size) =
            spool.finish(progress).await.map_err(|e| self.io_error(src, "writing into the cache", &e))?;
        Ok(Downloaded::Body { temp, sha256, size, etag: Some(validator), last_modified: None })
    }

    fn io_error(&self, src: &Source, what: &str, e: &std::io::Error) -> FetchError {
        FetchError::Io { url: src.shown.clone(), what: what.to_string(), message: download::io_message(e) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::render::Redacted;

    fn uri(value: &str) -> RenderedUri {
        RenderedUri {
            value: value.into(),
            user: None,
            password: None,
            pull_policy: PullPolicy::IfNotPresent,
            output_dir: "/tmp/x".into(),
            sha256: None,
        }
    }

    fn fetcher(repository: Option<&str>) -> (tempfile::TempDir, Fetcher) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = FetchOptions::new(dir.path().join("cache"));
        o.repository = repository.map(str::to_string);
        (dir, Fetcher::new(o).unwrap())
    }

    #[test]
    fn resolves_values() {
        let (_d, f) = fetcher(Some("http://repo:8080/pkgs/"));
        let s = f.resolve(&uri("/prod/app.tar.gz")).unwrap();
        assert_eq!(s.url.as_str(), "http://repo:8080/pkgs/prod/app.tar.gz");
        assert_eq!(s.format, Format::TarGz);

        let mut u = uri("https://alice:s3cret@h/x/start%20me.sh?sig=abc#frag");
        let s = f.resolve(&u).unwrap();
        assert_eq!(s.url.as_str(), "https://h/x/start%20me.sh?sig=abc");
        assert_eq!(s.shown, "https://h/x/start%20me.sh?…");
        assert_eq!(s.user.as_deref(), Some("alice"));
        assert_eq!(s.password.as_deref(), Some("s3cret"));
        assert_eq!(s.format, Format::Plain("start me.sh".into()));
        u.user = Some("bob".into());
        u.password = Some(Redacted("pw".into()));
        let s = f.resolve(&u).unwrap();
        assert_eq!((s.user.as_deref(), s.password.as_deref()), (Some("bob"), Some("pw")));

        let s = f.resolve(&uri("file:///srv/a%20b.zip")).unwrap();
        assert_eq!(s.local, Some(PathBuf::from("/srv/a b.zip")));

        let (_d, none) = fetcher(None);
        assert!(matches!(none.resolve(&uri("/prod/x.tgz")), Err(FetchError::NoRepository { .. })));
        let err = f.resolve(&uri("ftp://h/x.tgz")).err().unwrap().to_string();
        assert!(err.contains("unsupported scheme"), "{err}");
        let err = f.resolve(&uri("http://h/dir/")).err().unwrap().to_string();
        assert!(err.contains("file name"), "{err}");
        let err = f.resolve(&uri("http://u:hunter2@[bad/x")).err().unwrap();
        assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2"), "a b%2");
        assert_eq!(percent_decode("%41%zz"), "A%zz");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("é%é"), "é%é");
    }
}
