//! The instance and app handlers: list, status, start/stop/restart/reload, delete, and an
//! app's delete; with the `timeout` query that waits for an action to finish.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::AppState;
use crate::protocol::{Deleted, InstanceList, InstanceStatus};
use crate::spec::InstanceId;
use crate::supervisor::instance::Command;
use crate::supervisor::{state::Kind, AppDelete, ListFilter, SupervisorError};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    namespace: Option<String>,
    name: Option<String>,
    state: Option<String>,
}

pub(super) async fn list(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<InstanceList>, ApiError> {
    app.live().access.require_read(&caller)?;
    let state = match q.state.as_deref() {
        None | Some("") => None,
        Some(s) => {
            Some(parse_kind(s).ok_or_else(|| ApiError::bad_request(format!("unknown state {s:?}")).field("state"))?)
        }
    };
    let filter = ListFilter { namespace: q.namespace, name: q.name, state };
    Ok(Json(InstanceList { instances: app.supervisor.list(&filter) }))
}

fn parse_kind(s: &str) -> Option<Kind> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).ok().or_else(|| {
        let mut c = s.chars();
        let cap: String = c.next().map(|f| f.to_uppercase().chain(c.flat_map(char::to_lowercase)).collect())?;
        serde_json::from_value(serde_json::Value::String(cap)).ok()
    })
}

pub(super) fn instance_id(namespace: String, name: String, index: String) -> Result<InstanceId, ApiError> {
    let index = index.parse().map_err(|_| ApiError::bad_request(format!("{index:?} is not an instance index")))?;
    Ok(InstanceId { namespace, name, index })
}

pub(super) async fn status(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index)): Path<(String, String, String)>,
) -> Result<Json<InstanceStatus>, ApiError> {
    app.live().access.require_read(&caller)?;
    let id = instance_id(namespace, name, index)?;
    let mut status = app.supervisor.status(&id)?;
    status.limits = app
        .supervisor
        .specs()
        .iter()
        .find(|s| s.metadata.namespace == id.namespace && s.metadata.name == id.name)
        .map(|s| s.instance_limits());
    Ok(Json(status))
}

#[derive(Debug, Deserialize)]
pub(super) struct ActionQuery {
    /// Seconds to wait for the action to complete; without it, the request returns at once (202).
    timeout: Option<f64>,
    /// `fail`: why (a REMOTE check's verdict), shown as the instance's stop reason.
    reason: Option<String>,
    /// `crash` (a hollow host's): the exit code its run ends with (1 by default)...
    #[serde(rename = "exitCode")]
    exit_code: Option<i32>,
    /// ...or the signal that ends it.
    signal: Option<i32>,
    /// An app's delete: at once, without its `strategy.scaleIn` hook's word.
    #[serde(default)]
    force: bool,
}

/// The instance actions, as the route's `{action}` names them.
const ACTIONS: &str = "start, stop, restart, reload, fail, crash";

pub(super) async fn action(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index, action)): Path<(String, String, String, String)>,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let id = instance_id(namespace, name, index)?;
    app.supervisor.status(&id)?;
    if !ACTIONS.split(", ").any(|a| a == action) {
        let message = format!("no action {action:?} ({ACTIONS})");
        return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", message).field("action"));
    }
    let timeout = q.timeout.map(secs).transpose()?;
    let command = match action.as_str() {
        "start" => Command::Start,
        "stop" => Command::Stop,
        "restart" => Command::Restart,
        "reload" => Command::Reload,
        "fail" => Command::Fail(q.reason.clone().unwrap_or_else(|| "failed by request".to_string())),
        _ => Command::Crash(match (q.signal, q.exit_code) {
            (Some(signal), _) => crate::supervisor::state::ExitStatus::Signal(signal),
            (None, code) => crate::supervisor::state::ExitStatus::Code(code.unwrap_or(1)),
        }),
    };
    let (recorded, is_recorded) = tokio::sync::oneshot::channel();
    let (sup_app, id2) = (app.clone(), id.clone());
    // In its own task: a client hanging up cannot cut it short.
    let work = tokio::spawn(async move { sup_app.supervisor.act(&id2, command, recorded).await });
    let code = match once_recorded(timeout, is_recorded, work).await? {
        Some(()) => StatusCode::OK,
        None => StatusCode::ACCEPTED,
    };
    Ok((code, Json(app.supervisor.status(&id)?)).into_response())
}

