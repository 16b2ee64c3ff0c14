//! One metric's measurements and what they add up to (seed 004's `metricResults[]`): pure, so
//! the HookRun's runner only takes measurements and asks what to do next.
//!
//! A measurement is Successful (the success condition holds, or the failure condition does not
//! when only that one is set), Failed (the failure condition holds, or the success condition
//! does not when only that one is set), Inconclusive (both set, neither holds), or Error (the
//! call or the evaluation failed). The metric is Failed once failed measurements exceed
//! `failureLimit` (0: the first fails it; -1: never), Error once errors in a row exceed
//! `consecutiveErrorLimit`, Inconclusive when its measurements are done and any was
//! inconclusive, else Successful when they are done.

use super::condition::Condition;
use super::model::{Metric, NoData};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MeasurementPhase {
    Successful,
    Failed,
    Inconclusive,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetricPhase {
    Pending,
    Running,
    Successful,
    Failed,
    Error,
    Inconclusive,
}

impl MetricPhase {
    pub fn is_done(self) -> bool {
        !matches!(self, MetricPhase::Pending | MetricPhase::Running)
    }
}

/// One call and its verdict.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    pub phase: MeasurementPhase,
    /// The result as text (`"32"`), when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub started_at_ms: u64,
    pub finished_at_ms: u64,
    /// The URL or query after templating and why the verdict (the condition, the error).
    pub message: String,
}

/// A measurement as written out: its times also in RFC 3339, as seed 004 shows them (read
/// back, the ms fields are what count).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MeasurementShown<'a> {
    phase: MeasurementPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    started_at: String,
    started_at_ms: u64,
    finished_at: String,
    finished_at_ms: u64,
    message: &'a str,
}

impl Serialize for Measurement {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let rfc3339 = crate::clock::rfc3339_utc_seconds;
        MeasurementShown {
            phase: self.phase,
            value: self.value.as_deref(),
            started_at: rfc3339(self.started_at_ms),
            started_at_ms: self.started_at_ms,
            finished_at: rfc3339(self.finished_at_ms),
            finished_at_ms: self.finished_at_ms,
            message: &self.message,
        }
        .serialize(serializer)
    }
}

/// What a provider returned for one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A value to judge.
    Value(serde_json::Value),
    /// The call worked but found nothing (an empty vector, a path that matched nothing).
    NoData,
    /// The call failed.
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricResult {
    pub name: String,
    pub phase: MetricPhase,
    pub count: u32,
    pub successful: u32,
    pub failed: u32,
    pub inconclusive: u32,
    pub error: u32,
    pub consecutive_error: u32,
    /// The last [`MAX_KEPT_MEASUREMENTS`] (the counts above are of all).
    pub measurements: Vec<Measurement>,
    /// Older measurements dropped to keep the last ones (a metric with only an interval
    /// measures until stopped).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub measurements_dropped: u32,
}

/// Measurements a metric keeps: a run's record is rewritten with each one.
pub const MAX_KEPT_MEASUREMENTS: usize = 100;

/// A metric measuring until stopped journals a measurement whose phase differs from the one
/// before, and every this many: not each one, which would push real events out.
pub const EVENT_EVERY: u32 = 100;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A metric's compiled conditions.
#[derive(Debug)]
pub struct Judge {
    success: Option<Condition>,
    failure: Option<Condition>,
}

impl Judge {
    /// Compiles the metric's conditions (a template that was checked compiles).
    pub fn of(metric: &Metric) -> Result<Judge, String> {
        let compile = |c: &Option<String>| c.as_deref().map(Condition::parse).transpose();
        Ok(Judge { success: compile(&metric.success_condition)?, failure: compile(&metric.failure_condition)? })
    }

