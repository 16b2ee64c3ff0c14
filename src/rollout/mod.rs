//! Rollouts: moving an app's instances from one revision to the next within the strategy's
//! budget (seed 003 Deployment, seed 002 serial update). The planner ([`plan`]) is pure and
//! shared: stewardd drives it for one host's instances, steward-sched for an app across hosts.

pub mod plan;

pub use plan::{failure, plan, Health, Member, Plan, Rule, Step, View};

use crate::spec::model::{StrategyType, UpdateStrategy};

/// The spec's strategy for `replicas` instances, as the planner takes it.
pub fn rule(strategy: &UpdateStrategy, replicas: u32) -> Rule {
    let (min_ready_ms, deadline_ms) =
        (strategy.min_ready_seconds.saturating_mul(1000), strategy.progress_deadline_secs().saturating_mul(1000));
    match strategy.kind {
        StrategyType::Rolling => {
            let (mut max_unavailable, max_surge) = strategy.budget(replicas);
            if max_unavailable == 0 && max_surge == 0 {
                // Validation refuses it; a percentage of a count scaled down later can still
                // come to it, and a rollout must be able to move.
                max_unavailable = 1;
            }
            Rule::Rolling { max_unavailable, max_surge, min_ready_ms, deadline_ms }
        }
        StrategyType::Serial => {
            Rule::Serial { pause_ms: strategy.pause_secs().saturating_mul(1000), min_ready_ms, deadline_ms }
        }
    }
}
