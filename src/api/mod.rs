//! The HTTP/JSON API, versioned under /v1, served on the local unix socket.
//! One handler per request; one error shape: `{"error": {"code", "message", "field"}}`.

pub mod auth;
pub mod error;
mod extract;
mod metrics;
pub mod remote;
pub mod serve;

use crate::protocol::{
    AppOnNode, Applied, Deleted, HealthBody, Heartbeat, InstanceList, InstanceOnNode, InstanceStatus, JournalBounds,
    NodeDocument, PortsDocument, StreamLine, ValuesBody, ValuesList, ValuesSummary,
};
use crate::spec::{self, Format, InstanceId, Roots};
use crate::supervisor::values::ValueKind;
use crate::supervisor::{state::Kind, ListFilter, Supervisor, SupervisorError};
use auth::{Access, Caller};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use error::ApiError;
use extract::{Body, Path, Query};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Largest spec body accepted (defined with the configuration, whose remote limit defaults to it).
pub use crate::config::MAX_BODY;

pub struct AppState {
    pub supervisor: Supervisor,
    pub roots: Roots,
    /// The host's cpus and memory and the instance cap: a spec asking for more is refused.
    pub host: crate::spec::validate::HostCapacity,
    /// What SIGHUP may change at run time: access rules and the node's labels and attributes.
    pub live: std::sync::RwLock<LiveConfig>,
    /// Turns true when the daemon is stopping: open event streams end, so shutdown is not held
    /// up by followers.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// CPU and memory use for /v1/node.
    pub usage: crate::host::UsageSampler,
}

/// The part of the configuration a reload (SIGHUP) applies without a restart.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub access: Access,
    pub host_ip: String,
    pub node: crate::config::NodeConfig,
    /// The configured range, as last (re)loaded. It takes effect at the next start: until then
    /// /v1/node shows it as pending next to the allocator's range.
    pub port_range: (u16, u16),
    pub events: crate::config::EventsConfig,
}

impl AppState {
    fn live(&self) -> LiveConfig {
        self.live.read().expect("live config lock").clone()
    }
}

/// The OpenAPI description of this API (docs/openapi.json), served at /v1/openapi.json.
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

/// The API with the local socket's body limit ([`MAX_BODY`]).
pub fn router(state: Arc<AppState>) -> Router {
    router_with_limit(state, MAX_BODY)
}

