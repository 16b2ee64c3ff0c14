//! The pod workload (seed 001): an instance's containers in the Docker Engine, started in
//! order, watched by `docker wait`, stopped by `docker stop`. The state machine, the store and
//! the restart policy are the actor's; only these steps talk to dockerd.

use super::hooks::{self, Hook};
use super::workload::{
    BoxFuture, Cancel, Cx, InPlace, Launched, Probe, ProbeRole, Readopted, RunEnd, Runner, Workload,
};
use crate::cni::pods::HolderState;
use crate::health::Outcome;
use crate::protocol::{ContainerExited, InstanceChange};
use crate::runtime::docker::{ContainerInfo, DockerError, Holder, PodStart, PullOutcome, RegistryAuth};
use crate::runtime::process::ResolvedUser;
use crate::runtime::procinfo::ProcessIdentity;
use crate::spec::pod::NetworkMode;
use crate::spec::render::pod::{RenderedContainer, RenderedPod};
use crate::spec::render::{InjectionTarget, Probe as Handler};
use crate::spec::RenderedInstance;
use crate::supervisor::instance::messages::Msg;
use crate::supervisor::record::InstanceRecord;
use crate::supervisor::state::ExitStatus;
use crate::supervisor::{values, Shared};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

/// How often a Lost pod asks whether dockerd is back.
pub(super) const LOST_POLL: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct Pod {
    /// Env vars from secrets and configmaps, per container, resolved at the last staging.
    injected_env: Vec<Vec<(String, String)>>,
    /// The same per init container.
    init_injected_env: Vec<Vec<(String, String)>>,
    /// The containers' log followers (their output into the run dir's files).
    log_tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Containers that exited cleanly while others run on (seed 001: the pod ends when all
    /// have exited).
    exited: Vec<Option<i64>>,
    /// Registry credentials from the pod's `imagePullSecrets`, resolved at the last staging.
    pull_auths: Vec<RegistryAuth>,
}

impl Workload for Pod {
    fn new(_shared: &Shared, _rec: &InstanceRecord) -> Pod {
        Pod::default()
    }

    /// Secret and configmap files go below the run dir (mounted read-only into the
    /// containers); dockerd makes and limits the containers' cgroups.
    fn prepare(
        &mut self,
        cx: &mut Cx<'_>,
        rendered: &RenderedInstance,
        run_dir: std::os::fd::OwnedFd,
    ) -> Result<(), String> {
        super::process::run_dir_access(&run_dir, rendered, &[]).map_err(|e| format!("run directory {e}"))?;
        let Some(pod) = &rendered.pod else { return Err("the spec renders no pod".into()) };
        self.injected_env = pod.containers.iter().map(|c| inject(cx, rendered, c)).collect::<Result<_, _>>()?;
        self.init_injected_env =
            pod.init_containers.iter().map(|c| inject(cx, rendered, c)).collect::<Result<_, _>>()?;
        self.pull_auths = pull_auths(cx, pod)?;
        let lookup = |source, store: &str| {
            let key = (values::ValueKind::of(source), values::Values::key(&cx.rec.id.namespace, store));
            cx.shared.values.lock().expect("values lock").get(&key).map(|v| v.data.clone())
        };
        let reaper = Some(&cx.shared.reaper);
        crate::runtime::volumes::prepare(pod, &rendered.run_dir, &cx.rec.id.namespace, &lookup, reaper)?;
        if pod.volumes.iter().any(|v| matches!(v.content, crate::spec::pod::VolumeContent::Kept { .. })) {
            crate::supervisor::Supervisor::note_kept_ordinal(cx.shared, &cx.rec.id);
        }
        Ok(())
    }

    async fn clear(&mut self, _cx: &mut Cx<'_>) -> bool {
        // A pod's start removes its instance's leftover containers itself (see `start_pod`).
        true
    }

    async fn clear_unrecorded(&mut self, _cx: &mut Cx<'_>) {
        // Stopped containers are kept for inspection until the next start removes them.
    }

    /// Starts the pod's containers in order (seed 001): Running as soon as dockerd has them all
    /// started; a container that then exits is seen by its watch.
    async fn launch(&mut self, cx: &mut Cx<'_>, rendered: &RenderedInstance, cancel: &Cancel) -> Launched {
        let Some(pod) = &rendered.pod else { return Launched::Failed("the spec renders no pod".into()) };
        // Nothing of the pod may run before its Starting is durable.
        if cx.journal.has_held() {
            cx.journal.commit(&cx.shared.store, cx.rec, Vec::new()).await;
        }
        for t in self.log_tasks.drain(..) {
            t.abort();
        }
        let (instance, pod_id) = (cx.rec.key(), crate::spec::pod::pod_id(&cx.rec.id));
        // An earlier run's attachment (a start cut short, an end whose DEL did not run) is
        // given back before a new one is made, once that run's containers are gone.
        if cx.rec.network.is_some() {
            if let Err(e) = cx.shared.docker.remove_instance(&instance).await {
                return Launched::Failed(format!("pod start failed: {e}"));
            }
        }
        if let Err(e) = release_network(cx).await {
            return Launched::Failed(format!("pod start failed: {e}"));
        }
        let cni = cx.shared.cni_mode && matches!(pod.network, NetworkMode::Bridge | NetworkMode::User);
        let network = match cni.then(|| cx.shared.networks.network(pod.user_network.as_deref())).transpose() {
            Ok(network) => network,
            Err(e) => return Launched::Failed(format!("pod start failed: CNI: {e}")),
        };
        let (docker, spec) = (cx.shared.docker.clone(), cx.spec);
        // Its images, by their pull policies, before anything of the pod is made.
        match pull_images(cx, pod, &self.pull_auths, cancel).await {
            Ok(()) => {}
            Err(_) if cancel.is_set() => return Launched::Cancelled,
            Err(e) => return Launched::Failed(format!("pod start failed: {e}")),
        }
        let cluster_dns = match (pod.cluster_dns, &cx.shared.pod_dns) {
            (true, Some(resolver)) => Some(resolver.for_namespace(&cx.rec.id.namespace)),
            // Refused at apply; a spec stored before the daemon lost its `pod_dns` fails here.
            (true, None) => {
                let why = crate::services::dns::no_pod_dns();
                return Launched::Failed(format!("pod start failed: spec.template.spec.dns {why}"));
            }
            (false, _) => None,
        };
        let mut start = PodStart {
            instance: &instance,
            pod_id: &pod_id,
            pod,
            injected_env: &self.injected_env,
            init_injected_env: &self.init_injected_env,
            labels: &spec.spec.metadata.labels,
            log_dir: &rendered.run_dir,
            cni,
            dollar: &[],
            cluster_dns: cluster_dns.as_ref(),
        };
        // Cancelled, the start removes what it made (see `Docker::start_pod`).
        let holder = match docker.start_pod_holder(&start, &|| cancel.is_set()).await {
            Ok(holder) => holder,
            Err(_) if cancel.is_set() => return Launched::Cancelled,
            Err(e) => return Launched::Failed(format!("pod start failed: {e}")),
        };
        let mut dollar = Vec::new();
        if let (Some(network), Some(holder)) = (&network, &holder) {
            match attach(cx, network, holder, &instance).await {
                Ok(values) => dollar = values,
                Err(e) => {
                    let _ = docker.remove_instance(&instance).await;
                    return Launched::Failed(format!("pod start failed: {e}"));
                }
            }
        }
        start.dollar = &dollar;
        let ids = match docker.start_pod_containers(&start, holder.as_ref(), &|| cancel.is_set()).await {
            Ok(ids) if cancel.is_set() => {
                // Done before it saw the cancel.
                for id in &ids {
                    let _ = docker.remove(id).await;
                }
                let _ = docker.remove_holder(&instance).await;
                let _ = release_network(cx).await;
                return Launched::Cancelled;
            }
            Ok(ids) => ids,
            Err(e) => {
                // The start removed the holder; its attachment goes too.
                let _ = release_network(cx).await;
                if cancel.is_set() {
                    return Launched::Cancelled;
                }
                return Launched::Failed(format!("pod start failed: {e}"));
            }
        };
        cx.rec.holder = holder.map(|h| h.id);
        cx.rec.containers = inspect_all(cx.shared, &ids).await;
        show_address(cx.rec);
        cx.rec.mains = cx.rec.containers.iter().map(container_identity).collect();
        self.exited = vec![None; ids.len()];
        Launched::Running { since_ms: crate::supervisor::record::now_ms() }
    }

    /// Watches every container for its exit, and copies its output into the run dir's log
    /// files (resuming where the last follower stopped).
    fn watch(&mut self, cx: &mut Cx<'_>) {
        // Followers of an earlier watch (a pod found again after dockerd came back) would copy
        // the same lines twice.
        for t in self.log_tasks.drain(..) {
            t.abort();
        }
        for (index, info) in cx.rec.containers.iter().enumerate() {
            watch_exit(cx, info.id.clone(), index);
            let rendered = cx.rendered.and_then(|r| Some((r, r.pod.as_ref()?.containers.get(index)?)));
            if let Some((r, c)) = rendered {
                self.log_tasks.push(cx.shared.docker.follow_logs(&info.id, &r.run_dir, &c.name));
            }
        }
        // The pod's network holder is part of it, in every network mode: killed by hand, it
        // ends the pod (whose end gives a CNI address back), reported as the index after the
        // containers'. (Left alone, the containers ran on with only `lo`, "Running, ready".)
        if let Some(holder) = holder_of(cx.rec) {
            watch_exit(cx, holder, cx.rec.containers.len());
        }
    }

    /// After a daemon restart: the recorded containers are re-adopted if they still run (never
    /// restarted); one that ended while the daemon was away ends the pod by the policy.
    async fn readopt(&mut self, cx: &mut Cx<'_>) -> Readopted {
        let found = self.look_again(cx, false).await;
        if matches!(found, Readopted::Running) {
            tracing::info!(instance = %cx.rec.id, "re-adopted {} container(s)", cx.rec.containers.len());
            check_network(cx).await;
            cx.journal.show(cx.rec);
        }
        found
    }

    /// A Lost pod: when dockerd answers again, containers still running are watched again;
    /// any that ended ends the pod.
    async fn recover(&mut self, cx: &mut Cx<'_>) -> Option<Readopted> {
        cx.shared.docker.ping().await.ok()?;
        match self.look_again(cx, true).await {
            // Still no answer about a container: ask again later.
            Readopted::Lost(_) => None,
            found => Some(found),
        }
    }

    /// A container ended. Seed 001: a failure kills the whole pod; a clean exit (0) leaves the
    /// others running, and the pod ends when all have exited.
    async fn on_end(&mut self, cx: &mut Cx<'_>, index: usize, status: ExitStatus) -> Option<RunEnd> {
        if index >= cx.rec.containers.len() {
            let holder = format!("its network holder steward-{}-network", crate::spec::pod::pod_id(&cx.rec.id));
            tracing::warn!(instance = %cx.rec.id, "the pod's network holder {status}: the pod ends");
            let detail = ContainerExited { container: "(network holder)".into(), status };
            cx.note(InstanceChange::ContainerExited { detail }).await;
            self.kill_pod(cx).await;
            return Some(RunEnd { oom: None, which: Some(holder) });
        }
        if let Some(id) = cx.rec.containers.get(index).map(|c| c.id.clone()) {
            if let Ok(info) = cx.shared.docker.inspect(&id).await {
                cx.rec.containers[index] = info;
            }
        }
        let name = cx.rec.containers.get(index).map(|c| c.name.clone()).unwrap_or_default();
        if status.is_success() {
            if let Some(slot) = self.exited.get_mut(index) {
                *slot = Some(0);
            }
        } else {
            tracing::info!(instance = %cx.rec.id, "container {name} {status}: the pod ends");
        }
        if !status.is_success() || self.exited.iter().any(Option::is_none) {
            let detail = ContainerExited { container: name.clone(), status };
            cx.note(InstanceChange::ContainerExited { detail }).await;
        }
        if status.is_success() && self.exited.iter().any(Option::is_none) {
            return None;
        }
        let which = match cx.rec.containers.get(index) {
            Some(c) => format!("container {}", crate::spec::pod::short_container_name(&cx.rec.id, &c.name)),
            None => format!("container {index}"),
        };
        self.kill_pod(cx).await;
        let oom = cx.rec.containers.iter().find(|c| c.oom_killed);
        let oom = oom.map(|c| format!("OOM-killed: container {} was over its memory limit", c.name));
        Some(RunEnd { oom, which: Some(which) })
    }

    /// docker stop of every container (SIGTERM, killPolicy.gracePeriod, SIGKILL).
    fn stop(&mut self, cx: &mut Cx<'_>, _polite: bool, grace: Duration) -> BoxFuture<Result<(), String>> {
        let (docker, ids) = (cx.shared.docker.clone(), container_ids(cx.rec));
        Box::pin(async move {
            let all = ids.iter().map(|id| docker.stop(id, grace));
            match futures_util::future::join_all(all).await.into_iter().find_map(Result::err) {
                None => Ok(()),
                Some(e) => Err(format!("cannot stop the pod's containers: {e}")),
            }
        })
    }

    async fn finish_stop(&mut self, cx: &mut Cx<'_>, waited: Result<(), String>) -> Result<(), String> {
        refresh_containers(cx).await;
        if waited.is_ok() {
            if let Err(e) = release_network(cx).await {
                tracing::error!(instance = %cx.rec.id, "{e}");
            }
            remove_holder(cx).await;
        }
        waited
    }

    async fn kill(&mut self, cx: &mut Cx<'_>) -> bool {
        self.kill_pod(cx).await
    }

    /// SIGHUP to every container (a pod has no reloadCmd).
    async fn reload(&mut self, cx: &mut Cx<'_>) -> Result<(), String> {
        for id in container_ids(cx.rec) {
            cx.shared.docker.signal(&id, "SIGHUP").await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Into a running container (the first, or the one named) through the engine's archive
    /// API; the owner is root unless asked (a name is looked up in the container's passwd).
    async fn copy_in(
        &mut self,
        cx: &mut Cx<'_>,
        file: &crate::supervisor::instance::FileCopy,
    ) -> Result<crate::protocol::FileCopied, String> {
        let Some(pod) = cx.rendered.and_then(|r| r.pod.as_ref()) else { return Err("the spec renders no pod".into()) };
        let index = match &file.target {
            Some(name) => pod.containers.iter().position(|c| &c.name == name).ok_or_else(|| {
                let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
                format!("no container {name:?} in the pod (it has {})", names.join(", "))
            })?,
            None => 0,
        };
        let name = pod.containers.get(index).map(|c| c.name.clone()).unwrap_or_default();
        let running = cx.rec.containers.get(index).filter(|_| self.exited.get(index).is_none_or(Option::is_none));
        let id = running.map(|c| c.id.clone()).ok_or_else(|| format!("container {name} is not running"))?;
        if !file.path.starts_with('/') || file.path.ends_with('/') {
            return Err(format!("path {:?} must be an absolute file path in the container", file.path));
        }
        let docker = &cx.shared.docker;
        let owner = match file.user.as_deref() {
            None | Some("root") => (0, 0),
            Some(u) if u.chars().all(|c| c.is_ascii_digit() || c == ':') => values::resolve_owner(u)?,
            Some(u) => docker.container_user(&id, u).await.map_err(|e| named(e, &id, &name))?,
        };
        docker.copy_into(&id, &file.path, &file.data, file.mode(), owner).await.map_err(|e| named(e, &id, &name))?;
        Ok(crate::protocol::FileCopied {
            path: file.path.clone(),
            bytes: file.data.len() as u64,
            container: Some(name),
            owner: format!("{}:{}", owner.0, owner.1),
            mode: format!("{:04o}", file.mode()),
        })
    }

    fn restarts_in_place(&self, _cx: &Cx<'_>) -> bool {
        false
    }

    async fn restart_in_place(&mut self, _cx: &mut Cx<'_>) -> InPlace {
        InPlace::NotRun
    }

    /// Each container's local check and seed-003 liveness and readiness probes: HTTP and TCP
    /// at the pod's address (or the host's, see [`probe_address`]), EXEC and COMMAND inside the
    /// container (docker exec).
    fn probes(&self, cx: &Cx<'_>) -> Vec<Probe> {
        let Some(pod) = cx.rendered.and_then(|r| r.pod.as_ref()) else { return Vec::new() };
        let address = probe_address(cx, pod);
        let mut probes = Vec::new();
        for (index, c) in pod.containers.iter().enumerate() {
            let Some(id) = cx.rec.containers.get(index).map(|c| c.id.clone()) else { continue };
            let runner =
                |handler: &Handler, timeout| container_runner(cx.shared, &id, address.clone(), handler, timeout);
            if let Some(check) = c.health_checks.iter().find(|c| c.kind.is_local()) {
                probes.push(Probe {
                    index,
                    delay: Duration::from_secs(check.delay_seconds),
                    period: Duration::from_secs(check.interval_seconds.max(1)),
                    run: runner(&check.probe, check.timeout_seconds),
                    role: ProbeRole::Check(check.clone()),
                });
            }
            for (probe, readiness) in [(&c.lifecycle.liveness, false), (&c.lifecycle.readiness, true)] {
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

    fn post_start(&self, cx: &Cx<'_>) -> Option<BoxFuture<Result<(), String>>> {
        hooks::post_start(self.hooks(cx, |l| l.post_start.as_ref(), hooks::POST_START_TIMEOUT_SECS))
    }

    fn pre_stop(&self, cx: &Cx<'_>, deadline: tokio::time::Instant) -> Option<BoxFuture<()>> {
        let hooks = self.hooks(cx, |l| l.pre_stop.as_ref(), hooks::secs_until(deadline));
        hooks::pre_stop(&cx.rec.id, hooks, deadline)
    }

    /// A CNI pod's address is given back (owed until a DEL succeeds) before its record goes.
    async fn before_delete(&mut self, cx: &mut Cx<'_>) -> Result<(), String> {
        release_network(cx).await
    }

    async fn remove(&mut self, cx: &mut Cx<'_>) {
        if let Err(e) = cx.shared.docker.remove_instance(&cx.rec.key()).await {
            tracing::warn!(instance = %cx.rec.id, "removing containers: {e}");
        }
        // Docker removes each container's cgroup, not the instance's one above them (left
        // empty; none with Docker's systemd driver or without cgroup_parent).
        let cgroup = cx.shared.cgroups.instance(&super::cgroup_key(cx.rec));
        if let Err(e) = cgroup.remove() {
            tracing::debug!(instance = %cx.rec.id, "removing the pod's cgroup: {e}");
        }
        for t in self.log_tasks.drain(..) {
            t.abort();
        }
    }
}

impl Pod {
    /// Each running container's hook as `pick` chooses it, ready to run once within
    /// `timeout_secs` (EXEC inside the container, HTTP and TCP at the pod's address).
    fn hooks(
        &self,
        cx: &Cx<'_>,
        pick: fn(&crate::spec::render::probe::RenderedLifecycle) -> Option<&Handler>,
        timeout_secs: u64,
    ) -> Vec<Hook> {
        let Some(pod) = cx.rendered.and_then(|r| r.pod.as_ref()) else { return Vec::new() };
        let address = probe_address(cx, pod);
        let mut hooks = Vec::new();
        for (index, c) in pod.containers.iter().enumerate() {
            let Some(handler) = pick(&c.lifecycle) else { continue };
            let running = cx.rec.containers.get(index).filter(|_| self.exited.get(index) != Some(&Some(0)));
            let Some(info) = running else { continue };
            hooks.push((c.name.clone(), container_runner(cx.shared, &info.id, address.clone(), handler, timeout_secs)));
        }
        hooks
    }

    /// SIGKILL to every container of the pod, and their final info recorded.
    async fn kill_pod(&mut self, cx: &mut Cx<'_>) -> bool {
        let docker = cx.shared.docker.clone();
        let ids = container_ids(cx.rec);
        let results = futures_util::future::join_all(ids.iter().map(|id| docker.signal(id, "SIGKILL"))).await;
        let ok = results.iter().all(Result::is_ok);
        for e in results.into_iter().filter_map(Result::err) {
            tracing::warn!(instance = %cx.rec.id, "kill: {e}");
        }
        refresh_containers(cx).await;
        if let Err(e) = release_network(cx).await {
            tracing::error!(instance = %cx.rec.id, "{e}");
        }
        remove_holder(cx).await;
        ok
    }

    /// What runs of the recorded containers (a re-adoption, or dockerd back after Lost).
    /// `lost`: containers that exited cleanly before dockerd went away stay counted as such.
    async fn look_again(&mut self, cx: &mut Cx<'_>, lost: bool) -> Readopted {
        let mut infos = Vec::new();
        for (index, recorded) in cx.rec.containers.clone().iter().enumerate() {
            let exited_cleanly = lost && self.exited.get(index) == Some(&Some(0));
            match cx.shared.docker.inspect(&recorded.id).await {
                Ok(info) if info.is_running() || exited_cleanly => infos.push(info),
                Ok(info) => {
                    tracing::info!(instance = %cx.rec.id, "container {} ended while nobody watched", info.name);
                    let status = ExitStatus::Code(info.exit_code as i32);
                    cx.rec.containers[index] = info;
                    show_address(cx.rec);
                    // Others may have exited cleanly too: count them before deciding.
                    self.exited = cx
                        .rec
                        .containers
                        .iter()
                        .enumerate()
                        .map(|(i, c)| (i != index && !c.is_running() && c.exit_code == 0).then_some(0))
                        .collect();
                    return Readopted::Ended { index, status };
                }
                Err(DockerError::NoContainer(_)) => {
                    tracing::info!(instance = %cx.rec.id, "container {} was removed", crate::spec::pod::short_container_name(&cx.rec.id, &recorded.name));
                    return Readopted::Ended { index, status: ExitStatus::Removed };
                }
                Err(e) => return Readopted::Lost(e.to_string()),
            }
        }
        cx.rec.containers = infos;
        show_address(cx.rec);
        if !lost {
            self.exited = vec![None; cx.rec.containers.len()];
        }
        // A pod's network holder killed or removed while nobody watched ends the pod.
        if let Some(holder) = holder_of(cx.rec) {
            let index = cx.rec.containers.len();
            match cx.shared.docker.inspect(&holder).await {
                Ok(info) if info.is_running() => {}
                Ok(info) => return Readopted::Ended { index, status: ExitStatus::Code(info.exit_code as i32) },
                Err(DockerError::NoContainer(_)) => return Readopted::Ended { index, status: ExitStatus::Removed },
                Err(e) => return Readopted::Lost(e.to_string()),
            }
        }
        Readopted::Running
    }
}

/// Container `c`'s secrets and configmaps: its files written (below the run dir, mounted
/// read-only), its env vars returned.
/// The registry credentials of the pod's `imagePullSecrets`: each secret's docker config JSON
/// (key `.dockerconfigjson`). Err names the secret and what is wrong.
fn pull_auths(cx: &Cx<'_>, pod: &RenderedPod) -> Result<Vec<RegistryAuth>, String> {
    let namespace = &cx.rec.id.namespace;
    let mut auths = Vec::new();
    for name in &pod.image_pull_secrets {
        let key = values::Values::key(namespace, name);
        let secret = cx.shared.values.lock().expect("values lock").get(&(values::ValueKind::Secret, key)).cloned();
        let secret = secret.ok_or_else(|| format!("imagePullSecrets: secret {namespace}/{name} does not exist"))?;
        let config = secret.data.get(DOCKER_CONFIG_KEY).ok_or_else(|| {
            format!("imagePullSecrets: secret {namespace}/{name} has no key {DOCKER_CONFIG_KEY} (a docker config JSON)")
        })?;
        let found = crate::runtime::docker::parse_docker_config(config)
            .map_err(|e| format!("imagePullSecrets: secret {namespace}/{name}: {DOCKER_CONFIG_KEY}: {e}"))?;
        auths.extend(found);
    }
    Ok(auths)
}

/// The key of an image pull secret's docker config JSON (Kubernetes' name for it).
pub const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// Makes every image of the pod (init containers first) present by its pull policy, one image
/// at a time: what the engine reports goes into the instance's status message (at most once a
/// second), each pull into the journal (`imagePulled`). A failed pull fails the start with the
/// registry's message; the restart policy then retries it with its backoff.
async fn pull_images(
    cx: &mut Cx<'_>,
    pod: &RenderedPod,
    auths: &[RegistryAuth],
    cancel: &Cancel,
) -> Result<(), DockerError> {
    let docker = cx.shared.docker.clone();
    let mut seen = std::collections::BTreeSet::new();
    for c in pod.init_containers.iter().chain(&pod.containers) {
        if !seen.insert(c.image.clone()) {
            continue;
        }
        let latest: Arc<std::sync::Mutex<Option<String>>> = Default::default();
        let report = {
            let latest = latest.clone();
            move |line: &str| *latest.lock().expect("progress lock") = Some(line.to_string())
        };
        let pull = docker.ensure_image(&c.image, c.pull_policy, auths, &report);
        tokio::pin!(pull);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let outcome = loop {
            tokio::select! {
                outcome = &mut pull => break outcome,
                _ = cancel.wait() => return Err(DockerError::Cancelled),
                _ = tick.tick() => {
                    let line = latest.lock().expect("progress lock").take();
                    if let Some(line) = line {
                        cx.rec.message = line;
                        cx.rec.updated_ms = crate::supervisor::record::now_ms();
                        cx.journal.commit(&cx.shared.store, cx.rec, Vec::new()).await;
                    }
                }
            }
        }?;
        let detail = |outcome: &str, secs: Option<f64>, message: String| crate::protocol::ImagePulled {
            image: c.image.clone(),
            outcome: outcome.into(),
            secs,
            message,
        };
        let detail = match outcome {
            PullOutcome::Present => continue,
            PullOutcome::Pulled { secs, joined: false } => detail("pulled", Some(secs), String::new()),
            PullOutcome::Pulled { secs, joined: true } => detail("joined", Some(secs), String::new()),
            PullOutcome::PresentAfterFailedPull { message } => {
                tracing::warn!(instance = %cx.rec.id, "pulling {} failed, the image on the host is used: {message}", c.image);
                detail("presentAfterFailedPull", None, message)
            }
        };
        cx.rec.message.clear();
        cx.note(InstanceChange::ImagePulled { detail }).await;
    }
    Ok(())
}

fn inject(cx: &Cx<'_>, rendered: &RenderedInstance, c: &RenderedContainer) -> Result<Vec<(String, String)>, String> {
    if c.injections.iter().any(|i| matches!(i.target, InjectionTarget::File { .. })) {
        let dir = rendered.run_dir.join("values").join(&c.name);
        values::private_dir(&dir).map_err(|e| format!("cannot create {e}"))?;
    }
    let lookup = |kind, key: &str| cx.shared.values.lock().expect("values lock").get(&(kind, key.to_string())).cloned();
    values::inject(&c.injections, &cx.rec.id.namespace, lookup, &rendered.run_dir, &ResolvedUser::root())
}

/// Where a pod's HTTP and TCP probes and hooks go: a BRIDGE or USER pod's own address (the
/// first container's, whose network every container shares), on the container's port; a HOST
/// pod's 127.0.0.1. Err: the pod has no address (network NONE, or none known).
fn probe_address(cx: &Cx<'_>, pod: &RenderedPod) -> Result<IpAddr, String> {
    match pod.network {
        NetworkMode::Host => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        NetworkMode::Bridge | NetworkMode::User => cx
            .rec
            .containers
            .first()
            .and_then(|c| c.ip_address.parse::<IpAddr>().ok())
            .ok_or_else(|| "the pod has no address to probe".to_string()),
        NetworkMode::None => Err("the pod has no network to probe (network NONE)".into()),
    }
}

/// Runs `handler` once for container `id` within `timeout_secs`: HTTP and TCP at `address`,
/// a command inside the container (docker exec).
fn container_runner(
    shared: &Arc<Shared>,
    id: &str,
    address: Result<IpAddr, String>,
    handler: &Handler,
    timeout_secs: u64,
) -> Runner {
    let (shared, id) = (shared.clone(), id.to_string());
    let command = match handler {
        Handler::Command { command } => Some(command.clone()),
        _ => None,
    };
    let prepared = address.map(|ip| shared.prober.prepare(ip, handler));
    Box::new(move || {
        let (shared, id, command, prepared) = (shared.clone(), id.clone(), command.clone(), prepared.clone());
        Box::pin(async move {
            let timeout = Duration::from_secs(timeout_secs.max(1));
            if let Some(command) = command {
                return shared.docker.exec_check(&id, &command, timeout).await;
            }
            match prepared {
                // A command ran above: HTTP and TCP answer here.
                Ok(prepared) => shared.prober.run(&prepared, timeout).await.unwrap_or(Outcome::Pass),
                Err(why) => Outcome::Fail(why),
            }
        })
    })
}

fn container_ids(rec: &InstanceRecord) -> Vec<String> {
    rec.containers.iter().map(|c| c.id.clone()).collect()
}

/// Fresh info for each container; one that cannot be inspected keeps its id only.
async fn inspect_all(shared: &Shared, ids: &[String]) -> Vec<ContainerInfo> {
    let mut infos = Vec::new();
    for id in ids {
        let info = match shared.docker.inspect(id).await {
            Ok(info) => info,
            Err(_) => ContainerInfo { id: id.clone(), ..Default::default() },
        };
        infos.push(info);
    }
    infos
}

async fn refresh_containers(cx: &mut Cx<'_>) {
    let ids = container_ids(cx.rec);
    if !ids.is_empty() {
        cx.rec.containers = inspect_all(cx.shared, &ids).await;
        show_address(cx.rec);
    }
}

/// A CNI pod's attachment: recorded durably, then ADD into the holder's namespace, its result
/// recorded. Returns the `$` values known now (`HOST`: the pod's address; `BCS_CNI_NAME`).
/// A failed ADD has undone itself; the attachment is given back all the same (owed DEL).
async fn attach(
    cx: &mut Cx<'_>,
    network: &crate::cni::NetworkList,
    holder: &Holder,
    instance: &str,
) -> Result<Vec<(String, String)>, String> {
    let networks = cx.shared.networks.clone();
    let at = networks.attachment(network, &holder.id, instance);
    cx.rec.network = Some(Box::new(at.clone()));
    cx.journal.commit(&cx.shared.store, cx.rec, Vec::new()).await;
    let netns = format!("/proc/{}/ns/net", holder.pid);
    let added = networks.add(&at, &netns).await;
    // A kill -9 here leaves a lease whose result no record holds: the next start gives it back.
    crate::failpoint::hit("cni-added");
    match added {
        Ok(result) => {
            let address = result.address().map(|a| a.to_string());
            let address = address.ok_or_else(|| format!("CNI network {}: the ADD gave no address", at.network));
            if let Some(recorded) = cx.rec.network.as_mut() {
                recorded.result = Some(result);
            }
            cx.journal.commit(&cx.shared.store, cx.rec, Vec::new()).await;
            let address = match address {
                Ok(a) => a,
                Err(e) => {
                    let _ = release_network(cx).await;
                    return Err(e);
                }
            };
            tracing::info!(instance = %cx.rec.id, "CNI network {}: {address} on {}", at.network, at.ifname);
            Ok(vec![("HOST".into(), address), ("BCS_CNI_NAME".into(), at.ifname.clone())])
        }
        Err(e) => {
            let _ = release_network(cx).await;
            Err(format!("CNI ADD: {e}"))
        }
    }
}

/// A Docker error about container `id`, told with `name`, the container's name in the spec (a
/// person knows "main", not a 64-hex id).
fn named(e: DockerError, id: &str, name: &str) -> String {
    match e {
        DockerError::Api { container, message } if container == id => format!("container {name}: {message}"),
        DockerError::NoContainer(c) if c == id => format!("container {name} was removed"),
        other => other.to_string(),
    }
}

/// Reports container `id`'s end (or dockerd's loss) to the actor as the end of main `index`.
fn watch_exit(cx: &Cx<'_>, id: String, index: usize) {
    let (tx, generation, docker) = (cx.tx.clone(), cx.generation, cx.shared.docker.clone());
    tokio::spawn(async move {
        let msg = match docker.wait(&id).await {
            Ok(code) => Msg::MainExited { generation, index, status: ExitStatus::Code(code as i32) },
            Err(DockerError::NoContainer(_)) => Msg::MainExited { generation, index, status: ExitStatus::Removed },
            Err(e) => Msg::RuntimeLost { generation, reason: e.to_string() },
        };
        let _ = tx.send(msg);
    });
}

/// A re-adopted CNI pod's attachment, checked (CNI CHECK): a failure is reported, not acted
/// on — the pod keeps its address and runs on, as it did while the daemon was away.
async fn check_network(cx: &Cx<'_>) {
    let Some(at) = &cx.rec.network else { return };
    let HolderState::Running(netns) = cx.shared.networks.holder(at).await else { return };
    match cx.shared.networks.check(at, &netns).await {
        Ok(()) => tracing::info!(instance = %cx.rec.id, "CNI network {}: CHECK passed", at.network),
        Err(e) => tracing::warn!(instance = %cx.rec.id, "CNI network {}: CHECK failed: {e}", at.network),
    }
}

/// Gives a CNI pod's attachment back (DEL in the holder's namespace while it runs: every
/// caller removes it right after), owed durably until a DEL succeeds, and takes it off the
/// record. Err: the DEL could not even be
/// recorded as owed; the record keeps the attachment.
async fn release_network(cx: &mut Cx<'_>) -> Result<(), String> {
    let Some(at) = cx.rec.network.clone() else { return Ok(()) };
    let holder = cx.shared.networks.holder(&at).await;
    cx.shared.networks.release(&at, holder).await?;
    cx.rec.network = None;
    cx.journal.commit(&cx.shared.store, cx.rec, Vec::new()).await;
    Ok(())
}

/// A CNI pod's address in its containers' info (seed 001's `IPAddress`): Docker knows none
/// for containers on another's network namespace.
fn show_address(rec: &mut InstanceRecord) {
    let Some(address) = rec.network.as_ref().and_then(|n| n.address()) else { return };
    for c in &mut rec.containers {
        c.ip_address = address.to_string();
    }
}

/// The pod's network holder: recorded in every network mode (a record from before that knows
/// only a CNI pod's).
fn holder_of(rec: &InstanceRecord) -> Option<String> {
    rec.holder.clone().or_else(|| rec.network.as_ref().map(|n| n.holder.clone()))
}

/// The pod's network holder goes once its containers have: nothing else needs the network.
async fn remove_holder(cx: &mut Cx<'_>) {
    cx.rec.holder = None;
    if let Err(e) = cx.shared.docker.remove_holder(&cx.rec.key()).await {
        tracing::warn!(instance = %cx.rec.id, "removing the pod's network holder: {e}");
    }
}

/// The container's main process as the record keeps processes' (pid and start time), so that
/// `status` shows its pid like a process's.
fn container_identity(info: &ContainerInfo) -> Option<ProcessIdentity> {
    ProcessIdentity::of(i32::try_from(info.pid).ok().filter(|p| *p > 0)?)
}
