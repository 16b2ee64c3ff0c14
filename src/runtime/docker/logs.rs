//! A container's output into the instance's log files: followed while it runs (resuming
//! exactly where a previous follower stopped, through a small position file), or saved whole
//! for a container removed before anything followed it.

use super::{q, Docker};
use futures_util::StreamExt;
use std::path::{Path, PathBuf};

impl Docker {
    /// Appends everything container `id` has written to the log files of `name` in `dir` (with
    /// Docker's timestamps), as the follower would have: for a container about to be removed
    /// before anything followed it.
    pub(super) async fn save_output(&self, id: &str, dir: &Path, name: &str) {
        use tokio::io::AsyncWriteExt;
        let Ok(client) = self.client() else { return };
        let options =
            q::LogsOptions { stdout: true, stderr: true, timestamps: true, tail: "all".into(), ..Default::default() };
        let mut stream = client.logs(id, Some(options));
        // In the run directory, as root: never through a symlink or hard link (see safefs).
        let open = |stream: &str| {
            let path = dir.join(format!("{name}.{stream}.log"));
            async move {
                let f = tokio::task::spawn_blocking(move || crate::safefs::open_log(&path)).await??;
                Ok::<_, std::io::Error>(tokio::fs::File::from_std(f))
            }
        };
        let (Ok(mut out), Ok(mut err)) = (open("stdout").await, open("stderr").await) else { return };
        while let Some(Ok(chunk)) = stream.next().await {
            let _ = match chunk {
                bollard::container::LogOutput::StdErr { message } => err.write_all(&message).await,
                other => out.write_all(other.as_ref()).await,
            };
        }
        let _ = out.flush().await;
        let _ = err.flush().await;
    }

    /// Appends the container's output to `<dir>/<name>.stdout.log` and `.stderr.log` (where
    /// `steward logs` and log rotation find every instance's output) until it stops, resuming
    /// where an earlier follower of the same container left off (see [`LogPosition`]): a
    /// daemon restart neither replays nor loses a line.
    pub fn follow_logs(&self, id: &str, dir: &Path, name: &str) -> tokio::task::JoinHandle<()> {
        let (client, id) = (self.client(), id.to_string());
        let (out, err) = (dir.join(format!("{name}.stdout.log")), dir.join(format!("{name}.stderr.log")));
        let position_file = dir.join(format!(".{name}.logpos"));
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // In the run directory, as root: never through a symlink or hard link (see safefs).
            let open = |p: PathBuf| async move {
                let f = tokio::task::spawn_blocking(move || crate::safefs::open_log(&p)).await??;
                Ok::<_, std::io::Error>(tokio::fs::File::from_std(f))
            };
            let Ok(client) = client else { return };
            let (Ok(mut out_file), Ok(mut err_file)) = (open(out.clone()).await, open(err.clone()).await) else {
                return;
            };
            let mut position = LogPosition::resume(&position_file, &id, &out, &err);
            if position.last.is_empty() {
                // A new container: its run begins here in both files.
                let now = crate::clock::now_ms();
                let marker = format!("{} {}", crate::clock::rfc3339_utc(now), crate::logs::run_marker(now));
                let _ = out_file.write_all(marker.as_bytes()).await;
                let _ = err_file.write_all(marker.as_bytes()).await;
                let _ = out_file.flush().await;
                let _ = err_file.flush().await;
            }
            let options = q::LogsOptions {
                follow: true,
                stdout: true,
                stderr: true,
                timestamps: true,
                tail: "all".into(),
                ..Default::default()
            };
            let mut stream = client.logs(&id, Some(options));
            while let Some(Ok(chunk)) = stream.next().await {
                let is_err = matches!(chunk, bollard::container::LogOutput::StdErr { .. });
                let Some((stamp, _)) = split_timestamp(chunk.as_ref()) else { continue };
                if !position.is_new(&stamp) {
                    continue;
                }
                let (file, path) = if is_err { (&mut err_file, &err) } else { (&mut out_file, &out) };
                // The position first, naming the file's length before this line: a crash
                // between the two writes is told apart at resume by that length.
                position.advance(&position_file, stamp, is_err, path);
                // With Docker's timestamp in front: `steward logs --timestamps` shows it. Flushed
                // before the next line's position is taken: a tokio file's write completes in the
                // background, and the next `advance` must read the length with this line in it
                // (else a kill -9 right after made the next resume skip a line never written).
                let _ = file.write_all(chunk.as_ref()).await;
                let _ = file.flush().await;
            }
        })
    }
}

/// Where following a container's output stopped: the Docker timestamp of the last line taken,
/// and the length its log file had before that line was written. Kept in a small file beside
/// the logs and written before each line. At resume, a log file longer than that length holds
/// the line (or was rotated since: taken as holding it); one of exactly that length lost the
/// line to a crash between the two writes, so it is taken again.
#[derive(Debug, Default)]
struct LogPosition {
    container: String,
    /// Sortable form of the last line's timestamp (see [`sortable_stamp`]); lines at or before
    /// it are skipped.
    last: String,
}

