//! What the supervisor knows of an instance, as the facts a HookRun it makes is given
//! ([`crate::hooks::facts`]): a rollout's hook gate asks for its canary's; a scale-in gate
//! would ask for the instance it removes.

use super::instance::SpecEntry;
use super::Supervisor;
use crate::hooks::facts::InstanceFacts;
use crate::spec::InstanceId;

impl Supervisor {
    /// Instance `index` of `entry`'s app as it stands now: its CNI address and its ports from
    /// its record (an instance this host does not run has neither), and the app's revision.
    pub(super) fn instance_facts(&self, entry: &SpecEntry, index: u32) -> InstanceFacts {
        let id = InstanceId {
            namespace: entry.spec.metadata.namespace.clone(),
            name: entry.spec.metadata.name.clone(),
            index,
        };
        let (ports, pod_ip) = self
            .instances
            .lock()
            .expect("instances lock")
            .get(&id)
            .map(|h| {
                let record = h.status.borrow();
                let address = record.network.as_ref().and_then(|n| n.address()).map(|a| a.to_string());
                (record.ports.clone(), address)
            })
            .unwrap_or_default();
        InstanceFacts { id, pod_ip, host_ip: self.shared.host_ip.clone(), ports, revision: entry.revision }
    }
}
