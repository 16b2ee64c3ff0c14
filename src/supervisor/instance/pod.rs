//! The instance actor's pod runtime (seed 001): what a pod does where a process instance would
//! spawn, watch, signal or kill processes. The state machine, the store and the restart
//! policy are the same; only these steps talk to dockerd instead of the kernel.

use super::{next_interrupt, Actor, Command, Msg, Reply};
use crate::runtime::docker::{ContainerInfo, DockerError, PodStart};
use crate::runtime::procinfo::ProcessIdentity;
use crate::spec::pod::NetworkMode;
use crate::spec::RenderedInstance;
use crate::supervisor::record::now_ms;
use crate::supervisor::state::{Event, ExitStatus};
use std::time::Duration;

/// How often a Lost pod asks whether dockerd is back.
pub(super) const LOST_POLL: Duration = Duration::from_secs(1);

impl Actor {
    pub(super) fn is_pod(&self) -> bool {
        self.spec.spec.is_pod()
    }

    fn container_ids(&self) -> Vec<String> {
        self.rec.containers.iter().map(|c| c.id.clone()).collect()
    }

    /// Starts the pod's containers in order (seed 001): Running as soon as dockerd has them all
    /// started; a container that then exits is seen by its watch.
    pub(super) async fn start_pod(&mut self, rendered: &RenderedInstance) -> Option<(Command, Option<Reply>)> {
        let Some(pod) = &rendered.pod else {
            self.apply(Event::StartFailed { reason: "the spec renders no pod".into() }).await;
            return None;
        };
        for t in self.log_tasks.drain(..) {
            t.abort();
        }
        let (instance, pod_id) = (self.rec.key(), crate::spec::pod::pod_id(&self.rec.id));
        let docker = self.shared.docker.clone();
        let start = PodStart {
            instance: &instance,
            pod_id: &pod_id,
            pod,
            injected_env: &self.injected_env,
            labels: &self.spec.spec.metadata.labels,
            log_dir: &rendered.run_dir,
        };
        // A request that comes meanwhile cancels the start, which then removes what it made
        // (see `Docker::start_pod`); the request decides what follows.
        let cancel = std::sync::atomic::AtomicBool::new(false);
        let is_cancelled = || cancel.load(std::sync::atomic::Ordering::Relaxed);
        let mut interrupt = None;
        let result = {
            let starting = docker.start_pod(&start, &is_cancelled);
            tokio::pin!(starting);
            loop {
                tokio::select! {
                    r = &mut starting => break r,
                    m = next_interrupt(&mut self.rx), if interrupt.is_none() => {
                        cancel.store(true, std::sync::atomic::Ordering::Relaxed);
                        interrupt = Some(m);
                    }
                }
            }
        };
        if let Some((cmd, reply)) = interrupt {
            if let Ok(ids) = &result {
                // Done before it saw the cancel.
                for id in ids {
                    let _ = docker.remove(id).await;
                }
            }
            return Some((cmd, reply));
        }
        let ids = match result {
            Ok(ids) => ids,
            Err(e) => {
                self.apply(Event::StartFailed { reason: format!("pod start failed: {e}") }).await;
                return None;
            }
        };
        self.rec.containers = self.inspect_all(&ids).await;
        self.rec.mains = self.rec.containers.iter().map(container_identity).collect();
        let now = now_ms();
        self.rec.counter.running_since_ms = Some(now);
        self.rec.last_start_ms = Some(now);
        self.exited = vec![None; ids.len()];
        if self.apply(Event::MainReady).await {
            self.watch_containers();
            self.start_health_checks();
        }
        None
    }

    /// Fresh info for each container; one that cannot be inspected keeps its id only.
    async fn inspect_all(&self, ids: &[String]) -> Vec<ContainerInfo> {
        let mut infos = Vec::new();
        for id in ids {
            let info = match self.shared.docker.inspect(id).await {
                Ok(info) => info,
                Err(_) => ContainerInfo { id: id.clone(), ..Default::default() },
            };
            infos.push(info);
        }
        infos
    }

    /// Watches every container of the current generation for its exit, and copies its output
    /// into the run dir's log files (resuming where the last follower stopped).
    fn watch_containers(&mut self) {
        let rendered = self.rendered().ok();
        for (index, info) in self.rec.containers.iter().enumerate() {
            let (tx, generation, docker, id) =
                (self.tx.clone(), self.generation, self.shared.docker.clone(), info.id.clone());
            tokio::spawn(async move {
                let msg = match docker.wait(&id).await {
                    Ok(code) => Msg::MainExited { generation, index, status: ExitStatus::Code(code as i32) },
                    Err(DockerError::NoContainer(_)) => {
                        Msg::MainExited { generation, index, status: ExitStatus::Unknown }
                    }
                    Err(e) => Msg::RuntimeLost { generation, reason: e.to_string() },
                };
                let _ = tx.send(msg);
            });
            if let (Some(r), Some(c)) =
                (&rendered, rendered.as_ref().and_then(|r| r.pod.as_ref()).and_then(|p| p.containers.get(index)))
            {
                self.log_tasks.push(self.shared.docker.follow_logs(&info.id, &r.run_dir, &c.name));
            }
        }
    }

