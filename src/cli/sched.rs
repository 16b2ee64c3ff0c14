//! `steward-sched`: the thin, stateless scheduler plugin that talks to every host's stewardd.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "steward-sched",
    version,
    about = "Steward scheduler plugin: places instances across hosts by seed-000 constraints"
)]
pub struct SchedArgs {
    /// Cluster file: every daemon's address, token and CA.
    #[arg(long, value_name = "FILE", default_value = "/etc/steward/cluster.toml")]
    pub cluster: PathBuf,
    #[command(subcommand)]
    pub command: SchedCommand,
}

#[derive(Debug, Subcommand)]
pub enum SchedCommand {
    /// Place and apply an application on the cluster's nodes.
    Deploy {
        /// Process spec (JSON or TOML).
        file: PathBuf,
    },
    /// Show every application's instances across the cluster.
    Status,
    /// Stream every daemon's events, merged, resuming after disconnects.
    Watch,
    /// Change an application's instance count.
    Scale {
        /// namespace/name
        app: String,
        instances: u32,
    },
    /// Remove an application from every node.
    Delete {
        /// namespace/name
        app: String,
    },
}