    /// The verdict on one outcome, and why.
    pub fn judge(&self, outcome: &Outcome, no_data: NoData) -> (MeasurementPhase, String) {
        let value = match outcome {
            Outcome::Error(e) => return (MeasurementPhase::Error, e.clone()),
            Outcome::NoData => {
                let phase = match no_data {
                    NoData::Error => MeasurementPhase::Error,
                    NoData::Inconclusive => MeasurementPhase::Inconclusive,
                    NoData::Fail => MeasurementPhase::Failed,
                };
                return (phase, "no data".into());
            }
            Outcome::Value(v) => v,
        };
        let eval = |c: &Option<Condition>| c.as_ref().map(|c| c.eval(value).map(|b| (b, c.source().to_string())));
        let (success, failure) = match (eval(&self.success), eval(&self.failure)) {
            (Some(Err(e)), _) | (_, Some(Err(e))) => return (MeasurementPhase::Error, e),
            (s, f) => (s.and_then(Result::ok), f.and_then(Result::ok)),
        };
        match (success, failure) {
            (_, Some((true, c))) => (MeasurementPhase::Failed, format!("failureCondition {c:?} holds")),
            (Some((true, c)), _) => (MeasurementPhase::Successful, format!("successCondition {c:?} holds")),
            (Some((false, c)), None) => (MeasurementPhase::Failed, format!("successCondition {c:?} does not hold")),
            (None, Some((false, c))) => (MeasurementPhase::Successful, format!("failureCondition {c:?} does not hold")),
            (Some((false, s)), Some((false, f))) => (
                MeasurementPhase::Inconclusive,
                format!("neither successCondition {s:?} nor failureCondition {f:?} holds"),
            ),
            // No condition: the call itself working is success.
            (None, None) => (MeasurementPhase::Successful, "answered".into()),
        }
    }
}

impl MetricResult {
    pub fn new(name: &str) -> MetricResult {
        MetricResult {
            name: name.to_string(),
            phase: MetricPhase::Pending,
            count: 0,
            successful: 0,
            failed: 0,
            inconclusive: 0,
            error: 0,
            consecutive_error: 0,
            measurements: Vec::new(),
            measurements_dropped: 0,
        }
    }

    /// Adds a measurement and moves the phase.
    pub fn record(&mut self, m: Measurement, metric: &Metric) {
        self.count += 1;
        match m.phase {
            MeasurementPhase::Successful => self.successful += 1,
            MeasurementPhase::Failed => self.failed += 1,
            MeasurementPhase::Inconclusive => self.inconclusive += 1,
            MeasurementPhase::Error => self.error += 1,
        }
        self.consecutive_error = if m.phase == MeasurementPhase::Error { self.consecutive_error + 1 } else { 0 };
        self.measurements.push(m);
        let over = self.measurements.len().saturating_sub(MAX_KEPT_MEASUREMENTS);
        self.measurements.drain(..over);
        self.measurements_dropped = self.measurements_dropped.saturating_add(over as u32);
        self.phase = self.assess(metric);
    }

    /// Whether the last measurement recorded is journaled: each of a metric with a count (as
    /// many as it says); of one measuring until stopped, a change of phase, every
    /// [`EVENT_EVERY`]th, and the one that decided it.
    pub fn journals_last(&self, metric: &Metric) -> bool {
        let [.., before, last] = self.measurements.as_slice() else { return true };
        metric.planned().is_some()
            || before.phase != last.phase
            || self.count % EVENT_EVERY == 0
            || self.phase.is_done()
    }

    fn assess(&self, metric: &Metric) -> MetricPhase {
        let over = |n: u32, limit: i64| limit >= 0 && i64::from(n) > limit;
        if over(self.failed, metric.failure_limit) {
            return MetricPhase::Failed;
        }
        if over(self.consecutive_error, metric.consecutive_error_limit) {
            return MetricPhase::Error;
        }
        match metric.planned() {
            Some(n) if self.count >= n => {
                if self.inconclusive > 0 {
                    MetricPhase::Inconclusive
                } else if self.error > 0 && self.successful == 0 {
                    // Every measurement errored, within the limit: nothing says it passed.
                    MetricPhase::Error
                } else {
                    MetricPhase::Successful
                }
            }
            _ => MetricPhase::Running,
        }
    }

