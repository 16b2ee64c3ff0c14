//! Apps: deploy (create or update; create only), get, delete, scale, stop, start, restart,
//! rollouts, endpoints, copying a file into an instance.

use super::{answer, body, ndjson, State};
use crate::api::error::ApiError;
use crate::api::extract::{Body, Path, Query};
use crate::protocol::{DeployRequest, InstanceRequest, ScaleRequest};
use crate::sched::ops::SchedOps;
use crate::sched::scheduler::{check_spec, Intent};
use crate::sched::SchedError;
use crate::spec::source::Document;
use crate::spec::AppId;
use axum::extract::State as With;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

fn app_id((namespace, name): (String, String)) -> AppId {
    AppId::new(&namespace, &name)
}

pub async fn list(With(s): State) -> Response {
    answer(s.sched.status()).await
}

pub async fn get(With(s): State, Path(id): Path<(String, String)>) -> Response {
    answer(s.sched.app_detail(&app_id(id))).await
}

/// `PUT /v1/apps`: create or update.
pub async fn deploy(With(s): State, Body(bytes): Body) -> Response {
    deploy_as(s, &bytes, false).await
}

/// `POST /v1/apps`: create only; an app of that name is seed 002's NotAllowed.
pub async fn create(With(s): State, Body(bytes): Body) -> Response {
    deploy_as(s, &bytes, true).await
}

async fn deploy_as(s: std::sync::Arc<super::Served>, bytes: &[u8], create_only: bool) -> Response {
    let req: DeployRequest = match body(bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move {
        let doc = Document::of_value("spec", req.spec);
        let spec = check_spec(&doc.value).map_err(|errors| SchedError::Spec { path: "spec".into(), errors })?;
        SchedOps::deploy(&s.sched, &doc, spec, req.wait_for_room, create_only).await
    })
    .await
}

pub async fn delete(With(s): State, Path(id): Path<(String, String)>) -> Response {
    answer(async move { SchedOps::delete(&s.sched, &app_id(id)).await }).await
}

pub async fn scale(With(s): State, Path(id): Path<(String, String)>, Body(bytes): Body) -> Response {
    let req: ScaleRequest = match body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move { SchedOps::scale(&s.sched, &app_id(id), req.instances, req.wait_for_room).await }).await
}

/// An optional body naming one instance.
fn instance_of(bytes: &[u8]) -> Result<Option<u32>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    Ok(body::<InstanceRequest>(bytes)?.instance)
}

async fn intent(s: std::sync::Arc<super::Served>, id: (String, String), bytes: &[u8], intent: Intent) -> Response {
    let index = match instance_of(bytes) {
        Ok(i) => i,
        Err(e) => return e.into_response(),
    };
    answer(async move { SchedOps::set_stopped(&s.sched, &app_id(id), index, intent).await }).await
}

pub async fn stop(With(s): State, Path(id): Path<(String, String)>, Body(bytes): Body) -> Response {
    intent(s, id, &bytes, Intent::Stop).await
}

pub async fn start(With(s): State, Path(id): Path<(String, String)>, Body(bytes): Body) -> Response {
    intent(s, id, &bytes, Intent::Start).await
}

pub async fn restart(With(s): State, Path(id): Path<(String, String)>, Body(bytes): Body) -> Response {
    let index = match instance_of(&bytes) {
        Ok(i) => i,
        Err(e) => return e.into_response(),
    };
    answer(async move { SchedOps::restart(&s.sched, &app_id(id), index).await }).await
}

/// Each node's revision history of the app.
pub async fn revisions(With(s): State, Path(id): Path<(String, String)>) -> Response {
    answer(async move { s.sched.revisions(&app_id(id)).await }).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevisionQuery {
    /// The node whose revision to read (each numbers its own); else the first that keeps it.
    node: Option<String>,
}

/// One revision of the app and its spec, as a node that keeps it has it.
pub async fn revision(
    With(s): State,
    Path((namespace, name, revision)): Path<(String, String, String)>,
    Query(q): Query<RevisionQuery>,
) -> Response {
    let Ok(n) = revision.parse() else {
        return ApiError::bad_request(format!("{revision:?} is not a revision number")).into_response();
    };
    answer(async move { s.sched.revision(&AppId::new(&namespace, &name), n, q.node.as_deref()).await }).await
}

pub async fn rollout(With(s): State, Path(id): Path<(String, String)>) -> Response {
    answer(s.sched.rollout_status(&app_id(id))).await
}

/// `pause`, `resume` and `undo` (these two driven to the end, as the CLI's): the rollout after.
pub async fn rollout_action(
    With(s): State,
    Path((namespace, name, action)): Path<(String, String, String)>,
) -> Response {
    let key = AppId::new(&namespace, &name);
    answer(async move { SchedOps::rollout_action(&s.sched, &key, &action).await }).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointsQuery {
    #[serde(default)]
    watch: bool,
}

/// The app's endpoints (`null`: none yet); with `watch=true`, every new revision as an NDJSON
/// line, the first what is stored now.
pub async fn endpoints(With(s): State, Path(id): Path<(String, String)>, Query(q): Query<EndpointsQuery>) -> Response {
    let key = app_id(id);
    if !q.watch {
        return answer(s.sched.stored_endpoints(&key)).await;
    }
    if let Err(e) = s.sched.stored_endpoints(&key).await {
        return ApiError::from(e).into_response();
    }
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let sched = s.sched.clone();
    tokio::spawn(async move {
        let _ = sched
            .watch_endpoints(&key, |e| {
                let line = serde_json::to_vec(&e).unwrap_or_default();
                tx.try_send(line).is_ok() || !tx.is_closed()
            })
            .await;
    });
    ndjson(rx, s.shutdown.clone())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyQuery {
    path: String,
    #[serde(default)]
    writable: bool,
    user: Option<String>,
    container: Option<String>,
}

/// The body copied into the instance at `path` on whichever node runs it.
pub async fn copy_in(
    With(s): State,
    Path((namespace, name, index)): Path<(String, String, u32)>,
    Query(q): Query<CopyQuery>,
    Body(bytes): Body,
) -> Response {
    let key = AppId::new(&namespace, &name);
    answer(async move {
        let how = (q.writable, q.user.as_deref(), q.container.as_deref());
        let (node, copied) = s.sched.copy_in(&key, index, &q.path, bytes.to_vec(), how).await?;
        Ok(crate::protocol::CopiedOnNode { node, copied })
    })
    .await
}
