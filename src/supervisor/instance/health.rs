//! An instance's health checks: probing each process's local check (HTTP, TCP, COMMAND) of the
//! current generation, and acting on the verdicts (a change is journaled; a kill verdict stops
//! the instance with the check's reason).

use super::{cgroup_key, Actor, Msg};
use crate::runtime::process::{self, Launch, ResolvedUser};
use crate::runtime::reaper::ExitWatch;
use crate::spec::RenderedInstance;
use crate::supervisor::record::{now_ms, InstanceRecord};
use crate::supervisor::state::StopGoal;
use crate::supervisor::Shared;
use nix::sys::signal::Signal;
use std::time::Duration;

impl Actor {
    /// Starts probing each process's local check (HTTP, TCP or COMMAND) of the current generation.
    pub(super) fn start_health_checks(&mut self) {
        let Ok(rendered) = self.rendered() else { return };
        if self.is_pod() {
            return self.start_pod_health_checks(&rendered);
        }
        let started = self.rec.last_start_ms.unwrap_or_else(now_ms);
        self.trackers = Vec::with_capacity(rendered.processes.len());
        for (index, p) in rendered.processes.iter().enumerate() {
            let check = p.health_checks.iter().find(|c| c.kind.is_local()).cloned();
            self.trackers.push(check.as_ref().map(|c| crate::health::Tracker::new(c, started)));
            let Some(check) = check else { continue };
            let (tx, generation, shared) = (self.tx.clone(), self.generation, self.shared.clone());
            let mut command = CommandCheck::new(&self.rec, &rendered, index);
            command.env.extend(self.injected_env.get(index).into_iter().flatten().cloned());
            self.health_tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(check.delay_seconds)).await;
                loop {
                    let outcome = match shared.prober.probe(&check).await {
                        Some(o) => o,
                        None => command.run(&shared, check.timeout_seconds).await,
                    };
                    if tx.send(Msg::Checked { generation, index, outcome }).is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(check.interval_seconds.max(1))).await;
                }
            }));
        }
        self.rec.health = self.trackers.iter().map(|t| t.as_ref().map(|t| t.health.clone())).collect();
    }

    pub(super) async fn on_checked(&mut self, index: usize, outcome: crate::health::Outcome) {
        use crate::health::Verdict;
        let Some(Some(tracker)) = self.trackers.get_mut(index) else { return };
        let was = tracker.health.healthy;
        if matches!(outcome, crate::health::Outcome::Fail(_)) {
            self.shared.counters.check_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let verdict = tracker.record(outcome, now_ms());
        let health = tracker.health.clone();
        if let Some(slot) = self.rec.health.get_mut(index) {
            *slot = Some(health.clone());
        }
        if was != health.healthy {
            let detail =
                serde_json::json!({"process": index, "healthy": health.healthy, "lastFailure": health.last_failure});
            self.commit_event("healthChanged", detail).await;
        } else {
            self.journal.show(&self.rec);
        }
        if let Verdict::Kill { reason } = verdict {
            tracing::warn!(instance = %self.rec.id, "{reason}; killing it");
            self.stop_with(StopGoal::Fail { reason }).await;
        }
    }
}

/// What a COMMAND check needs to run as the instance's user, in its work dir and cgroup.
struct CommandCheck {
    command: Option<String>,
    cgroup_key: String,
    work_dir: std::path::PathBuf,
    user: String,
    env: Vec<(String, String)>,
    logs: (std::path::PathBuf, std::path::PathBuf),
}

impl CommandCheck {
    fn new(rec: &InstanceRecord, rendered: &RenderedInstance, index: usize) -> CommandCheck {
        let p = &rendered.processes[index];
        let command = p.health_checks.iter().find(|c| c.kind.is_local()).and_then(|c| match &c.probe {
            crate::spec::render::Probe::Command { command } => Some(command.clone()),
            _ => None,
        });
        let log = |stream: &str| rendered.run_dir.join(format!("{}.{stream}.log", p.proc_name));
        CommandCheck {
            command,
            cgroup_key: cgroup_key(rec),
            work_dir: p.work_path.clone(),
            user: p.user.clone(),
            env: p.env.iter().map(|e| (e.name.clone(), e.value.clone())).collect(),
            logs: (log("check"), log("check")),
        }
    }

    /// Exit 0 within the timeout is healthy; on timeout the command's session is killed.
    async fn run(&self, shared: &Shared, timeout_secs: u64) -> crate::health::Outcome {
        use crate::health::Outcome;
        let Some(command) = &self.command else { return Outcome::Fail("no command".into()) };
        let started = (|| -> Result<(i32, ExitWatch), String> {
            let user = ResolvedUser::lookup(&self.user)?;
            let stdout = process::open_log(&self.logs.0, &user).map_err(|e| e.to_string())?;
            let stderr = stdout.try_clone().map_err(|e| e.to_string())?;
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
