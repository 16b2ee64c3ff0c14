//! Kept volumes (seed 003 Dynamic, Isolated): listed with the instance using each, and removed
//! at the operator's word once no instance uses it.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::AppState;
use crate::protocol::VolumeList;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub(super) struct VolumesQuery {
    namespace: Option<String>,
}

/// GET /v1/volumes
pub(super) async fn list(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<VolumesQuery>,
) -> Result<Json<VolumeList>, ApiError> {
    app.live().access.require_read(&caller)?;
    // A walk of the disk (each volume's size): off the runtime's threads.
    let items = tokio::task::spawn_blocking(move || app.supervisor.kept_volumes(q.namespace.as_deref()))
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(VolumeList { items }))
}

/// One segment of a volume's path: a name, never `.`, `..`, hidden or holding a `/` (it is
/// joined below `volume_root`).
fn segment(field: &str, value: &str) -> Result<(), ApiError> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && !value.starts_with('.')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    match ok {
        true => Ok(()),
        false => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            format!("{field} {value:?} must be 1-253 letters, digits, '-', '_' or '.', not starting with '.'"),
        )
        .field(field)),
    }
}

/// DELETE /v1/volumes/{namespace}/{name}/{index}/{volume}
pub(super) async fn delete(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index, volume)): Path<(String, String, String, String)>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let id = super::instances::instance_id(namespace, name, index)?;
    segment("namespace", &id.namespace)?;
    segment("name", &id.name)?;
    segment("volume", &volume)?;
    let sup_app = app.clone();
    tokio::spawn(async move { sup_app.supervisor.remove_kept_volume(&id, &volume).await })
        .await
        .map_err(ApiError::internal)??;
    Ok(StatusCode::NO_CONTENT.into_response())
}
