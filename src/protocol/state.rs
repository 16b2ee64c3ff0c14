//! An instance's state as statuses and events carry it.

pub use crate::runtime::exit::ExitStatus;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a stop is for, so that `Stopping` knows where to go when everything is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum StopGoal {
    /// An operator's stop: end in `Stopped`, never a failure.
    Stop,
    /// An operator's restart (no restartCmd): stop, then start again.
    Restart,
    /// Delete the instance once stopped.
    Delete,
    /// The instance failed (health check, start failure): stop, then apply the restart policy.
    Fail { reason: String },
    /// Its host heard no scheduler for its app's `disconnect.stopAfterSecs`: end in `Stopped`
    /// (started again once a scheduler names the app to the host again).
    Fence,
}

/// In JSON: `{"state": "Backoff", "untilMs": ...}` — the same names as [`Kind`] and events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all_fields = "camelCase")]
pub enum State {
    /// Preparing directories, fetching packages.
    Staging,
    /// startCmd launched; waiting for the main process (startGracePeriod).
    Starting,
    Running,
    Stopping {
        goal: StopGoal,
    },
    /// Stopped by an operator (or applied with nothing started yet).
    Stopped,
    /// Ended and, by policy, not restarted.
    Exited {
        status: ExitStatus,
    },
    Failed {
        reason: String,
    },
    /// Waiting to restart.
    Backoff {
        until_ms: u64,
    },
    /// A pod whose runtime (dockerd) does not answer: its containers may still run. Back to
    /// Running when dockerd answers and they do.
    Lost {
        reason: String,
    },
}

/// The states without their data: the transition table's alphabet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    Staging,
    Starting,
    Running,
    Stopping,
    Stopped,
    Exited,
    Failed,
    Backoff,
    Lost,
}

impl State {
    pub fn kind(&self) -> Kind {
        match self {
            State::Staging => Kind::Staging,
            State::Starting => Kind::Starting,
            State::Running => Kind::Running,
            State::Stopping { .. } => Kind::Stopping,
            State::Stopped => Kind::Stopped,
            State::Exited { .. } => Kind::Exited,
            State::Failed { .. } => Kind::Failed,
            State::Backoff { .. } => Kind::Backoff,
            State::Lost { .. } => Kind::Lost,
        }
    }

    /// Whether processes of the instance may exist in this state.
    pub fn has_processes(&self) -> bool {
        matches!(self.kind(), Kind::Starting | Kind::Running | Kind::Stopping | Kind::Lost)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
