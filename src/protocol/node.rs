//! GET /v1/node: what a scheduler needs to place instances on this host.

use super::state::Kind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The node document. Read leniently (`default`): a field an older daemon does not send reads
/// as empty rather than failing the whole document, as it did when clients indexed JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeDocument {
    /// The node's name: config node.hostname, else the host's name.
    pub hostname: String,
    /// The address instances are reached at.
    pub host_ip: String,
    pub cpus: usize,
    /// Busy share of all CPUs since the previous /v1/node call, 0-100.
    pub cpu_usage_percent: f64,
    /// 1-minute load average.
    pub load_average: f64,
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    pub memory_used_bytes: u64,
    pub labels: BTreeMap<String, String>,
    pub attributes: BTreeMap<String, String>,
    /// The host's operating system and CPU architecture, as Kubernetes names them (`linux`,
    /// `amd64`, `arm64`): seed 003's `beta.kubernetes.io/os` and `…/arch`. Empty from a daemon
    /// that predates them.
    pub os: String,
    pub arch: String,
    /// Config `[node] zone`, `region`, `instance_type`: seed 003's other topology keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    pub ports: PortsDocument,
    /// What instances may request here and what they request (issue 25): a scheduler places
    /// only where an instance's requests fit in `allocatable - allocated`.
    pub resources: ResourcesDocument,
    /// How many instances this daemon supervises.
    pub instances: usize,
    /// Every app with a spec here, with its labels (EXCLUDE places by them).
    pub apps: Vec<AppOnNode>,
    pub events: JournalBounds,
    pub version: String,
    /// Where this daemon's applies and endpoint writes stand: a scheduler reads it before it
    /// reads its desired state, and hands the set over as of it (PUT /v1/desired).
    pub desired_mark: DesiredMark,
    /// The ordinals with a kept volume here (`namespace/name/ordinal`; seed 003 Dynamic,
    /// Isolated), their instance running or not: a scheduler places each such ordinal here,
    /// where its data is (issue 47).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept_volumes: Vec<String>,
    /// The address ClusterFirst pods ask here (`[services] pod_dns`); none: such pods are
    /// refused here, and a scheduler places them elsewhere (seed 003 `dns`; issue 47).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_dns: Option<String>,
}

impl NodeDocument {
    /// The topology facts the node reports, by their short names (`zone`, `instance-type`, `os`).
    pub fn topology(&self) -> BTreeMap<String, String> {
        use crate::spec::model::TopologyKey;
        let reported = [
            (TopologyKey::Zone, self.zone.as_deref()),
            (TopologyKey::Region, self.region.as_deref()),
            (TopologyKey::InstanceType, self.instance_type.as_deref()),
            (TopologyKey::Os, Some(self.os.as_str())),
            (TopologyKey::Arch, Some(self.arch.as_str())),
        ];
        reported
            .into_iter()
            .filter_map(|(key, value)| Some((key.short().to_string(), value.filter(|v| !v.is_empty())?.to_string())))
            .collect()
    }
}

/// cpu (thousandths of a core) and memory (bytes) of this host: what it has, what the config
/// keeps back, what is left for instances' requests, and what the apps here request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourcesDocument {
    pub capacity: crate::resources::Requests,
    pub reserved: crate::resources::Requests,
    pub allocatable: crate::resources::Requests,
    pub allocated: crate::resources::Requests,
}

impl ResourcesDocument {
    pub fn new(host: crate::resources::HostResources, allocated: crate::resources::Requests) -> ResourcesDocument {
        ResourcesDocument {
            capacity: host.capacity,
            reserved: host.reserved,
            allocatable: host.allocatable(),
            allocated,
        }
    }

    /// What is left for new requests.
    pub fn free(&self) -> crate::resources::Requests {
        self.allocatable.minus(self.allocated)
    }
}

/// The range hostPort 0 ports come from (the one in effect), and one configured since.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PortsDocument {
    pub range_start: u16,
    pub range_end: u16,
    /// Ports of the range neither listening on the host nor allocated.
    pub free: usize,
    /// A range a reload configured: it takes effect when stewardd restarts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<PortRange>,
    /// The kernel's range for outgoing connections' local ports (net.ipv4.ip_local_port_range),
    /// when it could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<PortRange>,
    /// The range in effect shares ports with `ephemeral` (reserved ones aside): an outgoing
    /// connection (a probe of the daemon's) may hold a port an instance is then given.
    pub overlaps_ephemeral: bool,
}