/// The API with bodies limited to `max_body` bytes (the remote listener's own limit).
pub fn router_with_limit(state: Arc<AppState>, max_body: usize) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/apply", post(apply))
        .route("/v1/instances", get(list))
        .route("/v1/instances/{namespace}/{name}/{index}", get(status).delete(delete))
        .route("/v1/instances/{namespace}/{name}/{index}/{action}", post(action))
        .route("/v1/instances/{namespace}/{name}/{index}/logs", get(logs))
        .route("/v1/apps/{namespace}/{name}", axum::routing::delete(delete_app))
        .route("/v1/events", get(events))
        .route("/v1/node", get(node))
        .route("/v1/secrets", get(list_secrets))
        .route("/v1/secrets/{namespace}/{name}", axum::routing::put(put_secret).delete(delete_secret))
        .route("/v1/configmaps", get(list_configmaps))
        .route("/v1/configmaps/{namespace}/{name}", axum::routing::put(put_configmap).delete(delete_configmap))
        .route("/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics::metrics))
        .fallback(extract::not_found)
        .method_not_allowed_fallback(extract::method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(state)
}

async fn openapi() -> Response {
    ([("content-type", "application/json")], OPENAPI).into_response()
}

/// GET /v1/node: what a scheduler needs to place instances on this host.
async fn node(State(app): State<Arc<AppState>>, caller: Caller) -> Result<Json<NodeDocument>, ApiError> {
    let live = app.live();
    live.access.require_read(&caller)?;
    let usage = app.usage.sample();
    let instances = app.supervisor.list(&ListFilter::default());
    // Every app with instances here, with its labels (EXCLUDE places by them).
    let apps = app
        .supervisor
        .specs()
        .iter()
        .map(|spec| {
            let meta = &spec.metadata;
            let mine = instances
                .iter()
                .filter(|i| i.id.namespace == meta.namespace && i.id.name == meta.name)
                .map(|i| InstanceOnNode { index: i.id.index, state: i.state.kind() })
                .collect();
            AppOnNode {
                namespace: meta.namespace.clone(),
                name: meta.name.clone(),
                labels: meta.labels.clone(),
                instances: mine,
            }
        })
        .collect();
    let store = app.supervisor.store();
    Ok(Json(NodeDocument {
        hostname: live.node.hostname(),
        host_ip: live.host_ip,
        cpus: usage.cpus,
        cpu_usage_percent: f64::from(usage.cpu_usage_percent),
        load_average: crate::host::load_average(),
        memory_total_bytes: usage.memory_total_bytes,
        memory_available_bytes: usage.memory_available_bytes,
        memory_used_bytes: usage.memory_used_bytes,
        labels: live.node.labels,
        attributes: live.node.attributes,
        ports: PortsDocument::new(app.supervisor.port_range(), app.supervisor.free_ports(), live.port_range),
        instances: instances.len(),
        apps,
        events: JournalBounds {
            first_seq: store.first_seq(),
            last_seq: store.last_seq(),
            retention: live.events.retention,
            max_bytes: live.events.max_bytes,
            bytes: store.journal_bytes(),
        },
        version: env!("CARGO_PKG_VERSION").to_string(),
    }))
}

async fn health() -> Json<HealthBody> {
    Json(HealthBody::ok())
}

#[derive(Debug, Deserialize)]
struct ApplyQuery {
    /// Comma-separated instance ids this host runs (a scheduler's placement); all by default.
    instances: Option<String>,
}

fn parse_selection(text: &str) -> Result<Vec<u32>, ApiError> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse().map_err(|_| {
                ApiError::bad_request(format!("instances: {s:?} is not an instance id (e.g. instances=0,3)"))
                    .field("instances")
            })
        })
        .collect()
}

/// An apply request's body as a spec: UTF-8, JSON or TOML (by Content-Type, else by its first
/// character), parsed, normalized, validated, and within this host. The fuzz target
/// (`crate::fuzz`) takes the same path.
pub fn apply_body(
    body: &[u8],
    content_type: &str,
    roots: &Roots,
    host: &spec::validate::HostCapacity,
) -> Result<spec::ProcessSpec, ApiError> {
    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("body is not UTF-8"))?;
    let format = if content_type.contains("toml") {
        Format::Toml
    } else if content_type.contains("json") {
        Format::Json
    } else {
        Format::sniff(text)
    };
    let parsed = spec::parse(text, format, roots).map_err(ApiError::invalid_spec)?;
    spec::within_host(&parsed, host).map_err(ApiError::invalid_spec)?;
    Ok(parsed)
}

/// POST /v1/apply: a spec in JSON or TOML (by Content-Type, else by its first character).
async fn apply(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    Query(q): Query<ApplyQuery>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let selection = q.instances.as_deref().map(parse_selection).transpose()?;
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let parsed = apply_body(&body, content_type, &app.roots, &app.host)?;
    // In its own task: a client that hangs up must not cancel an apply half-way (its store
    // commit may already be durable).
    let sup_app = app.clone();
    let outcome = tokio::spawn(async move { sup_app.supervisor.apply_selected(parsed, selection).await })
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| match e {
            SupervisorError::Invalid(_) => ApiError::from(e).field("instances"),
            e => ApiError::from(e),
        })?;
    let names = |ids: &[InstanceId]| ids.iter().map(ToString::to_string).collect::<Vec<_>>();
    let body = Applied {
        instances: names(&outcome.instances),
        generation: outcome.generation,
        changed: names(&outcome.changed),
        created: names(&outcome.created),
        unchanged: outcome.unchanged,
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    namespace: Option<String>,
    name: Option<String>,
    state: Option<String>,
}

