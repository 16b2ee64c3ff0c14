//! A HookRun as seed 004 shows it: `metadata`, a `spec` with the template's metrics copied in
//! and its args filled (so a template changed later does not change a run under way), and a
//! `status` with every metric's measurements. Pure data: the keeper (keeper.rs) stores it and
//! drives it.

use super::metric::{run_phase, MetricPhase, MetricResult};
use super::model::{Arg, HookTemplate, Metric};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The phase of a whole run: the metrics' phases added up (see [`run_phase`]).
pub type RunPhase = MetricPhase;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRun {
    pub api_version: String,
    pub kind: String,
    pub metadata: RunMetadata,
    pub spec: HookRunSpec,
    pub status: HookRunStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunMetadata {
    pub name: String,
    pub namespace: String,
    pub created_at_ms: u64,
    /// Who made it and why: a rollout sets `steward/app`, `steward/revision`, `steward/step`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRunSpec {
    /// The template it was made from (`namespace/name` is this run's namespace and that name).
    pub template: String,
    /// Every arg with its value.
    pub args: Vec<Arg>,
    pub metrics: Vec<Metric>,
    /// Set by `terminate`: the run takes no more measurements.
    #[serde(default)]
    pub terminate: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRunStatus {
    pub phase: RunPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    /// Why it ended as it did: the first metric that decided it, or "terminated".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub metric_results: Vec<MetricResult>,
}

/// A run's status as written out: its times also in RFC 3339, as seed 004 shows them (read
/// back, the ms fields are what count).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HookRunStatusShown<'a> {
    phase: RunPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    metric_results: &'a [MetricResult],
}

impl Serialize for HookRunStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let rfc3339 = crate::clock::rfc3339_utc_seconds;
        HookRunStatusShown {
            phase: self.phase,
            started_at: self.started_at_ms.map(rfc3339),
            started_at_ms: self.started_at_ms,
            finished_at: self.finished_at_ms.map(rfc3339),
            finished_at_ms: self.finished_at_ms,
            message: &self.message,
            metric_results: &self.metric_results,
        }
        .serialize(serializer)
    }
}

/// What a listing shows of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRunSummary {
    pub namespace: String,
    pub name: String,
    pub template: String,
    pub phase: RunPhase,
    /// Measurements taken, over every metric.
    pub measurements: u32,
    /// Of those, older ones no longer kept (each metric keeps its last 100).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub measurements_dropped: u32,
    pub created_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// What a listing shows of a template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookTemplateSummary {
    pub namespace: String,
    pub name: String,
    pub args: Vec<String>,
    pub metrics: Vec<String>,
}

/// GET /v1/hooktemplates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookTemplateList {
    pub items: Vec<HookTemplateSummary>,
}

/// GET /v1/hookruns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookRunList {
    pub items: Vec<HookRunSummary>,
}

/// The body of `POST /v1/hookruns`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateHookRun {
    /// The template's name, in `namespace`.
    pub template: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The run's name; without one, `TEMPLATE-<unix ms>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Values for the template's args (a template's own value may be overridden).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn default_namespace() -> String {
    crate::spec::model::DEFAULT_NAMESPACE.to_string()
}

pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl HookRun {
    /// A new run of `template` with `args` (each named arg must be declared; each declared arg
    /// needs a value, given or the template's).
    pub fn new(
        template: &HookTemplate,
        name: &str,
        args: &BTreeMap<String, String>,
        labels: BTreeMap<String, String>,
        now_ms: u64,
    ) -> Result<HookRun, String> {
        check_name(name)?;
        for given in args.keys() {
            if !template.spec.args.iter().any(|a| &a.name == given) {
                return Err(format!("args.{given}: template {} declares no such arg", template.metadata.name));
            }
        }
        let mut filled = Vec::new();
        for a in &template.spec.args {
            let value = args.get(&a.name).or(a.value.as_ref()).ok_or_else(|| {
                format!("args.{}: template {} gives it no value: one is needed", a.name, template.metadata.name)
            })?;
            filled.push(Arg { name: a.name.clone(), value: Some(value.clone()) });
        }
        Ok(HookRun {
            api_version: template.api_version.clone(),
            kind: "HookRun".into(),
            metadata: RunMetadata {
                name: name.to_string(),
                namespace: template.metadata.namespace.clone(),
                created_at_ms: now_ms,
                labels,
            },
            spec: HookRunSpec {
                template: template.metadata.name.clone(),
                args: filled,
                metrics: template.spec.metrics.clone(),
                terminate: false,
            },
            status: HookRunStatus {
                phase: MetricPhase::Pending,
                started_at_ms: None,
                finished_at_ms: None,
                message: String::new(),
                metric_results: template.spec.metrics.iter().map(|m| MetricResult::new(&m.name)).collect(),
            },
        })
    }

    pub fn key(&self) -> String {
        key(&self.metadata.namespace, &self.metadata.name)
    }

    pub fn args(&self) -> BTreeMap<String, String> {
        self.spec.args.iter().filter_map(|a| Some((a.name.clone(), a.value.clone()?))).collect()
    }

    pub fn is_done(&self) -> bool {
        self.status.phase.is_done()
    }

    /// Takes in one metric's result and works out the run's phase; at the end, its message.
    pub fn update(&mut self, index: usize, result: MetricResult, now_ms: u64) {
        self.status.metric_results[index] = result;
        self.settle(now_ms);
    }

    /// Terminated: every metric still running is decided by what it measured so far.
    pub fn terminate(&mut self, now_ms: u64) {
        let was_done = self.is_done();
        self.spec.terminate = true;
        for m in &mut self.status.metric_results {
            m.terminate();
        }
        self.settle(now_ms);
        if !was_done {
            self.status.message = "terminated".into();
        }
    }

    fn settle(&mut self, now_ms: u64) {
        let phase = run_phase(&self.status.metric_results);
        if phase.is_done() && !self.status.phase.is_done() {
            self.status.finished_at_ms = Some(now_ms);
            if let Some(decider) = self.status.metric_results.iter().find(|m| m.phase == phase) {
                let why = decider.measurements.last().map(|m| m.message.as_str()).unwrap_or("no measurement");
                self.status.message = format!("metric {} {:?}: {why}", decider.name, phase);
            }
        }
        self.status.phase = phase;
    }

    pub fn summary(&self) -> HookRunSummary {
        HookRunSummary {
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
            template: self.spec.template.clone(),
            phase: self.status.phase,
            measurements: self.status.metric_results.iter().map(|m| m.count).sum(),
            measurements_dropped: self.status.metric_results.iter().map(|m| m.measurements_dropped).sum(),
            created_at_ms: self.metadata.created_at_ms,
            finished_at_ms: self.status.finished_at_ms,
            message: self.status.message.clone(),
        }
    }
}

