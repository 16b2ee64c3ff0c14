//! POST /v1/apply: the spec body read, checked against this host and handed to the supervisor.
//! `apply_body` is the one path from bytes to a spec, shared with the fuzz target.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Body, Query};
use super::AppState;
use crate::protocol::Applied;
use crate::spec::{self, Format, InstanceId, Roots};
use crate::supervisor::SupervisorError;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub(super) struct ApplyQuery {
    /// Comma-separated instance ids this host runs (a scheduler's placement); all by default.
    instances: Option<String>,
    /// `true`: the spec's `strategy.autoRollback` set (`steward apply --auto-rollback`).
    #[serde(rename = "autoRollback")]
    auto_rollback: Option<bool>,
    /// `true`: the spec its failed rollout left, applied again, retries that rollout (`steward
    /// apply`, steward-sched's rollout steps); without it such an apply changes nothing.
    retry: Option<bool>,
}

fn parse_selection(text: &str) -> Result<Vec<u32>, ApiError> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse().map_err(|_| {
                ApiError::bad_request(format!("instances: {s:?} is not an instance id (e.g. instances=0,3)"))
                    .field("instances")
            })
        })
        .collect()
}

/// An apply request's body as a spec: UTF-8, JSON or TOML (by Content-Type, else by its first
/// character), parsed, normalized, validated, and within this host. The fuzz target
/// (`crate::fuzz`) takes the same path.
pub fn apply_body(
    body: &[u8],
    content_type: &str,
    roots: &Roots,
    host: &spec::validate::HostCapacity,
) -> Result<spec::ProcessSpec, ApiError> {
    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("body is not UTF-8"))?;
    let format = Format::for_content_type(content_type, text);
    let parsed = spec::parse(text, format, roots).map_err(ApiError::invalid_spec)?;
    spec::within_host(&parsed, host).map_err(ApiError::invalid_spec)?;
    Ok(parsed)
}

/// POST /v1/apply: a spec in JSON or TOML (by Content-Type, else by its first character).
pub(super) async fn apply(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    Query(q): Query<ApplyQuery>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let selection = q.instances.as_deref().map(parse_selection).transpose()?;
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let mut parsed = apply_body(&body, content_type, &app.roots, &app.host)?;
    if q.auto_rollback == Some(true) {
        parsed.strategy.auto_rollback = true;
    }
    // In its own task: a client that hangs up must not cancel an apply half-way (its store
    // commit may already be durable).
    let sup_app = app.clone();
    let by = caller.describe();
    let retry = q.retry == Some(true);
    let outcome =
        tokio::spawn(async move { sup_app.supervisor.apply_retrying_by(parsed, selection, &by, retry).await })
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| match e {
                SupervisorError::Invalid(ref m) => {
                    // The message starts with the field it is about (`instances: ...`).
                    let field = m.split_once(": ").map(|(f, _)| f).filter(|f| !f.contains(' ')).unwrap_or("instances");
                    let field = field.to_string();
                    ApiError::from(e).field(&field)
                }
                e => ApiError::from(e),
            })?;
    Ok((StatusCode::ACCEPTED, Json(Applied::from(&outcome))).into_response())
}

impl From<&crate::supervisor::ApplyOutcome> for Applied {
    fn from(outcome: &crate::supervisor::ApplyOutcome) -> Applied {
        let names = |ids: &[InstanceId]| ids.iter().map(ToString::to_string).collect::<Vec<_>>();
        Applied {
            instances: names(&outcome.instances),
            generation: outcome.generation,
            revision: outcome.revision,
            changed: names(&outcome.changed),
            created: names(&outcome.created),
            unchanged: outcome.unchanged,
            rollout: outcome.rollout,
        }
    }
}
