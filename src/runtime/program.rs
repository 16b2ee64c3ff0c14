//! Running a short-lived program (a CNI plugin, `nft`) from the daemon: its input written,
//! its output read whole, its exit taken from the daemon's reaper so that no other waitpid
//! caller races it, killed at a timeout.

use super::exit::ExitStatus;
use super::reaper::Reaper;
use std::os::unix::process::ExitStatusExt;

/// What a run gave back.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs `cmd` with `input` on its stdin, reading its stdout and stderr whole, within `timeout`
/// (then killed). In the daemon its exit comes from `reaper` (the one waitpid caller); without
/// one this process waits for its own child.
pub async fn run(
    reaper: Option<&Reaper>,
    mut cmd: std::process::Command,
    input: Vec<u8>,
    timeout: std::time::Duration,
) -> std::io::Result<Output> {
    let mut spawned = None;
    let watch = match reaper {
        Some(reaper) => {
            let (_, watch) = reaper.spawn(|| {
                cmd.spawn().map(|child| {
                    let pid = child.id() as i32;
                    spawned = Some(child);
                    (pid, None)
                })
            })?;
            Some(watch)
        }
        None => {
            spawned = Some(cmd.spawn()?);
            None
        }
    };
    let mut child = spawned.expect("spawned");
    let pid = child.id() as i32;
    let (mut stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let reaped = watch.is_some();
    let io = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        if let Some(pipe) = stdin.as_mut() {
            let _ = pipe.write_all(&input);
        }
        drop(stdin);
        let err_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut e) = stderr {
                let _ = e.read_to_end(&mut buf);
            }
            buf
        });
        let mut out = Vec::new();
        if let Some(mut o) = stdout {
            let _ = o.read_to_end(&mut out);
        }
        // Without the daemon's reaper, this process waits for its own child.
        let status = (!reaped).then(|| {
            child.wait().map(|s| match (s.code(), s.signal()) {
                (Some(c), _) => ExitStatus::Code(c),
                (None, Some(sig)) => ExitStatus::Signal(sig),
                _ => ExitStatus::Unknown,
            })
        });
        (out, err_reader.join().unwrap_or_default(), status)
    });
    let done = async move {
        let (stdout, stderr, status) = io.await.map_err(std::io::Error::other)?;
        let status = match (status, watch) {
            (Some(s), _) => s?,
            (None, Some(w)) => w.await.unwrap_or(ExitStatus::Unknown),
            (None, None) => ExitStatus::Unknown,
        };
        Ok(Output { status, stdout, stderr })
    };
    match tokio::time::timeout(timeout, done).await {
        Ok(r) => r,
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("took longer than {} s", timeout.as_secs())))
        }
    }
}

/// Runs the tool `program ARGS` (`nft`, `ip`) with `input` on its stdin, within `timeout`: its
/// stdout when it exits 0, else why not (the command line, its exit and its stderr).
pub async fn tool(
    reaper: Option<&Reaper>,
    program: &str,
    args: &[&str],
    input: &str,
    timeout: std::time::Duration,
) -> Result<String, String> {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out =
        run(reaper, cmd, input.as_bytes().to_vec(), timeout).await.map_err(|e| format!("cannot run {program}: {e}"))?;
    match out.status {
        ExitStatus::Code(0) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        status => {
            Err(format!("{program} {}: {status:?}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }
}

/// As [`tool`], from synchronous code (an instance's staging, which is not async), with
/// arguments that are paths and exit codes `ok` (besides 0) counted as success: [`run`] driven
/// to its end on this thread. On a runtime's worker the worker's other tasks (the reaper's
/// among them, which delivers this exit) move to another thread meanwhile. For the rare, short
/// runs of a host tool (making or growing a volume's filesystem image), not a hot path.
pub fn tool_blocking(
    reaper: Option<&Reaper>,
    program: &str,
    args: &[&std::ffi::OsStr],
    ok: &[i32],
    timeout: std::time::Duration,
) -> Result<String, String> {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let ran = run(reaper, cmd, Vec::new(), timeout);
    let out = match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| h.block_on(ran))
        }
        _ => tokio::runtime::Builder::new_current_thread().enable_all().build().and_then(|rt| rt.block_on(ran)),
    }
    .map_err(|e| format!("cannot run {program}: {e}"))?;
    match out.status {
        ExitStatus::Code(c) if c == 0 || ok.contains(&c) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        status => {
            let args: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
            Err(format!("{program} {}: {status:?}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }
}
