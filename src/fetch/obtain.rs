//! Getting the archive into the cache: a cache hit (re-hashed when the spec names a hash),
//! revalidation for `Always`, HTTP attempts with retries and backoff, or a `file:` copy.

use super::cache::{self, Meta, TempPath};
use super::download::{self, Attempt, Progress, Spool};
use super::source::Source;
use super::{now_ms, FetchError, Fetched, Fetcher};
use crate::spec::model::PullPolicy;
use crate::spec::render::RenderedUri;
use std::fs::File;
use std::time::Duration;

/// Backoff between attempts never grows beyond this.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

enum Downloaded {
    NotModified,
    Body { temp: TempPath, sha256: String, size: u64, etag: Option<String>, last_modified: Option<String> },
}

impl Fetcher {
    /// The archive, from the cache or downloaded into it, opened, with what it is.
    pub(super) async fn obtain(
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
