//! An instance's log files, as `GET /v1/instances/{id}/logs` (and so `steward logs`) reads them:
//! `<run dir>/<process or container>.<stdout|stderr>.log` (rotated copies `.1`, `.2` beside).
//!
//! A process writes its files itself (that is what lets it outlive the daemon), so its lines
//! carry no time and their order *across* files is recorded nowhere. A pod's lines are copied
//! from Docker with Docker's timestamp in front (`2026-11-24T22:50:01.5Z line`), so they have a
//! time. Each start writes a run marker (see [`run_marker`]) into the files it starts with.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What starts the run marker line written at every start.
pub const RUN_MARKER: &str = "--- steward: run started ";

/// The marker line written into an instance's log files when a run starts (`now_ms`).
pub fn run_marker(now_ms: u64) -> String {
    format!("{RUN_MARKER}{} ---\n", crate::clock::rfc3339_utc(now_ms))
}

/// The last `n` lines that the current run of `process` printed (after its run marker) to
/// `stream` (`stdout` or `stderr`): what a start that failed said before it detached or died.
/// Read as root through the run directory's descriptor, never through a planted link, and only
/// the file's last 16 KiB.
pub fn last_run_lines(run_dir: &Path, process: &str, stream: &str, n: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 16 << 10;
    let name = format!("{process}.{stream}.log");
    let path = run_dir.join(&name);
    let Ok(dir) = crate::safefs::open_daemon_dir(run_dir) else { return Vec::new() };
    let Ok(cname) = std::ffi::CString::new(name) else { return Vec::new() };
    let opened = crate::safefs::open_regular_at(std::os::fd::AsFd::as_fd(&dir), &cname, &path, libc::O_RDONLY, 0);
    let Ok(mut file) = opened else { return Vec::new() };
    let len = file.seek(SeekFrom::End(0)).unwrap_or(0);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).is_err() || file.read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let run = text.rfind(RUN_MARKER).map_or(&text[..], |at| &text[at..]);
    let lines: Vec<String> =
        run.lines().filter(|l| !l.starts_with(RUN_MARKER) && !l.trim().is_empty()).map(String::from).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// One log file and how far it has been read.
#[derive(Debug)]
pub struct LogFile {
    pub path: PathBuf,
    /// `<process>.<stream>.log` split up.
    pub process: String,
    pub stream: String,
    offset: u64,
    /// A last line without its newline yet: given once it is complete (or [`MAX_LINE`] long).
    partial: Vec<u8>,
    /// Reading began inside the file ([`LogFile::start_near_end`]): the first line is cut.
    skip_first_line: bool,
}

/// Most read from a log file at one look.
pub const READ_CHUNK: u64 = 1 << 20;

/// The longest line given whole; longer ones come in pieces.
pub const MAX_LINE: usize = 64 << 10;

/// How much of a file's end a tail reads.
pub const TAIL_WINDOW: u64 = 1 << 20;

/// One line of an instance's output, as the API sends it (a wire type: `crate::protocol`
/// re-exports it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// The process's procName or the container's name in the pod spec.
    pub process: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// Docker's timestamp of a pod's line; None for a process's (it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    pub line: String,
}

impl LogFile {
    pub fn new(path: PathBuf) -> LogFile {
        let file = path.file_name().unwrap_or_default().to_string_lossy().to_string();
        let stem = file.strip_suffix(".log").unwrap_or(&file);
        let (process, stream) = stem.rsplit_once('.').unwrap_or((stem, ""));
        LogFile {
            process: process.to_string(),
            stream: stream.to_string(),
            path,
            offset: 0,
            partial: Vec::new(),
            skip_first_line: false,
        }
    }

    pub fn name(&self) -> String {
        self.path.file_name().unwrap_or_default().to_string_lossy().to_string()
    }

