//! Seed 000's restart policy as a pure decision: restart (after which delay), give up, or stay.

use crate::spec::model::{RestartPolicy, RestartPolicyKind};
use serde::{Deserialize, Serialize};

/// After this long running without a restart, the attempt count starts again from zero.
pub const RESET_AFTER_MS: u64 = 30 * 60 * 1000;

/// An end this soon after the start (or a start that never ran a process) is a quick end.
pub const QUICK_END_MS: u64 = 1000;
/// Quick ends in a row that are still restarted without a floor (as systemd's start burst):
/// an operator killing a process just started is not a crash loop.
pub const QUICK_BURST: u32 = 3;
/// The least delay after the burst; it doubles with each further quick end in a row...
pub const QUICK_FLOOR_MS: u64 = 100;
/// ...up to this. A crash loop with `interval: 0` (or a missing secret, a bad user) would
/// otherwise restart hundreds of times a second, each a durable commit and an event.
pub const QUICK_FLOOR_MAX_MS: u64 = 10_000;

/// Consecutive restart attempts of one instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartCounter {
    /// Restarts scheduled since the count was last reset.
    pub attempts: u32,
    /// When the current run began (unix ms): its start command's spawn, for processes.
    pub running_since_ms: Option<u64>,
    /// Quick ends in a row (see [`QUICK_END_MS`]); any longer run resets it.
    #[serde(default)]
    pub quick_ends: u32,
}

impl RestartCounter {
    /// Attempts that count at `now_ms`: zero once the instance has run for 30 minutes.
    pub fn effective_attempts(&self, now_ms: u64) -> u32 {
        match self.running_since_ms {
            Some(since) if now_ms.saturating_sub(since) >= RESET_AFTER_MS => 0,
            _ => self.attempts,
        }
    }

    /// Whether an end at `now_ms` is a quick one: no process ran, or it ran under a second.
    pub fn ends_quickly(&self, now_ms: u64) -> bool {
        self.running_since_ms.is_none_or(|since| now_ms.saturating_sub(since) < QUICK_END_MS)
    }

    /// The least restart delay for an end at `now_ms`: 0 after a run of a second or more and
    /// for the first quick ends in a row, then 100 ms doubling with each one, at most 10 s.
    pub fn floor_ms(&self, now_ms: u64) -> u64 {
        if !self.ends_quickly(now_ms) || self.quick_ends < QUICK_BURST {
            return 0;
        }
        let doublings = (self.quick_ends - QUICK_BURST).min(16);
        QUICK_FLOOR_MS.saturating_mul(1 << doublings).min(QUICK_FLOOR_MAX_MS)
    }

