//! Steward: a per-host supervisor for BCS process instances and Docker pods.
//! The binaries in `src/bin` are thin; everything lives in these modules.

pub mod api;
pub mod cgroups;
pub mod cli;
pub mod client;
pub mod clock;
pub mod cni;
pub mod config;
pub mod console;
pub mod cron;
pub mod daemon;
pub mod ephemeral_ports;
pub mod failpoint;
pub mod fetch;
pub mod fuzz;
pub mod health;
pub mod hooks;
pub mod host;
pub mod logs;
pub mod ports;
pub mod protocol;
pub mod resources;
pub mod rollout;
pub mod runtime;
pub mod safefs;
pub mod sched;
pub mod services;
pub mod spec;
pub mod store;
pub mod supervisor;
pub mod tls;
pub mod wording;
