//! Dependencies, hook templates and runs, and the merged event stream.

use super::{answer, body, ndjson, State};
use crate::api::extract::{Body, Path, Query};
use crate::protocol::{
    Cursors, DependencyRequest, HookRunRequest, NodeItem, NodeLine, Removed, RunFound, RunsListing, WatchLine,
};
use crate::sched::ops::SchedOps;
use crate::sched::SchedError;
use crate::spec::source::Document;
use crate::spec::{AppId, Format};
use axum::extract::State as With;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

pub async fn dependencies(With(s): State) -> Response {
    answer(s.sched.dependency_statuses()).await
}

/// `PUT /v1/dependencies`: store (create or update; its copies take the new spec).
pub async fn put_dependency(With(s): State, Body(bytes): Body) -> Response {
    store_dependency(s, &bytes, false).await
}

/// `POST /v1/dependencies`: create only; one of that name is seed 002's NotAllowed.
pub async fn create_dependency(With(s): State, Body(bytes): Body) -> Response {
    store_dependency(s, &bytes, true).await
}

async fn store_dependency(s: std::sync::Arc<super::Served>, bytes: &[u8], create_only: bool) -> Response {
    let req: DependencyRequest = match body(bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move {
        let doc = Document::of_value("spec", req.spec);
        if create_only {
            // Named as the store names it; a spec that does not check is refused by the put.
            let key = crate::sched::scheduler::check_spec(&doc.value).map(|spec| AppId::of(&spec).to_string());
            if let Ok(key) = key {
                if s.sched.dependency_statuses().await?.iter().any(|d| d.dependency == key) {
                    return Err(SchedError::Exists { what: format!("dependency {key}") });
                }
            }
        }
        SchedOps::put_dependency(&s.sched, &doc, req.grace_secs).await
    })
    .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ForceQuery {
    #[serde(default)]
    force: bool,
}

pub async fn delete_dependency(
    With(s): State,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<ForceQuery>,
) -> Response {
    answer(async move {
        let removed = format!("{namespace}/{name}");
        let away = SchedOps::delete_dependency(&s.sched, &removed, q.force).await?;
        Ok(Removed { removed, away })
    })
    .await
}

pub async fn hook_templates(With(s): State) -> Response {
    answer(s.sched.hook_templates()).await
}

/// `PUT /v1/hooktemplates`: a HookTemplate document (JSON), stored and given to every node.
pub async fn put_hook_template(With(s): State, Body(bytes): Body) -> Response {
    answer(async move {
        let text = std::str::from_utf8(&bytes).map_err(|_| SchedError::Invalid("body: not UTF-8".into()))?;
        crate::sched::Scheduler::put_hook_template(&s.sched, text, Format::Json).await
    })
    .await
}

pub async fn delete_hook_template(With(s): State, Path((namespace, name)): Path<(String, String)>) -> Response {
    answer(async move {
        let away = s.sched.delete_hook_template(&namespace, &name).await?;
        Ok(Removed { removed: format!("{namespace}/{name}"), away })
    })
    .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NamespaceQuery {
    namespace: Option<String>,
}

pub async fn hook_runs(With(s): State, Query(q): Query<NamespaceQuery>) -> Response {
    answer(async move {
        let (runs, unreachable) = crate::sched::Scheduler::hook_runs(&s.sched, q.namespace.as_deref()).await;
        Ok::<_, SchedError>(RunsListing { runs, unreachable })
    })
    .await
}

pub async fn create_hook_run(With(s): State, Body(bytes): Body) -> Response {
    let req: HookRunRequest = match body(&bytes) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    answer(async move {
        let (node, run) = s.sched.create_hook_run(&req.run, req.node.as_deref()).await?;
        Ok(RunFound { node, run })
    })
    .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// Seconds to wait for the run to finish (at most 60).
    wait: Option<u64>,
}

/// A run, wherever it is; with `wait=SECS`, once it has finished or the time is up.
pub async fn hook_run(
    With(s): State,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<WaitQuery>,
) -> Response {
    answer(async move {
        let wait = q.wait.map(|w| std::time::Duration::from_secs(w.min(60)));
        let (node, run) = s.sched.hook_run(&namespace, &name, wait).await?;
        Ok(RunFound { node, run })
    })
    .await
}

pub async fn terminate_hook_run(With(s): State, Path((namespace, name)): Path<(String, String)>) -> Response {
    answer(async move {
        let (node, run) = s.sched.terminate_hook_run(&namespace, &name).await?;
        Ok(RunFound { node, run })
    })
    .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// `N` (after event N on every node; 0: all kept) or `h1=40,h2=12`; default: from now.
    since: Option<String>,
    /// false: each node's kept events after its cursor, then the end (default: follow).
    follow: Option<bool>,
}

/// Every node's events merged with what this scheduler's `run` sees and does, as NDJSON lines
/// (`WatchLine`): resumable per node by its sequence numbers, as `watch --since` (the
/// scheduler's own lines are not kept: they stream from now).
pub async fn events(With(s): State, Query(q): Query<EventsQuery>) -> Response {
    let cursors = match q.since.as_deref().map(Cursors::parse).transpose() {
        Ok(c) => c,
        Err(e) => {
            return crate::api::error::ApiError::bad_request(format!("since: {e}")).field("since").into_response()
        }
    };
    if q.follow == Some(false) {
        return backlog(s, cursors);
    }
    let mut nodes = match cursors {
        None => s.sched.follow(None),
        Some(Cursors::All(n)) => s.sched.follow(Some(n)),
        Some(Cursors::PerNode(map)) => s.sched.follow_from(&map),
    };
    let mut own = s.lines.subscribe();
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(async move {
        loop {
            let line = tokio::select! {
                item = nodes.recv() => match item {
                    Some(item) => WatchLine::Node(item),
                    None => return,
                },
                line = own.recv() => match line {
                    Ok(line @ WatchLine::Sched(_)) => line,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            };
            // Heartbeats go too: they keep an idle stream's connection alive.
            if tx.send(serde_json::to_vec(&line).unwrap_or_default()).await.is_err() {
                return;
            }
        }
    });
    ndjson(rx, s.shutdown.clone())
}

/// Each node's kept events after its cursor (a node without one: none), node by node, then the
/// end of the stream.
fn backlog(s: std::sync::Arc<super::Served>, cursors: Option<Cursors>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    let nodes = s.sched.nodes();
    tokio::spawn(async move {
        for (name, client) in nodes.iter() {
            let since = match &cursors {
                None => continue,
                Some(Cursors::All(n)) => *n,
                Some(Cursors::PerNode(map)) => match map.get(name) {
                    Some(n) => *n,
                    None => continue,
                },
            };
            let mut events = Vec::new();
            let read = client.events(since, false, |e| {
                events.push(e);
                true
            });
            if tokio::time::timeout(std::time::Duration::from_secs(10), read).await.is_err() {
                tracing::info!(node = %name, "events: no backlog within 10 s");
            }
            for e in events {
                let line = WatchLine::Node(NodeLine { node: name.clone(), item: NodeItem::Event(e) });
                if tx.send(serde_json::to_vec(&line).unwrap_or_default()).await.is_err() {
                    return;
                }
            }
        }
    });
    ndjson(rx, s.shutdown.clone())
}