    /// Stopped before its measurements were done (the run terminated): what it has says.
    pub fn terminate(&mut self) {
        if !self.phase.is_done() {
            self.phase = if self.failed > 0 {
                MetricPhase::Failed
            } else if self.inconclusive > 0 {
                MetricPhase::Inconclusive
            } else {
                MetricPhase::Successful
            };
        }
    }
}

/// A HookRun's phase from its metrics': any Error, else any Failed, else any Inconclusive, else
/// Running while one runs, Successful once all succeeded (seed 004's status.phase).
pub fn run_phase(metrics: &[MetricResult]) -> MetricPhase {
    let any = |p| metrics.iter().any(|m| m.phase == p);
    if any(MetricPhase::Error) {
        MetricPhase::Error
    } else if any(MetricPhase::Failed) {
        MetricPhase::Failed
    } else if metrics.iter().any(|m| !m.phase.is_done()) {
        if metrics.iter().all(|m| m.phase == MetricPhase::Pending) {
            MetricPhase::Pending
        } else {
            MetricPhase::Running
        }
    } else if any(MetricPhase::Inconclusive) {
        MetricPhase::Inconclusive
    } else {
        MetricPhase::Successful
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::model::{Provider, Web};
    use serde_json::json;

    fn metric(count: Option<u32>, success: Option<&str>, failure: Option<&str>) -> Metric {
        Metric {
            name: "webtest".into(),
            count,
            interval: count.filter(|n| *n > 1).map(|_| "1s".into()),
            success_condition: success.map(String::from),
            failure_condition: failure.map(String::from),
            failure_limit: 0,
            consecutive_error_limit: 4,
            no_data: NoData::Error,
            provider: Provider {
                web: Some(Web {
                    url: "http://127.0.0.1:1".into(),
                    headers: vec![],
                    json_path: None,
                    timeout_seconds: 1,
                    follow_redirects: false,
                }),
                prometheus: None,
            },
        }
    }

    fn run(metric: &Metric, outcomes: &[Outcome]) -> MetricResult {
        let judge = Judge::of(metric).unwrap();
        let mut r = MetricResult::new(&metric.name);
        for o in outcomes {
            let (phase, message) = judge.judge(o, metric.no_data);
            let value = match o {
                Outcome::Value(v) => Some(v.as_str().map(String::from).unwrap_or_else(|| v.to_string())),
                _ => None,
            };
            r.record(Measurement { phase, value, started_at_ms: 0, finished_at_ms: 0, message }, metric);
            if r.phase.is_done() {
                break;
            }
        }
        r
    }

    /// Seed 004's example: `asInt(result) < 30`, count 2, failureLimit 0: "32" fails it at the
    /// first measurement; 20 twice passes.
    #[test]
    fn the_seeds_example() {
        let m = metric(Some(2), Some("asInt(result) < 30"), None);
        let r = run(&m, &[Outcome::Value(json!("32")), Outcome::Value(json!("32"))]);
        assert_eq!((r.phase, r.count, r.failed), (MetricPhase::Failed, 1, 1));
        assert_eq!(r.measurements[0].value.as_deref(), Some("32"));
        assert!(r.measurements[0].message.contains("does not hold"), "{:?}", r.measurements[0]);
        let r = run(&m, &[Outcome::Value(json!(20)), Outcome::Value(json!(20))]);
        assert_eq!((r.phase, r.count, r.successful), (MetricPhase::Successful, 2, 2));
    }

    #[test]
    fn failure_limit_consecutive_errors_inconclusive_and_no_data() {
        let mut m = metric(Some(3), Some("asInt(result) < 30"), None);
        m.failure_limit = 1;
        let r = run(&m, &[Outcome::Value(json!(40)), Outcome::Value(json!(10)), Outcome::Value(json!(10))]);
        assert_eq!(r.phase, MetricPhase::Successful, "one failure within the limit");
        let r = run(&m, &[Outcome::Value(json!(40)), Outcome::Value(json!(40))]);
        assert_eq!((r.phase, r.count), (MetricPhase::Failed, 2));
        m.failure_limit = -1;
        let r = run(&m, &[Outcome::Value(json!(40)), Outcome::Value(json!(40)), Outcome::Value(json!(10))]);
        assert_eq!(r.phase, MetricPhase::Successful, "-1: no limit");

        let mut m = metric(Some(10), Some("true"), None);
        m.consecutive_error_limit = 2;
        let down = Outcome::Error("connection refused".into());
        let r = run(&m, &[down.clone(), down.clone(), Outcome::Value(json!(1)), down.clone(), down.clone(), down]);
        assert_eq!((r.phase, r.count, r.error, r.consecutive_error), (MetricPhase::Error, 6, 5, 3));

        let both = metric(Some(1), Some("asInt(result) < 30"), Some("asInt(result) > 50"));
        assert_eq!(run(&both, &[Outcome::Value(json!(40))]).phase, MetricPhase::Inconclusive);
        assert_eq!(run(&both, &[Outcome::Value(json!(60))]).phase, MetricPhase::Failed);

        let mut m = metric(Some(1), Some("result[0] < 1"), None);
        assert_eq!(run(&m, &[Outcome::NoData]).phase, MetricPhase::Error);
        m.no_data = NoData::Inconclusive;
        assert_eq!(run(&m, &[Outcome::NoData]).phase, MetricPhase::Inconclusive);
        m.no_data = NoData::Fail;
        let r = run(&m, &[Outcome::NoData]);
        assert_eq!((r.phase, r.measurements[0].message.as_str()), (MetricPhase::Failed, "no data"));
    }

    /// Measured until stopped: the last 100 kept, the others counted; journaled when the phase
    /// changes and every 100th, not each.
    #[test]
    fn a_metric_keeps_its_last_measurements_and_journals_changes() {
        let mut m = metric(None, Some("asInt(result) == 1"), None);
        m.interval = Some("1s".into());
        m.failure_limit = -1;
        let judge = Judge::of(&m).unwrap();
        let mut r = MetricResult::new(&m.name);
        let mut journaled = Vec::new();
        for i in 1..=250u64 {
            let outcome = Outcome::Value(json!(if i == 150 { 2 } else { 1 }));
            let (phase, message) = judge.judge(&outcome, m.no_data);
            r.record(Measurement { phase, value: None, started_at_ms: i, finished_at_ms: i, message }, &m);
            if r.journals_last(&m) {
                journaled.push(i);
            }
        }
        assert_eq!((r.count, r.measurements.len(), r.measurements_dropped), (250, 100, 150));
        assert_eq!(r.measurements[0].started_at_ms, 151, "the newest are kept");
        assert_eq!(journaled, [1, 100, 150, 151, 200]);
        assert!(r.journals_last(&metric(Some(300), None, None)), "each measurement of a counted metric");
    }

    #[test]
    fn a_runs_phase_from_its_metrics() {
        let with = |p| MetricResult { phase: p, ..MetricResult::new("m") };
        use MetricPhase::*;
        assert_eq!(run_phase(&[with(Successful), with(Running)]), Running);
        assert_eq!(run_phase(&[with(Successful), with(Inconclusive)]), Inconclusive);
        assert_eq!(run_phase(&[with(Failed), with(Running)]), Failed);
        assert_eq!(run_phase(&[with(Failed), with(Error)]), Error);
        assert_eq!(run_phase(&[with(Successful), with(Successful)]), Successful);
        assert_eq!(run_phase(&[with(Pending)]), Pending);
    }
}
