//! `steward logs`: an instance's output, read from its log files in its run directory
//! (`<run_base_dir>/<namespace>.<name>.<index>/<process>.<stdout|stderr>.log`).
//!
//! The workloads write those files themselves (that is what lets them outlive the daemon), so a
//! line carries no time and the order of lines *across* files is not recorded anywhere. What is
//! shown is therefore honest about it: the files in the order they were last written (oldest
//! first, so the newest output ends the listing), each line with its file; with `-f`, new lines
//! as they are seen, polled every [`POLL`]: lines of different files written within one poll
//! keep their order per file only. `--stream` picks one stream when the order matters.

use super::steward::{exit, Output, Stream};
use crate::client::{parse_instance_id, Client, ClientError};
use crate::config::Config;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often `-f` looks for appended output.
const POLL: Duration = Duration::from_millis(100);

/// One log file and how far it has been printed.
struct LogFile {
    path: PathBuf,
    /// `<process>.<stream>.log` split up, for the JSON form.
    process: String,
    stream: String,
    offset: u64,
    /// A last line without its newline yet: printed once it is complete.
    partial: Vec<u8>,
}

impl LogFile {
    fn new(path: PathBuf) -> LogFile {
        let file = path.file_name().unwrap_or_default().to_string_lossy().to_string();
        let stem = file.strip_suffix(".log").unwrap_or(&file);
        let (process, stream) = stem.rsplit_once('.').unwrap_or((stem, ""));
        LogFile { process: process.to_string(), stream: stream.to_string(), path, offset: 0, partial: Vec::new() }
    }

    fn name(&self) -> String {
        self.path.file_name().unwrap_or_default().to_string_lossy().to_string()
    }

    fn modified(&self) -> SystemTime {
        std::fs::metadata(&self.path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The complete lines appended since the last read. A file shorter than what was read was
    /// rotated (copied away and truncated): it is read again from its start.
    fn read_new(&mut self) -> Vec<String> {
        let Ok(data) = std::fs::read(&self.path) else { return Vec::new() };
        if (data.len() as u64) < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        self.partial.extend_from_slice(&data[self.offset as usize..]);
        self.offset = data.len() as u64;
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else { return Vec::new() };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        String::from_utf8_lossy(&complete).lines().map(str::to_string).collect()
    }
}

/// Runs `steward logs`; returns the exit code.
pub async fn run(
    config: &Config,
    socket: &Path,
    id: &str,
    follow: bool,
    tail: usize,
    stream: Option<Stream>,
    output: Output,
) -> anyhow::Result<i32> {
    let iid = parse_instance_id(id).map_err(anyhow::Error::msg)?;
    // The daemon says whether the instance exists (a deleted one's files may linger); when it
    // is down the files are still worth reading, so that is said and not fatal.
    match Client::new(socket).status(&iid).await {
        Ok(_) => {}
        Err(ClientError::Api { status: 404, message, .. }) => {
            eprintln!("steward: {message}");
            return Ok(exit::NOT_FOUND);
        }
        Err(e) => eprintln!("steward: {e}; showing the log files as they are"),
    }
    let dir = config.run_base_dir.join(format!("{}.{}.{}", iid.namespace, iid.name, iid.index));
    let mut files: Vec<LogFile> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .map(LogFile::new)
            .filter(|f| stream.is_none_or(|s| f.stream == s.word()))
            .collect(),
        Err(e) => {
            eprintln!("steward: no logs for {id} in {}: {e}", dir.display());
            return Ok(exit::NOT_FOUND);
        }
    };
    files.sort_by_key(|f| (f.modified(), f.name()));
    let mut out = std::io::stdout().lock();
    for f in &mut files {
        let mut lines = f.read_new();
        if !follow && !f.partial.is_empty() {
            // Nothing more will be read: the unfinished last line is shown as it is.
            lines.push(String::from_utf8_lossy(&std::mem::take(&mut f.partial)).to_string());
        }
        for line in &lines[lines.len().saturating_sub(tail)..] {
            print_line(&mut out, f, line, output)?;
        }
    }
    out.flush()?;
    if !follow {
        return Ok(exit::OK);
    }
    loop {
        tokio::time::sleep(POLL).await;
        files.sort_by_key(|f| (f.modified(), f.name()));
        for f in &mut files {
            for line in f.read_new() {
                print_line(&mut out, f, &line, output)?;
            }
        }
        out.flush()?;
    }
}

fn print_line(out: &mut impl Write, f: &LogFile, line: &str, output: Output) -> std::io::Result<()> {
    match output {
        Output::Text => writeln!(out, "[{}] {line}", f.name()),
        Output::Json => {
            let value = serde_json::json!({"file": f.name(), "process": f.process, "stream": f.stream, "line": line});
            writeln!(out, "{value}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