    pub fn modified(&self) -> SystemTime {
        std::fs::symlink_metadata(&self.path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The complete lines appended since the last read, at most [`READ_CHUNK`] bytes of them
    /// (a follower catches up on a burst one chunk a look). A file shorter than what was read
    /// was rotated (copied away and truncated): it is read again from its start. A line longer
    /// than [`MAX_LINE`] comes in pieces of that size: an endless line cannot grow the reader.
    /// Read as root from the instance's run directory: only a regular file with one link
    /// there, never through a symlink (see [`crate::safefs::open_daemon_file`]).
    pub fn read_new(&mut self) -> Vec<String> {
        use std::io::{Read, Seek, SeekFrom};
        let read = (|| {
            let mut file = crate::safefs::open_daemon_file(&self.path)?;
            let len = file.metadata()?.len();
            if len < self.offset {
                self.offset = 0;
                self.partial.clear();
            }
            file.seek(SeekFrom::Start(self.offset))?;
            let mut data = Vec::new();
            file.take(READ_CHUNK).read_to_end(&mut data)?;
            Ok::<_, std::io::Error>(data)
        })();
        let data = match read {
            Ok(data) => data,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("logs: {}: {e}", self.path.display());
                }
                return Vec::new();
            }
        };
        self.offset += data.len() as u64;
        self.partial.extend_from_slice(&data);
        if self.skip_first_line {
            // Started inside the file: its first line is cut, and not given.
            let Some(end) = self.partial.iter().position(|b| *b == b'\n') else {
                self.partial.clear();
                return Vec::new();
            };
            self.partial.drain(..=end);
            self.skip_first_line = false;
        }
        let mut lines = Vec::new();
        if let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') {
            let complete: Vec<u8> = self.partial.drain(..=end).collect();
            lines.extend(String::from_utf8_lossy(&complete).lines().map(str::to_string));
        }
        while self.partial.len() >= MAX_LINE {
            let piece: Vec<u8> = self.partial.drain(..MAX_LINE).collect();
            lines.push(String::from_utf8_lossy(&piece).into_owned());
        }
        lines
    }

    /// Starts reading at the last `window` bytes of the file (the first, cut line left out):
    /// for a tail, which needs no more than the end of a file however large it is.
    pub fn start_near_end(&mut self, window: u64) {
        let len = std::fs::symlink_metadata(&self.path).map_or(0, |m| m.len());
        if len > window {
            self.offset = len - window;
            self.skip_first_line = true;
        }
    }

    /// The unfinished last line, taken (when nothing more will be read).
    pub fn take_partial(&mut self) -> Option<String> {
        (!self.partial.is_empty()).then(|| String::from_utf8_lossy(&std::mem::take(&mut self.partial)).to_string())
    }

    /// `raw` as a [`LogLine`] of this file: a leading Docker timestamp becomes its time.
    pub fn line(&self, raw: &str) -> LogLine {
        let (time, line) = split_time(raw);
        LogLine { process: self.process.clone(), stream: self.stream.clone(), time, line: line.to_string() }
    }
}

/// The instance's current log files in `dir`, optionally of one process (or container) and
/// one stream, oldest-written first (the newest output ends a listing).
pub fn files(dir: &Path, process: Option<&str>, stream: Option<&str>) -> std::io::Result<Vec<LogFile>> {
    let mut files: Vec<LogFile> = std::fs::read_dir(dir)
        .map_err(|e| crate::safefs::at(dir, e))?
        .filter_map(|e| e.ok().filter(|e| e.file_type().is_ok_and(|t| t.is_file())).map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(LogFile::new)
        .filter(|f| process.is_none_or(|p| f.process == p) && stream.is_none_or(|s| f.stream == s))
        .collect();
    files.sort_by_key(|f| (f.modified(), f.name()));
    Ok(files)
}

/// Splits `2026-11-24T22:50:01.5Z message` into its time and message; a line without one is
/// all message.
pub fn split_time(raw: &str) -> (Option<String>, &str) {
    let Some((stamp, rest)) = raw.split_once(' ') else { return (None, raw) };
    let b = stamp.as_bytes();
    let looks_like = b.len() >= 20
        && stamp.ends_with('Z')
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[..4].iter().all(u8::is_ascii_digit);
    if looks_like {
        (Some(stamp.to_string()), rest)
    } else {
        (None, raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_name_gives_its_process_and_stream() {
        let f = LogFile::new(PathBuf::from("/run/x/game.server.stderr.log"));
        assert_eq!((f.process.as_str(), f.stream.as_str()), ("game.server", "stderr"));
    }

    #[test]
    fn only_complete_lines_are_read_and_a_truncated_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.stdout.log");
        std::fs::write(&path, "one\ntw").unwrap();
        let mut f = LogFile::new(path.clone());
        assert_eq!(f.read_new(), ["one"]);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"o\n").unwrap();
        assert_eq!(f.read_new(), ["two"]);
        std::fs::write(&path, "new\n").unwrap();
        assert_eq!(f.read_new(), ["new"], "rotated: read from the start");
    }

    #[test]
    fn docker_timestamps_are_split_off_and_plain_lines_kept() {
        assert_eq!(
            split_time("2026-11-24T22:50:01.5Z hello world"),
            (Some("2026-11-24T22:50:01.5Z".to_string()), "hello world")
        );
        assert_eq!(split_time("hello world"), (None, "hello world"));
        assert_eq!(split_time("2026 was a year"), (None, "2026 was a year"));
        assert!(run_marker(0).starts_with("--- steward: run started 1970-01-01T00:00:00.000Z"));
    }
}
