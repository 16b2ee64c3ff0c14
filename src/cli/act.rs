//! `steward start|stop|restart|reload`: an action on each instance in turn, and with a timeout
//! (the default) a wait until the instance got where the action leads.

use super::commands::{ends_the_command, exit_code, state_word, targets};
use super::steward::{exit, Output, Targets};
use crate::client::{Client, ClientError};
use crate::supervisor::record::InstanceStatus;
use crate::supervisor::state::Kind;
use std::time::Duration;

/// start, stop, restart, reload: each instance in turn; the exit code is the first failure's.
/// With a timeout (the default), an action that failed or did not finish in time is shown with
/// the instance's own reason (its status message).
pub async fn run(client: &Client, action: &str, t: Targets, output: Output) -> Result<i32, ClientError> {
    let ids = targets(client, &t).await?;
    let timeout = (t.timeout > 0.0).then_some(t.timeout);
    let mut code = exit::OK;
    let mut results = Vec::new();
    for id in ids {
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(t.timeout.clamp(0.0, 3600.0));
        // Whether the daemon finished (200) or its wait ran out (202), the instance's state says
        // where it stands.
        match client.action(&id, action, timeout).await {
            Ok(s) => {
                let (outcome, s) = match timeout {
                    Some(_) => settle(client, action, s, deadline).await?,
                    None => (Outcome::Reached, s),
                };
                if output == Output::Text {
                    crate::say!("{}: {}", s.id, state_word(&s.state));
                }
                match outcome {
                    Outcome::Reached => {}
                    Outcome::Failed => {
                        crate::esay!("steward: {id}: {action} failed: {}{}", state_word(&s.state), reason(&s))
                    }
                    Outcome::Pending => crate::esay!(
                        "steward: {id}: {action} did not finish in {} s: still {}{}",
                        t.timeout,
                        state_word(&s.state),
                        reason(&s)
                    ),
                }
                if outcome != Outcome::Reached {
                    code = first_failure(code, exit::FAILED);
                }
                results.push(s);
            }
            Err(e) if ends_the_command(&e) => return Err(e),
            Err(e) => {
                crate::esay!("steward: {id}: {e}");
                if exit_code(&e) == exit::FAILED {
                    // The daemon's answer says what went wrong with the action; the instance's
                    // message says why (a start that exited, a check that failed).
                    if let Ok(s) = client.status(&id).await {
                        crate::esay!("  {id} is {}{}", state_word(&s.state), reason(&s));
                    }
                }
                code = first_failure(code, exit_code(&e));
            }
        }
    }
    if output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&results).unwrap_or_default());
    }
    Ok(code)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Reached,
    Failed,
    Pending,
}

/// Where an instance stands after `action`: a start or restart is done at Running and has failed
/// in a state it only leaves by a restart or a new command (Backoff, Exited, Failed, Stopped); a
/// stop is done once nothing runs; a reload is done when the daemon said so.
fn outcome(action: &str, kind: Kind) -> Outcome {
    match (action, kind) {
        ("reload", _) => Outcome::Reached,
        ("stop", Kind::Stopped | Kind::Exited | Kind::Failed) => Outcome::Reached,
        ("stop", _) => Outcome::Pending,
        (_, Kind::Running) => Outcome::Reached,
        (_, Kind::Backoff | Kind::Exited | Kind::Failed | Kind::Stopped) => Outcome::Failed,
        _ => Outcome::Pending,
    }
}

/// The daemon answers a start once the start is under way; waiting means until the instance
/// got where the action leads (or the deadline passed), polling its status.
async fn settle(
    client: &Client,
    action: &str,
    mut s: InstanceStatus,
    deadline: std::time::Instant,
) -> Result<(Outcome, InstanceStatus), ClientError> {
    loop {
        let now = outcome(action, s.state.kind());
        if now != Outcome::Pending {
            return Ok((now, s));
        }
        if std::time::Instant::now() >= deadline {
            return Ok((Outcome::Pending, s));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        s = client.status(&s.id).await?;
    }
}

pub(super) fn first_failure(code: i32, new: i32) -> i32 {
    if code == exit::OK {
        new
    } else {
        code
    }
}

/// ": MESSAGE" when the instance has a status message, else nothing.
pub(super) fn reason(s: &InstanceStatus) -> String {
    if s.message.is_empty() {
        String::new()
    } else {
        format!(": {}", s.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_is_done_failed_or_under_way_by_the_state_it_left() {
        assert_eq!(outcome("start", Kind::Running), Outcome::Reached);
        assert_eq!(outcome("restart", Kind::Starting), Outcome::Pending);
        assert_eq!(outcome("start", Kind::Backoff), Outcome::Failed, "it exited and waits to retry");
        assert_eq!(outcome("start", Kind::Stopped), Outcome::Failed, "stopped meanwhile");
        assert_eq!(outcome("stop", Kind::Stopping), Outcome::Pending);
        assert_eq!(outcome("stop", Kind::Exited), Outcome::Reached, "nothing runs");
        assert_eq!(outcome("reload", Kind::Starting), Outcome::Reached, "a reload has no state to reach");
    }
}
