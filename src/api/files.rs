//! PUT /v1/instances/{namespace}/{name}/{index}/files: a file into a running instance (`steward
//! cp`, seed 001's local file). The body is the file's bytes; the query says where it goes.

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::instances::instance_id;
use super::AppState;
use crate::protocol::FileCopied;
use crate::supervisor::instance::FileCopy;
use crate::supervisor::SupervisorError;
use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub(super) struct FileQuery {
    /// A process's: absolute or relative to its workPath, inside the instance's workPaths. A
    /// pod's: absolute in the container.
    path: Option<String>,
    /// `r` (the default: 0400) or `rw` (0600), for the owner (seed 001's Right).
    mode: Option<String>,
    /// The owner: a user name, uid or uid:gid; default the process's user, a container's root.
    user: Option<String>,
    /// The process (procName) or container (its name in the spec); default the first.
    container: Option<String>,
}

pub(super) async fn copy_in(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    Path((namespace, name, index)): Path<(String, String, String)>,
    Query(q): Query<FileQuery>,
    body: Bytes,
) -> Result<Json<FileCopied>, ApiError> {
    app.live().access.require_write(&caller)?;
    let id = instance_id(namespace, name, index)?;
    app.supervisor.status(&id)?;
    let path =
        q.path.filter(|p| !p.is_empty()).ok_or_else(|| ApiError::bad_request("path is required").field("path"))?;
    if path.contains('\0') {
        return Err(ApiError::bad_request("path holds a NUL byte").field("path"));
    }
    let writable = match q.mode.as_deref() {
        None | Some("r") => false,
        Some("rw") => true,
        Some(other) => return Err(ApiError::bad_request(format!("mode {other:?} is not r or rw")).field("mode")),
    };
    let file =
        FileCopy { path, data: body.to_vec(), writable, user: q.user.filter(|u| !u.is_empty()), target: q.container };
    let sup_app = app.clone();
    // In its own task: a client hanging up does not cut a write half-way.
    let copied =
        tokio::spawn(async move { sup_app.supervisor.copy_in(&id, file).await }).await.map_err(ApiError::internal)?;
    match copied {
        Ok(c) => Ok(Json(c)),
        // What the request asked for that the instance cannot take is the request's fault.
        Err(SupervisorError::Failed(why)) if why.starts_with("path ") => Err(ApiError::bad_request(why).field("path")),
        Err(SupervisorError::Failed(why)) if why.starts_with("no process ") || why.starts_with("no container ") => {
            Err(ApiError::bad_request(why).field("container"))
        }
        Err(SupervisorError::Failed(why))
            if why.starts_with("user ") || why.contains("does not exist on this host") =>
        {
            Err(ApiError::bad_request(why).field("user"))
        }
        Err(e) => Err(e.into()),
    }
}
