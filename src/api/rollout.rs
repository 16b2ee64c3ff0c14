//! An app's revisions and going back to one (issue 18).

use super::auth::Caller;
use super::error::ApiError;
use super::extract::Body;
use super::AppState;
use crate::protocol::{Applied, RevisionList, RevisionSpec, RolloutBody, UndoRequest};
use crate::supervisor::SupervisorError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

/// GET /v1/apps/{namespace}/{name}/revisions.
pub(super) async fn revisions(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<RevisionList>, ApiError> {
    app.live().access.require_read(&caller)?;
    Ok(Json(app.supervisor.revisions(&namespace, &name)?))
}

/// GET /v1/apps/{namespace}/{name}/revisions/{revision}: the revision and its spec.
pub(super) async fn revision(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, revision)): Path<(String, String, String)>,
) -> Result<Json<RevisionSpec>, ApiError> {
    app.live().access.require_read(&caller)?;
    let n = revision.parse().map_err(|_| ApiError::bad_request(format!("{revision:?} is not a revision number")))?;
    Ok(Json(app.supervisor.revision(&namespace, &name, n)?))
}

/// GET /v1/apps/{namespace}/{name}/rollout.
pub(super) async fn rollout(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<RolloutBody>, ApiError> {
    app.live().access.require_read(&caller)?;
    Ok(Json(app.supervisor.rollout(&namespace, &name)?))
}

/// POST /v1/apps/{namespace}/{name}/rollout/pause.
pub(super) async fn pause(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<RolloutBody>, ApiError> {
    set_phase(app, caller, namespace, name, true).await
}

/// POST /v1/apps/{namespace}/{name}/rollout/resume.
pub(super) async fn resume(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<RolloutBody>, ApiError> {
    set_phase(app, caller, namespace, name, false).await
}

/// Pauses or resumes, in its own task like an apply (a client hanging up cannot cut it short).
async fn set_phase(
    app: Arc<AppState>,
    caller: Caller,
    namespace: String,
    name: String,
    pause: bool,
) -> Result<Json<RolloutBody>, ApiError> {
    app.live().access.require_write(&caller)?;
    let sup = app.supervisor.clone();
    let body = tokio::spawn(async move {
        if pause {
            sup.pause_rollout(&namespace, &name).await
        } else {
            sup.resume_rollout(&namespace, &name).await
        }
    })
    .await
    .map_err(ApiError::internal)??;
    Ok(Json(body))
}

/// POST /v1/apps/{namespace}/{name}/rollout/restart: every instance re-created under the same
/// spec, as a new revision rolled out by the app's strategy.
pub(super) async fn restart(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let by = caller.describe();
    let sup = app.supervisor.clone();
    let outcome = tokio::spawn(async move { sup.restart_app(&namespace, &name, &by).await })
        .await
        .map_err(ApiError::internal)??;
    Ok((StatusCode::ACCEPTED, Json(Applied::from(&outcome))).into_response())
}

/// POST /v1/apps/{namespace}/{name}/undo: an earlier revision applied again (a new revision).
pub(super) async fn undo(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let request: UndoRequest = if body.iter().all(u8::is_ascii_whitespace) {
        UndoRequest::default()
    } else {
        let bad = |e: String| ApiError::bad_request(format!("undo request: {e}"));
        match serde_json::from_slice::<serde_json::Value>(&body).map_err(|e| bad(e.to_string()))? {
            v @ serde_json::Value::Object(_) => serde_json::from_value(v).map_err(|e| bad(e.to_string()))?,
            other => return Err(bad(format!("expected an object such as {{\"toRevision\": 2}}, found {other}"))),
        }
    };
    let by = caller.describe();
    let sup_app = app.clone();
    // In its own task, like an apply: a client hanging up cannot cut it short.
    let outcome =
        tokio::spawn(async move { sup_app.supervisor.undo(&namespace, &name, request.to_revision, &by).await })
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| match e {
                SupervisorError::Invalid(_) => ApiError::from(e).field("toRevision"),
                e => ApiError::from(e),
            })?;
    Ok((StatusCode::ACCEPTED, Json(Applied::from(&outcome))).into_response())
}
