//! The cluster: nodes and their controls (cordon, drain, drift), seed 002's constraints, the
//! scheduler's settings, the engine (maintenance; seed 002's start and stop), notifications.

use super::{answer, body, State};
use crate::api::extract::{Body, Path, Query};
use crate::protocol::{
    ConfigValue, Constraint, CordonRequest, DrainRequest, DriftRequest, EngineRun, EngineRunBody, MaintenanceRequest,
    UrlRequest,
};
use crate::sched::ops::SchedOps;
use crate::sched::SchedError;
use axum::extract::State as With;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// A body that may be left out (`{}` then).
fn optional_body<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, crate::api::error::ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    body(bytes)
}

pub async fn nodes(With(s): State) -> Response {
    answer(s.sched.node_listing()).await
}

pub async fn cordon(With(s): State, Path(node): Path<String>, Body(bytes): Body) -> Response {
    let req: CordonRequest = match optional_body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move { s.sched.cordon(&node, Some((req.preferred, &req.reason))).await }).await
}

pub async fn uncordon(With(s): State, Path(node): Path<String>) -> Response {
    answer(async move { s.sched.cordon(&node, None).await }).await
}

/// Cordons the node (required) and moves every instance off it; the moves (one that stayed
/// says why; the answer is still 200, as a drift's list).
pub async fn drain(With(s): State, Path(node): Path<String>, Body(bytes): Body) -> Response {
    let req: DrainRequest = match optional_body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move { SchedOps::drain(&s.sched, &node, req.force).await }).await
}

/// Seed 002's `PATCH /api/nodes?cmd=drift`.
pub async fn drift(With(s): State, Body(bytes): Body) -> Response {
    let req: DriftRequest = match body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move { SchedOps::drift(&s.sched, &req).await }).await
}

pub async fn constraints(With(s): State) -> Response {
    answer(s.sched.constraints()).await
}

/// Seed 002's constraint query: `type`, `value`, `equal`, `soft`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConstraintQuery {
    #[serde(rename = "type")]
    kind: String,
    value: Option<String>,
    #[serde(default)]
    equal: bool,
    #[serde(default = "yes")]
    soft: bool,
}

fn yes() -> bool {
    true
}

/// `PATCH /v1/constraints?type=node&value=h3&equal=false&soft=true` (seed 002's).
pub async fn set_constraint(With(s): State, Query(q): Query<ConstraintQuery>) -> Response {
    answer(async move {
        let value = q.value.ok_or_else(|| SchedError::Invalid("value: required (the node's name)".into()))?;
        s.sched.set_constraint(Constraint { kind: q.kind, value, equal: q.equal, soft: q.soft, since_ms: 0 }).await
    })
    .await
}

/// `DELETE /v1/constraints?type=node[&value=h3]`: every constraint of the type, or the one on
/// the value.
pub async fn remove_constraint(With(s): State, Query(q): Query<ConstraintQuery>) -> Response {
    answer(async move { s.sched.remove_constraint(&q.kind, q.value.as_deref()).await }).await
}

pub async fn config(With(s): State) -> Response {
    answer(s.sched.config(None)).await
}

pub async fn config_key(With(s): State, Path(key): Path<String>) -> Response {
    answer(async move { s.sched.config(Some(&key)).await }).await
}

pub async fn set_config(With(s): State, Path(key): Path<String>, Body(bytes): Body) -> Response {
    let req: ConfigValue = match body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move { s.sched.set_config(&key, &req.value).await }).await
}

pub async fn engine(With(s): State) -> Response {
    answer(s.sched.engine_status()).await
}

pub async fn maintenance(With(s): State, Body(bytes): Body) -> Response {
    let req: MaintenanceRequest = match body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move { s.sched.set_maintenance(req.on, &req.reason).await }).await
}

/// Seed 002's `GET /api/status`: the engine `start`ed, or `stop`ped (maintenance).
pub async fn engine_run(With(s): State) -> Response {
    answer(async move {
        let on = s.sched.engine_status().await?.maintenance.is_some();
        Ok(EngineRunBody { status: if on { EngineRun::Stop } else { EngineRun::Start } })
    })
    .await
}

/// Seed 002's `PATCH /api/status {"status": "start"|"stop"}`: stop is maintenance mode.
pub async fn set_engine_run(With(s): State, Body(bytes): Body) -> Response {
    let req: EngineRunBody = match body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move {
        let stop = req.status == EngineRun::Stop;
        s.sched.set_maintenance(stop, if stop { "engine stopped (PATCH /v1/status)" } else { "" }).await?;
        Ok(req)
    })
    .await
}

pub async fn notifications(With(s): State) -> Response {
    answer(s.sched.webhooks()).await
}

pub async fn add_notification(With(s): State, Body(bytes): Body) -> Response {
    let req: UrlRequest = match body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move { s.sched.set_webhook(&req.url, true).await }).await
}

pub async fn remove_notification(With(s): State, Query(q): Query<UrlRequest>) -> Response {
    answer(async move { s.sched.set_webhook(&q.url, false).await }).await
}
