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
    http: &super::provider::Http,
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
        let (value, left_out) = stored_value(&outcome);
        let measurement = Measurement {
            phase,
            value,
            started_at_ms: started,
            finished_at_ms: now_ms(),
            message: format!("{called}: {why}{}", left_out.unwrap_or_default()),
        };
        result.record(measurement, metric);
        on_measurement(&result).await;
        if !result.phase.is_done() {
            tokio::time::sleep(Duration::from_millis(interval)).await;
        }
    }
    result
}

/// Most bytes of a measurement's value the run keeps (and its event carries): the condition
/// judged the whole value, but every reader of the run need not get it.
pub const MAX_STORED_VALUE_BYTES: usize = 64 << 10;

/// A measurement's value as the run keeps it, and, when it is too large to keep, why not.
fn stored_value(outcome: &Outcome) -> (Option<String>, Option<String>) {
    let value = match outcome {
        Outcome::Value(serde_json::Value::String(s)) => s.clone(),
        Outcome::Value(v) => v.to_string(),
        _ => return (None, None),
    };
    if value.len() > MAX_STORED_VALUE_BYTES {
        let why = format!(" (the value, {} bytes, is over the {MAX_STORED_VALUE_BYTES} kept)", value.len());
        return (None, Some(why));
    }
    (Some(value), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value over the bound is not stored: the message names its size instead.
    #[test]
    fn a_large_value_is_left_out_naming_its_size() {
        let small = Outcome::Value(serde_json::json!("32"));
        assert_eq!(stored_value(&small), (Some("32".into()), None));
        let large = Outcome::Value(serde_json::Value::String("a".repeat(MAX_STORED_VALUE_BYTES + 1)));
        let (value, why) = stored_value(&large);
        assert_eq!(value, None);
        assert_eq!(why.as_deref(), Some(" (the value, 65537 bytes, is over the 65536 kept)"));
        assert_eq!(stored_value(&Outcome::Error("down".into())), (None, None));
    }
}
