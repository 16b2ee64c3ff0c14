//! `schedule`: seed 003's scheduling block — node affinity, pod affinity and anti-affinity to
//! other apps' labels over a topology key, tolerations of cordoned hosts, and extra labels.
//! Read by steward-sched (src/sched/placement.rs); a daemon on its own only reports the labels.
//!
//! Seed 003 spells the soft kind `Prefered` and the effects `NoScheduler`/`PreferNoScheduler`;
//! Kubernetes' spellings (`Preferred`, `NoSchedule`, `PreferNoSchedule`) are read too.

use super::{is_default, TopologyKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Schedule {
    /// Seed 003: only "" (the default scheduler) is offered.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scheduler: String,
    /// Labels of the app's instances, beside `metadata.labels` (what other apps' pod affinity
    /// selects).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Affinity::is_empty")]
    pub affinity: Affinity,
    /// Seed 003 has `antiaffinity.pod` only.
    #[serde(skip_serializing_if = "AntiAffinity::is_empty")]
    pub antiaffinity: AntiAffinity,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Affinity {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodAffinity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeAffinity>,
}

impl Affinity {
    fn is_empty(&self) -> bool {
        self.pod.is_none() && self.node.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AntiAffinity {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodAffinity>,
}

impl AntiAffinity {
    fn is_empty(&self) -> bool {
        self.pod.is_none()
    }
}

/// Required: every term must hold (a filter). Prefered: each term that holds adds its weight
/// (a preference among the nodes the filters leave).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AffinityType {
    #[default]
    Required,
    #[serde(rename = "Prefered", alias = "Preferred")]
    Prefered,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodAffinity {
    #[serde(rename = "type")]
    pub kind: AffinityType,
    pub terms: Vec<PodAffinityTerm>,
}

/// Instances of the apps `selector` picks (in `namespaces`, default the app's own) on nodes
/// sharing the candidate node's value of `topologyKey`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodAffinityTerm {
    /// 1-100, Prefered only.
    #[serde(skip_serializing_if = "is_default")]
    pub weight: u32,
    /// A node fact ([`TopologyKey`]: hostname, the default, zone, region, instance type, os,
    /// arch in seed 003's spelling or another), else a node attribute or label.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_key: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    pub selector: LabelSelector,
}

impl PodAffinityTerm {
    /// What the term groups nodes by: a well-known fact by its short name (`hostname` by
    /// default, `zone` for `failure-domain.beta.kubernetes.io/zone`), else the key as written.
    pub fn topology(&self) -> &str {
        match self.topology_key.as_str() {
            "" => TopologyKey::Hostname.short(),
            key => TopologyKey::parse(key).map_or(key, |k| k.short()),
        }
    }
}

/// Labels that must all be equal, and expressions that must all hold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<Expression>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector (an empty selector selects everything).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|e| e.holds(labels.get(&e.key).map(String::as_str)))
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeAffinity {
    #[serde(rename = "type")]
    pub kind: AffinityType,
    pub terms: Vec<NodeAffinityTerm>,
}

/// Its expressions all hold (AND). Required terms: at least one must hold (OR, as Kubernetes'
/// nodeSelectorTerms).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeAffinityTerm {
    #[serde(skip_serializing_if = "is_default")]
    pub weight: u32,
    pub expressions: Vec<Expression>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExpressionOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    /// Node affinity only: the value, an integer, is greater than the expression's one value.
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Expression {
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<ExpressionOperator>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub value: Vec<String>,
}

impl Expression {
    /// Whether the expression holds for `found`, the key's value (None: absent). As
    /// Kubernetes: NotIn holds where the key is absent; Gt/Lt compare integers and fail where
    /// the key is absent or not a number.
    pub fn holds(&self, found: Option<&str>) -> bool {
        let number = |s: &str| s.trim().parse::<i64>().ok();
        match self.operator {
            None => false,
            Some(ExpressionOperator::In) => found.is_some_and(|v| self.value.iter().any(|x| x == v)),
            Some(ExpressionOperator::NotIn) => found.is_none_or(|v| !self.value.iter().any(|x| x == v)),
            Some(ExpressionOperator::Exists) => found.is_some(),
            Some(ExpressionOperator::DoesNotExist) => found.is_none(),
            Some(op @ (ExpressionOperator::Gt | ExpressionOperator::Lt)) => {
                let (Some(v), Some(bound)) = (found.and_then(number), self.value.first().and_then(|b| number(b)))
                else {
                    return false;
                };
                if op == ExpressionOperator::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }

    /// `zone In [a, b]`, `gpu DoesNotExist`.
    pub fn describe(&self) -> String {
        let op = self.operator.map_or("?".to_string(), |o| format!("{o:?}"));
        match self.value.len() {
            0 => format!("{} {op}", self.key),
            _ => format!("{} {op} [{}]", self.key, self.value.join(", ")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Any value of the key.
    Exists,
    /// The key's value equals `value` (the default, as Kubernetes).
    #[default]
    Equal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaintEffect {
    /// A required cordon.
    #[serde(rename = "NoScheduler", alias = "NoSchedule")]
    NoScheduler,
    /// A preferred cordon.
    #[serde(rename = "PreferNoScheduler", alias = "PreferNoSchedule")]
    PreferNoScheduler,
    /// Seed 003: not implemented; read and kept, with no effect.
    NoExecute,
}

/// Lets the app onto hosts carrying a matching taint: Steward's taints are the scheduler's
/// cordons (key [`CORDON_TAINT`], value empty, effect NoScheduler for a required cordon and
/// PreferNoScheduler for a preferred one).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Toleration {
    /// Empty with Exists: every taint.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key: String,
    pub operator: TolerationOperator,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Empty: every effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<u64>,
}

/// The taint key of a cordon; Kubernetes' key for the same is read too.
pub const CORDON_TAINT: &str = "steward/cordon";
pub const CORDON_TAINT_K8S: &str = "node.kubernetes.io/unschedulable";

impl Toleration {
    /// Whether it tolerates a cordon (required: effect NoScheduler, else PreferNoScheduler).
    pub fn tolerates_cordon(&self, required: bool) -> bool {
        let effect = if required { TaintEffect::NoScheduler } else { TaintEffect::PreferNoScheduler };
        let key = self.key.is_empty() || self.key == CORDON_TAINT || self.key == CORDON_TAINT_K8S;
        let value = match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value.is_empty() && !self.key.is_empty(),
        };
        key && value && self.effect.is_none_or(|e| e == effect)
    }
}

impl Schedule {
    pub fn is_empty(&self) -> bool {
        *self == Schedule::default()
    }

    /// Whether the app may go onto a host with a cordon of this kind.
    pub fn tolerates_cordon(&self, required: bool) -> bool {
        self.tolerations.iter().any(|t| t.tolerates_cordon(required))
    }
}
