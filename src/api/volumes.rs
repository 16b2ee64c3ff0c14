//! Kept volumes (seed 003 Dynamic, Isolated): listed with the instance using each, and removed
//! at the operator's word once no instance uses it.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::AppState;
use crate::protocol::VolumeList;
use crate::spec::render::InstanceId;
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

/// Each segment of a volume's path by the spec's own rule for the name it was made from
/// (namespace, app, volume): so none is `.`, `..` or holds a `/` (they are joined below
/// `volume_root`), and nothing a spec could not name is looked for.
fn check_segments(id: &InstanceId, volume: &str) -> Result<(), ApiError> {
    use crate::spec::validate::check_name;
    let namespace = match id.namespace == crate::spec::model::DEFAULT_NAMESPACE {
        true => Ok(()),
        false => check_name(&id.namespace),
    };
    for (field, checked) in [("namespace", namespace), ("name", check_name(&id.name)), ("volume", check_name(volume))] {
        checked.map_err(|e| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", format!("{field} {e}")).field(field)
        })?;
    }
    Ok(())
}

/// DELETE /v1/volumes/{namespace}/{name}/{index}/{volume}
pub(super) async fn delete(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index, volume)): Path<(String, String, String, String)>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let id = super::instances::instance_id(namespace, name, index)?;
    check_segments(&id, &volume)?;
    let sup_app = app.clone();
    tokio::spawn(async move { sup_app.supervisor.remove_kept_volume(&id, &volume).await })
        .await
        .map_err(ApiError::internal)??;
    Ok(StatusCode::NO_CONTENT.into_response())
}
