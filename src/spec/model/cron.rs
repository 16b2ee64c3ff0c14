//! `cronJob`: the app runs as a job at every tick of a cron rule (seed 003 CronJob). Each tick's
//! run set takes `job`'s parallelism, completions and active (seed 003 writes them beside the
//! rule; here they stay in `job`, as for a plain job).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CronJobSpec {
    /// `*/5 * * * *`, 6 fields with seconds first, or a macro (`@daily`).
    pub rule: String,
    /// The zone the rule's wall clock is in.
    pub time_zone: String,
    /// Seconds a tick may still start late; past that it is missed. 0: no limit (DESIGN § 7).
    pub deadline: u64,
    pub policy: ConcurrencyPolicy,
    /// No new tick starts while set (the runs going go on).
    pub suspend: bool,
    pub history: CronHistory,
}

impl Default for CronJobSpec {
    fn default() -> Self {
        CronJobSpec {
            rule: String::new(),
            time_zone: "UTC".into(),
            deadline: 0,
            policy: ConcurrencyPolicy::Allow,
            suspend: false,
            history: CronHistory::default(),
        }
    }
}

/// What a tick does while an earlier tick's runs still go (seed 003).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ConcurrencyPolicy {
    /// Both go.
    #[default]
    Allow,
    /// The tick is skipped.
    Forbid,
    /// The earlier runs are stopped; the tick's start.
    Replace,
}

/// Finished ticks kept, with their runs' instances and logs (DESIGN § 7: 0 and 0; the status
/// keeps the counts and the last success's and failure's time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CronHistory {
    pub success: u32,
    pub fail: u32,
}
