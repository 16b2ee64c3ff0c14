//! What steward-sched's desired store holds (the embedded store's tables, etcd's keys under the
//! prefix): apps with their placements and rollouts, dependencies, the leader's node records and
//! the cluster's settings. The JSON is the stored format: a field may be added (optional), never
//! renamed, so a store written by one version is read by the next.

use super::NodeState;
use crate::spec::AppId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One app as the scheduler wants it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct App {
    /// Stored as `namespace/name`.
    pub key: AppId,
    /// The spec document as deployed (JSON), `spec.instance` kept current by `scale`.
    pub spec: serde_json::Value,
    /// Instance id → where it is meant to run.
    pub placements: BTreeMap<u32, Placement>,
    /// The spec deployed before `spec` changed what runs: the nodes a rollout has not reached
    /// keep it, and `rollout undo` goes back to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<serde_json::Value>,
    /// The rollout of `spec` over the app's nodes (see sched/rollout.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<SchedRollout>,
    /// Instances the operator stopped (`steward-sched stop`, or a stop seen on their node):
    /// they keep their node and are never rescheduled, restarted or revived by the scheduler.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub stopped: BTreeSet<u32>,
    /// `delete` was asked while some nodes did not answer: the app is gone everywhere else, and
    /// each of these gets the delete when it answers again. Never placed or revived meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleting: Option<Deleting>,
    /// The operator asked to wait for room (`--wait-for-room`): instances that fit nowhere are
    /// held (`waiting`) instead of the deploy, scale or reschedule being refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait_for_room: bool,
    /// Instances held for room, and why: placed by the leading `run` once they fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<RoomWait>,
    /// The store's version of the record as read (etcd: its mod revision); not stored in it.
    #[serde(skip)]
    pub version: Option<i64>,
}

/// Instances with no node yet: none had room for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomWait {
    pub since_ms: u64,
    pub instances: BTreeSet<u32>,
    /// The placement's refusal: each node's reason.
    pub reason: String,
}

/// A delete that some nodes have yet to get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deleting {
    pub since_ms: u64,
    /// The nodes that did not answer the delete (they may still run the app's instances).
    pub nodes: BTreeSet<String>,
}

/// An app's rollout across its nodes: one node at a time, each by the spec's strategy, so the
/// budget (counted against the app's whole instance count) holds for the whole app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedRollout {
    /// `phase` (and `reason` when failed), as a node's rollout has them.
    #[serde(flatten)]
    pub phase: crate::protocol::RolloutPhase,
    pub started_ms: u64,
    pub updated_ms: u64,
    /// Node → the app's revision there once it took the spec (the node's own numbering).
    #[serde(default)]
    pub applied: BTreeMap<String, u64>,
    /// The nodes whose rollout completed.
    #[serde(default)]
    pub done: Vec<String>,
    /// It goes back after a failed rollout (autoRollback): it does not roll back again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback: bool,
}

