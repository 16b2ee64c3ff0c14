//! Command-line interfaces of the three binaries. The clap definitions live here (not in
//! `src/bin`) so that man pages and completions can be generated from them.

pub mod act;
pub mod commands;
pub mod daemon;
pub mod events;
pub mod logs;
pub mod man;
pub mod sched;
pub mod steward;
