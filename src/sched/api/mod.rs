//! `steward-sched serve`: steward-sched's own HTTP API over the desired store (seed 002's
//! deployd API server): apps, dependencies, nodes and their controls, constraints, notifications,
//! the engine, hook templates and runs, and the nodes' events merged. The CLI (`--server`) and
//! any integration are its clients. It serves with the daemons' remote listener's TLS, tokens,
//! rate and size limits and error shape; a read token may read, a write token change. The web
//! console (src/console) is served beside it under `/ui/`.
//!
//! Any `serve` sharing a store answers; the one that leads (its `run` loop) applies, the others
//! store and wait for the leader, as a deploy on a shared store always has.

mod apps;
mod cluster;
mod extras;

use crate::api::auth::{Caller, TokenRole};
use crate::api::error::ApiError;
use crate::protocol::{WatchLine, NOTES_HEADER, UNREACHABLE_HEADER};
use crate::sched::{SchedError, Scheduler};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Serialize;
use std::sync::Arc;

/// The OpenAPI description of this API (docs/sched-openapi.json), served at /v1/openapi.json.
pub const OPENAPI: &str = include_str!("../../../docs/sched-openapi.json");

/// What the handlers share.
pub struct Served {
    pub sched: Arc<Scheduler>,
    /// What this process's `run` loop sees and does, for the merged event stream.
    pub lines: tokio::sync::broadcast::Sender<WatchLine>,
    /// Turns true when serving stops: open streams end.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Without the `run` loop (`serve --no-run`): the cluster file, looked at before each
    /// request (the loop follows it itself).
    pub nodes_watch: Option<crate::sched::scheduler::NodesWatch>,
}

type State = axum::extract::State<Arc<Served>>;

/// The API: reads for any accepted token, changes for write tokens only.
pub fn router(served: Arc<Served>, max_body: usize) -> Router {
    let reads = Router::new()
        .route("/v1/health", get(health))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/whoami", get(whoami))
        .route("/v1/apps", get(apps::list))
        .route("/v1/apps/{namespace}/{name}", get(apps::get))
        .route("/v1/apps/{namespace}/{name}/rollout", get(apps::rollout))
        .route("/v1/apps/{namespace}/{name}/revisions", get(apps::revisions))
        .route("/v1/apps/{namespace}/{name}/revisions/{revision}", get(apps::revision))
        .route("/v1/apps/{namespace}/{name}/endpoints", get(apps::endpoints))
        .route("/v1/nodes", get(cluster::nodes))
        .route("/v1/constraints", get(cluster::constraints))
        .route("/v1/config", get(cluster::config))
        .route("/v1/config/{key}", get(cluster::config_key))
        .route("/v1/engine", get(cluster::engine))
        .route("/v1/status", get(cluster::engine_run))
        .route("/v1/notifications", get(cluster::notifications))
        .route("/v1/dependencies", get(extras::dependencies))
        .route("/v1/hooktemplates", get(extras::hook_templates))
        .route("/v1/hookruns", get(extras::hook_runs))
        .route("/v1/hookruns/{namespace}/{name}", get(extras::hook_run))
        .route("/v1/events", get(extras::events));
    let writes = Router::new()
        .route("/v1/apps", put(apps::deploy).post(apps::create))
        .route("/v1/apps/{namespace}/{name}", axum::routing::delete(apps::delete))
        .route("/v1/apps/{namespace}/{name}/scale", post(apps::scale))
        .route("/v1/apps/{namespace}/{name}/stop", post(apps::stop))
        .route("/v1/apps/{namespace}/{name}/start", post(apps::start))
        .route("/v1/apps/{namespace}/{name}/restart", post(apps::restart))
        .route("/v1/apps/{namespace}/{name}/rollout/{action}", post(apps::rollout_action))
        .route(
            "/v1/apps/{namespace}/{name}/instances/{index}/files",
            put(apps::copy_in).layer(axum::extract::DefaultBodyLimit::max(crate::supervisor::instance::MAX_COPY_BYTES)),
        )
        .route("/v1/nodes/{node}/cordon", post(cluster::cordon).delete(cluster::uncordon))
        .route("/v1/nodes/{node}/drain", post(cluster::drain))
        .route("/v1/drift", post(cluster::drift))
        .route("/v1/constraints", axum::routing::patch(cluster::set_constraint).delete(cluster::remove_constraint))
        .route("/v1/config/{key}", put(cluster::set_config))
        .route("/v1/engine/maintenance", post(cluster::maintenance))
        .route("/v1/status", axum::routing::patch(cluster::set_engine_run))
        .route("/v1/notifications", post(cluster::add_notification).delete(cluster::remove_notification))
        .route("/v1/dependencies", put(extras::put_dependency).post(extras::create_dependency))
        .route("/v1/dependencies/{namespace}/{name}", axum::routing::delete(extras::delete_dependency))
        .route("/v1/hooktemplates", put(extras::put_hook_template))
        .route("/v1/hooktemplates/{namespace}/{name}", axum::routing::delete(extras::delete_hook_template))
        .route("/v1/hookruns", post(extras::create_hook_run))
        .route("/v1/hookruns/{namespace}/{name}/terminate", post(extras::terminate_hook_run))
        .route_layer(axum::middleware::from_fn(require_write));
    reads
        .merge(writes)
        .fallback(crate::api::extract::not_found)
        .method_not_allowed_fallback(crate::api::extract::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(served.clone(), current_nodes))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(served)
}

/// Without the `run` loop, each request sees the cluster file's nodes as they are now.
async fn current_nodes(
    axum::extract::State(s): State,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(watch) = &s.nodes_watch {
        watch.refresh(&s.sched);
    }
    next.run(req).await
}