impl SchedRollout {
    /// Whether it reached `node` (the node took the spec, now at `revision`): one it has not
    /// reached runs the previous spec, none of its instances updated whatever the node counts.
    pub fn reached(&self, node: &str, revision: u64) -> bool {
        self.applied.get(node) == Some(&revision)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The node's name in the cluster file.
    pub node: String,
    pub state: PlacementState,
    /// Times the instance was placed elsewhere after a loss or failure.
    #[serde(default)]
    pub reschedules: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state")]
pub enum PlacementState {
    /// Applied to its node.
    Placed,
    /// Its node stopped answering (heartbeats stopped); kept there unless rescheduled.
    Lost,
    /// Its node gave up on it (Failed) and the policy keeps it there.
    Failed,
    /// Shown only (never stored): found running on a node it is not placed on (`run` deletes
    /// it there).
    Stray,
    /// Shown only (never stored): the app is being deleted; its node has yet to get the delete.
    Deleting,
    /// Meant for its node, but the apply has not succeeded yet.
    Pending { reason: String },
}

/// A dependency (seed 002's dependency pod): a spec stored once, started on a host when the
/// first dependent instance arrives there, one copy per host (node scope) or per host and
/// namespace (namespace scope), removed `grace_secs` after its last dependent left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// `namespace/name`.
    pub key: String,
    /// The spec document as stored (JSON); each copy runs it with one instance.
    pub spec: serde_json::Value,
    /// Bumped at every change of `spec`: copies on an older one are applied again.
    pub revision: u64,
    /// Seconds a copy without dependents stays before it is removed (seed 002: 5 min).
    pub grace_secs: u64,
    /// Copy key (`node/namespace`) → the copy running there.
    #[serde(default)]
    pub copies: BTreeMap<String, DependencyCopy>,
    /// The store's version of the record as read; not stored in it.
    #[serde(skip)]
    pub version: Option<i64>,
}

/// One running copy of a dependency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DependencyCopy {
    pub node: String,
    /// The namespace it runs in: the dependency's own (node scope) or its dependents' (namespace
    /// scope).
    pub namespace: String,
    /// The dependency's revision the copy was applied with.
    pub revision: u64,
    pub started_ms: u64,
    /// When it was last applied with a new revision (a rolling update waits for it to be ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_ms: Option<u64>,
    /// Since when no dependent instance is placed on its node (in its namespace); None while one
    /// is. Stored, so a new leader counts the grace period from the same moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since_ms: Option<u64>,
}

impl DependencyCopy {
    pub fn key(node: &str, namespace: &str) -> String {
        format!("{node}/{namespace}")
    }
}

/// What the leading `run` knows of a node, written at each change of its state, so every
/// scheduler sharing the store (and `node ls`) sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    /// The node's name in the cluster file.
    pub name: String,
    pub state: NodeState,
    pub since_ms: u64,
    /// Its daemon's address (from the cluster file).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// What its daemon said of itself when last heard up.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// The cluster's controls (seed 002's engine config, constraints and notify list): one record,
/// written by compare-and-swap like an app.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// Maintenance mode: the leader follows and reports, and changes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// Node → its cordon: nothing new is placed there (required), or only when no other node
    /// fits (preferred; seed 002's constraint `soft: false`, DESIGN § 7).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cordons: BTreeMap<String, Cordon>,
    /// Seed 002's constraints (`node==h1`, `node!=h3`): a node one does not let in counts as
    /// cordoned, required when the constraint is `soft` (it must hold), else preferred.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<crate::protocol::Constraint>,
    /// Where notifications go (seed 002's notify callbacks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<String>,
    /// The scheduler's own settings (seed 002's engine config; `config get|set`).
    #[serde(default, skip_serializing_if = "EngineConfig::is_default")]
    pub config: EngineConfig,
    /// The store's version of the record as read; not stored in it.
    #[serde(skip)]
    pub version: Option<i64>,
}

impl Settings {
    /// `node`'s cordon: the operator's, or one a constraint makes (a required one wins).
    pub fn cordon_of(&self, node: &str) -> Option<Cordon> {
        let own = self.cordons.get(node).cloned();
        let by_constraint = self
            .constraints
            .iter()
            .filter(|c| c.kind == "node" && (c.value == node) != c.equal)
            .map(|c| Cordon {
                preferred: !c.soft,
                since_ms: c.since_ms,
                reason: format!("constraint node{}{}", if c.equal { "==" } else { "!=" }, c.value),
            })
            .min_by_key(|c| c.preferred);
        match (own, by_constraint) {
            (Some(own), Some(c)) if own.preferred && !c.preferred => Some(c),
            (own, c) => own.or(c),
        }
    }

    /// The cordons of `nodes` (see [`Settings::cordon_of`]).
    pub fn cordons_over<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, Cordon> {
        nodes.into_iter().filter_map(|n| self.cordon_of(n).map(|c| (n.to_string(), c))).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    pub since_ms: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "CordonRecord")]
pub struct Cordon {
    /// False (required): nothing new placed there; true: placed there only when no other node
    /// fits. Seed 002's constraint `soft` means enforced (DESIGN § 7): soft true is required.
    pub preferred: bool,
    pub since_ms: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// A cordon as stored, or written seed 002's way (`soft`: true, it must hold; DESIGN § 7).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CordonRecord {
    #[serde(default)]
    preferred: bool,
    soft: Option<bool>,
    since_ms: u64,
    #[serde(default)]
    reason: String,
}