    /// A container ended. Seed 001: a failure kills the whole pod; a clean exit (0) leaves the
    /// others running, and the pod ends when all have exited.
    pub(super) async fn on_container_exit(&mut self, index: usize, status: ExitStatus) {
        if let Some(id) = self.rec.containers.get(index).map(|c| c.id.clone()) {
            if let Ok(info) = self.shared.docker.inspect(&id).await {
                self.rec.containers[index] = info;
            }
        }
        let name = self.rec.containers.get(index).map(|c| c.name.clone()).unwrap_or_default();
        if !status.is_success() {
            tracing::info!(instance = %self.rec.id, "container {name} {status}: the pod ends");
            self.commit_event("containerExited", serde_json::json!({"container": name, "status": status})).await;
        }
        if status.is_success() {
            if let Some(slot) = self.exited.get_mut(index) {
                *slot = Some(0);
            }
            if self.exited.iter().any(Option::is_none) {
                self.commit_event("containerExited", serde_json::json!({"container": name, "status": status})).await;
                return;
            }
        }
        self.on_main_exit(index, status).await;
    }

    /// SIGKILL to every container of the pod, and their final info recorded.
    pub(super) async fn kill_pod(&mut self) -> bool {
        let ids = self.container_ids();
        let docker = self.shared.docker.clone();
        let kills = ids.iter().map(|id| docker.signal(id, "SIGKILL"));
        let results = futures_util::future::join_all(kills).await;
        let ok = results.iter().all(Result::is_ok);
        for e in results.into_iter().filter_map(Result::err) {
            tracing::warn!(instance = %self.rec.id, "kill: {e}");
        }
        self.refresh_containers().await;
        self.remove_holder().await;
        ok
    }

    /// The pod's network holder goes once its containers have: nothing else needs the network.
    async fn remove_holder(&self) {
        if let Err(e) = self.shared.docker.remove_holder(&self.rec.key()).await {
            tracing::warn!(instance = %self.rec.id, "removing the pod's network holder: {e}");
        }
    }

    async fn refresh_containers(&mut self) {
        let ids = self.container_ids();
        if !ids.is_empty() {
            self.rec.containers = self.inspect_all(&ids).await;
        }
    }

    /// docker stop of every container (SIGTERM, killPolicy.gracePeriod, SIGKILL), requests
    /// handled meanwhile as a process stop handles them. True when all are stopped.
    pub(super) async fn stop_pod(&mut self) -> Result<(), String> {
        let grace = self.kill_grace();
        let (docker, ids) = (self.shared.docker.clone(), self.container_ids());
        let stops = async move {
            let all = ids.iter().map(|id| docker.stop(id, grace));
            futures_util::future::join_all(all).await.into_iter().find_map(Result::err)
        };
        tokio::pin!(stops);
        let failure = loop {
            tokio::select! {
                r = &mut stops => break r,
                Some(msg) = self.rx.recv() => self.during_stop(msg).await,
            }
        };
        self.refresh_containers().await;
        if failure.is_none() {
            self.remove_holder().await;
        }
        match failure {
            None => Ok(()),
            Some(e) => Err(format!("cannot stop the pod's containers: {e}")),
        }
    }

    /// After a daemon restart: the recorded containers are re-adopted if they still run (never
    /// restarted); one that ended while the daemon was away ends the pod by the policy.
    pub(super) async fn readopt_pod(&mut self) {
        self.new_generation();
        self.mains.clear();
        let mut infos = Vec::new();
        for (index, recorded) in self.rec.containers.clone().iter().enumerate() {
            match self.shared.docker.inspect(&recorded.id).await {
                Ok(info) if info.is_running() => infos.push(info),
                Ok(info) => {
                    tracing::info!(instance = %self.rec.id, "container {} ended while the daemon was away", info.name);
                    let status = ExitStatus::Code(info.exit_code as i32);
                    self.rec.containers[index] = info;
                    return self.on_container_exit_after_absence(index, status).await;
                }
                Err(DockerError::NoContainer(_)) => {
                    tracing::info!(instance = %self.rec.id, "container {} is gone", recorded.id);
                    return self.on_main_exit(index, ExitStatus::Unknown).await;
                }
                Err(e) => return self.lose(e.to_string()).await,
            }
        }
        tracing::info!(instance = %self.rec.id, "re-adopted {} container(s)", infos.len());
        self.rec.containers = infos;
        self.exited = vec![None; self.rec.containers.len()];
        self.journal.show(&self.rec);
        self.watch_containers();
        self.start_health_checks();
    }

    async fn on_container_exit_after_absence(&mut self, index: usize, status: ExitStatus) {
        self.exited = vec![None; self.rec.containers.len()];
        // Others may have exited cleanly too: count them before deciding.
        for (i, c) in self.rec.containers.iter().enumerate() {
            if !c.is_running() && c.exit_code == 0 && i != index {
                self.exited[i] = Some(0);
            }
        }
        self.on_container_exit(index, status).await;
    }

