//! How an instance runs: process spawning, the single reaper, pidfds, /proc identity; pods of
//! containers on the Docker Engine.

pub mod command;
pub mod dirwatch;
pub mod docker;
pub mod exit;
pub mod process;
pub mod procinfo;
pub mod program;
pub mod reaper;
pub mod spawn;
pub mod volumes;
