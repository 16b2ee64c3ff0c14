//! What a controller that makes a HookRun (a rollout's hook gate; later a scale-in gate) knows
//! of the instance the hook is about, passed as args by name. Seed 004 says only that an arg
//! declared without a value "由创建 HookRun 时传入" (is given when the HookRun is made), and its
//! example declares `PodName` and writes `http://{{ args.PodIP }}:9091`; which facts there are
//! and how they are spelled beyond those two is our choice (docs/spec.md, HookTemplates).

use std::collections::{BTreeMap, BTreeSet};

/// The instance's name as Steward names a pod: `namespace.name.index` (`BCS_POD_ID`, its run
/// directory, its containers' Docker names).
pub const POD_NAME: &str = "PodName";
/// Where the instance answers: its CNI address when it has one, else the host's.
pub const POD_IP: &str = "PodIP";
pub const POD_NAMESPACE: &str = "PodNamespace";
/// The instance's index within its app (`${instanceid}` of a step's values).
pub const POD_INDEX: &str = "PodIndex";
/// The app's name (`metadata.name` of its spec).
pub const APP_NAME: &str = "AppName";
/// The host's address (the daemon's `host_ip`).
pub const HOST_IP: &str = "HostIP";
/// The app's revision: in a rollout, the one rolled out.
pub const REVISION: &str = "Revision";

/// Every fact but the ports, which are [`port_arg`] of each port name.
pub const FIXED_FACTS: [&str; 7] = [POD_NAME, POD_IP, POD_NAMESPACE, POD_INDEX, APP_NAME, HOST_IP, REVISION];

/// A port's fact: `PORT_<name>`, as its environment variable is named (a '-' becomes '_'), so
/// one port has one name everywhere; its value is the port the instance answers on at PodIP.
pub fn port_arg(port_name: &str) -> String {
    format!("PORT_{}", port_name.replace('-', "_"))
}

/// One instance's facts, as its controller sees them when it makes a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceFacts {
    pub id: crate::spec::InstanceId,
    /// Its CNI address, when it has one.
    pub pod_ip: Option<String>,
    pub host_ip: String,
    /// Port name → the port it answers on (at its CNI address, or the host's).
    pub ports: BTreeMap<String, u16>,
    pub revision: u64,
}

impl InstanceFacts {
    /// The facts as args, by name.
    pub fn args(&self) -> BTreeMap<String, String> {
        let pod_ip = self.pod_ip.clone().unwrap_or_else(|| self.host_ip.clone());
        let mut args = BTreeMap::from([
            (POD_NAME.to_string(), crate::spec::pod::pod_id(&self.id)),
            (POD_IP.to_string(), pod_ip),
            (POD_NAMESPACE.to_string(), self.id.namespace.clone()),
            (POD_INDEX.to_string(), self.id.index.to_string()),
            (APP_NAME.to_string(), self.id.name.clone()),
            (HOST_IP.to_string(), self.host_ip.clone()),
            (REVISION.to_string(), self.revision.to_string()),
        ]);
        args.extend(self.ports.iter().map(|(name, port)| (port_arg(name), port.to_string())));
        args
    }
}

/// The names of the facts a controller gives for an app with these port names: what an apply
/// can count on before any instance runs.
pub fn fact_names<'a>(port_names: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    FIXED_FACTS.iter().map(|f| f.to_string()).chain(port_names.into_iter().map(port_arg)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instances_facts_by_name() {
        let facts = InstanceFacts {
            id: crate::spec::InstanceId { namespace: "test".into(), name: "web".into(), index: 2 },
            pod_ip: None,
            host_ip: "10.0.0.5".into(),
            ports: BTreeMap::from([("http-alt".to_string(), 31002)]),
            revision: 7,
        };
        let args = facts.args();
        assert_eq!(args["PodName"], "test.web.2");
        assert_eq!(args["PodIP"], "10.0.0.5", "no CNI address: the host's");
        assert_eq!((args["PodIndex"].as_str(), args["Revision"].as_str()), ("2", "7"));
        assert_eq!(args["PORT_http_alt"], "31002");
        let on_cni = InstanceFacts { pod_ip: Some("172.30.0.9".into()), ..facts };
        assert_eq!(on_cni.args()["PodIP"], "172.30.0.9");
        let names: BTreeSet<String> = on_cni.args().into_keys().collect();
        assert_eq!(names, fact_names(["http-alt"]), "what an apply counts on is what a run gets");
    }
}
