//! The bodies of steward-sched's own API (`steward-sched serve`, docs/sched-openapi.json): what
//! its clients send, and what it answers beyond the scheduler's listings (placements, nodes,
//! rollouts, dependencies, hooks: sched_answers.rs) and what it stores (sched_records.rs).

use crate::spec::SpecError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The header an answer names the nodes in that did not answer while it was made (JSON: node
/// → why), so a client can report them as the in-process commands do.
pub const UNREACHABLE_HEADER: &str = "steward-unreachable";

/// The header an answer carries what the request said as it went in (JSON: lines in order, a
/// rollout's progress say), for a client to print where the command would have.
pub const NOTES_HEADER: &str = "steward-notes";

/// `PUT /v1/apps` (create or update) and `POST /v1/apps` (create only: seed 002's PodGroup POST).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeployRequest {
    /// The process or pod spec, as JSON (seed spellings are read as a file's are).
    pub spec: serde_json::Value,
    /// Instances that fit nowhere are held Pending instead of the deploy being refused.
    #[serde(default)]
    pub wait_for_room: bool,
}

/// What a deploy placed, and what it warned of (affinity terms no node reports).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deployed {
    pub instances: Vec<crate::sched::scheduler::PlacedInstance>,
    #[serde(default)]
    pub warnings: Vec<SpecError>,
}

/// `GET /v1/apps/{namespace}/{name}`: the app as stored (spec, placements, rollout, stops) and
/// what its nodes report of each instance.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppDetail {
    pub app: crate::sched::store::App,
    pub instances: Vec<crate::sched::scheduler::PlacedInstance>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScaleRequest {
    pub instances: u32,
    /// As for a deploy; absent: what the app was deployed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_room: Option<bool>,
}

/// `stop`, `start`, `restart`: the whole app, or one instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<u32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CordonRequest {
    /// Placed there still when no other node fits.
    #[serde(default)]
    pub preferred: bool,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainRequest {
    /// Move stateful apps too.
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/drift` (seed 002's `PATCH /api/nodes?cmd=drift`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DriftRequest {
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<u32>,
    #[serde(default)]
    pub force: bool,
}

/// `PUT /v1/config/{key}`: a value, or `default`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigValue {
    pub value: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintenanceRequest {
    pub on: bool,
    #[serde(default)]
    pub reason: String,
}

/// Seed 002's engine status: `start` (it changes what runs) or `stop` (maintenance: it follows
/// and reports, and changes nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineRun {
    Start,
    Stop,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EngineRunBody {
    pub status: EngineRun,
}

/// `GET /v1/whoami` (steward-sched serve and stewardd): what the caller may do, and which server
/// answers (the web console shows its buttons and its pages by them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Whoami {
    /// `read` or `write`.
    pub role: String,
    /// `steward-sched` (a cluster) or `stewardd` (one host).
    pub server: String,
}

/// `POST /v1/notifications`, `DELETE /v1/notifications?url=`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UrlRequest {
    pub url: String,
}

/// `PUT /v1/dependencies` (create or update), `POST` (create only: seed 002's POST /api/depends).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DependencyRequest {
    pub spec: serde_json::Value,
    /// How long a copy without dependents stays (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_secs: Option<u64>,
}

/// What a removal could not reach: nodes that keep something until they answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Removed {
    pub removed: String,
    /// Nodes that did not answer and still hold it.
    pub away: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HookRunRequest {
    pub run: crate::hooks::CreateHookRun,
    /// The node to run it on; default the first that answers, in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// A run and the node that holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFound {
    pub node: String,
    pub run: crate::hooks::HookRun,
}

/// Every node's runs, and why the nodes that did not answer did not.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunsListing {
    pub runs: Vec<crate::sched::scheduler::RunOnNode>,
    pub unreachable: BTreeMap<String, String>,
}

/// A copy into an instance: where it went and what was written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopiedOnNode {
    pub node: String,
    pub copied: crate::protocol::FileCopied,
}

/// Seed 002's constraint (a swarm node filter): nodes whose `type` (today `node`, the node's
/// name) is (`equal`) or is not (`!equal`) `value` take new instances; `soft` true, it must
/// hold (DESIGN § 7), false, only preferred.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Constraint {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
    #[serde(default)]
    pub equal: bool,
    #[serde(default = "yes")]
    pub soft: bool,
    #[serde(default)]
    pub since_ms: u64,
}

fn yes() -> bool {
    true
}

/// Where a merged event stream starts (`watch --since`, `GET /v1/events?since=`): after event
/// N on every node, or per node (sequence numbers are each daemon's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursors {
    All(u64),
    PerNode(BTreeMap<String, u64>),
}

impl Cursors {
    /// `40`, or `h1=40,h2=12`.
    pub fn parse(s: &str) -> Result<Cursors, String> {
        if let Ok(n) = s.parse() {
            return Ok(Cursors::All(n));
        }
        let mut map = BTreeMap::new();
        for part in s.split(',') {
            let (node, n) = part.split_once('=').ok_or_else(|| format!("{part:?}: expected NODE=N"))?;
            let n = n.parse().map_err(|_| format!("{part:?}: {n:?} is not a sequence number"))?;
            map.insert(node.to_string(), n);
        }
        Ok(Cursors::PerNode(map))
    }

    /// As [`Cursors::parse`] reads it.
    pub fn text(&self) -> String {
        match self {
            Cursors::All(n) => n.to_string(),
            Cursors::PerNode(map) => map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","),
        }
    }
}