impl PortsDocument {
    /// The range in effect and, when a reload configured another, that one as pending.
    pub fn new(in_effect: (u16, u16), free: usize, configured: (u16, u16)) -> PortsDocument {
        let pending =
            (configured != in_effect).then_some(PortRange { range_start: configured.0, range_end: configured.1 });
        PortsDocument {
            range_start: in_effect.0,
            range_end: in_effect.1,
            free,
            pending,
            ephemeral: None,
            overlaps_ephemeral: false,
        }
    }

    /// With the kernel's ephemeral range, and whether the range in effect overlaps it.
    pub fn with_ephemeral(mut self, ephemeral: &crate::ephemeral_ports::Ephemeral) -> PortsDocument {
        let (start, end) = ephemeral.range;
        self.ephemeral = Some(PortRange { range_start: start, range_end: end });
        self.overlaps_ephemeral = ephemeral.overlaps((self.range_start, self.range_end));
        self
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortRange {
    pub range_start: u16,
    pub range_end: u16,
}

/// An app with a spec on the node, and its instances there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppOnNode {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub instances: Vec<InstanceOnNode>,
    /// The template hash of the spec it runs (its current revision's; count and strategy left
    /// out): a scheduler tells a node that missed (or undid) a rollout by it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hash: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceOnNode {
    pub index: u32,
    pub state: Kind,
    /// Seed 003's Ready condition (what steward-sched reports upward and rollouts wait for).
    #[serde(default)]
    pub ready: bool,
    /// Kept by a failed rollout for its output (runs nothing, holds no port): not a stray.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
}

/// The event journal's bounds: resume a stream from `last_seq`; a `since` below
/// `first_seq - 1` is answered 410.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct JournalBounds {
    /// Oldest event kept (`last_seq + 1` when the journal is empty).
    pub first_seq: u64,
    pub last_seq: u64,
    /// Config events.retention: newest events kept.
    pub retention: u64,
    /// Config events.max_bytes: most bytes of event bodies kept.
    pub max_bytes: u64,
    /// Bytes of event bodies the journal holds now.
    pub bytes: u64,
    /// The journal's identity: it changes only with a new state directory, whose sequence
    /// numbers start over. A follower seeing another one resyncs (0: a daemon that predates it).
    pub journal_id: u64,
}

/// A point in this daemon's sequence of scheduler writes (placed applies, endpoint writes):
/// `boot` names the daemon process (the sequence starts over with each), `mark` counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DesiredMark {
    pub boot: u64,
    pub mark: u64,
}

/// PUT /v1/desired: everything a scheduler wants on this host, as of `as_of` (read from GET
/// /v1/node before the scheduler read its desired state). The daemon keeps the endpoints given
/// and drops the rest, and deletes every placed app (one applied with an instance selection)
/// not named — except what was written after `as_of`, which the set could not know of.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostDesired {
    pub as_of: DesiredMark,
    /// `namespace/name` of every app placed here.
    pub apps: Vec<String>,
    /// Every app's endpoints, as the scheduler stores them.
    pub endpoints: Vec<super::AppEndpoints>,
    /// How often the scheduler hands sets over (its reconcile period): a host fences an app
    /// (`disconnect.stopAfterSecs`) only after three of these without one, however short the
    /// app's own limit.
    #[serde(default)]
    pub every_secs: u64,
}

/// What PUT /v1/desired did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DesiredOutcome {
    /// Placed apps deleted here: none of the set's.
    pub dropped_apps: Vec<String>,
    /// Placed apps the set does not name, deleted here at their `scaleIn` hook's word: each
    /// instance goes when its hook run says (`rollout status` shows them waiting).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub draining_apps: Vec<String>,
    /// Apps whose endpoints were forgotten here.
    pub dropped_endpoints: Vec<String>,
    /// Apps of the set with no spec here (the scheduler applies them).
    pub lacking: Vec<String>,
}
