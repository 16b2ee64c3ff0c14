//! Seed 003's lifecycle hooks as every workload runs them: each process's (container's)
//! postStart at once after a start, its preStop at once before the stop signal. A workload
//! supplies the hooks, ready to run; these say how their outcomes count.

use super::workload::{BoxFuture, Runner};
use crate::health::Outcome;

/// How long a postStart hook may take (seed 003 gives none; a hook that hangs must not keep
/// the instance in limbo).
pub const POST_START_TIMEOUT_SECS: u64 = 60;

/// A named hook: the process's or container's name, and the hook ready to run once.
pub(crate) type Hook = (String, Runner);

/// Every postStart at once; the first failure names its process (container). None: no hooks.
pub(crate) fn post_start(hooks: Vec<Hook>) -> Option<BoxFuture<Result<(), String>>> {
    if hooks.is_empty() {
        return None;
    }
    Some(Box::pin(async move {
        let runs = hooks.iter().map(|(name, run)| async move { (name, run().await) });
        for (name, outcome) in futures_util::future::join_all(runs).await {
            if let Outcome::Fail(why) = outcome {
                return Err(format!("postStart of {name} failed: {why}"));
            }
        }
        Ok(())
    }))
}

/// Every preStop at once, ended at `deadline` whatever they do: seed 003's stop goes on
/// whether they succeed or not, so failures are only logged. None: no hooks.
pub(crate) fn pre_stop(
    instance: &crate::spec::InstanceId,
    hooks: Vec<Hook>,
    deadline: tokio::time::Instant,
) -> Option<BoxFuture<()>> {
    if hooks.is_empty() {
        return None;
    }
    let instance = instance.clone();
    Some(Box::pin(async move {
        let runs = hooks.iter().map(|(name, run)| async move { (name, run().await) });
        match tokio::time::timeout_at(deadline, futures_util::future::join_all(runs)).await {
            Ok(done) => {
                for (name, outcome) in done {
                    if let Outcome::Fail(why) = outcome {
                        tracing::warn!(%instance, "preStop of {name} failed (the stop goes on): {why}");
                    }
                }
            }
            Err(_) => tracing::warn!(%instance, "preStop still ran at the end of the grace period"),
        }
    }))
}

/// Seconds left until `deadline`, at least 1: a preStop's own timeout.
pub(crate) fn secs_until(deadline: tokio::time::Instant) -> u64 {
    deadline.saturating_duration_since(tokio::time::Instant::now()).as_secs().max(1)
}
