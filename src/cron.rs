//! Cron schedules for CronJobs (issue 20): when a rule's next tick is, in its time zone, and what
//! a CronJob does about the ticks that fell due. Pure: the caller gives the times.
//!
//! Rules are croner's (MIT): 5 fields, or 6 with seconds first, and the macros (`@hourly`,
//! `@daily`, `@weekly`, `@monthly`, `@yearly`). A rule is matched against the **wall clock** of
//! its zone, and a daylight-saving change has one rule (issue 20): a wall time the change skips
//! fires once, at the change; a wall time it repeats fires once, the first time. (croner alone
//! fires `30 2 * * *` at the change but skips `*/20 2 * * *` altogether on a spring-forward day,
//! and fires `*/20 2 * * *` twice on a fall-back night; Vixie cron keeps rules with a `*` hour on
//! elapsed time — not done here: one rule for all.)

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use std::str::FromStr;

/// Field names, as a 5-field rule orders them (a 6-field one has `second` first).
const FIELDS: [&str; 5] = ["minute", "hour", "day of month", "month", "day of week"];
/// Ticks counted at most when working out what fell due (a rule every second, a daemon down
/// for days): past this many, the count says "at least".
const MAX_COUNTED: u32 = 100_000;

#[derive(Debug, Clone)]
pub struct Schedule {
    cron: croner::Cron,
    tz: Tz,
}

impl Schedule {
    /// Parses `rule` in time zone `zone` (an IANA name such as `Europe/Berlin`, or `UTC`); the
    /// error names the field that is wrong.
    pub fn parse(rule: &str, zone: &str) -> Result<Schedule, String> {
        let tz = Tz::from_str(zone)
            .map_err(|_| format!("timeZone: {zone:?} is not a time zone (e.g. UTC, Asia/Shanghai)"))?;
        let cron =
            croner::Cron::from_str(rule.trim()).map_err(|e| format!("rule: {}", explain(rule, &e.to_string())))?;
        Ok(Schedule { cron, tz })
    }

    /// The first tick strictly after `after_ms` (unix ms); None if the rule never fires again.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        let after = instant(after_ms)?;
        let mut wall = after.with_timezone(&self.tz).naive_local();
        // Wall times from there on, until one falls after `after` in real time: one the change
        // repeats maps to its first instant (already past on the second pass), one it skips to
        // the change (already past for the skipped times after the first).
        for _ in 0..MAX_COUNTED {
            let as_utc = Utc.from_utc_datetime(&wall);
            wall = self.cron.find_next_occurrence(&as_utc, false).ok()?.naive_utc();
            let at = self.resolve(wall)?;
            if at > after {
                return u64::try_from(at.timestamp_millis()).ok();
            }
        }
        None
    }

    /// The instant of wall time `wall`: the first of two (a repeated hour), or the change's (a
    /// skipped one).
    fn resolve(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.tz.from_local_datetime(&wall) {
            LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
            LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
            LocalResult::None => {
                // In a gap: the first wall time after it is the change itself.
                let mut probe = wall;
                for _ in 0..(26 * 60) {
                    probe += chrono::Duration::minutes(1);
                    let found = match self.tz.from_local_datetime(&probe) {
                        LocalResult::Single(t) => Some(t),
                        LocalResult::Ambiguous(first, _) => Some(first),
                        LocalResult::None => None,
                    };
                    if let Some(t) = found {
                        // The change is at the top of the minute `probe` is in, less the minutes
                        // stepped past it: the instant of the gap's end.
                        let t = t.with_timezone(&Utc);
                        let into = probe.and_utc().timestamp() % 60;
                        return Some(t - chrono::Duration::seconds(into));
                    }
                }
                None
            }
        }
    }

    /// What to do at `now_ms`, the ticks up to `handled_ms` having been dealt with (a CronJob
    /// starts counting from its creation). `deadline_secs`: how late a tick may still start (0:
    /// any lateness; DESIGN § 7).
    pub fn decide(&self, handled_ms: u64, now_ms: u64, deadline_secs: u64) -> Decision {
        let Some(first) = self.next_after(handled_ms) else { return Decision::Never };
        if first > now_ms {
            return Decision::Wait { next_ms: first };
        }
        // Every tick due by now: the latest may start; those before it are missed (never a burst).
        let late = |t: u64| deadline_secs > 0 && now_ms.saturating_sub(t) > deadline_secs.saturating_mul(1000);
        let (mut latest, mut due, mut late_before) = (first, 1u32, 0u32);
        while due < MAX_COUNTED {
            match self.next_after(latest) {
                Some(t) if t <= now_ms => {
                    late_before += u32::from(late(latest));
                    latest = t;
                    due += 1;
                }
                _ => break,
            }
        }
        if late(latest) {
            Decision::Missed { tick_ms: latest, missed: due }
        } else {
            Decision::Start { tick_ms: latest, missed: due - 1, late: late_before }
        }
    }
}

