//! Running one metric: measure, judge, record, wait the interval, until the metric's phase is
//! decided. The durable HookRun (keeper.rs) commits each measurement as it is recorded
//! (`on_measurement`, awaited before the next is taken) and resumes from what it committed.

use super::metric::{Judge, Measurement, MetricPhase, MetricResult, Outcome};
use super::model::{parse_duration_ms, Metric};
use crate::clock::now_ms;
use std::collections::BTreeMap;
use std::time::Duration;

/// Runs `metric` on from `result` (a new one, or what a run recorded before a restart) until
/// its phase is decided, telling `on_measurement` each measurement as it is recorded and
/// waiting for it (a durable caller commits it) before going on.
pub async fn run_metric<F: std::future::Future<Output = ()>>(
    http: &reqwest::Client,
    metric: &Metric,
    args: &BTreeMap<String, String>,
    mut result: MetricResult,
    mut on_measurement: impl FnMut(&MetricResult) -> F,
) -> MetricResult {
    let judge = match Judge::of(metric) {
        Ok(j) => j,
        Err(e) => {
            result.phase = MetricPhase::Error;
            result.measurements.push(Measurement {
                phase: super::metric::MeasurementPhase::Error,
                value: None,
                started_at_ms: now_ms(),
                finished_at_ms: now_ms(),
                message: e,
            });
            return result;
        }
    };
    let interval = metric.interval.as_deref().and_then(|i| parse_duration_ms(i).ok()).unwrap_or(0);
    if result.phase == MetricPhase::Pending {
        result.phase = MetricPhase::Running;
    }
    // After a restart the next measurement is due an interval after the last one, not at once.
    if let Some(last) = result.measurements.last() {
        let due = last.finished_at_ms.saturating_add(interval);
        tokio::time::sleep(Duration::from_millis(due.saturating_sub(now_ms()))).await;
    }
    while !result.phase.is_done() {
        let started = now_ms();
        let (outcome, called) = super::provider::measure(http, metric, args).await;
        let (phase, why) = judge.judge(&outcome, metric.no_data);
        let value = match &outcome {
            Outcome::Value(serde_json::Value::String(s)) => Some(s.clone()),
            Outcome::Value(v) => Some(v.to_string()),
            _ => None,
        };
        let measurement = Measurement {
            phase,
            value,
            started_at_ms: started,
            finished_at_ms: now_ms(),
            message: format!("{called}: {why}"),
        };
        result.record(measurement, metric);
        on_measurement(&result).await;
        if !result.phase.is_done() {
            tokio::time::sleep(Duration::from_millis(interval)).await;
        }
    }
    result
}
