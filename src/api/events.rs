//! GET /v1/events: the durable journal as NDJSON, then (with follow) new events as they are
//! committed, with heartbeats; the cursor rules (ahead, pruned) answered before streaming.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::Query;
use super::{tokio_stream_from, AppState};
use crate::protocol::{Heartbeat, StreamLine};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Events read from the journal at a time, and the most bytes of them: a stream's backlog is
/// paged, never loaded whole (a page is 100 small events, or 16 of the largest).
const PAGE: usize = 100;
const PAGE_BYTES: usize = 256 << 10;

/// Lines queued for a slow reader (each event is at most `store::MAX_EVENT_BYTES`).
const CHANNEL: usize = 16;

#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    since: Option<u64>,
    /// Keep the stream open for new events (default true).
    follow: Option<bool>,
}

/// GET /v1/events?since=SEQ: every event after SEQ from the durable journal as NDJSON, then (with
/// follow) new ones as they are committed, and a heartbeat line when there has been nothing to
/// send for `events.heartbeat_secs`. Subscribes before reading the backlog, so nothing
/// committed in between is lost; duplicates are dropped by sequence number. A `since` whose
/// successors were pruned (retention) is a 410: the reader has missed events and must resync.
pub(super) async fn events(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let config = app.live();
    config.access.require_read(&caller)?;
    let slot = app.streams.take(&caller)?;
    let store = app.supervisor.store().clone();
    let mut live = store.subscribe();
    let app = app.clone();
    let since = q.since.unwrap_or(0);
    let follow = q.follow.unwrap_or(true);
    let heartbeat = Duration::from_secs(config.events.heartbeat_secs.max(1));
    let newest = store.last_seq();
    if since > newest {
        let message = format!(
            "since {since} is beyond this daemon's newest event {newest}: the cursor belongs to another journal; \
             resume from /v1/node's events.lastSeq"
        );
        return Err(ApiError::new(StatusCode::CONFLICT, "since_ahead", message).field("since"));
    }
    // Read the first batch before answering, so a pruned `since` can still be a proper error.
    let first_batch = store.events_page(since, PAGE, PAGE_BYTES).map_err(ApiError::internal)?;
    let oldest = first_batch.first().map_or(newest + 1, |e| e.seq);
    if oldest > since + 1 {
        let message = format!(
            "events {} to {} after since {since} are no longer kept (events.retention {}, events.max_bytes {}): read the \
             current state (GET /v1/instances) and resume from /v1/node's events.lastSeq",
            since + 1,
            oldest - 1,
            config.events.retention,
            config.events.max_bytes
        );
        return Err(ApiError::new(StatusCode::GONE, "since_pruned", message).field("since"));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL);
    tokio::spawn(async move {
        // Held for as long as the stream runs.
        let _slot = slot;
        let mut last = since;
        let mut pending = Some(first_batch);
        loop {
            let batch = match pending.take().map_or_else(|| store.events_page(last, PAGE, PAGE_BYTES), Ok) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!("events: {e}");
                    return;
                }
            };
            if batch.is_empty() {
                break;
            }
            if !send_gapless(&tx, &mut last, batch).await {
                return;
            }
        }
        if !follow {
            return;
        }
        let mut shutdown = app.shutdown.clone();
        loop {
            let next = tokio::select! {
                ev = tokio::time::timeout(heartbeat, live.recv()) => ev,
                _ = shutdown.wait_for(|stopping| *stopping) => return,
                // The reader went away: its slot is given back now, not at the next event.
                _ = tx.closed() => return,
            };
            let Ok(next) = next else {
                // Idle: tell the reader the stream and the daemon are alive.
                let beat = StreamLine::Heartbeat {
                    heartbeat: Heartbeat { at_ms: crate::clock::now_ms(), last_seq: store.last_seq() },
                };
                let mut line = serde_json::to_vec(&beat).unwrap_or_default();
                line.push(b'\n');
                if tx.send(Ok(Bytes::from(line))).await.is_err() {
                    return;
                }
                continue;
            };
            match next {
                Ok(ev) if ev.seq <= last => {}
                Ok(ev) => {
                    last = ev.seq;
                    if tx.send(Ok(ndjson(&ev))).await.is_err() {
                        return;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    // Too slow for the live feed: catch up from the journal, a page at a time.
                    while let Ok(batch) = store.events_page(last, PAGE, PAGE_BYTES) {
                        if batch.is_empty() {
                            break;
                        }
                        if !send_gapless(&tx, &mut last, batch).await {
                            return;
                        }
                    }
                }
                Err(_) => return,
            }
        }
    });
    let stream = tokio_stream_from(rx);
    Ok(([("content-type", "application/x-ndjson")], axum::body::Body::from_stream(stream)).into_response())
}

/// Sends `batch` (read after `last`), moving `last` on. Events pruned between two pages of a
/// slow reader would be a gap: the stream is cut instead, with an error (the response ends
/// without its last chunk), so the reader knows to resume from where it got — where it is
/// then answered 410 — never skips events silently. False: the stream is over.
async fn send_gapless(tx: &Lines, last: &mut u64, batch: Vec<crate::store::Event>) -> bool {
    if batch.first().is_some_and(|ev| ev.seq != *last + 1) {
        let why = format!("events after {last} were pruned while this stream read them: resume from {last}");
        tracing::info!("events: {why}");
        let _ = tx.send(Err(std::io::Error::other(why))).await;
        return false;
    }
    for ev in batch {
        *last = ev.seq;
        if tx.send(Ok(ndjson(&ev))).await.is_err() {
            return false;
        }
    }
    true
}

type Lines = tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>;

/// An event line: the journal's entry as stored. Its body is passed through, not re-typed, so a
/// reader gets exactly what was journaled (a body of an older version included); its shape is
/// [`crate::protocol::Event`]'s.
fn ndjson(ev: &crate::store::Event) -> Bytes {
    let mut line = serde_json::to_vec(ev).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}
