//! GET /v1/instances/{namespace}/{name}/{index}/logs: an instance's output files read from
//! its run directory by the daemon and sent as NDJSON, followed by polling when asked.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::instances::instance_id;
use super::{tokio_stream_from, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
pub(super) struct LogsQuery {
    /// The last N lines of each file (default 100).
    tail: Option<usize>,
    /// Keep sending what is appended (default false).
    follow: Option<bool>,
    /// `stdout` or `stderr` only.
    stream: Option<String>,
    /// One process (procName) or container (its name in the pod spec) only.
    process: Option<String>,
}

/// GET /v1/instances/{namespace}/{name}/{index}/logs: the instance's output as NDJSON lines
/// (`process`, `stream`, `time` for a pod's lines, `line`), read from its run directory by the
/// daemon (a client need not know where that is).
pub(super) async fn logs(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index)): Path<(String, String, String)>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    app.live().access.require_read(&caller)?;
    let id = instance_id(namespace, name, index)?;
    let slot = app.streams.take(&caller)?;
    app.supervisor.status(&id)?;
    if let Some(s) = q.stream.as_deref().filter(|s| !["stdout", "stderr"].contains(s)) {
        return Err(ApiError::bad_request(format!("stream {s:?} is not stdout or stderr")).field("stream"));
    }
    let dir = app.roots.run_base_dir.join(format!("{}.{}.{}", id.namespace, id.name, id.index));
    if let Some(name) = q.process.as_deref() {
        // A name the spec no longer has may still have files (a container renamed since).
        let has_files = crate::logs::files(&dir, Some(name), None).is_ok_and(|f| !f.is_empty());
        match app.supervisor.check_workload_name(&id, name) {
            Err(why) if !has_files => return Err(ApiError::bad_request(why).field("process")),
            _ => {}
        }
    }
    let mut files = match crate::logs::files(&dir, q.process.as_deref(), q.stream.as_deref()) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(), // never started yet
        Err(e) => return Err(ApiError::internal(format!("reading {}: {e}", dir.display()))),
    };
    let (tail, follow) = (q.tail.unwrap_or(100), q.follow.unwrap_or(false));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let mut shutdown = app.shutdown.clone();
    tokio::spawn(async move {
        // Held for as long as the stream runs.
        let _slot = slot;
        let send_line = |f: &crate::logs::LogFile, raw: &str| {
            let mut line = serde_json::to_vec(&f.line(raw)).unwrap_or_default();
            line.push(b'\n');
            Bytes::from(line)
        };
        for f in &mut files {
            f.start_near_end(crate::logs::TAIL_WINDOW);
            let mut lines = f.read_new();
            if !follow {
                lines.extend(f.take_partial());
            }
            for raw in &lines[lines.len().saturating_sub(tail)..] {
                if tx.send(Ok(send_line(f, raw))).await.is_err() {
                    return;
                }
            }
        }
        if !follow {
            return;
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep(LOG_POLL) => {}
                _ = shutdown.wait_for(|stopping| *stopping) => return,
                _ = tx.closed() => return,
            }
            // Files a start made since (a container's first output) join from their start.
            for new in crate::logs::files(&dir, q.process.as_deref(), q.stream.as_deref()).unwrap_or_default() {
                if !files.iter().any(|f| f.path == new.path) {
                    files.push(new);
                }
            }
            files.sort_by_key(|f| (f.modified(), f.name()));
            for f in &mut files {
                for raw in f.read_new() {
                    if tx.send(Ok(send_line(f, &raw))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stream = tokio_stream_from(rx);
    Ok(([("content-type", "application/x-ndjson")], axum::body::Body::from_stream(stream)).into_response())
}

/// How often a followed log is looked at for appended output.
const LOG_POLL: Duration = Duration::from_millis(100);
