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
    /// Steps the rollout goes through in order (issue 19): move instances up to a partition,
    /// run a hook that must pass, pause. After the last, the rest of the instances move.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<RolloutStep>,
    /// A hook run before any instance moves: a rollout goes ahead only when it passes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_hook: Option<HookStep>,
    /// A hook run once every instance runs the revision: the rollout completes only when it
    /// passes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_hook: Option<HookStep>,
    /// A hook run for each instance a scale-in removes (issue 47; seed 004's hooks on scaling,
    /// GameDeployment's PreDeleteHook): the instance goes only when its run is Successful.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_in: Option<ScaleInHook>,
}

/// `strategy.scaleIn`: the hook, and how long a removal waits for its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ScaleInHook {
    /// Its args may take the removed instance's `${hostip}`, `${ports.NAME}`, `${instanceid}`.
    pub hook: HookStep,
    /// Seconds a removal waits for the run's verdict (default 600).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// What the time limit does: `Keep` the instance (the default: nothing is removed without
    /// a verdict) or `Delete` it.
    #[serde(skip_serializing_if = "super::is_default")]
    pub on_timeout: OnTimeout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OnTimeout {
    #[default]
    Keep,
    Delete,
}

/// How long a scale-in's removal waits for its hook's verdict by default.
pub const DEFAULT_SCALE_IN_TIMEOUT_SECS: u64 = 600;

impl ScaleInHook {
    pub fn timeout_secs(&self) -> u64 {
        self.timeout_seconds.unwrap_or(DEFAULT_SCALE_IN_TIMEOUT_SECS)
    }
}

/// One step of `strategy.steps`: exactly one of its fields.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RolloutStep {
    /// Move instances until this many (a count, or a percentage of `spec.instance` rounded up)
    /// run the new revision. Counted as GameDeployment's canary steps are not: there, a
    /// partition is how many stay old; here, how many are new (issue 19's `{partition: 100%}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<CountOrPercent>,
    /// Run a HookTemplate; the rollout goes on only if the run is Successful (Inconclusive
    /// pauses it, Failed or Error fails it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookStep>,
    /// Wait this many seconds (`60`, or `{"duration": 60}`), or until resumed (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStep>,
}

/// A hook a rollout runs: a stored HookTemplate and values for its args. A value may take the
/// canary instance's `${hostip}`, `${ports.NAME}`, `${instanceid}`, `${namespace}`, `${name}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HookStep {
    /// The template's name, in the app's namespace.
    pub template: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<HookStepArg>,
}

/// Seed 004's arg shape: `{"name": ..., "value": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HookStepArg {
    pub name: String,
    pub value: String,
}

/// `pause`: seconds, or `{"duration": seconds}`, or `{}` (until an operator resumes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PauseStep {
    Seconds(u64),
    For {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration: Option<u64>,
    },
}

impl PauseStep {
    /// Seconds to wait, or None: until resumed.
    pub fn seconds(&self) -> Option<u64> {
        match self {
            PauseStep::Seconds(s) => Some(*s),
            PauseStep::For { duration } => *duration,
        }
    }
}

/// A step as the rollout carries it out: the written steps with the hooks around them and the
/// final move of every instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Move instances until this many run the revision.
    Partition(u32),
    Hook(HookStep),
    Pause(Option<u64>),
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

    /// What a rollout to `instances` instances goes through: the pre hook, the steps, every
    /// instance moved, the post hook. Without steps and hooks, only the move of every instance.
    pub fn gates(&self, instances: u32) -> Vec<Gate> {
        let mut gates: Vec<Gate> = self.pre_hook.iter().cloned().map(Gate::Hook).collect();
        for step in &self.steps {
            if let Some(p) = &step.partition {
                gates.push(Gate::Partition(p.count(instances, true).min(instances)));
            } else if let Some(h) = &step.hook {
                gates.push(Gate::Hook(h.clone()));
            } else if let Some(p) = &step.pause {
                gates.push(Gate::Pause(p.seconds()));
            }
        }
        gates.push(Gate::Partition(instances));
        gates.extend(self.post_hook.iter().cloned().map(Gate::Hook));
        gates
    }

    /// The hooks it names, with their field paths.
    pub fn hooks(&self) -> Vec<(String, &HookStep)> {
        let mut hooks = Vec::new();
        if let Some(h) = &self.pre_hook {
            hooks.push(("preHook".to_string(), h));
        }
        for (i, step) in self.steps.iter().enumerate() {
            if let Some(h) = &step.hook {
                hooks.push((format!("steps[{i}].hook"), h));
            }
        }
        if let Some(h) = &self.post_hook {
            hooks.push(("postHook".to_string(), h));
        }
        if let Some(s) = &self.scale_in {
            hooks.push(("scaleIn.hook".to_string(), &s.hook));
        }
        hooks
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