    /// dockerd stopped answering: the pod is Lost (its containers may well run on).
    pub(super) async fn lose(&mut self, reason: String) {
        tracing::warn!(instance = %self.rec.id, "{reason}");
        self.new_generation();
        if self.rec.state.kind() == crate::supervisor::state::Kind::Lost {
            return;
        }
        self.apply(Event::RuntimeLost { reason }).await;
    }

    /// A Lost pod: when dockerd answers again, containers still running are watched again;
    /// any that ended ends the pod.
    pub(super) async fn try_recover(&mut self) {
        if self.shared.docker.ping().await.is_err() {
            return;
        }
        self.new_generation();
        let mut infos = Vec::new();
        for (index, recorded) in self.rec.containers.clone().iter().enumerate() {
            match self.shared.docker.inspect(&recorded.id).await {
                Ok(info) if info.is_running() || self.exited.get(index) == Some(&Some(0)) => infos.push(info),
                Ok(info) => {
                    let status = ExitStatus::Code(info.exit_code as i32);
                    self.rec.containers[index] = info;
                    return self.on_container_exit_after_absence(index, status).await;
                }
                Err(DockerError::NoContainer(_)) => return self.on_main_exit(index, ExitStatus::Unknown).await,
                Err(_) => return,
            }
        }
        self.rec.containers = infos;
        if self.apply(Event::RuntimeBack).await {
            tracing::info!(instance = %self.rec.id, "dockerd is back; the pod's containers still run");
            self.watch_containers();
            self.start_health_checks();
        }
    }

    /// SIGHUP to every container (a pod has no reloadCmd).
    pub(super) async fn reload_pod(&mut self) -> Result<(), String> {
        for id in self.container_ids() {
            self.shared.docker.signal(&id, "SIGHUP").await.map_err(|e| e.to_string())?;
        }
        self.commit_event("reloaded", serde_json::json!({})).await;
        Ok(())
    }

    /// Starts each container's local check: HTTP and TCP probes from the host (published or
    /// host ports), COMMAND checks run inside the container (docker exec).
    pub(super) fn start_pod_health_checks(&mut self, rendered: &RenderedInstance) {
        let Some(pod) = &rendered.pod else { return };
        let started = self.rec.last_start_ms.unwrap_or_else(now_ms);
        self.trackers = Vec::with_capacity(pod.containers.len());
        for (index, c) in pod.containers.iter().enumerate() {
            let check = c.health_checks.iter().find(|c| c.kind.is_local()).cloned();
            self.trackers.push(check.as_ref().map(|c| crate::health::Tracker::new(c, started)));
            let Some(check) = check else { continue };
            let Some(id) = self.rec.containers.get(index).map(|c| c.id.clone()) else { continue };
            // BRIDGE and USER pods are probed at their own address (the main container's, whose
            // network every container shares), on the container's port; HOST pods on 127.0.0.1.
            let own_address = matches!(pod.network, NetworkMode::Bridge | NetworkMode::User);
            let address = self.rec.containers.first().and_then(|c| c.ip_address.parse::<std::net::IpAddr>().ok());
            let (tx, generation, shared) = (self.tx.clone(), self.generation, self.shared.clone());
            self.health_tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(check.delay_seconds)).await;
                loop {
                    let probed = match (own_address, address) {
                        (false, _) => shared.prober.probe(&check).await,
                        (true, Some(ip)) => shared.prober.probe_at(ip, &check).await,
                        (true, None) => match check.probe {
                            crate::spec::render::Probe::Command { .. } => None,
                            _ => Some(crate::health::Outcome::Fail("the pod has no address to probe".into())),
                        },
                    };
                    let outcome = match probed {
                        Some(o) => o,
                        None => {
                            let command = match &check.probe {
                                crate::spec::render::Probe::Command { command } => command.clone(),
                                _ => String::new(),
                            };
                            let timeout = Duration::from_secs(check.timeout_seconds.max(1));
                            shared.docker.exec_check(&id, &command, timeout).await
                        }
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

    /// Removes the pod's containers (delete, or a start that must begin from nothing).
    pub(super) async fn remove_pod(&mut self) {
        if let Err(e) = self.shared.docker.remove_instance(&self.rec.key()).await {
            tracing::warn!(instance = %self.rec.id, "removing containers: {e}");
        }
    }

    /// Why the pod ended, if the OOM killer ended a container.
    pub(super) fn pod_oom(&self) -> Option<String> {
        let c = self.rec.containers.iter().find(|c| c.oom_killed)?;
        Some(format!("OOM-killed: container {} was over its memory limit", c.name))
    }
}

/// The container's main process as the record keeps processes' (pid and start time), so that
/// `status` shows its pid like a process's.
fn container_identity(info: &ContainerInfo) -> Option<ProcessIdentity> {
    ProcessIdentity::of(i32::try_from(info.pid).ok().filter(|p| *p > 0)?)
}
