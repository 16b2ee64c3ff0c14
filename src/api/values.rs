//! Secrets and configmaps: names and keys are listed, values never leave except into
//! instances. One generic handler per verb, and the thin per-kind handlers the routes name.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Body, Path, Query};
use super::AppState;
use crate::protocol::{ValuesBody, ValuesList, ValuesSummary};
use crate::supervisor::values::ValueKind;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub(super) struct ValuesQuery {
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

pub(super) async fn list_secrets(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ValuesQuery>,
) -> Result<Json<ValuesList>, ApiError> {
    list_values(&app, &caller, ValueKind::Secret, q).await
}

pub(super) async fn list_configmaps(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ValuesQuery>,
) -> Result<Json<ValuesList>, ApiError> {
    list_values(&app, &caller, ValueKind::ConfigMap, q).await
}

pub(super) async fn put_secret(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Body(body): Body,
) -> Result<Json<ValuesSummary>, ApiError> {
    put_values(&app, &caller, ValueKind::Secret, namespace, name, body).await
}

pub(super) async fn put_configmap(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Body(body): Body,
) -> Result<Json<ValuesSummary>, ApiError> {
    put_values(&app, &caller, ValueKind::ConfigMap, namespace, name, body).await
}

pub(super) async fn delete_secret(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    delete_values(&app, &caller, ValueKind::Secret, namespace, name).await
}

pub(super) async fn delete_configmap(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    delete_values(&app, &caller, ValueKind::ConfigMap, namespace, name).await
}
