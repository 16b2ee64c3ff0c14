//! HookTemplates and HookRuns (seed 004, issue 19): a handler per request; the keeper
//! (hooks/keeper.rs) owns the data. Writes run in their own task, like an apply: a client that
//! hangs up cannot cut a commit short.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Body, Path, Query};
use super::AppState;
use crate::hooks::run::{HookRunList, HookTemplateList};
use crate::hooks::{CreateHookRun, HookError, HookRun, HookTemplate, HookTemplateSummary, Hooks};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

impl From<HookError> for ApiError {
    fn from(e: HookError) -> ApiError {
        match e {
            HookError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            HookError::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            HookError::Invalid(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", e.to_string()),
            HookError::Store(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string()),
        }
    }
}

/// Runs `work` on the keeper in a task of its own.
async fn detached<T: Send + 'static, F: Future<Output = Result<T, HookError>> + Send + 'static>(
    app: &Arc<AppState>,
    work: impl FnOnce(Hooks) -> F,
) -> Result<T, ApiError> {
    let hooks = app.supervisor.hooks().clone();
    Ok(tokio::spawn(work(hooks)).await.map_err(ApiError::internal)??)
}

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    namespace: Option<String>,
    /// `key=value`, as many as wanted: runs with every one of these labels.
    label: Option<String>,
}

/// GET /v1/hooktemplates.
pub(super) async fn list_templates(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<HookTemplateList>, ApiError> {
    app.live().access.require_read(&caller)?;
    Ok(Json(HookTemplateList { items: app.supervisor.hooks().templates(q.namespace.as_deref()) }))
}

/// GET /v1/hooktemplates/{namespace}/{name}.
pub(super) async fn get_template(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<HookTemplate>, ApiError> {
    app.live().access.require_read(&caller)?;
    let t = app.supervisor.hooks().template(&namespace, &name);
    Ok(Json(t.ok_or_else(|| ApiError::from(HookError::NotFound(format!("no hook template {namespace}/{name}"))))?))
}

/// PUT /v1/hooktemplates/{namespace}/{name}: a HookTemplate in JSON or TOML; its metadata
/// may leave out the name and namespace, which the path gives.
pub(super) async fn put_template(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    Path((namespace, name)): Path<(String, String)>,
    Body(body): Body,
) -> Result<Json<HookTemplateSummary>, ApiError> {
    app.live().access.require_write(&caller)?;
    let text = std::str::from_utf8(&body).map_err(|_| ApiError::bad_request("body is not UTF-8"))?;
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let format = crate::spec::Format::for_content_type(content_type, text);
    let template = crate::hooks::parse_template(text, format).map_err(ApiError::invalid_spec)?;
    if template.metadata.name != name || template.metadata.namespace != namespace {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            format!(
                "metadata: the template is {}/{}, the path says {namespace}/{name}",
                template.metadata.namespace, template.metadata.name
            ),
        )
        .field("metadata.name"));
    }
    Ok(Json(detached(&app, |hooks| async move { hooks.put_template(template).await }).await?))
}

/// DELETE /v1/hooktemplates/{namespace}/{name}.
pub(super) async fn delete_template(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    detached(&app, |hooks| async move { hooks.delete_template(&namespace, &name).await }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// GET /v1/hookruns.
pub(super) async fn list_runs(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<HookRunList>, ApiError> {
    app.live().access.require_read(&caller)?;
    let mut labels = BTreeMap::new();
    if let Some(l) = &q.label {
        let (k, v) =
            l.split_once('=').ok_or_else(|| ApiError::bad_request("label: expected key=value").field("label"))?;
        labels.insert(k.to_string(), v.to_string());
    }
    Ok(Json(HookRunList { items: app.supervisor.hooks().runs(q.namespace.as_deref(), &labels) }))
}

/// POST /v1/hookruns: creates a run of a template and starts it.
pub(super) async fn create_run(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Body(body): Body,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let req: CreateHookRun = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("body: {e} (expected {{\"template\": NAME, \"args\": {{...}}}})"))
            .field("template")
    })?;
    let run = detached(&app, |hooks| async move { hooks.create_run(req).await }).await?;
    Ok((StatusCode::CREATED, Json(run)).into_response())
}

#[derive(Debug, Deserialize)]
pub(super) struct RunQuery {
    /// Seconds to wait for the run to finish before answering (as it stands then).
    wait: Option<f64>,
}

/// GET /v1/hookruns/{namespace}/{name}.
pub(super) async fn get_run(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<RunQuery>,
) -> Result<Json<HookRun>, ApiError> {
    app.live().access.require_read(&caller)?;
    let hooks = app.supervisor.hooks();
    let not_found = || ApiError::from(HookError::NotFound(format!("no hook run {namespace}/{name}")));
    if let Some(secs) = q.wait.filter(|s| s.is_finite() && *s > 0.0) {
        let wait = std::time::Duration::from_secs_f64(secs.min(3600.0));
        let _ = tokio::time::timeout(wait, hooks.wait(&namespace, &name)).await;
    }
    Ok(Json(hooks.run(&namespace, &name).ok_or_else(not_found)?))
}

/// POST /v1/hookruns/{namespace}/{name}/terminate.
pub(super) async fn terminate_run(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<HookRun>, ApiError> {
    app.live().access.require_write(&caller)?;
    Ok(Json(detached(&app, |hooks| async move { hooks.terminate(&namespace, &name).await }).await?))
}

/// DELETE /v1/hookruns/{namespace}/{name}: terminated first if it is going.
pub(super) async fn delete_run(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    detached(&app, |hooks| async move { hooks.delete_run(&namespace, &name).await }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
