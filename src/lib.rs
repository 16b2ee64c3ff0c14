//! Steward: a per-host supervisor for BCS process instances and Docker pods.
//! The binaries in `src/bin` are thin; everything lives in these modules.

pub mod cli;
pub mod config;
pub mod host;
pub mod spec;
