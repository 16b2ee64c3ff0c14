//! A process instance's local health checks: HTTP and TCP probed from the host, COMMAND run as
//! the process's user, in its work dir and in the instance's cgroup.

use super::Processes;
use crate::health::Outcome;
use crate::runtime::process::{self, Launch, ResolvedUser};
use crate::runtime::reaper::ExitWatch;
use crate::spec::RenderedInstance;
use crate::supervisor::instance::workload::{Cx, Probe};
use crate::supervisor::record::InstanceRecord;
use crate::supervisor::Shared;
use nix::sys::signal::Signal;
use std::sync::Arc;
use std::time::Duration;

impl Processes {
    pub(super) fn local_probes(&self, cx: &Cx<'_>) -> Vec<Option<Probe>> {
        let Some(rendered) = cx.rendered else { return Vec::new() };
        let mut probes = Vec::with_capacity(rendered.processes.len());
        for (index, p) in rendered.processes.iter().enumerate() {
            let Some(check) = p.health_checks.iter().find(|c| c.kind.is_local()).cloned() else {
                probes.push(None);
                continue;
            };
            let mut command = CommandCheck::new(cx.rec, rendered, index);
            command.env.extend(self.injected_env.get(index).into_iter().flatten().cloned());
            let (command, shared, probed) = (Arc::new(command), cx.shared.clone(), check.clone());
            let run = move || {
                let (command, shared, check) = (command.clone(), shared.clone(), probed.clone());
                Box::pin(async move {
                    match shared.prober.probe(&check).await {
                        Some(o) => o,
                        None => command.run(&shared, check.timeout_seconds).await,
                    }
                }) as crate::supervisor::instance::workload::BoxFuture<Outcome>
            };
            probes.push(Some(Probe { check, run: Box::new(run) }));
        }
        probes
    }
}

/// What a COMMAND check needs to run as the instance's user, in its work dir and cgroup.
struct CommandCheck {
    command: Option<String>,
    cgroup_key: String,
    work_dir: std::path::PathBuf,
    user: String,
    env: Vec<(String, String)>,
    log: std::path::PathBuf,
}

impl CommandCheck {
    fn new(rec: &InstanceRecord, rendered: &RenderedInstance, index: usize) -> CommandCheck {
        let p = &rendered.processes[index];
        let command = p.health_checks.iter().find(|c| c.kind.is_local()).and_then(|c| match &c.probe {
            crate::spec::render::Probe::Command { command } => Some(command.clone()),
            _ => None,
        });
        CommandCheck {
            command,
            cgroup_key: crate::supervisor::instance::cgroup_key(rec),
            work_dir: p.work_path.clone(),
            user: p.user.clone(),
            env: p.env.iter().map(|e| (e.name.clone(), e.value.clone())).collect(),
            log: rendered.run_dir.join(format!("{}.check.log", p.proc_name)),
        }
    }

    /// Exit 0 within the timeout is healthy; on timeout the command's session is killed.
    async fn run(&self, shared: &Shared, timeout_secs: u64) -> Outcome {
        let Some(command) = &self.command else { return Outcome::Fail("no command".into()) };
        let started = (|| -> Result<(i32, ExitWatch), String> {
            let user = ResolvedUser::lookup(&self.user)?;
            let stdout = process::open_log(&self.log, &user).map_err(|e| e.to_string())?;
            let stderr = stdout.try_clone().map_err(|e| format!("{}: {e}", self.log.display()))?;
            let join = shared.cgroups.instance(&self.cgroup_key).join_files().map_err(|e| e.to_string())?;
            let launch = Launch {
                command,
                work_dir: &self.work_dir,
                user: &user,
                env: &self.env,
                stdout,
                stderr,
                cgroup_join: join,
            };
            process::launch(&shared.reaper, launch).map_err(|e| e.to_string())
        })();
        let (pid, exit) = match started {
            Ok(x) => x,
            Err(e) => return Outcome::Fail(format!("cannot run the check command: {e}")),
        };
        match tokio::time::timeout(Duration::from_secs(timeout_secs.max(1)), exit).await {
            Ok(Ok(status)) if status.is_success() => Outcome::Pass,
            Ok(Ok(status)) => Outcome::Fail(format!("check command {status}")),
            Ok(Err(_)) => Outcome::Fail("check command: exit status lost".into()),
            Err(_) => {
                // It leads its own session (setsid): end everything it started.
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
                Outcome::Fail(format!("check command did not finish within {timeout_secs}s"))
            }
        }
    }
}
