//! The cgroup layer's errors: every variant names the operation and the file or directory, so a
//! log line is enough to see what failed where.

use std::path::PathBuf;

/// Everything that can go wrong in the cgroup layer.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// An instance key or the configured parent would not be one plain directory name below the
    /// parent (a '/' or ".." could escape it and touch someone else's cgroup).
    #[error("cannot {op} {path}: invalid cgroup name {name:?}: {reason}")]
    InvalidName { op: &'static str, path: PathBuf, name: String, reason: &'static str },

    /// A system call on a cgroupfs file or directory failed.
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A kernel file held something we could not parse.
    #[error("cannot {op} {path}: unexpected content {content:?}")]
    Parse { op: &'static str, path: PathBuf, content: String },

    /// A limit was asked for but its controller is not mounted (v1) or not enabled (v2).
    #[error("cannot {op} {path}: the {controller} controller is not available")]
    Unavailable { op: &'static str, path: PathBuf, controller: &'static str },

    /// A limit that no kernel file can express (negative, zero, NaN, infinite).
    #[error("cannot {op} {path}: invalid {what} limit {value}")]
    InvalidLimit { op: &'static str, path: PathBuf, what: &'static str, value: f64 },

    /// Neither a cgroup2 mount at the root nor any v1 controller we use was found.
    #[error("cannot {op} {path}: {reason}")]
    NoHierarchy { op: &'static str, path: PathBuf, reason: String },

    /// Sending a signal failed for a reason other than "already gone".
    #[error("cannot {op} {pid} in {path}: {source}")]
    Signal {
        op: &'static str,
        path: PathBuf,
        pid: i32,
        #[source]
        source: nix::Error,
    },

    /// kill_all gave up: these processes were still in the cgroup at its deadline.
    #[error("cannot {op} {path}: {} processes still present after {rounds} rounds: {pids:?}", pids.len())]
    Survivors { op: &'static str, path: PathBuf, rounds: u32, pids: Vec<i32> },
}

impl CgroupError {
    /// A closure for `map_err` on io results, so call sites stay one line.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CgroupError {
        let path = path.into();
        move |source| CgroupError::Io { op, path, source }
    }

    /// True when the error is "no such file or directory", i.e. the cgroup or the file is absent.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CgroupError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}
