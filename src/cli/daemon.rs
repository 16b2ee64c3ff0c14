//! `stewardd`: the per-host supervisor daemon.

use clap::Parser;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "stewardd",
    version,
    about = "Steward daemon: supervises BCS process instances and Docker pods on this host",
    long_about = "Steward daemon: keeps this host's instances alive. It fetches packages, allocates ports, \
starts each instance as its user in its own cgroup, watches, health-checks and restarts it by policy, \
and reports every change on its API. Stopping the daemon never stops the instances."
)]
pub struct DaemonArgs {
    /// Configuration file (TOML); without it the embedded defaults apply.
    #[arg(long, value_name = "FILE", env = "STEWARD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory for the durable state store (overrides the config).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Unix socket for the local API (overrides the config).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}
