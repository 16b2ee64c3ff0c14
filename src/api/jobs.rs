//! Jobs (issue 20): their status and runs. Applied and deleted as any app.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::AppState;
use crate::protocol::{CronBody, CronList, JobBody, JobList};
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

/// GET /v1/cronjobs.
pub(super) async fn list_crons(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<JobsQuery>,
) -> Result<Json<CronList>, ApiError> {
    app.live().access.require_read(&caller)?;
    let mut items = app.supervisor.crons();
    if let Some(ns) = &q.namespace {
        items.retain(|j| j.app.split_once('/').is_some_and(|(n, _)| n == ns));
    }
    Ok(Json(CronList { items }))
}

/// GET /v1/cronjobs/{namespace}/{name}.
pub(super) async fn cron(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<CronBody>, ApiError> {
    app.live().access.require_read(&caller)?;
    Ok(Json(app.supervisor.cron(&namespace, &name)?))
}

#[derive(Debug, Deserialize)]
pub(super) struct CronActionQuery {
    /// A trigger: start it whatever the cron job's concurrencyPolicy says while runs go.
    force: Option<bool>,
}

/// POST /v1/cronjobs/{namespace}/{name}/{action}: trigger, suspend or resume.
pub(super) async fn cron_action(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, action)): Path<(String, String, String)>,
    Query(q): Query<CronActionQuery>,
) -> Result<Json<CronBody>, ApiError> {
    app.live().access.require_write(&caller)?;
    if !matches!(action.as_str(), "trigger" | "suspend" | "resume") {
        return Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            "not_found",
            format!("no cron job action {action:?} (trigger, suspend, resume)"),
        ));
    }
    if q.force.is_some() && action != "trigger" {
        return Err(ApiError::bad_request(format!("force: only a trigger takes it, not {action}")).field("force"));
    }
    let force = q.force.unwrap_or(false);
    let sup = app.clone();
    let body = tokio::spawn(async move { sup.supervisor.cron_action(&namespace, &name, &action, force).await })
        .await
        .map_err(ApiError::internal)??;
    Ok(Json(body))
}
