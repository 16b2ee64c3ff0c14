//! The wall clock in the daemon's one unit (unix milliseconds), and times for people: RFC 3339
//! in UTC, without a calendar crate.

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Unix milliseconds as RFC 3339 UTC, e.g. `2026-11-24T22:31:47.123Z`.
pub fn rfc3339_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86400, secs % 86400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms % 1000
    )
}

/// Unix milliseconds as RFC 3339 UTC to the second, as Kubernetes writes its times (seed
/// 004's `2020-11-09T10:08:49Z`).
pub fn rfc3339_utc_seconds(ms: u64) -> String {
    let at = chrono::DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX)).unwrap_or_default();
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A span for people, its two largest units: `45s`, `2m 5s`, `2h 5m`, `3d 4h`.
pub fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm: exact
/// for every day, without a calendar crate for one line of output).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `now + wait`, saturating: a wait too long for the clock means "as good as never", not a
/// panic (a spec's numbers are bounded, but a record stored by an older version may not be).
pub fn deadline_after(wait: std::time::Duration) -> tokio::time::Instant {
    deadline_from(tokio::time::Instant::now(), wait)
}

/// `start + wait`, saturating as [`deadline_after`]: a wait timed from when something began.
pub fn deadline_from(start: tokio::time::Instant, wait: std::time::Duration) -> tokio::time::Instant {
    // A century is never reached and never overflows the monotonic clock.
    start.checked_add(wait).unwrap_or_else(|| start + std::time::Duration::from_secs(100 * 365 * 86_400))
}
