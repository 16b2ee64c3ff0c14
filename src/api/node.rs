//! GET /v1/node and /v1/health: what this host offers a scheduler (capacity, ports, apps,
//! journal bounds) and whether the daemon answers. Read-only, apart from any instance.

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use crate::protocol::{
    AppOnNode, HealthBody, InstanceOnNode, JournalBounds, NodeDocument, PortsDocument, ResourcesDocument,
};
use crate::supervisor::ListFilter;
use axum::extract::State;
use axum::Json;
use std::sync::Arc;

/// GET /v1/node: what a scheduler needs to place instances on this host.
pub(super) async fn node(State(app): State<Arc<AppState>>, caller: Caller) -> Result<Json<NodeDocument>, ApiError> {
    let live = app.live();
    live.access.require_read(&caller)?;
    let usage = match app.supervisor.is_hollow() {
        true => hollow_sample(&app),
        false => app.usage.sample(),
    };
    let instances = app.supervisor.list(&ListFilter::default());
    // Every app with instances here, with its labels (EXCLUDE places by them).
    let apps = app
        .supervisor
        .specs()
        .iter()
        .map(|spec| {
            let meta = &spec.metadata;
            let mine = instances
                .iter()
                .filter(|i| i.id.namespace == meta.namespace && i.id.name == meta.name)
                .map(|i| InstanceOnNode { index: i.id.index, state: i.state.kind(), ready: i.ready, kept: i.kept })
                .collect();
            AppOnNode {
                namespace: meta.namespace.clone(),
                name: meta.name.clone(),
                labels: spec.instance_labels(),
                instances: mine,
                hash: crate::supervisor::revisions::template_hash(spec),
            }
        })
        .collect();
    let mut ports = PortsDocument::new(app.supervisor.port_range(), app.supervisor.free_ports(), live.port_range);
    match crate::ephemeral_ports::Ephemeral::read() {
        Ok(ephemeral) => ports = ports.with_ephemeral(&ephemeral),
        Err(e) => tracing::debug!("the kernel's ephemeral port range: {e}"),
    }
    let store = app.supervisor.store();
    Ok(Json(NodeDocument {
        hostname: live.node.hostname(),
        host_ip: live.host_ip,
        cpus: usage.cpus,
        cpu_usage_percent: f64::from(usage.cpu_usage_percent),
        load_average: crate::host::load_average(),
        memory_total_bytes: usage.memory_total_bytes,
        memory_available_bytes: usage.memory_available_bytes,
        memory_used_bytes: usage.memory_used_bytes,
        os: crate::host::os().to_string(),
        arch: crate::host::arch().to_string(),
        zone: live.node.zone,
        region: live.node.region,
        instance_type: live.node.instance_type,
        labels: live.node.labels,
        attributes: live.node.attributes,
        ports,
        resources: ResourcesDocument::new(app.supervisor.host_resources(), app.supervisor.allocated()),
        instances: instances.len(),
        apps,
        events: JournalBounds {
            first_seq: store.first_seq(),
            last_seq: store.last_seq(),
            retention: live.events.retention,
            max_bytes: live.events.max_bytes,
            bytes: store.journal_bytes(),
            journal_id: store.journal_id(),
        },
        version: env!("CARGO_PKG_VERSION").to_string(),
        desired_mark: app.supervisor.desired_mark(),
        kept_volumes: app.supervisor.kept_ordinals(),
        pod_dns: app.supervisor.pod_dns().map(|a| a.to_string()),
    }))
}

/// A hollow host's cpus and memory as configured, its use what its instances simulate.
fn hollow_sample(app: &AppState) -> crate::host::UsageSample {
    let capacity = app.supervisor.host_resources().capacity;
    let (busy_milli_cpu, memory_used_bytes) = app.supervisor.hollow_load();
    let memory_used_bytes = memory_used_bytes.min(capacity.memory_bytes);
    crate::host::UsageSample {
        cpus: capacity.milli_cpu.div_ceil(1000).max(1) as usize,
        cpu_usage_percent: (busy_milli_cpu as f64 * 100.0 / capacity.milli_cpu.max(1) as f64).min(100.0) as f32,
        memory_total_bytes: capacity.memory_bytes,
        memory_available_bytes: capacity.memory_bytes - memory_used_bytes,
        memory_used_bytes,
    }
}

/// What the caller may do here (the web console on the remote listener shows its buttons by it).
pub(super) async fn whoami(
    State(app): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Json<crate::protocol::Whoami>, ApiError> {
    let live = app.live();
    live.access.require_read(&caller)?;
    let role = if live.access.require_write(&caller).is_ok() { "write" } else { "read" };
    Ok(Json(crate::protocol::Whoami { role: role.into(), server: "stewardd".into() }))
}

pub(super) async fn health() -> Json<HealthBody> {
    Json(HealthBody::ok())
}
