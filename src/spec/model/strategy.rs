//! How a changed spec reaches the running instances: seed 003's Deployment strategy (a budget of
//! unavailable and surplus instances, `ready` seconds before an instance counts) and seed 002's
//! serial update (each instance in turn: removed, a pause, deployed again). Defaults are the
//! seeds' (DESIGN § 7): rolling with unavailable 0 and surge 1, serial pause 10 s.

use serde::{Deserialize, Serialize};

/// `strategy` of a spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UpdateStrategy {
    #[serde(rename = "type", skip_serializing_if = "super::is_default")]
    pub kind: StrategyType,
    /// Instances that may be unavailable during a rolling update: a count or a percentage of
    /// `spec.instance` (rounded down). Default 0 (seed 003 `unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<CountOrPercent>,
    /// Instances that may run beyond `spec.instance` during a rolling update: a count or a
    /// percentage (rounded up). Default 1 (seed 003 `surge`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<CountOrPercent>,
    /// Seconds a new instance must be ready before it counts as available (seed 003 `ready`).
    #[serde(skip_serializing_if = "super::is_default")]
    pub min_ready_seconds: u64,
    /// `serial`: seconds between an instance's stop and its start on the new revision (seed
    /// 002: 10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_seconds: Option<u64>,
    /// Seconds a new instance may take to become available before the rollout fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<u64>,
    /// A failed rollout goes back to the revision it started from.
    #[serde(skip_serializing_if = "super::is_default")]
    pub auto_rollback: bool,
}

/// Seed 002's pause between an instance's removal and its deployment.
pub const DEFAULT_SERIAL_PAUSE_SECS: u64 = 10;
/// How long a new instance may take to become available (Kubernetes' progressDeadlineSeconds).
pub const DEFAULT_PROGRESS_DEADLINE_SECS: u64 = 600;

impl UpdateStrategy {
    pub fn is_empty(&self) -> bool {
        *self == UpdateStrategy::default()
    }

    /// The budget for `replicas` instances: (max unavailable, max surge), as counts.
    pub fn budget(&self, replicas: u32) -> (u32, u32) {
        let unavailable = self.max_unavailable.as_ref().map_or(0, |v| v.count(replicas, false));
        let surge = self.max_surge.as_ref().map_or(1, |v| v.count(replicas, true));
        (unavailable, surge)
    }

    pub fn pause_secs(&self) -> u64 {
        self.pause_seconds.unwrap_or(DEFAULT_SERIAL_PAUSE_SECS)
    }

    pub fn progress_deadline_secs(&self) -> u64 {
        self.progress_deadline_seconds.unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECS)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StrategyType {
    /// Batches bounded by maxUnavailable and maxSurge (seed 003 Deployment).
    #[default]
    Rolling,
    /// One instance at a time: stop, pause, start on the new revision, wait until ready (seed
    /// 002 RescheduleSpec).
    Serial,
}

/// A count (`2`) or a percentage of the instance count (`"25%"`). Anything else is kept as
/// written, for validation to name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountOrPercent {
    Count(u64),
    Percent(u64),
    Invalid(String),
}

impl CountOrPercent {
    /// As a count of `replicas`: a percentage rounded up (`up`, a surge) or down.
    pub fn count(&self, replicas: u32, up: bool) -> u32 {
        match self {
            CountOrPercent::Count(n) => u32::try_from(*n).unwrap_or(u32::MAX),
            CountOrPercent::Percent(p) => {
                let scaled = u64::from(replicas) * p.min(&100);
                let n = if up { scaled.div_ceil(100) } else { scaled / 100 };
                n as u32
            }
            CountOrPercent::Invalid(_) => 0,
        }
    }
}

impl Serialize for CountOrPercent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CountOrPercent::Count(n) => s.serialize_u64(*n),
            CountOrPercent::Percent(p) => s.serialize_str(&format!("{p}%")),
            CountOrPercent::Invalid(text) => s.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for CountOrPercent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = CountOrPercent;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a count or a percentage such as \"25%\"")
            }
            fn visit_u64<E>(self, n: u64) -> Result<CountOrPercent, E> {
                Ok(CountOrPercent::Count(n))
            }
            fn visit_i64<E>(self, n: i64) -> Result<CountOrPercent, E> {
                Ok(u64::try_from(n).map_or_else(|_| CountOrPercent::Invalid(n.to_string()), CountOrPercent::Count))
            }
            fn visit_f64<E>(self, n: f64) -> Result<CountOrPercent, E> {
                Ok(CountOrPercent::Invalid(n.to_string()))
            }
            fn visit_str<E>(self, text: &str) -> Result<CountOrPercent, E> {
                let t = text.trim();
                let parsed = match t.strip_suffix('%') {
                    Some(p) => p.trim().parse().ok().map(CountOrPercent::Percent),
                    None => t.parse().ok().map(CountOrPercent::Count),
                };
                Ok(parsed.unwrap_or_else(|| CountOrPercent::Invalid(text.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}
