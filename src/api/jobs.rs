//! Jobs (issue 20): their status and runs. Applied and deleted as any app.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::AppState;
use crate::protocol::{JobBody, JobList};
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub(super) struct JobsQuery {
    namespace: Option<String>,
}

/// GET /v1/jobs.
pub(super) async fn list(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<JobsQuery>,
) -> Result<Json<JobList>, ApiError> {
    app.live().access.require_read(&caller)?;
    let mut items = app.supervisor.jobs();
    if let Some(ns) = &q.namespace {
        items.retain(|j| j.app.split_once('/').is_some_and(|(n, _)| n == ns));
    }
    Ok(Json(JobList { items }))
}

/// GET /v1/jobs/{namespace}/{name}.
pub(super) async fn status(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<JobBody>, ApiError> {
    app.live().access.require_read(&caller)?;
    Ok(Json(app.supervisor.job(&namespace, &name)?))
}
