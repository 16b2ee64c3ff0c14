//! `strategy`: the rollout's budget (seed 003) or serial mode (seed 002), checked as written and
//! for the spec's instance count.

use super::MAX_DAY_SECS;
use crate::spec::error::{Errors, Path};
use crate::spec::model::{CountOrPercent, StrategyType, UpdateStrategy};

pub(super) fn strategy(s: &UpdateStrategy, instances: u32, at: &Path, errors: &mut Errors) {
    let mut both_zero = true;
    for (field, value) in [("maxUnavailable", &s.max_unavailable), ("maxSurge", &s.max_surge)] {
        let Some(value) = value else {
            // Unset: unavailable 0, surge 1.
            both_zero &= field == "maxUnavailable";
            continue;
        };
        if s.kind == StrategyType::Serial {
            errors.add(&at.field(field), "a serial update moves one instance at a time: it takes no budget");
            continue;
        }
        match value {
            CountOrPercent::Invalid(text) => errors
                .add(&at.field(field), format!("expected a count or a percentage such as \"25%\", found {text:?}")),
            CountOrPercent::Percent(p) if *p > 100 => {
                errors.add(&at.field(field), format!("a percentage is at most 100%, found {p}%"))
            }
            CountOrPercent::Count(n) if *n > u64::from(super::MAX_INSTANCES) => {
                errors.add(&at.field(field), format!("must be at most {}", super::MAX_INSTANCES))
            }
            _ => {}
        }
        both_zero &= value.count(instances, field == "maxSurge") == 0;
    }
    if s.kind == StrategyType::Rolling && both_zero {
        errors.add(
            at,
            format!(
                "maxUnavailable and maxSurge are both 0 for {instances} instance(s): a rolling update could never \
                 take a step (seed 003: not both 0)"
            ),
        );
    }
    if s.kind != StrategyType::Serial && s.pause_seconds.is_some() {
        errors.add(&at.field("pauseSeconds"), "is for `type: serial` only");
    }
    if s.pause_seconds.is_some_and(|p| p > MAX_DAY_SECS) {
        errors.add(&at.field("pauseSeconds"), format!("must be at most {MAX_DAY_SECS}"));
    }
    if s.min_ready_seconds > MAX_DAY_SECS {
        errors.add(&at.field("minReadySeconds"), format!("must be at most {MAX_DAY_SECS}"));
    }
    match s.progress_deadline_seconds {
        Some(0) => errors.add(&at.field("progressDeadlineSeconds"), "must be at least 1"),
        Some(d) if d > super::MAX_WEEK_SECS => {
            errors.add(&at.field("progressDeadlineSeconds"), format!("must be at most {}", super::MAX_WEEK_SECS))
        }
        _ => {}
    }
    if s.progress_deadline_secs() <= s.min_ready_seconds {
        errors.add(
            &at.field("progressDeadlineSeconds"),
            format!(
                "must be more than minReadySeconds ({}): an instance could never become available in time",
                s.min_ready_seconds
            ),
        );
    }
    for (i, step) in s.steps.iter().enumerate() {
        let at = at.field("steps").index(i);
        let set = [step.partition.is_some(), step.hook.is_some(), step.pause.is_some()].iter().filter(|b| **b).count();
        if set != 1 {
            errors.add(&at, "needs exactly one of partition, hook and pause");
        }
        match &step.partition {
            Some(CountOrPercent::Invalid(text)) => errors.add(
                &at.field("partition"),
                format!("expected a count or a percentage such as \"25%\", found {text:?}"),
            ),
            Some(CountOrPercent::Percent(p)) if *p > 100 => {
                errors.add(&at.field("partition"), format!("a percentage is at most 100%, found {p}%"))
            }
            _ => {}
        }
        if step.pause.as_ref().and_then(|p| p.seconds()).is_some_and(|p| p > MAX_DAY_SECS) {
            errors.add(&at.field("pause"), format!("must be at most {MAX_DAY_SECS} seconds"));
        }
    }
    let mut last = 0;
    for (i, step) in s.steps.iter().enumerate() {
        if let Some(p) = step.partition.as_ref().filter(|p| !matches!(p, CountOrPercent::Invalid(_))) {
            let n = p.count(instances, true).min(instances);
            if n < last {
                errors.add(
                    &at.field("steps").index(i).field("partition"),
                    format!("{n} instance(s) is fewer than an earlier step's {last}: a rollout only moves forward"),
                );
            }
            last = last.max(n);
        }
    }
    if let Some(t) = s.scale_in.as_ref().and_then(|h| h.timeout_seconds) {
        if t == 0 || t > MAX_DAY_SECS {
            errors.add(&at.field("scaleIn").field("timeoutSeconds"), format!("must be 1 to {MAX_DAY_SECS} seconds"));
        }
    }
    for (path, hook) in s.hooks() {
        let at = at.field(&path);
        if let Err(e) = crate::hooks::run::check_name(&hook.template) {
            errors.add(&at.field("template"), e);
        }
        let mut seen = std::collections::BTreeSet::new();
        for (j, arg) in hook.args.iter().enumerate() {
            if arg.name.is_empty() {
                errors.add(&at.field("args").index(j).field("name"), "is required");
            } else if !seen.insert(&arg.name) {
                errors.add(&at.field("args").index(j).field("name"), format!("{:?} is given twice", arg.name));
            }
        }
    }
}
