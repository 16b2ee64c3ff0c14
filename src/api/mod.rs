//! The HTTP/JSON API, versioned under /v1, served on the local unix socket.
//! One handler per request; one error shape: `{"error": {"code", "message", "field"}}`.

pub mod auth;
pub mod error;
pub mod extract;
mod metrics;
pub mod remote;
pub mod serve;
pub mod streams;

// The handlers, one room per family of routes; the routes themselves stay in `router_with_limit`
// below (tests/openapi.rs reads them from this file).
mod apply;
mod endpoints;
mod events;
mod files;
mod hooks;
mod instances;
mod jobs;
mod logs;
mod node;
mod rollout;
mod values;
mod volumes;

pub use apply::apply_body;

use crate::spec::Roots;
use crate::supervisor::Supervisor;
use auth::Access;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;

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
    /// Open event streams and log followers, counted against their caps.
    pub streams: std::sync::Arc<streams::StreamSlots>,
    /// Requests answered, by method and route (`steward_api_requests_total`).
    pub requests: metrics::RequestCounts,
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
        .route("/v1/health", get(node::health))
        .route("/v1/apply", post(apply::apply))
        .route("/v1/instances", get(instances::list))
        .route("/v1/instances/{namespace}/{name}/{index}", get(instances::status).delete(instances::delete))
        .route("/v1/instances/{namespace}/{name}/{index}/{action}", post(instances::action))
        .route("/v1/instances/{namespace}/{name}/{index}/logs", get(logs::logs))
        .route(
            "/v1/instances/{namespace}/{name}/{index}/files",
            axum::routing::put(files::copy_in)
                .layer(axum::extract::DefaultBodyLimit::max(crate::supervisor::instance::MAX_COPY_BYTES)),
        )
        .route("/v1/apps/{namespace}/{name}", axum::routing::delete(instances::delete_app))
        .route("/v1/apps/{namespace}/{name}/revisions", get(rollout::revisions))
        .route("/v1/apps/{namespace}/{name}/revisions/{revision}", get(rollout::revision))
        .route("/v1/apps/{namespace}/{name}/rollout", get(rollout::rollout))
        .route("/v1/apps/{namespace}/{name}/rollout/pause", post(rollout::pause))
        .route("/v1/apps/{namespace}/{name}/rollout/resume", post(rollout::resume))
        .route("/v1/apps/{namespace}/{name}/rollout/restart", post(rollout::restart))
        .route("/v1/apps/{namespace}/{name}/undo", post(rollout::undo))
        .route("/v1/events", get(events::events))
        .route("/v1/node", get(node::node))
        .route("/v1/whoami", get(node::whoami))
        .route("/v1/secrets", get(values::list_secrets))
        .route("/v1/secrets/{namespace}/{name}", axum::routing::put(values::put_secret).delete(values::delete_secret))
        .route("/v1/configmaps", get(values::list_configmaps))
        .route(
            "/v1/configmaps/{namespace}/{name}",
            axum::routing::put(values::put_configmap).delete(values::delete_configmap),
        )
        .route("/v1/volumes", get(volumes::list))
        .route("/v1/volumes/{namespace}/{name}/{index}/{volume}", axum::routing::delete(volumes::delete))
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/jobs/{namespace}/{name}", get(jobs::status))
        .route("/v1/cronjobs", get(jobs::list_crons))
        .route("/v1/cronjobs/{namespace}/{name}", get(jobs::cron))
        .route("/v1/cronjobs/{namespace}/{name}/{action}", post(jobs::cron_action))
        .route("/v1/hooktemplates", get(hooks::list_templates))
        .route(
            "/v1/hooktemplates/{namespace}/{name}",
            get(hooks::get_template).put(hooks::put_template).delete(hooks::delete_template),
        )
        .route("/v1/hookruns", get(hooks::list_runs).post(hooks::create_run))
        .route("/v1/hookruns/{namespace}/{name}", get(hooks::get_run).delete(hooks::delete_run))
        .route("/v1/hookruns/{namespace}/{name}/terminate", post(hooks::terminate_run))
        .route("/v1/endpoints", get(endpoints::list))
        .route("/v1/endpoints/{namespace}/{name}", get(endpoints::get).put(endpoints::put).delete(endpoints::delete))
        .route("/v1/desired", axum::routing::put(endpoints::put_desired))
        .route("/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics::metrics))
        // Counted by route, so only requests that matched one (a fuzzer's paths are no label).
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), metrics::count_request))
        .fallback(extract::not_found)
        .method_not_allowed_fallback(extract::method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(state)
}

async fn openapi() -> Response {
    ([("content-type", "application/json")], OPENAPI).into_response()
}

/// An mpsc receiver as a `Stream`, without pulling in tokio-stream.
/// Shared by the two NDJSON streams (events, logs).
fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
