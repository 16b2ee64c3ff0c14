//! `steward rollout history|undo|status|pause|resume|restart`: an app's revisions, going back to
//! one, and following, pausing, resuming and restarting its rollout.

use super::steward::{exit, Output, RolloutCommand};
use crate::client::{Client, ClientError};
use crate::protocol::{RolloutBody, RolloutPhase, ScaleInPhase};
use std::io::{IsTerminal, Write};
use std::time::Duration;

pub(super) async fn run(client: &Client, cmd: RolloutCommand, output: Output) -> Result<i32, ClientError> {
    let split = |app: &str| {
        let (ns, name) = app.split_once('/').expect("clap checked namespace/name");
        (ns.to_string(), name.to_string())
    };
    match cmd {
        RolloutCommand::History { app, revision: Some(n) } => {
            let (namespace, name) = split(&app);
            let found = client.revision(&namespace, &name, n).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&found).unwrap_or_default()),
                Output::Text => {
                    let r = &found.info;
                    crate::say!("revision:    {}{}", r.revision, if r.current { " (current)" } else { "" });
                    crate::say!("hash:        {}", r.hash);
                    crate::say!("created:     {}", crate::clock::rfc3339_utc(r.created_ms));
                    crate::say!("applied by:  {}", r.applied_by);
                    match &r.outcome {
                        Some(RolloutPhase::Failed { reason }) => crate::say!("outcome:     failed: {reason}"),
                        Some(phase) => crate::say!("outcome:     {}", phase.name()),
                        None => {}
                    }
                    crate::say!("spec:\n{}", serde_json::to_string_pretty(&found.spec).unwrap_or_default());
                }
            }
        }
        RolloutCommand::History { app, revision: None } => {
            let (namespace, name) = split(&app);
            let list = client.revisions(&namespace, &name).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default()),
                Output::Text => {
                    crate::say!("{:<9} {:<16}  {:<24}  {:<9} APPLIED BY", "REVISION", "HASH", "CREATED", "OUTCOME");
                    for r in &list.revisions {
                        let mark = if r.current { "*" } else { " " };
                        let created = crate::clock::rfc3339_utc(r.created_ms);
                        let outcome = r.outcome.as_ref().map_or("-", RolloutPhase::name);
                        crate::say!(
                            "{mark}{:<8} {:<16}  {:<24}  {outcome:<9} {}",
                            r.revision,
                            r.hash,
                            created,
                            r.applied_by
                        );
                        if let Some(RolloutPhase::Failed { reason }) = &r.outcome {
                            crate::say!("          failed: {reason}");
                        }
                    }
                }
            }
        }
        RolloutCommand::Undo { app, to_revision } => {
            let (namespace, name) = split(&app);
            let applied = client.undo(&namespace, &name, to_revision).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&applied).unwrap_or_default()),
                Output::Text if applied.unchanged => crate::say!("{app}: already runs that revision's spec"),
                Output::Text => {
                    crate::say!(
                        "{app}: revision {} applied; {} instance(s) move to it",
                        applied.revision,
                        applied.changed.len()
                    )
                }
            }
        }
        RolloutCommand::Status { app, watch, revision, timeout } => {
            let (namespace, name) = split(&app);
            if !watch {
                let body = client.rollout_status(&namespace, &name).await?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&body).unwrap_or_default()),
                    Output::Text => crate::say!("{}", describe(&body)),
                }
                return Ok(exit::OK);
            }
            return follow(client, (&namespace, &name), revision, Duration::from_secs(timeout), output).await;
        }
        RolloutCommand::Pause { app } => act(client, &app, "pause", output).await?,
        RolloutCommand::Resume { app } => act(client, &app, "resume", output).await?,
        RolloutCommand::Restart { app } => {
            let (namespace, name) = split(&app);
            let applied = client.rollout_restart(&namespace, &name).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&applied).unwrap_or_default()),
                Output::Text => crate::say!(
                    "{app}: restarting as revision {}; {} instance(s) to re-create (steward rollout status {app} -w)",
                    applied.revision,
                    applied.changed.len()
                ),
            }
        }
    }
    Ok(exit::OK)
}

/// `pause` or `resume`, and the rollout as it is then.
async fn act(client: &Client, app: &str, action: &str, output: Output) -> Result<(), ClientError> {
    let (namespace, name) = app.split_once('/').expect("clap checked namespace/name");
    let body = client.rollout_action(namespace, name, action).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&body).unwrap_or_default()),
        Output::Text => crate::say!("{}", describe(&body)),
    }
    Ok(())
}

/// One line: the revision, the phase, and where the instances stand.
fn describe(body: &RolloutBody) -> String {
    let p = &body.progress;
    let counts = format!(
        "{} of {} updated, {} ready{}",
        p.updated,
        p.instances,
        p.ready,
        if p.spares > 0 { format!(", {} surge", p.spares) } else { String::new() }
    );
    // Each instance a scale-in removes at its hook's word, on a line of its own.
    let scale_in: String = body
        .scale_in
        .iter()
        .map(|s| {
            let why = if s.reason.is_empty() { format!("hook run {}", s.run) } else { s.reason.clone() };
            let phase = match s.phase {
                ScaleInPhase::Waiting => "scale-in waits on its hook",
                ScaleInPhase::Kept => "kept by its scale-in hook (steward rollout resume runs it again)",
                ScaleInPhase::Held => "held by its scale-in hook (steward rollout resume removes it)",
            };
            format!("\n  {}/{}: {phase}: {why}", body.app, s.ordinal)
        })
        .collect();
    let line = match &body.rollout {
        None => format!("{}: revision {}, never rolled out here; {counts}", body.app, body.revision),
        Some(r) => {
            let phase = match &r.phase {
                RolloutPhase::Failed { reason } => {
                    // Where its output is, and how to try again (issue 43).
                    let logs: Vec<String> = r.kept.iter().map(|i| format!("steward logs {}/{i}", body.app)).collect();
                    let logs =
                        if logs.is_empty() { String::new() } else { format!("; its output: {}", logs.join(", ")) };
                    format!("failed: {reason}{logs}; applying the same spec again retries it")
                }
                other => other.name().to_string(),
            };
            let at = match (r.gate, r.message.as_str()) {
                (0, "") => String::new(),
                (gate, "") => format!(" at step {gate}"),
                (gate, message) => format!(" at step {gate} ({message})"),
            };
            format!("{}: revision {} (from {}), {phase}{at}; {counts}", body.app, r.target, r.from)
        }
    };
    line + &scale_in
}

