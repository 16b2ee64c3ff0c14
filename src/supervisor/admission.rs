//! Admission by requests (issue 25): an apply that would make the instances' requests on this
//! host add up past what it offers (`resources::HostResources::allocatable`) is refused with a
//! conflict naming the resource. Checked under the apply lock, so two applies at once (two
//! schedulers, a scheduler and a local apply) cannot overcommit the host between them.
//!
//! What an app holds is its request times its slots: the instances an apply asks for (the
//! selection, or `spec.instance`); for a job, the runs it may have at once (`parallelism`). A
//! rollout's surge instance and a job's finished runs kept for their logs hold nothing more.

use super::{app_key, Supervisor, SupervisorError};
use crate::resources::{HostResources, Requests};
use crate::spec::ProcessSpec;

/// How many instances of `spec` run at once at most here.
pub(super) fn slots(spec: &ProcessSpec, selection: Option<&[u32]>) -> u64 {
    if spec.runs_to_completion() {
        // A cron job's tick runs as its `job` says (one run when it says nothing).
        return spec.job.as_ref().map_or(1, |job| u64::from(job.parallelism.max(1)));
    }
    match selection {
        Some(ids) => ids.len() as u64,
        None => u64::from(spec.spec.instance),
    }
}

/// What one app holds of the host.
fn holds(spec: &ProcessSpec, selection: Option<&[u32]>) -> Requests {
    spec.instance_requests().times(slots(spec, selection))
}

impl Supervisor {
    /// What this host offers instances (capacity, reserve).
    pub fn host_resources(&self) -> HostResources {
        self.resources
    }

    /// What the apps here request, all together.
    pub fn allocated(&self) -> Requests {
        let specs = self.specs.lock().expect("specs lock");
        specs.values().fold(Requests::default(), |sum, e| sum.plus(holds(&e.spec, e.selection.as_deref())))
    }

    /// Refuses `spec` (replacing what its app holds now) if it asks for more of a resource than
    /// is free. An apply that asks for no more than before is never refused: a host made
    /// smaller (a larger reserve) keeps what it runs and may still shrink it.
    pub(super) fn admit(&self, spec: &ProcessSpec, selection: Option<&[u32]>) -> Result<(), SupervisorError> {
        let key = app_key(&spec.metadata.namespace, &spec.metadata.name);
        let (others, before) = {
            let specs = self.specs.lock().expect("specs lock");
            specs.iter().fold((Requests::default(), Requests::default()), |(others, before), (k, e)| {
                let held = holds(&e.spec, e.selection.as_deref());
                if *k == key {
                    (others, held)
                } else {
                    (others.plus(held), before)
                }
            })
        };
        let wanted = holds(spec, selection);
        let room = self.resources.allocatable().minus(others);
        // Only a resource the apply asks more of can refuse it.
        let growing = Requests {
            milli_cpu: if wanted.milli_cpu > before.milli_cpu { wanted.milli_cpu } else { 0 },
            memory_bytes: if wanted.memory_bytes > before.memory_bytes { wanted.memory_bytes } else { 0 },
        };
        match growing.exceeds(&room) {
            None => Ok(()),
            Some(short) => Err(SupervisorError::Conflict(format!(
                "{key}: {short} on this host ({} instance(s) of {} cpu and {} memory each; allocatable {} cpu, \
                 {} memory, of which other apps request {} cpu, {} memory)",
                slots(spec, selection),
                crate::resources::cpu_text(spec.instance_requests().milli_cpu),
                crate::resources::memory_text(spec.instance_requests().memory_bytes),
                crate::resources::cpu_text(self.resources.allocatable().milli_cpu),
                crate::resources::memory_text(self.resources.allocatable().memory_bytes),
                crate::resources::cpu_text(others.milli_cpu),
                crate::resources::memory_text(others.memory_bytes),
            ))),
        }
    }
}
