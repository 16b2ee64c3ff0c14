//! `steward events`: the daemon's durable event journal, one line per event.
//!
//! Text lines read `SEQ TIME SUBJECT WHAT[: REASON][ (MESSAGE)]`, TIME in RFC 3339 UTC with
//! milliseconds (the journal's own clock is UTC milliseconds; UTC reads the same on every host of
//! a fleet, which is what comparing events across daemons needs). `-o json` prints each event as
//! the API sends it, `atMs` included.

use super::steward::{exit, Output};
use crate::client::{Client, ClientError};
use crate::protocol::{Event, EventBody, InstanceChange, InstanceEvent, Transition};
use std::io::Write;

pub async fn run(client: &Client, since: u64, follow: bool, output: Output) -> Result<i32, ClientError> {
    let mut out = std::io::stdout().lock();
    client
        .events(since, follow, |e| {
            let line = match output {
                Output::Json => serde_json::to_string(&e).unwrap_or_default(),
                Output::Text => text_line(&e),
            };
            writeln!(out, "{line}").is_ok() && out.flush().is_ok()
        })
        .await?;
    Ok(exit::OK)
}

/// One event for a person: a transition shows its states and, when the daemon gave one, why;
/// control characters escaped (see safe_text.rs).
pub fn text_line(e: &Event) -> String {
    let b = &e.body;
    let what = match b {
        EventBody::Instance(InstanceEvent {
            change: InstanceChange::Transition(Transition { from, to, reason, .. }),
            ..
        }) => match reason.as_deref().filter(|r| !r.is_empty()) {
            Some(reason) => format!("{from} -> {to}: {reason}"),
            None => format!("{from} -> {to}"),
        },
        EventBody::Instance(InstanceEvent { change: InstanceChange::ReadyChanged { detail }, .. }) => {
            match (detail.ready, detail.reason.as_deref()) {
                (true, _) => format!("ready (process {})", detail.process),
                (false, Some(why)) => format!("not ready (process {}): {why}", detail.process),
                (false, None) => format!("not ready (process {})", detail.process),
            }
        }
        EventBody::Other(v) if v["type"].as_str().is_none() => v.to_string(),
        known => known.kind(),
    };
    let subject = b.instance_id().or(b.app()).unwrap_or("-");
    let message = match b {
        EventBody::Instance(InstanceEvent { change: InstanceChange::Transition(t), .. }) => t.message.as_deref(),
        EventBody::Other(v) => v["message"].as_str(),
        _ => None,
    };
    let msg = message.filter(|m| !m.is_empty()).map(|m| format!(" ({m})")).unwrap_or_default();
    // Reasons and messages carry workload text: escaped for the terminal.
    let line = format!("{:>6} {} {subject} {what}{msg}", e.seq, rfc3339_utc(e.at_ms));
    super::safe_text::safe_line(&line).into_owned()
}
pub use crate::clock::rfc3339_utc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_read_as_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00.000Z", "a leap day");
        assert_eq!(rfc3339_utc(1_795_560_707_123), "2026-11-24T22:51:47.123Z");
        assert_eq!(rfc3339_utc(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_transition_shows_its_reason_when_it_has_one() {
        let event = |body: serde_json::Value| Event {
            seq: 7,
            at_ms: 1_795_560_707_123,
            body: serde_json::from_value(body).unwrap(),
        };
        let with = event(serde_json::json!({"type": "transition", "instance": "demo/ticker/0",
            "from": "Running", "to": "Stopping", "reason": "operator stop"}));
        assert_eq!(
            text_line(&with),
            "     7 2026-11-24T22:51:47.123Z demo/ticker/0 Running -> Stopping: operator stop"
        );
        let without = event(serde_json::json!({"type": "transition", "instance": "demo/ticker/0",
            "from": "Starting", "to": "Running"}));
        assert_eq!(text_line(&without), "     7 2026-11-24T22:51:47.123Z demo/ticker/0 Starting -> Running");
        let other = event(serde_json::json!({"type": "appDeleted", "app": "demo/ticker"}));
        assert!(text_line(&other).ends_with("demo/ticker appDeleted"));
    }
}
