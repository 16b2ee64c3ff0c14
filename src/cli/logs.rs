//! `steward logs`: an instance's output, read through the daemon (`GET /v1/instances/{id}/logs`,
//! see src/logs.rs for what is in the files and what order can honestly be given).
//!
//! A process's lines carry no time and their order across files is recorded nowhere, so files
//! come oldest-written first, each line with its file; with `-f`, new lines as the daemon sees
//! them (every 100 ms). A pod's lines have Docker's time (`--timestamps` shows it). `--stream`
//! and `--container` pick one stream or one process/container when the order matters. With this
//! host's daemon unreachable the files under the configured run directory are read directly, and
//! that is said (the exit is 3 all the same); a remote daemon's files are not on this host, so
//! then it is only told. A `--container` the instance lacks is refused naming those it has.
//!
//! Lines go out as the workload wrote them into a pipe or a file; on a terminal their control
//! characters are escaped (as journalctl does), so a workload cannot drive the terminal.

use super::endpoint::Endpoint;
use super::steward::{exit, Output, Stream};
use crate::client::{parse_instance_id, ClientError, LogLine};
use std::io::{IsTerminal, Write};
use std::path::Path;

/// What `steward logs` was asked for.
pub struct LogsRequest<'a> {
    pub id: &'a str,
    pub follow: bool,
    pub tail: usize,
    pub stream: Option<Stream>,
    /// One process (procName) or container (its name in the pod spec).
    pub process: Option<String>,
    pub timestamps: bool,
}

/// Runs `steward logs`; returns the exit code.
pub async fn run(endpoint: &Endpoint, req: LogsRequest<'_>, output: Output) -> anyhow::Result<i32> {
    let iid = parse_instance_id(req.id).map_err(anyhow::Error::msg)?;
    let mut query = vec![("tail", req.tail.to_string()), ("follow", req.follow.to_string())];
    if let Some(s) = req.stream {
        query.push(("stream", s.word().to_string()));
    }
    if let Some(p) = &req.process {
        query.push(("process", p.clone()));
    }
    let mut out = std::io::stdout().lock();
    let escape = out.is_terminal();
    let mut failed = None;
    let result = endpoint
        .client()
        .logs(&iid, &query, |l| match print_line(&mut out, &l, req.timestamps, output, escape) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        })
        .await;
    if let Some(e) = failed {
        return Err(e.into());
    }
    match result {
        Ok(()) => Ok(exit::OK),
        Err(ClientError::Api { status: 404, message, .. }) => {
            eprintln!("steward: {message}");
            Ok(exit::NOT_FOUND)
        }
        Err(e @ ClientError::Unreachable { .. }) => match endpoint.local_config() {
            // The files are still worth reading: where the configuration says they are. The
            // exit is still 3 (the daemon is unreachable): a script must not take it for a 0.
            Some(config) => {
                let dir = config.run_base_dir.join(format!("{}.{}.{}", iid.namespace, iid.name, iid.index));
                eprintln!("steward: {e}; showing the log files in {} as they are", dir.display());
                read_files(&dir, &req, output, &mut out, escape)?;
                Ok(exit::UNREACHABLE)
            }
            None => Ok(super::commands::report(e, endpoint)),
        },
        Err(e) => Ok(super::commands::report(e, endpoint)),
    }
}

/// Without the daemon: the files themselves (no following); what is missing is said.
fn read_files(dir: &Path, req: &LogsRequest, output: Output, out: &mut impl Write, escape: bool) -> anyhow::Result<()> {
    let stream = req.stream.map(Stream::word);
    let mut files = match crate::logs::files(dir, req.process.as_deref(), stream) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("steward: no logs for {}: {e}", req.id);
            return Ok(());
        }
    };
    if let (Some(name), true) = (&req.process, files.is_empty()) {
        eprintln!("steward: no log files of {name:?} in {}", dir.display());
    }
    for f in &mut files {
        f.start_near_end(crate::logs::TAIL_WINDOW);
        let mut lines = f.read_new();
        lines.extend(f.take_partial());
        for raw in &lines[lines.len().saturating_sub(req.tail)..] {
            let l = f.line(raw);
            let l = LogLine { process: l.process, stream: l.stream, time: l.time, line: l.line };
            print_line(out, &l, req.timestamps, output, escape)?;
        }
    }
    Ok(())
}

/// One line; `escape`: its control characters escaped (stdout is a terminal).
fn print_line(
    out: &mut impl Write,
    l: &LogLine,
    timestamps: bool,
    output: Output,
    escape: bool,
) -> std::io::Result<()> {
    match output {
        Output::Text => {
            let time = match (&l.time, timestamps) {
                (Some(t), true) => format!("{t} "),
                (None, true) => "- ".to_string(), // a process's line has no time
                _ => String::new(),
            };
            let line = format!("[{}.{}.log] {time}{}", l.process, l.stream, l.line);
            match escape {
                true => writeln!(out, "{}", super::safe_text::safe_line(&line))?,
                false => writeln!(out, "{line}")?,
            }
        }
        Output::Json => {
            let file = format!("{}.{}.log", l.process, l.stream);
            let mut value = serde_json::json!({"file": file, "process": l.process, "stream": l.stream, "line": l.line});
            if let Some(t) = &l.time {
                value["time"] = serde_json::json!(t);
            }
            writeln!(out, "{value}")?;
        }
    }
    out.flush()
}
