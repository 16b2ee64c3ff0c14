//! A pod's init containers (seed 003 `initializers`): each runs to completion in the pod's
//! network namespace, in order, before the pod's containers are created, and must exit 0.
//! Their output goes to the run directory's logs like the containers'; a failure's tail is in
//! the start's error.

use super::{numa, Docker, DockerError, PodStart};
use crate::spec::render::pod::RenderedContainer;
use bollard::query_parameters as q;
use futures_util::StreamExt;
use std::time::Duration;

/// `io.steward.index` of init container `n`: not a container of the running pod.
pub(super) fn init_index(n: usize) -> String {
    format!("init-{n}")
}

impl Docker {
    /// Runs init container `n` in `network` until it exits: created, started, waited for
    /// (asking `cancelled` every 100 ms), then removed once its output is copied. Err names
    /// it, how it ended, and the last lines it printed.
    pub(super) async fn run_init_container(
        &self,
        start: &PodStart<'_>,
        (n, c): (usize, &RenderedContainer),
        network: String,
        topology: &numa::Topology,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<(), DockerError> {
        let env = start.init_injected_env.get(n).map(Vec::as_slice).unwrap_or_default();
        let body = self.container_body(start, c, env, &init_index(n), network, topology, false).await?;
        let name = format!("steward-{}-{}", start.pod_id, c.name);
        let options = q::CreateContainerOptions { name: Some(name), ..Default::default() };
        let id = self.client()?.create_container(Some(options), body).await.map_err(|e| self.error(&c.name, e))?.id;
        let ran = match self.run_to_end(&id, &c.name, start, cancelled).await {
            Ok(0) => Ok(()),
            Ok(code) => Err(DockerError::InitFailed {
                container: c.name.clone(),
                detail: format!("exited with code {code}{}", self.output_tail(&id, 3).await.unwrap_or_default()),
            }),
            Err(e) => Err(e),
        };
        let _ = self.remove(&id).await;
        ran
    }

    /// Starts created container `id` and waits for its exit code, its output followed into
    /// the run directory meanwhile.
    async fn run_to_end(
        &self,
        id: &str,
        name: &str,
        start: &PodStart<'_>,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<i64, DockerError> {
        self.client()?.start_container(id, None::<q::StartContainerOptions>).await.map_err(|e| self.error(name, e))?;
        // A wait for "not-running" answers at once for a container that has already exited.
        let mut wait = std::pin::pin!(self.wait(id));
        let follower = self.follow_logs(id, start.log_dir, name);
        let code = loop {
            tokio::select! {
                code = &mut wait => break code,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if cancelled() {
                        follower.abort();
                        return Err(DockerError::Cancelled);
                    }
                }
            }
        };
        // The follower ends with the container's output: the logs are whole before it goes.
        let _ = tokio::time::timeout(Duration::from_secs(2), follower).await;
        code
    }

    /// The last `n` lines of each of the container's streams, as `; it printed: ...` (None
    /// when it printed nothing).
    async fn output_tail(&self, id: &str, n: usize) -> Option<String> {
        let mut said = Vec::new();
        for (stream, stdout) in [("stderr", false), ("stdout", true)] {
            let options = q::LogsOptions { stdout, stderr: !stdout, tail: n.to_string(), ..Default::default() };
            let mut logs = self.client().ok()?.logs(id, Some(options));
            while let Some(Ok(chunk)) = logs.next().await {
                let text = String::from_utf8_lossy(chunk.as_ref()).to_string();
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    said.push(format!("{stream}: {}", line.chars().take(300).collect::<String>()));
                }
            }
        }
        (!said.is_empty()).then(|| format!("; it printed: {}", said.join(" | ")))
    }
}
