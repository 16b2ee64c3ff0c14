//! COMMAND health checks run inside a pod's container (docker exec), bounded by the check's
//! timeout.

use super::{Docker, DockerError};
use futures_util::StreamExt;
use std::time::Duration;

impl Docker {
    /// Runs `command` with `/bin/sh -c` in the container: exit 0 within `timeout` is healthy.
    pub async fn exec_check(&self, id: &str, command: &str, timeout: Duration) -> crate::health::Outcome {
        use crate::health::Outcome;
        let run = async {
            let config = bollard::models::ExecConfig {
                cmd: Some(vec!["/bin/sh".into(), "-c".into(), command.into()]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            };
            let exec = self.client()?.create_exec(id, config).await.map_err(|e| self.error(id, e))?;
            let started = self.client()?.start_exec(&exec.id, None).await.map_err(|e| self.error(id, e))?;
            if let bollard::exec::StartExecResults::Attached { mut output, .. } = started {
                while output.next().await.is_some() {}
            }
            let inspected = self.client()?.inspect_exec(&exec.id).await.map_err(|e| self.error(id, e))?;
            Ok::<_, DockerError>(inspected.exit_code.unwrap_or(-1))
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(0)) => Outcome::Pass,
            Ok(Ok(code)) => Outcome::Fail(format!("check command exited with code {code}")),
            Ok(Err(e)) => Outcome::Fail(format!("cannot run the check command: {e}")),
            Err(_) => Outcome::Fail(format!("check command did not finish within {}s", timeout.as_secs())),
        }
    }
}
