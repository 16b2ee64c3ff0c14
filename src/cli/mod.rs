//! Command-line interfaces of the three binaries. The clap definitions live here (not in
//! `src/bin`) so that man pages and completions can be generated from them.

pub mod act;
mod apply;
pub mod commands;
pub mod cp;
pub mod daemon;
mod delete;
pub mod endpoint;
pub mod events;
mod hook;
mod job;
pub mod logs;
pub mod man;
mod rollout;
pub mod safe_text;
pub mod sched;
mod services;
mod show;
pub mod steward;
mod values;
