//! The hollow workload (issue 46 item 4, `runtime = "hollow"`): an instance that runs nothing.
//! It launches at once, Running, and stops at once; what it "runs" is in the record (`mains`,
//! one slot per process or container), so a daemon restart re-adopts it as it would real
//! processes. It ends only when told to crash (`POST …/crash`), which the actor then takes as
//! any main process's exit: the restart policy, its backoff, maxtimes and reset act as for a
//! real one. Its resource use is simulated from its requests (see [`usage`]).
//!
//! A daemon of hollow instances exercises the supervisor, store, journal, events, admission and
//! API for real; kubemark's hollow kubelets do the same for Kubernetes.

use super::messages::Msg;
use super::workload::{BoxFuture, Cancel, Cx, InPlace, Launched, Probe, Readopted, RunEnd, Workload};
use crate::spec::{ProcessSpec, RenderedInstance};
use crate::supervisor::record::{InstanceRecord, Usage};
use crate::supervisor::state::ExitStatus;
use crate::supervisor::Shared;
use std::time::Duration;

/// What an instance that requests no memory is taken to use, per process (container).
const DEFAULT_MEMORY_BYTES: u64 = 16 << 20;
/// What an instance that requests no cpu is taken to request, in thousandths of a core.
const DEFAULT_MILLI_CPU: u64 = 100;

#[derive(Default)]
pub(crate) struct Hollow {
    /// The run being watched (its generation): only it can be told to crash.
    watched: Option<u64>,
}

/// Slots of a run: one per process, or per container of a pod.
fn mains_of(rendered: &RenderedInstance) -> usize {
    rendered.pod.as_ref().map_or(rendered.processes.len(), |pod| pod.containers.len()).max(1)
}

impl Workload for Hollow {
    const FETCHES_PACKAGES: bool = false;

    fn new(_shared: &Shared, _rec: &InstanceRecord) -> Hollow {
        Hollow::default()
    }

    fn prepare(&mut self, _: &mut Cx<'_>, _: &RenderedInstance, _: std::os::fd::OwnedFd) -> Result<(), String> {
        Ok(())
    }

    async fn clear(&mut self, _cx: &mut Cx<'_>) -> bool {
        true
    }

    async fn clear_unrecorded(&mut self, _cx: &mut Cx<'_>) {}

    async fn launch(&mut self, cx: &mut Cx<'_>, rendered: &RenderedInstance, _cancel: &Cancel) -> Launched {
        *cx.launch_place = None;
        // No pid: the slots say how many it runs, and that it was recorded running.
        cx.rec.mains = vec![None; mains_of(rendered)];
        Launched::Running { since_ms: crate::supervisor::record::now_ms() }
    }

    fn watch(&mut self, cx: &mut Cx<'_>) {
        self.watched = Some(cx.generation);
    }

    /// What the record says ran still runs: nothing could have ended it while the daemon was
    /// away. A record without slots never got to run.
    async fn readopt(&mut self, cx: &mut Cx<'_>) -> Readopted {
        if cx.rec.mains.is_empty() {
            return Readopted::Ended { index: 0, status: ExitStatus::Unknown };
        }
        tracing::debug!(instance = %cx.rec.id, "re-adopted a hollow run of {} slot(s)", cx.rec.mains.len());
        Readopted::Running
    }

    async fn recover(&mut self, _cx: &mut Cx<'_>) -> Option<Readopted> {
        Some(Readopted::Running)
    }

    async fn on_end(&mut self, _cx: &mut Cx<'_>, _index: usize, _status: ExitStatus) -> Option<RunEnd> {
        self.watched = None;
        Some(RunEnd { oom: None, which: None })
    }

    fn stop(&mut self, _cx: &mut Cx<'_>, _polite: bool, _grace: Duration) -> BoxFuture<Result<(), String>> {
        self.watched = None;
        Box::pin(async { Ok(()) })
    }

    async fn finish_stop(&mut self, _cx: &mut Cx<'_>, _waited: Result<(), String>) -> Result<(), String> {
        Ok(())
    }

    async fn kill(&mut self, _cx: &mut Cx<'_>) -> bool {
        self.watched = None;
        true
    }

    async fn reload(&mut self, _cx: &mut Cx<'_>) -> Result<(), String> {
        Ok(())
    }

    async fn copy_in(
        &mut self,
        _cx: &mut Cx<'_>,
        _file: &super::messages::FileCopy,
    ) -> Result<crate::protocol::FileCopied, String> {
        Err("a hollow instance has no files to copy into".into())
    }

    fn restarts_in_place(&self, _cx: &Cx<'_>) -> bool {
        false
    }

    async fn restart_in_place(&mut self, _cx: &mut Cx<'_>) -> InPlace {
        InPlace::NotRun
    }

    /// None: a hollow instance is ready while Running.
    fn probes(&self, _cx: &Cx<'_>) -> Vec<Probe> {
        Vec::new()
    }

    async fn before_delete(&mut self, _cx: &mut Cx<'_>) -> Result<(), String> {
        Ok(())
    }

    async fn remove(&mut self, _cx: &mut Cx<'_>) {}

    /// Main 0 of the watched run ends with `status`, as a real exit would be reported.
    fn crash(&mut self, cx: &mut Cx<'_>, status: ExitStatus) -> Result<(), String> {
        if self.watched != Some(cx.generation) {
            return Err(format!("nothing runs to crash: instance is {}", cx.rec.state.kind()));
        }
        self.watched = None;
        let _ = cx.tx.send(Msg::MainExited { generation: cx.generation, index: 0, status });
        Ok(())
    }
}

/// A hollow instance's simulated use while it runs (None otherwise): its memory request (16 MiB
/// a process without one) held, and half its cpu request (100m without one) busy since its
/// start, so that `steward status` and `steward node` show plausible, steady figures.
pub(crate) fn usage(spec: &ProcessSpec, rec: &InstanceRecord, now_ms: u64) -> Option<Usage> {
    if !rec.state.has_processes() || rec.mains.is_empty() {
        return None;
    }
    let slots = rec.mains.len() as u64;
    let requests = spec.instance_requests();
    let memory_bytes = if requests.memory_bytes > 0 { requests.memory_bytes } else { DEFAULT_MEMORY_BYTES * slots };
    let running_ms = now_ms.saturating_sub(rec.last_start_ms.unwrap_or(now_ms));
    Some(Usage {
        cpu_usage_usec: busy_milli_cpu(spec).saturating_mul(running_ms),
        memory_bytes,
        oom_kills: 0,
        tasks: slots,
        tasks_max: None,
    })
}

/// Thousandths of a core a running hollow instance of `spec` keeps busy: half its request.
pub(crate) fn busy_milli_cpu(spec: &ProcessSpec) -> u64 {
    let requested = spec.instance_requests().milli_cpu;
    (if requested > 0 { requested } else { DEFAULT_MILLI_CPU }) / 2
}
