//! How a process ended, as the reaper (or Docker) reports it: the state machine, the status and
//! the events all carry this one type.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a main process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// The process was not this daemon's child (re-adopted after a daemon restart), so the
    /// kernel gave its status to another parent.
    Unknown,
    /// A pod's container was removed (`docker rm`, while stewardd watched or was down), and
    /// its exit status with it.
    Removed,
}

impl ExitStatus {
    /// Success for the restart policy: only a clean `exit 0`.
    pub fn is_success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exited with code {c}"),
            ExitStatus::Signal(s) => {
                let name = nix::sys::signal::Signal::try_from(*s).map(|s| s.as_str()).unwrap_or("?");
                write!(f, "killed by signal {s} ({name})")
            }
            ExitStatus::Unknown => f.write_str("exited (status unknown: not a child of this daemon)"),
            ExitStatus::Removed => f.write_str("was removed (its exit status went with it)"),
        }
    }
}