async fn list(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<InstanceList>, ApiError> {
    app.live().access.require_read(&caller)?;
    let state = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => {
            Some(parse_kind(s).ok_or_else(|| ApiError::bad_request(format!("unknown state {s:?}")).field("state"))?)
        }
    };
    let filter = ListFilter { namespace: q.namespace, name: q.name, state };
    Ok(Json(InstanceList { instances: app.supervisor.list(&filter) }))
}

fn parse_kind(s: &str) -> Option<Kind> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).ok().or_else(|| {
        let mut c = s.chars();
        let cap: String = c.next().map(|f| f.to_uppercase().chain(c.flat_map(char::to_lowercase)).collect())?;
        serde_json::from_value(serde_json::Value::String(cap)).ok()
    })
}

fn instance_id(namespace: String, name: String, index: String) -> Result<InstanceId, ApiError> {
    let index = index.parse().map_err(|_| ApiError::bad_request(format!("{index:?} is not an instance index")))?;
    Ok(InstanceId { namespace, name, index })
}

async fn status(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index)): Path<(String, String, String)>,
) -> Result<Json<InstanceStatus>, ApiError> {
    app.live().access.require_read(&caller)?;
    let id = instance_id(namespace, name, index)?;
    let mut status = app.supervisor.status(&id)?;
    status.limits = app
        .supervisor
        .specs()
        .iter()
        .find(|s| s.metadata.namespace == id.namespace && s.metadata.name == id.name)
        .map(|s| s.instance_limits());
    Ok(Json(status))
}

#[derive(Debug, Deserialize)]
struct ActionQuery {
    /// Seconds to wait for the action to complete; without it, the request returns at once (202).
    timeout: Option<f64>,
}

async fn action(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index, action)): Path<(String, String, String, String)>,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let id = instance_id(namespace, name, index)?;
    app.supervisor.status(&id)?;
    if !["start", "stop", "restart", "reload"].contains(&action.as_str()) {
        let message = format!("no action {action:?} (start, stop, restart, reload)");
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", message).field("action"));
    }
    let sup_app = app.clone();
    let id2 = id.clone();
    let work = async move {
        let s = &sup_app.supervisor;
        match action.as_str() {
            "start" => s.start(&id2).await,
            "stop" => s.stop(&id2).await,
            "restart" => s.restart(&id2).await,
            "reload" => s.reload(&id2).await,
            other => Err(SupervisorError::NotFound(format!("action {other:?} (start, stop, restart, reload)"))),
        }
    };
    run_maybe_waiting(&app, &id, q.timeout, work).await
}

async fn delete(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index)): Path<(String, String, String)>,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let id = instance_id(namespace, name, index)?;
    app.supervisor.status(&id)?;
    let sup_app = app.clone();
    let id2 = id.clone();
    // Always in its own task, so a client hanging up cannot cut the cleanup after the delete.
    let work = tokio::spawn(async move { sup_app.supervisor.delete(&id2).await });
    match q.timeout {
        Some(t) => match tokio::time::timeout(secs(t)?, work).await {
            Ok(r) => {
                r.map_err(ApiError::internal)?.map(|_| StatusCode::NO_CONTENT.into_response()).map_err(ApiError::from)
            }
            Err(_) => Ok(StatusCode::ACCEPTED.into_response()),
        },
        None => Ok(StatusCode::ACCEPTED.into_response()),
    }
}

