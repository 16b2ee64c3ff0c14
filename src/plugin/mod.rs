//! steward-sched, the scheduler side: reads every node from its daemon's remote API, places
//! instances by seed 000's constraints, applies them, follows every daemon's events, notices
//! lost nodes and reschedules by restart policy, and runs the REMOTE_HTTP / REMOTE_TCP checks.
//! It keeps only the desired state (apps, specs, placements); the daemons stay the source of
//! truth for what runs.

pub mod affinity;
pub mod checks;
pub mod cluster;
pub mod etcd;
pub mod notify;
pub mod placement;
#[cfg(test)]
mod placement_bench;
pub mod sched;
pub mod store;

pub use cluster::Cluster;
pub use sched::Scheduler;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cluster file {path}: {message}")]
    Cluster { path: PathBuf, message: String },
    #[error("{path}: {errors}")]
    Spec { path: PathBuf, errors: crate::spec::SpecErrors },
    #[error("{0}")]
    Placement(#[from] placement::PlacementError),
    #[error("applying {app}: {message}")]
    Apply { app: String, message: String },
    #[error("node {node}: {message}")]
    Node { node: String, message: String },
    /// `hint`: what the operator may have meant (a namespace left out), or how to create it.
    #[error("no app {app} ({hint})")]
    NoApp { app: String, hint: String },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("desired-state store: {0}")]
    Store(String),
    /// Maintenance mode is on: nothing may change what runs.
    #[error("maintenance mode is on (since {since_ms} ms{}): nothing changes what runs until `steward-sched maintenance off`", if reason.is_empty() { String::new() } else { format!(": {reason}") })]
    Maintenance { since_ms: u64, reason: String },
    /// A scheduler setting the operator gave is unknown or out of range.
    #[error("config: {0}")]
    Config(String),
    /// The app changed in the store since it was read (another scheduler wrote it).
    #[error("{app} was changed by another steward-sched meanwhile; nothing was written (try again)")]
    Conflict { app: String },
}
