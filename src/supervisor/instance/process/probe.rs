//! A process instance's probes: its seed-000 local health check and its seed-003 liveness and
//! readiness probes. HTTP and TCP are probed from the host; COMMAND and EXEC run as the
//! process's user, in its work dir and in the instance's cgroup.

use super::Processes;
use crate::health::Outcome;
use crate::runtime::process::{self, Launch, ResolvedUser};
use crate::runtime::reaper::ExitWatch;
use crate::spec::render::Probe as Handler;
use crate::spec::RenderedInstance;
use crate::supervisor::instance::hooks::{self, Hook};
use crate::supervisor::instance::workload::{BoxFuture, Cx, Probe, ProbeRole, Runner};
use crate::supervisor::record::InstanceRecord;
use crate::supervisor::Shared;
use nix::sys::signal::Signal;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

impl Processes {
    pub(super) fn local_probes(&self, cx: &Cx<'_>) -> Vec<Probe> {
        let Some(rendered) = cx.rendered else { return Vec::new() };
        let mut probes = Vec::new();
        for (index, p) in rendered.processes.iter().enumerate() {
            let env = self.injected_env.get(index).cloned().unwrap_or_default();
            let runner = |handler: &Handler, timeout_secs: u64| {
                let command = match handler {
                    Handler::Command { command } => Some(command.clone()),
                    _ => None,
                };
                let mut command = CommandRun::new(cx.rec, rendered, index, command);
                command.env.extend(env.iter().cloned());
                handler_runner(cx.shared.clone(), handler.clone(), Arc::new(command), timeout_secs)
            };
            if let Some(check) = p.health_checks.iter().find(|c| c.kind.is_local()) {
                probes.push(Probe {
                    index,
                    delay: Duration::from_secs(check.delay_seconds),
                    period: Duration::from_secs(check.interval_seconds.max(1)),
                    run: runner(&check.probe, check.timeout_seconds),
                    role: ProbeRole::Check(check.clone()),
                });
            }
            for (probe, readiness) in [(&p.lifecycle.liveness, false), (&p.lifecycle.readiness, true)] {
                let Some(probe) = probe else { continue };
                let (success, failure) = (probe.success_threshold, probe.failure_threshold);
                probes.push(Probe {
                    index,
                    delay: Duration::from_secs(probe.delay_secs),
                    period: Duration::from_secs(probe.period_secs.max(1)),
                    run: runner(&probe.handler, probe.timeout_secs),
                    role: if readiness {
                        ProbeRole::Readiness { success, failure }
                    } else {
                        ProbeRole::Liveness { success, failure }
                    },
                });
            }
        }
        probes
    }
}

impl Processes {
    /// Each process's hook as `pick` chooses it, ready to run once within `timeout_secs`;
    /// only processes whose main process runs.
    fn hooks(
        &self,
        cx: &Cx<'_>,
        pick: fn(&crate::spec::render::probe::RenderedLifecycle) -> Option<&Handler>,
        timeout_secs: u64,
    ) -> Vec<Hook> {
        let Some(rendered) = cx.rendered else { return Vec::new() };
        let mut hooks = Vec::new();
        for (index, p) in rendered.processes.iter().enumerate() {
            let Some(handler) = pick(&p.lifecycle) else { continue };
            if !self.mains.get(index).is_some_and(Option::is_some) {
                continue;
            }
            let command = match handler {
                Handler::Command { command } => Some(command.clone()),
                _ => None,
            };
            let mut run = CommandRun::new(cx.rec, rendered, index, command);
            run.env.extend(self.injected_env.get(index).into_iter().flatten().cloned());
            let runner = handler_runner(cx.shared.clone(), handler.clone(), Arc::new(run), timeout_secs);
            hooks.push((p.proc_name.clone(), runner));
        }
        hooks
    }

    pub(super) fn post_start_hooks(&self, cx: &Cx<'_>) -> Option<BoxFuture<Result<(), String>>> {
        hooks::post_start(self.hooks(cx, |l| l.post_start.as_ref(), hooks::POST_START_TIMEOUT_SECS))
    }

    pub(super) fn pre_stop_hooks(&self, cx: &Cx<'_>, deadline: tokio::time::Instant) -> Option<BoxFuture<()>> {
        let hooks = self.hooks(cx, |l| l.pre_stop.as_ref(), hooks::secs_until(deadline));
        hooks::pre_stop(&cx.rec.id, hooks, deadline)
    }
}

/// Runs `handler` once: HTTP and TCP at 127.0.0.1 within the timeout (a plain-HTTP probe on
/// a connection it keeps), a command as `command` says.
fn handler_runner(shared: Arc<Shared>, handler: Handler, command: Arc<CommandRun>, timeout_secs: u64) -> Runner {
    let prepared = shared.prober.prepare(IpAddr::V4(Ipv4Addr::LOCALHOST), &handler);
    Box::new(move || {
        let (shared, prepared, command) = (shared.clone(), prepared.clone(), command.clone());
        Box::pin(async move {
            let timeout = Duration::from_secs(timeout_secs.max(1));
            match shared.prober.run(&prepared, timeout).await {
                Some(o) => o,
                None => command.run(&shared, timeout_secs).await,
            }
        })
    })
}

/// What a command (a COMMAND check, an EXEC probe or hook) needs to run as the process's
/// user, in its work dir and the instance's cgroup, with output to its `check` log.
pub(super) struct CommandRun {
    command: Option<String>,
    cgroup_key: String,
    work_dir: std::path::PathBuf,
    user: String,
    env: Vec<(String, String)>,
    log: std::path::PathBuf,
}

impl CommandRun {
    pub(super) fn new(
        rec: &InstanceRecord,
        rendered: &RenderedInstance,
        index: usize,
        command: Option<String>,
    ) -> CommandRun {
        let p = &rendered.processes[index];
        CommandRun {
            command,
            cgroup_key: crate::supervisor::instance::cgroup_key(rec),
            work_dir: p.work_path.clone(),
            user: p.user.clone(),
            env: p.env.iter().map(|e| (e.name.clone(), e.value.clone())).collect(),
            log: rendered.run_dir.join(format!("{}.check.log", p.proc_name)),
        }
    }

    /// Exit 0 within the timeout passes; on timeout the command's session is killed.
    pub(super) async fn run(&self, shared: &Shared, timeout_secs: u64) -> Outcome {
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
            Err(e) => return Outcome::Fail(format!("cannot run the command: {e}")),
        };
        match tokio::time::timeout(Duration::from_secs(timeout_secs.max(1)), exit).await {
            Ok(Ok(status)) if status.is_success() => Outcome::Pass,
            Ok(Ok(status)) => Outcome::Fail(format!("command {status}")),
            Ok(Err(_)) => Outcome::Fail("command: exit status lost".into()),
            Err(_) => {
                // It leads its own session (setsid): end everything it started.
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
                Outcome::Fail(format!("command did not finish within {timeout_secs}s"))
            }
        }
    }
}