pub(super) async fn delete(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index)): Path<(String, String, String)>,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    let id = instance_id(namespace, name, index)?;
    app.supervisor.status(&id)?;
    let timeout = q.timeout.map(secs).transpose()?;
    let (recorded, is_recorded) = tokio::sync::oneshot::channel();
    let sup_app = app.clone();
    // Always in its own task, so a client hanging up cannot cut the cleanup after the delete.
    let work = tokio::spawn(async move { sup_app.supervisor.delete(&id, recorded).await });
    Ok(match once_recorded(timeout, is_recorded, work).await? {
        Some(()) => StatusCode::NO_CONTENT.into_response(),
        None => StatusCode::ACCEPTED.into_response(),
    })
}

/// Waits for an instance's request (`work`) to be durable (`is_recorded`), then, with a
/// timeout, up to it for the request to be done. Some: done, with what it gave; None: under way
/// (202), or not waited for. Nothing is answered before the request is durable: an answer a
/// kill -9 could undo would be a lie. Never told, the work ended first: with its error, which is
/// the answer, or done (a stopped instance's delete can end its actor before it reads the wait),
/// answered as any request without a timeout is (202).
async fn once_recorded<T>(
    timeout: Option<Duration>,
    is_recorded: tokio::sync::oneshot::Receiver<()>,
    work: tokio::task::JoinHandle<Result<T, SupervisorError>>,
) -> Result<Option<T>, ApiError> {
    let done = |r: Result<Result<T, SupervisorError>, tokio::task::JoinError>| {
        r.map_err(ApiError::internal)?.map(Some).map_err(ApiError::from)
    };
    if is_recorded.await.is_err() {
        return Ok(done(work.await)?.filter(|_| timeout.is_some()));
    }
    match timeout {
        Some(t) => match tokio::time::timeout(t, work).await {
            Ok(r) => done(r),
            Err(_) => Ok(None),
        },
        None => Ok(None),
    }
}

/// DELETE /v1/apps/{namespace}/{name}: every instance of the app here, then its spec.
pub(super) async fn delete_app(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    app.live().access.require_write(&caller)?;
    if !app.supervisor.specs().iter().any(|s| s.metadata.namespace == namespace && s.metadata.name == name) {
        return Err(ApiError::from(SupervisorError::NotFound(format!("app {namespace}/{name}"))));
    }
    let timeout = q.timeout.map(secs).transpose()?;
    let sup_app = app.clone();
    let force = q.force;
    // Told once the delete is recorded: nothing is answered before (a 202 lost to a kill -9
    // would be a lie); not told, the work ended with its error.
    let (recorded, is_recorded) = tokio::sync::oneshot::channel::<()>();
    // In its own task, like an instance's delete: a client hanging up cannot cut it short.
    let work = tokio::spawn(async move {
        let supervisor = &sup_app.supervisor;
        let of_app = |s: &crate::supervisor::record::InstanceStatus| s.id.namespace == namespace && s.id.name == name;
        let ids: Vec<InstanceId> =
            supervisor.list(&Default::default()).into_iter().filter(of_app).map(|s| s.id).collect();
        // Subscribed before the delete: its appDeleted cannot pass unseen.
        let mut journal = supervisor.store().subscribe();
        let gone = || !supervisor.specs().iter().any(|s| s.metadata.namespace == namespace && s.metadata.name == name);
        let how = supervisor.record_app_delete(&namespace, &name, force).await?;
        let _ = recorded.send(());
        match how {
            AppDelete::Now => supervisor.delete_app(&namespace, &name).await,
            // At its scale-in hooks' word: done when its spec is gone, looked at again at each
            // event journaled (its appDeleted among them).
            AppDelete::AtHooksWord => loop {
                if gone() {
                    break Ok(ids);
                }
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = journal.recv().await {
                    break Ok(ids);
                }
            },
        }
    });
    Ok(match once_recorded(timeout, is_recorded, work).await? {
        Some(ids) => Json(Deleted { deleted: ids.iter().map(ToString::to_string).collect() }).into_response(),
        None => StatusCode::ACCEPTED.into_response(),
    })
}

/// A `timeout` query value: seconds, 0 to 3600.
fn secs(t: f64) -> Result<Duration, ApiError> {
    if !t.is_finite() || t < 0.0 {
        return Err(
            ApiError::bad_request(format!("timeout {t} is not a number of seconds from 0 to 3600")).field("timeout")
        );
    }
    Ok(Duration::from_secs_f64(t.min(3600.0)))
}