/// Changes need a write token.
async fn require_write(caller: Caller, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match caller.token {
        Some(TokenRole::Write) => next.run(req).await,
        _ => ApiError::forbidden("this token may only read").into_response(),
    }
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// What the caller's token may do.
async fn whoami(caller: Caller) -> Json<crate::protocol::Whoami> {
    let role = if caller.token == Some(TokenRole::Write) { "write" } else { "read" };
    Json(crate::protocol::Whoami { role: role.into(), server: "steward-sched".into() })
}

async fn openapi() -> Response {
    ([("content-type", "application/json")], OPENAPI).into_response()
}

/// The API's answer for a scheduler error: the daemons' error shape, a status that fits.
impl From<SchedError> for ApiError {
    fn from(e: SchedError) -> ApiError {
        let (status, code) = match &e {
            SchedError::NoApp { .. } | SchedError::NoNode { .. } | SchedError::NotFound(_) => {
                (StatusCode::NOT_FOUND, "not_found")
            }
            SchedError::Spec { errors, .. } => {
                let mut out = ApiError::invalid_spec(errors.clone());
                out.body.message = e.to_string();
                return out;
            }
            SchedError::Several(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_spec"),
            // Seed 002's NotAllowed: no room in the cluster, or it exists already.
            SchedError::Placement(_) | SchedError::Exists { .. } => (StatusCode::CONFLICT, "not_allowed"),
            SchedError::Maintenance { .. } => (StatusCode::CONFLICT, "maintenance"),
            SchedError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
            SchedError::Apply { .. } => (StatusCode::CONFLICT, "refused"),
            SchedError::Config(_) | SchedError::Invalid(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            SchedError::Node { .. } => (StatusCode::BAD_GATEWAY, "node_failed"),
            SchedError::Cluster { .. } | SchedError::Tls(_) | SchedError::Store(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            SchedError::Server { status, code, message } => {
                let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
                let mut out = ApiError::new(status, "server", message.clone());
                out.body.code = code.clone();
                return out;
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

/// Runs one request's work, and answers with its result (JSON) or error, naming the nodes that
/// did not answer meanwhile in the [`UNREACHABLE_HEADER`].
async fn answer<T: Serialize>(work: impl std::future::Future<Output = Result<T, SchedError>>) -> Response {
    let (out, told) = Scheduler::telling(work).await;
    let mut response = match out {
        Ok(v) => Json(v).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    };
    if !told.unreachable.is_empty() {
        set_json_header(&mut response, UNREACHABLE_HEADER, &told.unreachable);
    }
    if !told.notes.is_empty() {
        set_json_header(&mut response, NOTES_HEADER, &told.notes);
    }
    response
}

/// `value` as JSON in header `name` (header values are visible ASCII: every other character
/// escaped, as JSON reads it back).
fn set_json_header(response: &mut Response, name: &'static str, value: &impl Serialize) {
    let text = serde_json::to_string(value).unwrap_or_default();
    let ascii: String = text
        .chars()
        .flat_map(|c| match c {
            ' '..='~' => vec![c],
            c => {
                let mut units = [0u16; 2];
                c.encode_utf16(&mut units)
                    .iter()
                    .flat_map(|u| format!("\\u{u:04x}").chars().collect::<Vec<_>>())
                    .collect()
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&ascii) {
        response.headers_mut().insert(name, v);
    }
}

/// A JSON body, or a 400 naming what is wrong with it.
fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("body: {e}")).field("body"))
}

/// An NDJSON stream of what `rx` yields, ending when serving stops.
fn ndjson(mut rx: tokio::sync::mpsc::Receiver<Vec<u8>>, mut shutdown: tokio::sync::watch::Receiver<bool>) -> Response {
    let stream = futures_util::stream::poll_fn(move |cx| {
        if *shutdown.borrow_and_update() {
            return std::task::Poll::Ready(None);
        }
        rx.poll_recv(cx).map(|line| {
            line.map(|mut l| {
                l.push(b'\n');
                Ok::<_, std::io::Error>(axum::body::Bytes::from(l))
            })
        })
    });
    ([("content-type", "application/x-ndjson")], axum::body::Body::from_stream(stream)).into_response()
}

/// Serves the API on `listen` (TLS with `cert` and `key`, tokens from `tokens_file`) until
/// `shutdown` turns true.
pub async fn serve(
    served: Arc<Served>,
    config: &crate::config::RemoteConfig,
    limits: crate::config::ServeLimits,
) -> Result<(), crate::api::remote::RemoteError> {
    use crate::api::remote::{accept_tls, guard, Guard, RemoteError};
    let addr = config.listen.expect("serve has an address");
    let (Some(cert), Some(key)) = (&config.cert, &config.key) else {
        return Err(RemoteError::Tls(crate::tls::TlsError::Config("serve needs cert and key".into())));
    };
    let tls = crate::tls::server_config(cert, key)?;
    let checks = Arc::new(Guard::new(config)?);
    let limiter = crate::api::serve::ConnectionLimiter::new(limits);
    let (incoming, accepting) = accept_tls(addr, tls, limiter).await?;
    let shutdown = served.shutdown.clone();
    let api = router(served, config.max_body_bytes).layer(axum::middleware::from_fn_with_state(checks.clone(), guard));
    // The web console's files beside the API (src/console): public, as they hold no data.
    let app = crate::console::with_console(api, checks);
    tracing::info!(%addr, "steward-sched serves its API and its console at /ui/");
    crate::api::serve::serve(incoming, app, limits.header_timeout, shutdown).await;
    accepting.abort();
    Ok(())
}
