//! Getting the bytes: HTTP(S) with retries, conditional requests and a stall timeout, or a
//! local file. Either way the data is streamed to a temporary file in the cache directory by a
//! blocking writer thread that hashes as it writes; nothing is held whole in memory.

use super::cache::{hex, TempPath};
use super::sandbox::chain;
use hyper::body::Bytes;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{self, Write};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub type Progress<'a> = &'a (dyn Fn(u64, Option<u64>) + Send + Sync);

/// How often `progress` is called at most while bytes arrive.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

enum Msg {
    Data(Bytes),
    Done,
}

/// The temporary file being written, with its writer thread.
pub struct Spool {
    tx: mpsc::Sender<Msg>,
    join: tokio::task::JoinHandle<io::Result<(String, u64)>>,
    temp: TempPath,
    received: u64,
    total: Option<u64>,
    last_progress: Instant,
}

impl Spool {
    pub fn new(temp: TempPath, mut file: File, total: Option<u64>) -> Spool {
        let (tx, mut rx) = mpsc::channel::<Msg>(32);
        let join = tokio::task::spawn_blocking(move || {
            let mut hash = Sha256::new();
            let mut n = 0u64;
            while let Some(msg) = rx.blocking_recv() {
                match msg {
                    Msg::Data(b) => {
                        hash.update(&b);
                        file.write_all(&b)?;
                        n += b.len() as u64;
                    }
                    Msg::Done => {
                        file.sync_all()?;
                        return Ok((hex(&hash.finalize()), n));
                    }
                }
            }
            Err(io::Error::other("download abandoned"))
        });
        Spool { tx, join, temp, received: 0, total, last_progress: Instant::now() }
    }

    pub async fn write(&mut self, chunk: Bytes, progress: Progress<'_>) -> io::Result<()> {
        self.received += chunk.len() as u64;
        if self.tx.send(Msg::Data(chunk)).await.is_err() {
            // The writer stopped: its result says why.
            return Err(self.fail().await);
        }
        if self.last_progress.elapsed() >= PROGRESS_EVERY {
            self.last_progress = Instant::now();
            progress(self.received, self.total);
        }
        Ok(())
    }

    async fn fail(&mut self) -> io::Error {
        match (&mut self.join).await {
            Ok(Err(e)) => e,
            Ok(Ok(_)) => io::Error::other("writer finished early"),
            Err(e) => io::Error::other(format!("writer failed: {e}")),
        }
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// Syncs the file; returns it with its sha256 and size.
    pub async fn finish(mut self, progress: Progress<'_>) -> io::Result<(TempPath, String, u64)> {
        if self.tx.send(Msg::Done).await.is_err() {
            return Err(self.fail().await);
        }
        let (sha, n) = match (&mut self.join).await {
            Ok(r) => r?,
            Err(e) => return Err(io::Error::other(format!("writer failed: {e}"))),
        };
        progress(n, self.total.or(Some(n)));
        Ok((self.temp, sha, n))
    }
}

/// What one attempt came to.
pub enum Attempt<T> {
    Done(T),
    /// Worth another try (5xx, 429, connection trouble, stall); with a server-given delay.
    Retry {
        why: String,
        after: Option<Duration>,
    },
    /// No point retrying (4xx, local I/O).
    Fatal(super::FetchError),
}

/// reqwest's message without the URL (which the caller adds, without credentials), plus the
/// underlying cause (connection refused, ...).
pub fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else if e.is_body() || e.is_decode() {
        "error reading the body"
    } else if e.is_redirect() {
        "redirect error"
    } else {
        "request failed"
    };
    let mut s = what.to_string();
    let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(&e);
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

pub fn io_message(e: &io::Error) -> String {
    chain(e)
}

/// `Retry-After` in seconds (the HTTP-date form is ignored), capped at a minute.
pub fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let v = resp.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let secs: u64 = v.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(60)))
}