impl HookTemplate {
    pub fn key(&self) -> String {
        key(&self.metadata.namespace, &self.metadata.name)
    }

    pub fn summary(&self) -> HookTemplateSummary {
        HookTemplateSummary {
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
            args: self.spec.args.iter().map(|a| a.name.clone()).collect(),
            metrics: self.spec.metrics.iter().map(|m| m.name.clone()).collect(),
        }
    }
}

/// A run's or template's name: what a secret's may be (it is a store key and a URL segment).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(format!("name {name:?} must be 1-253 letters, digits, '-', '_' or '.'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::metric::{Measurement, MeasurementPhase};

    fn template() -> HookTemplate {
        crate::hooks::parse_template(
            r#"{"kind": "HookTemplate", "metadata": {"name": "t"}, "spec": {
                 "args": [{"name": "host", "value": "127.0.0.1"}, {"name": "port"}],
                 "metrics": [{"name": "a", "successCondition": "result == 1",
                              "provider": {"web": {"url": "http://{{ args.host }}:{{ args.port }}/"}}},
                             {"name": "b", "count": 2, "interval": "1s", "successCondition": "result == 1",
                              "provider": {"web": {"url": "http://{{ args.host }}:{{ args.port }}/"}}}]}}"#,
            crate::spec::Format::Json,
        )
        .unwrap()
    }

    fn measured(phase: MeasurementPhase) -> Measurement {
        Measurement { phase, value: Some("1".into()), started_at_ms: 1, finished_at_ms: 2, message: "m".into() }
    }

    #[test]
    fn args_are_filled_and_checked() {
        let t = template();
        let args = BTreeMap::from([("port".to_string(), "80".to_string())]);
        let run = HookRun::new(&t, "r", &args, BTreeMap::new(), 5).unwrap();
        assert_eq!(run.args()["host"], "127.0.0.1");
        assert_eq!(run.status.phase, MetricPhase::Pending);
        let e = HookRun::new(&t, "r", &BTreeMap::new(), BTreeMap::new(), 5).unwrap_err();
        assert!(e.contains("args.port"), "{e}");
        let odd = BTreeMap::from([("port".into(), "1".into()), ("nope".into(), "1".into())]);
        assert!(HookRun::new(&t, "r", &odd, BTreeMap::new(), 5).unwrap_err().contains("args.nope"));
        assert!(HookRun::new(&t, "a/b", &args, BTreeMap::new(), 5).is_err());
    }

    #[test]
    fn the_run_ends_with_its_metrics_and_says_why() {
        let t = template();
        let args = BTreeMap::from([("port".to_string(), "80".to_string())]);
        let mut run = HookRun::new(&t, "r", &args, BTreeMap::new(), 5).unwrap();
        let mut a = run.status.metric_results[0].clone();
        a.record(measured(MeasurementPhase::Successful), &t.spec.metrics[0]);
        run.update(0, a, 10);
        assert_eq!(run.status.phase, MetricPhase::Running);
        let mut b = run.status.metric_results[1].clone();
        b.record(measured(MeasurementPhase::Failed), &t.spec.metrics[1]);
        run.update(1, b, 20);
        assert_eq!(run.status.phase, MetricPhase::Failed);
        assert_eq!(run.status.finished_at_ms, Some(20));
        assert!(run.status.message.starts_with("metric b Failed"), "{}", run.status.message);

        // Seed 004's status: the times also in RFC 3339, the run's and each measurement's.
        run.status.started_at_ms = Some(1_604_916_529_000);
        let shown = serde_json::to_value(&run.status).unwrap();
        assert_eq!(shown["startedAt"], "2020-11-09T10:08:49Z");
        assert_eq!(shown["finishedAt"], "1970-01-01T00:00:00Z");
        assert_eq!(shown["metricResults"][1]["measurements"][0]["startedAt"], "1970-01-01T00:00:00Z");
        let read: HookRunStatus = serde_json::from_value(shown).unwrap();
        assert_eq!(read, run.status, "read back as written");

        let mut run = HookRun::new(&t, "r", &args, BTreeMap::new(), 5).unwrap();
        run.terminate(30);
        assert_eq!(run.status.phase, MetricPhase::Successful);
        assert!(run.spec.terminate);
    }
}