/// DELETE /v1/apps/{namespace}/{name}: every instance of the app here, then its spec.
async fn delete_app(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    if !app.supervisor.specs().iter().any(|s| s.metadata.namespace == namespace && s.metadata.name == name) {
        return Err(ApiError::from(SupervisorError::NotFound(format!("app {namespace}/{name}"))));
    }
    let timeout = q.timeout.map(secs).transpose()?;
    let sup_app = app.clone();
    // In its own task, like an instance's delete: a client hanging up cannot cut it short.
    let work = tokio::spawn(async move { sup_app.supervisor.delete_app(&namespace, &name).await });
    let deleted =
        |ids: Vec<InstanceId>| Json(Deleted { deleted: ids.iter().map(ToString::to_string).collect() }).into_response();
    match timeout {
        Some(t) => match tokio::time::timeout(t, work).await {
            Ok(r) => r.map_err(ApiError::internal)?.map(deleted).map_err(ApiError::from),
            Err(_) => Ok(StatusCode::ACCEPTED.into_response()),
        },
        None => Ok(StatusCode::ACCEPTED.into_response()),
    }
}

/// A `timeout` query value: seconds, 0 to 3600.
fn secs(t: f64) -> Result<Duration, ApiError> {
    if !t.is_finite() || t < 0.0 {
        return Err(
            ApiError::bad_request(format!("timeout {t} is not a number of seconds from 0 to 3600")).field("timeout")
        );
    }
    Ok(Duration::from_secs_f64(t.min(3600.0)))
}

/// Runs an instance action; with a timeout, waits for it and answers with the status.
async fn run_maybe_waiting(
    app: &Arc<AppState>,
    id: &InstanceId,
    timeout: Option<f64>,
    work: impl std::future::Future<Output = Result<(), SupervisorError>> + Send + 'static,
) -> Result<Response, ApiError> {
    match timeout {
        None => {
            tokio::spawn(async move {
                if let Err(e) = work.await {
                    tracing::info!("action failed: {e}");
                }
            });
            Ok((StatusCode::ACCEPTED, Json(app.supervisor.status(id)?)).into_response())
        }
        Some(t) => match tokio::time::timeout(secs(t)?, work).await {
            Ok(Ok(())) => Ok((StatusCode::OK, Json(app.supervisor.status(id)?)).into_response()),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Ok((StatusCode::ACCEPTED, Json(app.supervisor.status(id)?)).into_response()),
        },
    }
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    since: Option<u64>,
    /// Keep the stream open for new events (default true).
    follow: Option<bool>,
}