impl From<CordonRecord> for Cordon {
    fn from(r: CordonRecord) -> Cordon {
        Cordon { preferred: r.soft.map_or(r.preferred, |soft| !soft), since_ms: r.since_ms, reason: r.reason }
    }
}

/// Every key with its default, range and meaning (what `config get` lists).
pub const KEYS: &[(&str, u64, u64, u64, &str)] = &[
    (
        "reconcileSecs",
        10,
        1,
        3600,
        "seconds between the leader's reconcile passes (also where held instances look for room)",
    ),
    ("notifyRestartLimit", 3, 1, 1000, "restarts within the window beyond which a `restarts` notification is sent"),
    ("notifyRestartWindowSecs", 300, 1, 86_400, "the window of notifyRestartLimit, in seconds"),
    (
        "dependencyGraceSecs",
        300,
        0,
        86_400,
        "seconds an idle dependency copy stays, for `depend apply` without --grace",
    ),
];

/// The values set; a key left out has its default (an unchanged record stays empty).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EngineConfig(std::collections::BTreeMap<String, u64>);

/// The key's default, range and meaning; Err: no such key (the known ones named).
pub fn key_of(key: &str) -> Result<&'static (&'static str, u64, u64, u64, &'static str), String> {
    KEYS.iter().find(|k| k.0 == key).ok_or_else(|| {
        let known: Vec<&str> = KEYS.iter().map(|k| k.0).collect();
        format!("no setting {key:?} (known: {})", known.join(", "))
    })
}

impl EngineConfig {
    pub fn is_default(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `key` in force (its default when not set).
    pub fn get(&self, key: &str) -> Option<u64> {
        let (_, default, ..) = key_of(key).ok()?;
        Some(self.0.get(key).copied().unwrap_or(*default))
    }

    pub fn reconcile_every(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.get("reconcileSecs").unwrap_or(10))
    }

    /// Sets `key` from the operator's text: Err names the key and what it takes.
    pub fn set(&mut self, key: &str, text: &str) -> Result<u64, String> {
        let (key, default, min, max, _) = *key_of(key)?;
        let value = match text.trim() {
            "default" => default,
            t => t.parse::<u64>().map_err(|_| format!("{key}: {text:?} is not a whole number"))?,
        };
        if !(min..=max).contains(&value) {
            return Err(format!("{key}: {value} is out of range {min}-{max}"));
        }
        match value == default {
            true => self.0.remove(key),
            false => self.0.insert(key.to_string(), value),
        };
        Ok(value)
    }

    /// Every key with its value in force and whether it is the default.
    pub fn listing(&self) -> Vec<super::sched_answers::ConfigEntry> {
        KEYS.iter()
            .map(|(key, default, min, max, about)| super::sched_answers::ConfigEntry {
                key: key.to_string(),
                value: self.get(key).unwrap_or(*default),
                default: *default,
                range: format!("{min}-{max}"),
                about: about.to_string(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_default_parse_and_range_check() {
        let mut c = EngineConfig::default();
        assert_eq!(c.get("reconcileSecs"), Some(10));
        assert_eq!(c.set("reconcileSecs", "3"), Ok(3));
        assert_eq!(c.reconcile_every(), std::time::Duration::from_secs(3));
        assert_eq!(serde_json::to_value(&c).unwrap(), serde_json::json!({"reconcileSecs": 3}));
        assert_eq!(c.set("reconcileSecs", "default"), Ok(10));
        assert!(c.is_default(), "a default is not stored: {c:?}");
        assert_eq!(c.set("reconcileSecs", "0").unwrap_err(), "reconcileSecs: 0 is out of range 1-3600");
        assert_eq!(c.set("notifyRestartLimit", "x").unwrap_err(), "notifyRestartLimit: \"x\" is not a whole number");
        assert!(c.set("nope", "1").unwrap_err().starts_with("no setting \"nope\" (known: reconcileSecs,"));
        assert_eq!(c.listing().len(), KEYS.len());
    }
}
