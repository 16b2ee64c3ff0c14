//! How an instance runs: process spawning, the single reaper, pidfds, /proc identity.
//! (Docker pods get their own runtime in a later issue.)

pub mod command;
pub mod process;
pub mod procinfo;
pub mod reaper;
pub mod spawn;
