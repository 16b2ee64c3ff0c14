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
    /// `steward logs` and log rotation find every instance's output) until it stops, each
    /// stream resuming where an earlier follower of the same container left it (see
    /// [`StreamPosition`]): a daemon restart neither replays nor loses a line.
    pub fn follow_logs(&self, id: &str, dir: &Path, name: &str) -> tokio::task::JoinHandle<()> {
        let (client, id) = (self.client(), id.to_string());
        let (out, err) = (dir.join(format!("{name}.stdout.log")), dir.join(format!("{name}.stderr.log")));
        let positions = (dir.join(format!(".{name}.stdout.logpos")), dir.join(format!(".{name}.stderr.logpos")));
        let legacy = dir.join(format!(".{name}.logpos"));
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
            let mut out_at = StreamPosition::resume(positions.0, &legacy, &id, out, Stream::Out);
            let mut err_at = StreamPosition::resume(positions.1, &legacy, &id, err, Stream::Err);
            if out_at.last.is_empty() && err_at.last.is_empty() {
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
                // Each stream by its own position: Docker stamps a stream's lines in order, but
                // hands the two streams over interleaved out of stamp order.
                let (at, file) = if is_err { (&mut err_at, &mut err_file) } else { (&mut out_at, &mut out_file) };
                if !at.is_new(&stamp) {
                    continue;
                }
                // The position first, naming the file's length before this line: a crash
                // between the two writes is told apart at resume by that length.
                at.advance(stamp);
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

/// A container's output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Out,
    Err,
}

/// Where following one stream of a container's output stopped: the Docker timestamp of the
/// last line taken, and the length the stream's log file had before that line was written. Kept in a small file beside the logs
/// (one per stream) and written before each line. At resume, a log file longer than that length
/// holds the line (or was rotated since: taken as holding it); one of exactly that length lost
/// the line to a crash between the two writes, so it is taken again.
#[derive(Debug)]
struct StreamPosition {
    /// The position file.
    file: PathBuf,
    /// The stream's log file.
    log: PathBuf,
    container: String,
    /// Sortable form of the last line's timestamp (see [`sortable_stamp`]); lines at or before
    /// it are skipped. (Docker stamps a stream's lines in nanoseconds, in order: a line of the
    /// same stamp is that line again, as Docker repeats one where a follow's history ends.)
    last: String,
}

impl StreamPosition {
    /// The position in `file`; where there is none yet, what an earlier stewardd kept for both
    /// streams in `legacy` (one stamp: lines of the other stream at or before it are skipped,
    /// as they were).
    fn resume(file: PathBuf, legacy: &Path, container: &str, log: PathBuf, stream: Stream) -> StreamPosition {
        let read = |path: &Path| crate::safefs::read_daemon_file(path, 4096).ok();
        let (data, old) = match read(&file) {
            Some(data) => (Some(data), false),
            None => (read(legacy), true),
        };
        let mut at = StreamPosition { file, log, container: container.to_string(), last: String::new() };
        let Some(data) = data else { return at };
        let text = String::from_utf8_lossy(&data);
        let parts: Vec<&str> = text.split_whitespace().collect();
        // "<container> <stamp> <previous stamp> <length before>", or the legacy "<container>
        // <stamp> <previous stamp> <out|err> <length before>".
        let (id, stamp, previous, length) = match (old, parts.as_slice()) {
            (false, [id, stamp, previous, length]) => (*id, *stamp, *previous, Some(*length)),
            (true, [id, stamp, previous, written_to, length]) => {
                let ours = (*written_to == "err") == (stream == Stream::Err);
                (*id, *stamp, *previous, ours.then_some(*length))
            }
            _ => return at,
        };
        if id != container {
            return at; // another run's container: its output starts afresh
        }
        let now = crate::safefs::daemon_file_len(&at.log);
        let lost = length.is_some_and(|l| l.parse::<u64>().is_ok_and(|before| now == before));
        at.last = if lost { previous } else { stamp }.trim_start_matches('-').to_string();
        at
    }

    /// Whether a line stamped `stamp` is yet to be taken.
    fn is_new(&self, stamp: &str) -> bool {
        stamp > self.last.as_str()
    }

    /// Records a line stamped `stamp` as taken, about to be appended to the log file.
    fn advance(&mut self, stamp: String) {
        let before = crate::safefs::daemon_file_len(&self.log);
        let previous = if self.last.is_empty() { "-".to_string() } else { self.last.clone() };
        self.last = stamp;
        let text = format!("{} {} {previous} {before}\n", self.container, self.last);
        if let Err(e) = write_small(&self.file, text.as_bytes()) {
            tracing::warn!("cannot record the log position in {}: {e}", self.file.display());
        }
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

    /// The stream's position file, its log file, and the legacy position file, in `dir`.
    fn files(dir: &Path, stream: &str) -> (PathBuf, PathBuf, PathBuf) {
        (dir.join(format!(".c.{stream}.logpos")), dir.join(format!("c.{stream}.log")), dir.join(".c.logpos"))
    }

    fn resume(dir: &Path, container: &str, stream: Stream) -> StreamPosition {
        let name = if stream == Stream::Err { "stderr" } else { "stdout" };
        let (pos, log, legacy) = files(dir, name);
        StreamPosition::resume(pos, &legacy, container, log, stream)
    }

    const T1: &str = "2026-01-01T00:00:01.000000000";
    const T2: &str = "2026-01-01T00:00:02.000000000";

    #[test]
    fn resume_takes_a_line_again_only_if_the_crash_came_before_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let (_, out, _) = files(dir.path(), "stdout");
        std::fs::write(&out, "line-1\n").unwrap();
        let mut p = resume(dir.path(), "abc", Stream::Out);
        assert!(p.is_new("2026-01-01T00:00:00.000000001"), "nothing recorded: everything is new");
        p.advance(T1.into());
        // Crash before the line was appended: the file has the recorded length; taken again.
        let again = resume(dir.path(), "abc", Stream::Out);
        assert!(again.is_new(T1));
        // Appended: skipped at resume.
        std::fs::write(&out, "line-1\nline-2\n").unwrap();
        let after = resume(dir.path(), "abc", Stream::Out);
        assert!(!after.is_new(T1));
        assert!(after.is_new("2026-01-01T00:00:01.000000001"));
        // Another container (a new run): from its start.
        let other = resume(dir.path(), "def", Stream::Out);
        assert!(other.is_new("2000-01-01T00:00:00.000000000"));
    }

    /// Issue 44: one position for both streams dropped a stderr line stamped before the last
    /// stdout line taken. Each stream now skips only its own.
    #[test]
    fn the_streams_keep_their_own_positions() {
        let dir = tempfile::tempdir().unwrap();
        let (mut out, mut err) = (resume(dir.path(), "abc", Stream::Out), resume(dir.path(), "abc", Stream::Err));
        assert!(out.is_new(T2));
        out.advance(T2.into());
        std::fs::write(files(dir.path(), "stdout").1, "out-2\n").unwrap();
        // Handed over after it, stamped before it: still new on its own stream.
        assert!(err.is_new(T1));
        err.advance(T1.into());
        std::fs::write(files(dir.path(), "stderr").1, "err-1\n").unwrap();
        let (out, err) = (resume(dir.path(), "abc", Stream::Out), resume(dir.path(), "abc", Stream::Err));
        assert!(!out.is_new(T2) && !err.is_new(T1));
        assert!(err.is_new(T2), "stderr's own next line");
    }

    /// Docker repeats a line where a follow's history ends: the same stamp is that line again.
    #[test]
    fn a_line_of_the_last_stamp_is_that_line_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = resume(dir.path(), "abc", Stream::Out);
        assert!(out.is_new(T1));
        out.advance(T1.into());
        assert!(!out.is_new(T1), "repeated");
        std::fs::write(files(dir.path(), "stdout").1, "a\n").unwrap();
        let again = resume(dir.path(), "abc", Stream::Out);
        assert!(!again.is_new(T1) && again.is_new(T2));
    }

    /// What an earlier stewardd kept (one position for both streams) is where each resumes.
    #[test]
    fn the_legacy_position_is_read_for_both_streams() {
        let dir = tempfile::tempdir().unwrap();
        let (_, out, legacy) = files(dir.path(), "stdout");
        std::fs::write(&out, "a\n").unwrap();
        std::fs::write(&legacy, format!("abc {T2} {T1} out 0\n")).unwrap();
        let (o, e) = (resume(dir.path(), "abc", Stream::Out), resume(dir.path(), "abc", Stream::Err));
        assert!(!o.is_new(T2) && !e.is_new(T2));
        assert!(o.is_new("2026-01-01T00:00:02.000000001") && e.is_new("2026-01-01T00:00:02.000000001"));
        // Its line not written (stdout has the recorded length): stdout takes it again.
        std::fs::write(&legacy, format!("abc {T2} {T1} out 2\n")).unwrap();
        let o = resume(dir.path(), "abc", Stream::Out);
        assert!(o.is_new(T2));
    }
}