impl LogPosition {
    fn resume(file: &Path, container: &str, out: &Path, err: &Path) -> LogPosition {
        let fresh = LogPosition { container: container.to_string(), last: String::new() };
        let Ok(data) = crate::safefs::read_daemon_file(file, 4096) else { return fresh };
        let text = String::from_utf8_lossy(&data);
        // "<container> <stamp> <previous stamp> <out|err> <length before>"
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [id, stamp, previous, stream, length] = parts.as_slice() else { return fresh };
        if *id != container {
            return fresh; // another run's container: its output starts afresh
        }
        let path = if *stream == "err" { err } else { out };
        let now = crate::safefs::daemon_file_len(path);
        let written = !length.parse::<u64>().is_ok_and(|before| now == before);
        let last = if written { stamp } else { previous };
        LogPosition { container: container.to_string(), last: last.trim_start_matches('-').to_string() }
    }

    fn is_new(&self, stamp: &str) -> bool {
        stamp > self.last.as_str()
    }

    /// Records `stamp` as taken, about to be appended to `path`.
    fn advance(&mut self, file: &Path, stamp: String, is_err: bool, path: &Path) {
        let before = crate::safefs::daemon_file_len(path);
        let previous = if self.last.is_empty() { "-".to_string() } else { self.last.clone() };
        let stream = if is_err { "err" } else { "out" };
        let text = format!("{} {stamp} {previous} {stream} {before}\n", self.container);
        if let Err(e) = write_small(file, text.as_bytes()) {
            tracing::warn!("cannot record the log position in {}: {e}", file.display());
        }
        self.last = stamp;
    }
}

/// Overwrites a small file in place (one write; a reader sees old or new bytes, and the
/// content is padded to a fixed width so a shorter record never leaves a longer one's tail).
fn write_small(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut padded = data.to_vec();
    padded.resize(data.len().max(256), b' ');
    // In the run directory, as root: never through a symlink or hard link (see safefs).
    crate::safefs::write_daemon_file(path, &padded, 0o600)
}

/// Splits Docker's `2026-11-24T22:50:01.12345Z message` (logs with timestamps) into a sortable
/// stamp and the message.
fn split_timestamp(chunk: &[u8]) -> Option<(String, &[u8])> {
    let space = chunk.iter().position(|b| *b == b' ')?;
    let stamp = std::str::from_utf8(&chunk[..space]).ok()?;
    Some((sortable_stamp(stamp)?, &chunk[space + 1..]))
}

/// Docker prints RFC 3339 with nanoseconds, trailing zeros trimmed (`…:01.5Z`): padded to nine
/// digits, the stamps sort as text in time order.
fn sortable_stamp(stamp: &str) -> Option<String> {
    let body = stamp.strip_suffix('Z')?;
    let (seconds, fraction) = body.split_once('.').unwrap_or((body, ""));
    if seconds.len() != 19 || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(format!("{seconds}.{fraction:0<9}"))
}

#[cfg(test)]
mod log_position_tests {
    use super::*;

    #[test]
    fn docker_stamps_sort_as_text_once_padded() {
        let a = sortable_stamp("2026-11-24T22:50:01.5Z").unwrap();
        let b = sortable_stamp("2026-11-24T22:50:01.123456789Z").unwrap();
        let c = sortable_stamp("2026-11-24T22:50:02Z").unwrap();
        assert_eq!(a, "2026-11-24T22:50:01.500000000");
        assert!(b < a && a < c, "{b} {a} {c}");
        assert!(sortable_stamp("yesterday").is_none());
        let (stamp, message) = split_timestamp(b"2026-11-24T22:50:01.5Z hello world\n").unwrap();
        assert_eq!((stamp.as_str(), message), ("2026-11-24T22:50:01.500000000", &b"hello world\n"[..]));
    }

    #[test]
    fn resume_takes_a_line_again_only_if_the_crash_came_before_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let (pos, out, err) =
            (dir.path().join(".c.logpos"), dir.path().join("c.stdout.log"), dir.path().join("c.stderr.log"));
        std::fs::write(&out, "line-1\n").unwrap();
        let mut p = LogPosition::resume(&pos, "abc", &out, &err);
        assert!(p.is_new("2026-01-01T00:00:00.000000001"), "nothing recorded: everything is new");
        p.advance(&pos, "2026-01-01T00:00:01.000000000".into(), false, &out);
        // Crash before the line was appended: the file has the recorded length; taken again.
        let again = LogPosition::resume(&pos, "abc", &out, &err);
        assert!(again.is_new("2026-01-01T00:00:01.000000000"));
        // Appended: skipped at resume.
        std::fs::write(&out, "line-1\nline-2\n").unwrap();
        let after = LogPosition::resume(&pos, "abc", &out, &err);
        assert!(!after.is_new("2026-01-01T00:00:01.000000000"));
        assert!(after.is_new("2026-01-01T00:00:01.000000001"));
        // Another container (a new run): from its start.
        let other = LogPosition::resume(&pos, "def", &out, &err);
        assert!(other.is_new("2000-01-01T00:00:00.000000000"));
    }
}
