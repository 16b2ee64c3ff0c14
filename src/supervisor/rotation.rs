//! Size-based rotation of every instance's log files, on a timer (see `LogRotation`).

use super::LogRotation;
use std::path::PathBuf;

/// Rotates every instance's logs (`<run_base_dir>/<instance>/*.log`) that outgrew the limit.
/// A size check every few seconds: the files are written by the workloads directly, so there
/// is no write the daemon could hook.
pub(super) async fn rotate_logs(run_base_dir: PathBuf, rotation: LogRotation) {
    loop {
        tokio::time::sleep(rotation.every).await;
        let dir = run_base_dir.clone();
        let result = tokio::task::spawn_blocking(move || rotate_all(&dir, rotation)).await;
        if let Err(e) = result {
            tracing::warn!("log rotation task: {e}");
        }
    }
}

/// One round of [`rotate_logs`]. Only run directories root owns are entered (a directory below
/// the run root that a workload owns, e.g. its workPath, holds nothing of the daemon's), and
/// every step goes through directory descriptors (see [`crate::runtime::process::rotate_log_at`]).
pub fn rotate_all(run_base_dir: &std::path::Path, rotation: LogRotation) {
    use crate::fetch::sys;
    use std::os::fd::AsFd;
    let base = match std::fs::File::open(run_base_dir) {
        Ok(f) => std::os::fd::OwnedFd::from(f),
        Err(e) => return tracing::warn!("log rotation: {}: {e}", run_base_dir.display()),
    };
    for instance in sys::list(base.as_fd()).unwrap_or_default() {
        let dir_path = run_base_dir.join(sys::os_str(&instance));
        let dir = match crate::safefs::open_daemon_dir_at(base.as_fd(), &instance, &dir_path) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("log rotation skips {e}");
                continue;
            }
        };
        for file in sys::list(dir.as_fd()).unwrap_or_default() {
            let name = sys::os_str(&file);
            if std::path::Path::new(name).extension().is_some_and(|e| e == "log") {
                let rotated = crate::runtime::process::rotate_log_at(
                    dir.as_fd(),
                    &dir_path,
                    name,
                    rotation.max_bytes,
                    rotation.keep,
                );
                if let Err(e) = rotated {
                    tracing::warn!("log rotation: {e}");
                }
            }
        }
    }
}
