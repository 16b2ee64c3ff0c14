//! Endpoints (issue 27): GET /v1/endpoints, GET/PUT/DELETE /v1/endpoints/{namespace}/{name};
//! and PUT /v1/desired, the scheduler's whole set for this host (supervisor/desired.rs).
//! steward-sched writes them; anyone allowed to read watches one app's by long poll (`after`
//! a revision, up to `timeout` seconds). The keeper (services/keeper.rs) owns the data.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Body, Path, Query};
use super::AppState;
use crate::protocol::{AppEndpoints, EndpointsList};
use crate::services::EndpointsError;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The longest a long poll waits.
pub const MAX_WAIT_SECS: f64 = 300.0;

impl From<EndpointsError> for ApiError {
    fn from(e: EndpointsError) -> ApiError {
        match e {
            EndpointsError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            EndpointsError::Stale { .. } => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            EndpointsError::Invalid(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", e.to_string()),
            EndpointsError::Store(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string()),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    namespace: Option<String>,
}

/// GET /v1/endpoints.
pub(super) async fn list(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<EndpointsList>, ApiError> {
    app.live().access.require_read(&caller)?;
    Ok(Json(EndpointsList { items: app.supervisor.endpoints().list(q.namespace.as_deref()) }))
}

#[derive(Debug, Deserialize)]
pub(super) struct WatchQuery {
    /// Answer once the revision is above this one (a long poll).
    after: Option<u64>,
    /// Seconds to wait for that (default 30, at most 300); then the kept revision is answered.
    timeout: Option<f64>,
}

/// GET /v1/endpoints/{namespace}/{name}[?after=REV&timeout=SECS].
pub(super) async fn get(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<WatchQuery>,
) -> Result<Json<AppEndpoints>, ApiError> {
    app.live().access.require_read(&caller)?;
    let keeper = app.supervisor.endpoints();
    let found = match q.after {
        None => keeper.get(&namespace, &name),
        Some(after) => {
            let secs = q.timeout.unwrap_or(30.0);
            if !(0.0..=MAX_WAIT_SECS).contains(&secs) {
                let why = format!("timeout {secs} is not 0-{MAX_WAIT_SECS} seconds");
                return Err(ApiError::bad_request(why).field("timeout"));
            }
            let mut stopping = app.shutdown.clone();
            tokio::select! {
                e = keeper.wait_after(&namespace, &name, after, Duration::from_secs_f64(secs)) => e,
                _ = stopping.wait_for(|s| *s) => keeper.get(&namespace, &name),
            }
        }
    };
    found.map(Json).ok_or_else(|| ApiError::from(EndpointsError::NotFound(format!("{namespace}/{name}"))))
}

/// PUT /v1/endpoints/{namespace}/{name}: steward-sched's revision of the app's endpoints.
pub(super) async fn put(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let endpoints: AppEndpoints = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", format!("body: {e}")))?;
    if endpoints.namespace != namespace || endpoints.name != name {
        let why = format!("the body is {}, the path says {namespace}/{name}", endpoints.key());
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", why));
    }
    let keeper = app.supervisor.endpoints().clone();
    tokio::spawn(async move { keeper.put(endpoints).await }).await.map_err(ApiError::internal)??;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// DELETE /v1/endpoints/{namespace}/{name}: the app is gone.
pub(super) async fn delete(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let keeper = app.supervisor.endpoints().clone();
    tokio::spawn(async move { keeper.delete(&namespace, &name).await }).await.map_err(ApiError::internal)??;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// PUT /v1/desired: the scheduler's whole desired set for this host; what it does not name
/// (and was written before it was read) goes.
pub(super) async fn put_desired(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Body(body): Body,
) -> Result<Json<crate::protocol::DesiredOutcome>, ApiError> {
    app.live().access.require_write(&caller)?;
    let set: crate::protocol::HostDesired = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", format!("body: {e}")))?;
    let sup = app.supervisor.clone();
    let outcome = tokio::spawn(async move { sup.take_desired(set).await }).await.map_err(ApiError::internal)??;
    Ok(Json(outcome))
}