/// GET /v1/events?since=SEQ: every event after SEQ from the durable journal as NDJSON, then (with
/// follow) new ones as they are committed, and a heartbeat line when there has been nothing to
/// send for `events.heartbeat_secs`. Subscribes before reading the backlog, so nothing
/// committed in between is lost; duplicates are dropped by sequence number. A `since` whose
/// successors were pruned (retention) is a 410: the reader has missed events and must resync.
async fn events(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let config = app.live();
    config.access.require_read(&caller)?;
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
    let first_batch = store.events_since(since, 1000).map_err(ApiError::internal)?;
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
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    tokio::spawn(async move {
        let mut last = since;
        let mut pending = Some(first_batch);
        loop {
            let batch = match pending.take().map_or_else(|| store.events_since(last, 1000), Ok) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!("events: {e}");
                    return;
                }
            };
            if batch.is_empty() {
                break;
            }
            for ev in batch {
                last = ev.seq;
                if tx.send(Ok(ndjson(&ev))).await.is_err() {
                    return;
                }
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
                    // Too slow for the live feed: catch up from the journal.
                    if let Ok(batch) = store.events_since(last, 10_000) {
                        for ev in batch {
                            last = ev.seq;
                            if tx.send(Ok(ndjson(&ev))).await.is_err() {
                                return;
                            }
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

#[derive(Debug, Deserialize)]
struct LogsQuery {
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
async fn logs(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index)): Path<(String, String, String)>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    app.live().access.require_read(&caller)?;
    let id = instance_id(namespace, name, index)?;
    app.supervisor.status(&id)?;
    if let Some(s) = q.stream.as_deref().filter(|s| !["stdout", "stderr"].contains(s)) {
        return Err(ApiError::bad_request(format!("stream {s:?} is not stdout or stderr")).field("stream"));
    }
    let dir = app.roots.run_base_dir.join(format!("{}.{}.{}", id.namespace, id.name, id.index));
    let mut files = match crate::logs::files(&dir, q.process.as_deref(), q.stream.as_deref()) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(), // never started yet
        Err(e) => return Err(ApiError::internal(format!("reading {}: {e}", dir.display()))),
    };
    let (tail, follow) = (q.tail.unwrap_or(100), q.follow.unwrap_or(false));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let mut shutdown = app.shutdown.clone();
    tokio::spawn(async move {
        let send_line = |f: &crate::logs::LogFile, raw: &str| {
            let mut line = serde_json::to_vec(&f.line(raw)).unwrap_or_default();
            line.push(b'\n');
            Bytes::from(line)
        };
        for f in &mut files {
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

/// An event line: the journal's entry as stored. Its body is passed through, not re-typed, so a
/// reader gets exactly what was journaled (a body of an older version included); its shape is
/// [`crate::protocol::Event`]'s.
fn ndjson(ev: &crate::store::Event) -> Bytes {
    let mut line = serde_json::to_vec(ev).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// An mpsc receiver as a `Stream`, without pulling in tokio-stream.
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

// Secrets and configmaps: names and keys are listed, values never leave except into instances.

#[derive(Debug, Deserialize)]
struct ValuesQuery {
    namespace: Option<String>,
}

async fn list_values(
    app: &AppState,
    caller: &Caller,
    kind: ValueKind,
    q: ValuesQuery,
) -> Result<Json<ValuesList>, ApiError> {
    app.live().access.require_read(caller)?;
    Ok(Json(ValuesList { items: app.supervisor.list_values(kind, q.namespace.as_deref()) }))
}

async fn put_values(
    app: &Arc<AppState>,
    caller: &Caller,
    kind: ValueKind,
    namespace: String,
    name: String,
    body: Bytes,
) -> Result<Json<ValuesSummary>, ApiError> {
    app.live().access.require_write(caller)?;
    let body: ValuesBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("body: {e} (expected {{\"data\": {{\"key\": \"value\"}}}})")).field("data")
    })?;
    let sup_app = app.clone();
    let summary = tokio::spawn(async move { sup_app.supervisor.put_values(kind, &namespace, &name, body.data).await })
        .await
        .map_err(ApiError::internal)??;
    Ok(Json(summary))
}

async fn delete_values(
    app: &Arc<AppState>,
    caller: &Caller,
    kind: ValueKind,
    namespace: String,
    name: String,
) -> Result<Response, ApiError> {
    app.live().access.require_write(caller)?;
    let sup_app = app.clone();
    tokio::spawn(async move { sup_app.supervisor.delete_values(kind, &namespace, &name).await })
        .await
        .map_err(ApiError::internal)??;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_secrets(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ValuesQuery>,
) -> Result<Json<ValuesList>, ApiError> {
    list_values(&app, &caller, ValueKind::Secret, q).await
}

async fn list_configmaps(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ValuesQuery>,
) -> Result<Json<ValuesList>, ApiError> {
    list_values(&app, &caller, ValueKind::ConfigMap, q).await
}

async fn put_secret(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Body(body): Body,
) -> Result<Json<ValuesSummary>, ApiError> {
    put_values(&app, &caller, ValueKind::Secret, namespace, name, body).await
}

async fn put_configmap(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Body(body): Body,
) -> Result<Json<ValuesSummary>, ApiError> {
    put_values(&app, &caller, ValueKind::ConfigMap, namespace, name, body).await
}

async fn delete_secret(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    delete_values(&app, &caller, ValueKind::Secret, namespace, name).await
}

async fn delete_configmap(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    delete_values(&app, &caller, ValueKind::ConfigMap, namespace, name).await
}
