//! steward-sched, the scheduler side: reads every node from its daemon's remote API, places
//! instances by seed 000's constraints, applies them, follows every daemon's events, notices
//! lost nodes and reschedules by restart policy, and runs the REMOTE_HTTP / REMOTE_TCP checks.
//! It keeps only the desired state (apps, specs, placements); the daemons stay the source of
//! truth for what runs.

pub mod affinity;
pub mod api;
pub mod client;
pub mod cluster;
pub mod etcd;
pub mod notify;
pub mod ops;
pub mod placement;
#[cfg(test)]
mod placement_bench;
pub mod scheduler;
pub mod store;
pub mod unreported_keys;

pub use cluster::Cluster;
pub use scheduler::Scheduler;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    #[error("cluster file {path}: {message}")]
    Cluster { path: PathBuf, message: String },
    #[error("{path}: {errors}")]
    Spec { path: PathBuf, errors: crate::spec::SpecErrors },
    /// Several documents' mistakes, each its own error.
    #[error("{}", several(.0))]
    Several(Vec<SchedError>),
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
    #[error("maintenance mode is on (since {}{}): nothing changes what runs until `steward-sched maintenance off`", since(*since_ms), if reason.is_empty() { String::new() } else { format!(": {reason}") })]
    Maintenance { since_ms: u64, reason: String },
    /// A scheduler setting the operator gave is unknown or out of range.
    #[error("config: {0}")]
    Config(String),
    /// A request that cannot be carried out as asked (seed 002's BadRequest).
    #[error("{0}")]
    Invalid(String),
    /// A node the request names is not in the cluster file.
    #[error("node {node}: not in the cluster file")]
    NoNode { node: String },
    /// A thing asked for (a constraint, a notification URL) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// An app or dependency asked to be created exists already (seed 002's NotAllowed).
    #[error("{what} exists already (deploy it to update it)")]
    Exists { what: String },
    /// What a steward-sched server answered (`--server`): its message, and its code.
    #[error("{message}")]
    Server { status: u16, code: String, message: String },
    /// The app changed in the store since it was read (another scheduler wrote it).
    #[error("{app} was changed by another steward-sched meanwhile; nothing was written (try again)")]
    Conflict { app: String },
}

/// One error per line.
fn several(errors: &[SchedError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

/// `2026-11-25T18:02:11Z, 2h 5m ago`.
fn since(ms: u64) -> String {
    let utc = crate::clock::rfc3339_utc(ms);
    let ago = crate::clock::span(crate::clock::now_ms().saturating_sub(ms));
    format!("{}Z, {ago} ago", utc.get(..19).unwrap_or(&utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43, item 10: the maintenance refusal says since when for people (UTC) and how long
    /// ago, not epoch milliseconds.
    #[test]
    fn the_maintenance_refusal_says_when_for_people() {
        let since_ms = crate::clock::now_ms() - (2 * 3600 + 5 * 60) * 1000;
        let e = SchedError::Maintenance { since_ms, reason: "moving racks".into() }.to_string();
        let utc = crate::clock::rfc3339_utc(since_ms);
        assert!(e.contains(&utc[..19]) && e.contains("2h 5m ago"), "{e}");
        assert!(!e.contains(&since_ms.to_string()) && e.contains(": moving racks"), "{e}");
    }
}