/// What a CronJob does about its schedule now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing due; the next tick is at `next_ms`.
    Wait { next_ms: u64 },
    /// Tick `tick_ms` starts a run; `missed` earlier ticks fell due without one (the daemon was
    /// down), `late` of them past the starting deadline (seed 003 counts those failed).
    Start { tick_ms: u64, missed: u32, late: u32 },
    /// The latest due tick is past its starting deadline: it and the `missed - 1` before it are
    /// missed, all of them late.
    Missed { tick_ms: u64, missed: u32 },
    /// The rule fires no more.
    Never,
}

fn instant(ms: u64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(i64::try_from(ms).ok()?)
}

/// croner's message, with the field it is about when one field alone is wrong.
fn explain(rule: &str, message: &str) -> String {
    let fields: Vec<&str> = rule.split_whitespace().collect();
    let names: Vec<&str> = match fields.len() {
        5 => FIELDS.to_vec(),
        6 => std::iter::once("second").chain(FIELDS).collect(),
        _ => {
            return format!(
                "{rule:?}: {message} (5 fields: minute hour day-of-month month day-of-week, or a macro such as @daily)"
            )
        }
    };
    for (i, name) in names.iter().enumerate() {
        let alone: Vec<&str> = (0..fields.len()).map(|j| if j == i { fields[j] } else { "*" }).collect();
        if croner::Cron::from_str(&alone.join(" ")).is_err() {
            return format!("{rule:?}: the {name} field {:?} is wrong ({message})", fields[i]);
        }
    }
    format!("{rule:?}: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix ms of a UTC wall time.
    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap().timestamp_millis() as u64
    }

    fn ticks(s: &Schedule, from: u64, until: u64) -> Vec<u64> {
        let mut out = Vec::new();
        let mut t = from;
        while let Some(next) = s.next_after(t).filter(|n| *n <= until) {
            out.push(next);
            t = next;
        }
        out
    }

    #[test]
    fn a_skipped_wall_time_fires_once_at_the_change() {
        // Europe/Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
        for rule in ["30 2 * * *", "*/20 2 * * *"] {
            let s = Schedule::parse(rule, "Europe/Berlin").unwrap();
            let got = ticks(&s, utc(2026, 3, 28, 20, 0), utc(2026, 3, 29, 20, 0));
            assert_eq!(got, vec![utc(2026, 3, 29, 1, 0)], "{rule}");
        }
        // Hourly: every hour that exists, none twice.
        let s = Schedule::parse("0 * * * *", "Europe/Berlin").unwrap();
        let got = ticks(&s, utc(2026, 3, 28, 23, 30), utc(2026, 3, 29, 2, 30));
        assert_eq!(got, vec![utc(2026, 3, 29, 0, 0), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 2, 0)]);
    }

    #[test]
    fn a_repeated_wall_time_fires_once() {
        // Europe/Berlin, 2026-10-25: 03:00 CEST (01:00 UTC) goes back to 02:00 CET.
        let s = Schedule::parse("30 2 * * *", "Europe/Berlin").unwrap();
        let got = ticks(&s, utc(2026, 10, 24, 20, 0), utc(2026, 10, 25, 20, 0));
        assert_eq!(got, vec![utc(2026, 10, 25, 0, 30)], "02:30 CEST only");
        let s = Schedule::parse("*/20 2 * * *", "Europe/Berlin").unwrap();
        let got = ticks(&s, utc(2026, 10, 24, 20, 0), utc(2026, 10, 25, 20, 0));
        assert_eq!(got, vec![utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 0, 20), utc(2026, 10, 25, 0, 40)]);
        // Asked from inside the second pass: nothing more that night.
        assert_eq!(s.next_after(utc(2026, 10, 25, 1, 10)), Some(utc(2026, 10, 26, 1, 0)));
    }

    #[test]
    fn zones_macros_and_seconds() {
        let s = Schedule::parse("@daily", "Asia/Shanghai").unwrap();
        assert_eq!(s.next_after(utc(2026, 1, 1, 12, 0)), Some(utc(2026, 1, 1, 16, 0)), "midnight UTC+8");
        let s = Schedule::parse("*/2 * * * * *", "UTC").unwrap();
        assert_eq!(s.next_after(utc(2026, 1, 1, 0, 0)), Some(utc(2026, 1, 1, 0, 0) + 2000));
    }

    #[test]
    fn mistakes_name_the_field() {
        let e = Schedule::parse("61 * * * *", "UTC").unwrap_err();
        assert!(e.starts_with("rule:") && e.contains("the minute field \"61\""), "{e}");
        let e = Schedule::parse("0 0 32 * *", "UTC").unwrap_err();
        assert!(e.contains("day of month field \"32\""), "{e}");
        let e = Schedule::parse("* * * *", "UTC").unwrap_err();
        assert!(e.contains("5 fields"), "{e}");
        let e = Schedule::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert!(e.starts_with("timeZone:"), "{e}");
    }

    #[test]
    fn due_ticks_start_once_and_late_ones_are_missed() {
        let s = Schedule::parse("*/5 * * * *", "UTC").unwrap();
        let created = utc(2026, 1, 1, 0, 1);
        assert_eq!(s.decide(created, utc(2026, 1, 1, 0, 3), 0), Decision::Wait { next_ms: utc(2026, 1, 1, 0, 5) });
        assert_eq!(
            s.decide(created, utc(2026, 1, 1, 0, 5), 0),
            Decision::Start { tick_ms: utc(2026, 1, 1, 0, 5), missed: 0, late: 0 }
        );
        // Down from 00:06 to 00:31: the ticks 00:10 to 00:30 fell due; only 00:30 starts.
        let handled = utc(2026, 1, 1, 0, 5);
        assert_eq!(
            s.decide(handled, utc(2026, 1, 1, 0, 31), 0),
            Decision::Start { tick_ms: utc(2026, 1, 1, 0, 30), missed: 4, late: 0 }
        );
        // With a 30 s starting deadline, 00:30 is a minute late: missed too.
        assert_eq!(
            s.decide(handled, utc(2026, 1, 1, 0, 31), 30),
            Decision::Missed { tick_ms: utc(2026, 1, 1, 0, 30), missed: 5 }
        );
        assert_eq!(
            s.decide(handled, utc(2026, 1, 1, 0, 31), 120),
            Decision::Start { tick_ms: utc(2026, 1, 1, 0, 30), missed: 4, late: 4 }
        );
        // A 7-minute deadline: of the four passed over, 00:25 (6 min) was not yet late.
        assert_eq!(
            s.decide(handled, utc(2026, 1, 1, 0, 31), 420),
            Decision::Start { tick_ms: utc(2026, 1, 1, 0, 30), missed: 4, late: 3 }
        );
        // A cron job running for a week, far older than its 30 s deadline: a tick 10 s late
        // still starts; the deadline counts from the tick, never from the job's creation.
        let week = s.decide(utc(2026, 1, 8, 0, 25), utc(2026, 1, 8, 0, 30) + 10_000, 30);
        assert_eq!(week, Decision::Start { tick_ms: utc(2026, 1, 8, 0, 30), missed: 0, late: 0 });
    }
}
