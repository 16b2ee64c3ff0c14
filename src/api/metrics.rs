//! GET /metrics in the Prometheus text format.

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use crate::supervisor::state::Kind;
use crate::supervisor::ListFilter;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::fmt::Write;
use std::sync::Arc;

const KINDS: [Kind; 8] = [
    Kind::Staging,
    Kind::Starting,
    Kind::Running,
    Kind::Stopping,
    Kind::Stopped,
    Kind::Exited,
    Kind::Failed,
    Kind::Backoff,
];

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Requests answered, by (method, route as declared): how hard a scheduler or a dashboard
/// works this daemon.
#[derive(Default)]
pub struct RequestCounts(std::sync::Mutex<std::collections::BTreeMap<(String, String), u64>>);

/// Counts the request by its matched route (middleware on every route).
pub async fn count_request(
    State(app): State<Arc<AppState>>,
    route: axum::extract::MatchedPath,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let key = (request.method().to_string(), route.as_str().to_string());
    *app.requests.0.lock().expect("request counts lock").entry(key).or_default() += 1;
    next.run(request).await
}

pub async fn metrics(State(app): State<Arc<AppState>>, caller: Caller) -> Result<Response, ApiError> {
    app.live().access.require_read(&caller)?;
    let list = app.supervisor.list(&ListFilter::default());
    let mut out = String::new();
    header(&mut out, "steward_api_requests_total", "counter", "API requests, by method and route.");
    for ((method, route), n) in app.requests.0.lock().expect("request counts lock").iter() {
        let _ = writeln!(out, "steward_api_requests_total{{method=\"{method}\",route=\"{route}\"}} {n}");
    }
    header(&mut out, "steward_instances", "gauge", "Instances by state.");
    for k in KINDS {
        let n = list.iter().filter(|s| s.state.kind() == k).count();
        let _ = writeln!(out, "steward_instances{{state=\"{k}\"}} {n}");
    }
    header(&mut out, "steward_instances_ready", "gauge", "Running instances whose readiness probes all pass.");
    let _ = writeln!(out, "steward_instances_ready {}", list.iter().filter(|s| s.ready).count());
    header(&mut out, "steward_instance_ready", "gauge", "1 while the instance is ready, else 0.");
    for s in list.iter().filter(|s| s.state.has_processes()) {
        let _ = writeln!(out, "steward_instance_ready{{instance=\"{}\"}} {}", s.id, u8::from(s.ready));
    }
    header(&mut out, "steward_restarts_total", "counter", "Restarts of all instances over their lives.");
    let _ = writeln!(out, "steward_restarts_total {}", list.iter().map(|s| s.restarts).sum::<u64>());
    header(&mut out, "steward_instance_restarts_total", "counter", "Restarts of each instance.");
    for s in &list {
        let _ = writeln!(out, "steward_instance_restarts_total{{instance=\"{}\"}} {}", s.id, s.restarts);
    }
    let counters = app.supervisor.counters();
    header(&mut out, "steward_check_failures_total", "counter", "Failed health checks.");
    let _ = writeln!(out, "steward_check_failures_total {}", counters.check_failures);
    header(&mut out, "steward_fetch_bytes_total", "counter", "Bytes downloaded for instance packages.");
    let _ = writeln!(out, "steward_fetch_bytes_total {}", counters.fetch_bytes);
    header(&mut out, "steward_events_last_sequence", "gauge", "Sequence number of the newest event.");
    let _ = writeln!(out, "steward_events_last_sequence {}", app.supervisor.store().last_seq());
    let store = app.supervisor.store().stats();
    header(&mut out, "steward_store_commits_total", "counter", "Durable write transactions (one fsync each).");
    let _ = writeln!(out, "steward_store_commits_total {}", store.write_txns);
    header(&mut out, "steward_store_failed_commits_total", "counter", "Write transactions the store refused.");
    let _ = writeln!(out, "steward_store_failed_commits_total {}", store.failed_txns);
    header(&mut out, "steward_store_batches_total", "counter", "Batches committed (group commit folds many into one).");
    let _ = writeln!(out, "steward_store_batches_total {}", store.batches);
    rollout_metrics(&mut out, &app.supervisor.rollouts());
    // Resource use, from each running instance's cgroup.
    let usage: Vec<_> = list
        .iter()
        .filter(|s| s.state.has_processes())
        .filter_map(|s| app.supervisor.status(&s.id).ok().and_then(|st| st.usage.map(|u| (s.id.to_string(), u))))
        .collect();
    header(&mut out, "steward_instance_cpu_seconds_total", "counter", "CPU time used by each instance's cgroup.");
    for (id, u) in &usage {
        let _ =
            writeln!(out, "steward_instance_cpu_seconds_total{{instance=\"{id}\"}} {}", u.cpu_usage_usec as f64 / 1e6);
    }
    header(&mut out, "steward_instance_memory_bytes", "gauge", "Memory used by each instance's cgroup.");
    for (id, u) in &usage {
        let _ = writeln!(out, "steward_instance_memory_bytes{{instance=\"{id}\"}} {}", u.memory_bytes);
    }
    Ok(([("content-type", "text/plain; version=0.0.4")], out).into_response())
}

/// Each app's rollout here: its phase, target revision, progress and steps taken.
fn rollout_metrics(out: &mut String, rollouts: &[crate::protocol::RolloutBody]) {
    const PHASES: [&str; 4] = ["progressing", "paused", "complete", "failed"];
    let with = |r: &crate::protocol::RolloutBody| r.rollout.clone().map(|x| (r.app.clone(), x, r.progress.clone()));
    let rollouts: Vec<_> = rollouts.iter().filter_map(with).collect();
    header(out, "steward_rollout_phase", "gauge", "1 for the phase each app's rollout is in, else 0.");
    for (app, r, _) in &rollouts {
        for phase in PHASES {
            let _ = writeln!(
                out,
                "steward_rollout_phase{{app=\"{app}\",phase=\"{phase}\"}} {}",
                u8::from(r.phase.name() == phase)
            );
        }
    }
    header(out, "steward_rollout_target_revision", "gauge", "The revision each app's rollout moves to.");
    for (app, r, _) in &rollouts {
        let _ = writeln!(out, "steward_rollout_target_revision{{app=\"{app}\"}} {}", r.target);
    }
    header(out, "steward_rollout_updated_instances", "gauge", "Instances on the rollout's revision.");
    for (app, _, p) in &rollouts {
        let _ = writeln!(out, "steward_rollout_updated_instances{{app=\"{app}\"}} {}", p.updated);
    }
    header(out, "steward_rollout_ready_instances", "gauge", "Instances running the rollout's revision, ready.");
    for (app, _, p) in &rollouts {
        let _ = writeln!(out, "steward_rollout_ready_instances{{app=\"{app}\"}} {}", p.ready);
    }
    header(out, "steward_rollout_steps_total", "counter", "Steps the app's current rollout has taken.");
    for (app, r, _) in &rollouts {
        let _ = writeln!(out, "steward_rollout_steps_total{{app=\"{app}\"}} {}", r.steps);
    }
}