/// A bar of `width` cells, `done` of `of` filled.
fn bar(done: u32, of: u32, width: usize) -> String {
    let filled = if of == 0 { width } else { (done as usize * width) / of as usize };
    format!("[{}{}]", "#".repeat(filled.min(width)), ".".repeat(width - filled.min(width)))
}

/// How a revision of an app fared, as `rollout status -w` and `apply --wait` tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fate {
    /// Its rollout goes on (or is paused).
    Unsettled,
    /// Its rollout completed (or it never needed one).
    Complete,
    /// Its rollout failed: what to tell, with the revision that runs now.
    Failed(String),
    /// A newer revision was applied before its rollout ended.
    Superseded(u64),
}

/// The fate of `revision`, from the app's rollout now (`body`) and, once the app has moved
/// past it, the revision's recorded outcome.
pub(super) async fn fate_of(
    client: &Client,
    (ns, name): (&str, &str),
    revision: u64,
    body: &RolloutBody,
) -> Result<Fate, ClientError> {
    if body.revision == revision {
        return Ok(match body.rollout.as_ref().map(|r| &r.phase) {
            None | Some(RolloutPhase::Complete) => Fate::Complete,
            Some(RolloutPhase::Failed { reason }) => Fate::Failed(format!("revision {revision} failed: {reason}")),
            Some(_) => Fate::Unsettled,
        });
    }
    let history = client.revisions(ns, name).await?;
    let outcome = history.revisions.iter().find(|r| r.revision == revision).and_then(|r| r.outcome.clone());
    let went_back = body.rollout.as_ref().filter(|r| r.rollback_of == Some(revision));
    Ok(match (outcome, went_back) {
        (Some(RolloutPhase::Complete), _) => Fate::Complete,
        (Some(RolloutPhase::Failed { reason }), _) => {
            let how = match went_back {
                Some(r) => format!(" (autoRollback, {})", r.phase.name()),
                None => String::new(),
            };
            Fate::Failed(format!("revision {revision} failed: {reason}; revision {} runs now{how}", body.revision))
        }
        (_, Some(r)) => Fate::Failed(format!(
            "revision {revision} failed; revision {} runs now (autoRollback, {})",
            body.revision,
            r.phase.name()
        )),
        _ => Fate::Superseded(body.revision),
    })
}

/// `rollout status -w`: until the revision followed has rolled out (exit 0), failed (exit 6,
/// also once autoRollback went back: it says which revision runs now) or the time is up (exit
/// 6). It follows `pinned`, else the app's current revision (the failed one, when that is an
/// autoRollback's) and then any newer one applied meanwhile. On a terminal one line redrawn
/// with a progress bar; elsewhere a line per change.
async fn follow(
    client: &Client,
    (ns, name): (&str, &str),
    pinned: Option<u64>,
    timeout: Duration,
    output: Output,
) -> Result<i32, ClientError> {
    let tty = output == Output::Text && std::io::stdout().is_terminal();
    let deadline = std::time::Instant::now() + timeout;
    let mut last = String::new();
    let mut following = pinned;
    // The width drawn last: a shorter line is padded over it (a carriage return and spaces, no
    // escape codes, so a captured screen stays plain text).
    let mut drawn = 0;
    loop {
        let body = client.rollout_status(ns, name).await?;
        let revision = *following
            .get_or_insert_with(|| body.rollout.as_ref().and_then(|r| r.rollback_of).unwrap_or(body.revision));
        let line = match output {
            Output::Json => serde_json::to_string(&body).unwrap_or_default(),
            Output::Text => describe(&body),
        };
        if line != last {
            if tty {
                let p = &body.progress;
                let text = format!("{} {}", bar(p.ready, p.instances, 20), super::safe_text::safe_line(&line));
                print!("\r{text:<drawn$}");
                drawn = text.chars().count();
                let _ = std::io::stdout().flush();
            } else {
                crate::say!("{line}");
            }
            last = line;
        }
        let end = |code: i32, message: Option<String>| {
            if tty {
                println!();
            }
            if let Some(m) = message {
                crate::esay!("steward: {ns}/{name}: {m}");
            }
            Ok(code)
        };
        match fate_of(client, (ns, name), revision, &body).await? {
            Fate::Complete => return end(exit::OK, None),
            Fate::Failed(message) => return end(exit::FAILED, Some(message)),
            Fate::Superseded(newer) if pinned.is_none() => {
                following = Some(newer);
                continue;
            }
            Fate::Superseded(newer) => {
                let message = format!("revision {newer} was applied before revision {revision} rolled out");
                return end(exit::FAILED, Some(message));
            }
            Fate::Unsettled if std::time::Instant::now() > deadline => {
                let message = format!("the rollout of revision {revision} did not end within {} s", timeout.as_secs());
                return end(exit::FAILED, Some(message));
            }
            Fate::Unsettled => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