    /// Records that a restart was scheduled at `now_ms`.
    pub fn count_restart(&mut self, now_ms: u64) {
        self.quick_ends = if self.ends_quickly(now_ms) { self.quick_ends.saturating_add(1) } else { 0 };
        self.attempts = self.effective_attempts(now_ms) + 1;
        self.running_since_ms = None;
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Restart {
        delay_ms: u64,
    },
    GiveUp {
        why: String,
    },
    /// The policy does not restart this kind of end.
    Stay,
}

/// What the policy says after an end that was a `success` (exit 0) or not.
/// Attempt k (1-based) waits `interval + backoff * (k - 1)` seconds, and never less than the
/// counter's crash-loop floor.
pub fn decide(policy: &RestartPolicy, counter: &RestartCounter, success: bool, now_ms: u64) -> Decision {
    let wants = match policy.policy {
        RestartPolicyKind::Never => false,
        RestartPolicyKind::OnFailure => !success,
        RestartPolicyKind::Always => true,
    };
    if !wants {
        return Decision::Stay;
    }
    let done = counter.effective_attempts(now_ms);
    if policy.maxtimes > 0 && done >= policy.maxtimes {
        return Decision::GiveUp {
            why: format!("not restarted: {done} restarts already (restartPolicy.maxtimes {})", policy.maxtimes),
        };
    }
    let k = u64::from(done) + 1;
    let secs = policy.interval.saturating_add(policy.backoff.saturating_mul(k - 1));
    Decision::Restart { delay_ms: secs.saturating_mul(1000).max(counter.floor_ms(now_ms)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(kind: RestartPolicyKind, interval: u64, backoff: u64, maxtimes: u32) -> RestartPolicy {
        RestartPolicy { policy: kind, interval, backoff, maxtimes }
    }

    #[test]
    fn seed_example_delays() {
        // seed 000: interval 5, backoff 10 → 5 s, 15 s, 25 s.
        let policy = p(RestartPolicyKind::OnFailure, 5, 10, 0);
        let mut c = RestartCounter::default();
        let mut delays = Vec::new();
        for _ in 0..3 {
            match decide(&policy, &c, false, 0) {
                Decision::Restart { delay_ms } => delays.push(delay_ms),
                other => panic!("{other:?}"),
            }
            c.count_restart(0);
        }
        assert_eq!(delays, vec![5_000, 15_000, 25_000]);
    }

    #[test]
    fn maxtimes_caps_and_zero_is_unlimited() {
        let capped = p(RestartPolicyKind::Always, 0, 0, 2);
        let c = RestartCounter { attempts: 2, running_since_ms: None, quick_ends: 0 };
        assert!(matches!(decide(&capped, &c, false, 0), Decision::GiveUp { .. }));
        let unlimited = p(RestartPolicyKind::Always, 0, 0, 0);
        let c = RestartCounter { attempts: 1_000_000, running_since_ms: Some(0), quick_ends: 0 };
        assert_eq!(decide(&unlimited, &c, true, QUICK_END_MS), Decision::Restart { delay_ms: 0 });
    }

    #[test]
    fn thirty_minutes_of_running_resets_the_count() {
        let capped = p(RestartPolicyKind::Always, 1, 1, 2);
        let c = RestartCounter { attempts: 2, running_since_ms: Some(0), quick_ends: 0 };
        assert!(matches!(decide(&capped, &c, false, RESET_AFTER_MS - 1), Decision::GiveUp { .. }));
        assert_eq!(decide(&capped, &c, false, RESET_AFTER_MS), Decision::Restart { delay_ms: 1_000 });
        let mut c = c;
        c.count_restart(RESET_AFTER_MS);
        assert_eq!(c.attempts, 1);
        // An instance far older than the window (a day up, counted at an epoch time): reset,
        // its backoff that of a first attempt; the quick-end floor stays off for a long run.
        let day = 24 * 60 * 60 * 1000;
        let epoch = 1_795_000_000_000;
        let old = RestartCounter { attempts: 2, running_since_ms: Some(epoch), quick_ends: 7 };
        assert_eq!(decide(&capped, &old, false, epoch + day), Decision::Restart { delay_ms: 1_000 });
        assert_eq!(old.floor_ms(epoch + day), 0);
        let mut old = old;
        old.count_restart(epoch + day);
        assert_eq!((old.attempts, old.quick_ends), (1, 0));
        // A run just under the window after a day of restarts keeps counting.
        let under = RestartCounter { attempts: 2, running_since_ms: Some(epoch + day), quick_ends: 0 };
        assert!(matches!(decide(&capped, &under, false, epoch + day + RESET_AFTER_MS - 1), Decision::GiveUp { .. }));
    }

    #[test]
    fn quick_ends_in_a_row_wait_longer_and_a_real_run_resets() {
        let eager = p(RestartPolicyKind::Always, 0, 0, 0);
        let mut c = RestartCounter::default();
        let mut delays = Vec::new();
        for _ in 0..12 {
            // Started, and dead 10 ms later.
            c.running_since_ms = Some(1_000_000);
            match decide(&eager, &c, false, 1_000_010) {
                Decision::Restart { delay_ms } => delays.push(delay_ms),
                other => panic!("{other:?}"),
            }
            c.count_restart(1_000_010);
        }
        assert_eq!(delays, vec![0, 0, 0, 100, 200, 400, 800, 1_600, 3_200, 6_400, 10_000, 10_000]);
        // A start that never ran a process is quick too.
        assert_eq!(decide(&eager, &c, false, 5), Decision::Restart { delay_ms: 10_000 });
        // A run of a second: restarted at once, and the floor starts over.
        c.running_since_ms = Some(0);
        assert_eq!(decide(&eager, &c, false, QUICK_END_MS), Decision::Restart { delay_ms: 0 });
        c.count_restart(QUICK_END_MS);
        assert_eq!(c.quick_ends, 0);
        // A policy delay above the floor is kept as it is.
        let slow = p(RestartPolicyKind::Always, 5, 0, 0);
        assert_eq!(decide(&slow, &RestartCounter::default(), false, 0), Decision::Restart { delay_ms: 5_000 });
    }

    #[test]
    fn policies_choose_which_ends_restart() {
        let c = RestartCounter::default();
        assert_eq!(decide(&p(RestartPolicyKind::Never, 0, 0, 0), &c, false, 0), Decision::Stay);
        assert_eq!(decide(&p(RestartPolicyKind::OnFailure, 0, 0, 0), &c, true, 0), Decision::Stay);
        assert!(matches!(decide(&p(RestartPolicyKind::OnFailure, 0, 0, 0), &c, false, 0), Decision::Restart { .. }));
        assert!(matches!(decide(&p(RestartPolicyKind::Always, 0, 0, 0), &c, true, 0), Decision::Restart { .. }));
    }
}
