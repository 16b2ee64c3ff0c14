//! Commands run inside a pod's container (docker exec): COMMAND health checks, EXEC probes
//! and lifecycle hooks, each bounded by its timeout.

use super::{Docker, DockerError};
use futures_util::StreamExt;
use std::time::Duration;

impl Docker {
    /// Runs `command` with `/bin/sh -c` in the container: exit 0 within `timeout` passes. A
    /// command still running at the timeout is killed (docker exec has no kill: its host pid
    /// gets SIGKILL), so a probe that hangs every period does not pile up in the container.
    pub async fn exec_check(&self, id: &str, command: &str, timeout: Duration) -> crate::health::Outcome {
        use crate::health::Outcome;
        let config = bollard::models::ExecConfig {
            cmd: Some(vec!["/bin/sh".into(), "-c".into(), command.into()]),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let created = match self.client() {
            Ok(client) => client.create_exec(id, config).await.map_err(|e| self.error(id, e)),
            Err(e) => Err(e),
        };
        let exec = match created {
            Ok(exec) => exec,
            Err(e) => return Outcome::Fail(format!("cannot run the command: {e}")),
        };
        let run = async {
            let started = self.client()?.start_exec(&exec.id, None).await.map_err(|e| self.error(id, e))?;
            if let bollard::exec::StartExecResults::Attached { mut output, .. } = started {
                while output.next().await.is_some() {}
            }
            let inspected = self.client()?.inspect_exec(&exec.id).await.map_err(|e| self.error(id, e))?;
            Ok::<_, DockerError>(inspected.exit_code.unwrap_or(-1))
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(0)) => Outcome::Pass,
            Ok(Ok(code)) => Outcome::Fail(format!("command exited with code {code}")),
            Ok(Err(e)) => Outcome::Fail(format!("cannot run the command: {e}")),
            Err(_) => {
                let pid = match self.client() {
                    Ok(client) => {
                        client.inspect_exec(&exec.id).await.ok().filter(|i| i.running == Some(true)).and_then(|i| i.pid)
                    }
                    Err(_) => None,
                };
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 0) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                }
                Outcome::Fail(format!("command did not finish within {}s", timeout.as_secs()))
            }
        }
    }
}
