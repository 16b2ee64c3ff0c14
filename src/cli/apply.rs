//! `steward apply`: the file validated here first (mistakes named with the file), posted, and
//! with `--wait` each changed instance watched until it runs the applied generation or rests.

use super::rollout::Fate;
use super::steward::{exit, Output};
use crate::client::{parse_instance_id, Client, ClientError};
use crate::spec::{self, InstanceId, Roots};
use crate::supervisor::record::InstanceStatus;
use crate::supervisor::state::Kind;
use std::path::Path;
use std::time::Duration;

/// `steward apply`'s flags.
pub(super) struct How {
    pub wait: bool,
    pub timeout: u64,
    pub auto_rollback: bool,
}

/// Applies `file`: each of its documents (a YAML stream may hold several), every one validated
/// before any is applied. `roots`: this host's, when the daemon is this host's; None for a
/// remote daemon, which checks the spec's paths against its own roots.
pub(super) async fn apply(
    client: &Client,
    roots: Option<&Roots>,
    file: &Path,
    how: How,
    output: Output,
) -> Result<i32, ClientError> {
    // Validated here first, so mistakes are named with the file (and a YAML one's line).
    let check = |doc: &serde_json::Value| match roots {
        Some(roots) => spec::from_document(doc, roots).map(drop),
        None => crate::sched::scheduler::check_spec(doc).map(drop),
    };
    let documents = match spec::source::read_checked(file, check) {
        Ok(d) => d,
        Err(spec::source::Refused::Unreadable(why)) => {
            crate::esay!("steward: {why}");
            return Ok(exit::INVALID);
        }
        Err(refused) => {
            crate::esay!("{refused}");
            return Ok(exit::INVALID);
        }
    };
    for (doc, ()) in &documents {
        let code = apply_one(client, doc, &how, output).await?;
        if code != exit::OK {
            return Ok(code);
        }
    }
    Ok(exit::OK)
}

/// Applies one document (its label names it in what is said) and waits as `how` says.
async fn apply_one(
    client: &Client,
    doc: &spec::source::Document,
    &How { wait, timeout, auto_rollback }: &How,
    output: Output,
) -> Result<i32, ClientError> {
    let (label, (text, format)) = (&doc.label, doc.body());
    let applied =
        match client.apply_with(text, format, None, crate::client::ApplyOptions { auto_rollback, retry: true }).await {
            Ok(a) => a,
            // What only the daemon could check (a remote daemon's paths), named with the file too.
            Err(ClientError::Api { status: 400 | 422, errors, .. }) if !errors.is_empty() => {
                let errors = spec::SpecErrors(errors);
                // One error a line, as `steward validate` prints them.
                eprintln!("{}", crate::cli::safe_text::safe_text(&format!("{label}: {}", doc.locate(errors))));
                return Ok(exit::INVALID);
            }
            Err(e) => return Err(e),
        };
    if output == Output::Text {
        if applied.unchanged {
            crate::say!(
                "{label}: unchanged ({} instance(s), generation {})",
                applied.instances.len(),
                applied.generation
            );
        } else {
            crate::say!(
                "applied {label} (generation {}): {}; {} to (re)start",
                applied.generation,
                applied.instances.join(", "),
                applied.changed.len()
            );
            if applied.rollout {
                crate::say!("  rolling out revision {} (steward rollout status APP -w)", applied.revision);
            }
        }
    }
    if !wait {
        if output == Output::Json {
            println!("{}", serde_json::to_string_pretty(&applied).unwrap_or_default());
        }
        return Ok(exit::OK);
    }
    let ids: Vec<InstanceId> = applied.changed.iter().filter_map(|i| parse_instance_id(i).ok()).collect();
    // A rollout that fails leaves the instances it did not move on their revision: no use waiting.
    let app = applied.rollout.then(|| ids.first().map(|i| (i.namespace.clone(), i.name.clone()))).flatten();
    let waited = Waited {
        ids: &ids,
        created: &applied.created,
        generation: applied.generation,
        revision: applied.revision,
        rollout_of: app,
    };
    let (outcomes, failed) = wait_for_generation(client, waited, Duration::from_secs(timeout), output).await?;
    let all_ok = failed.is_none() && outcomes.iter().all(|o| o.outcome == Outcome::Running);
    match output {
        Output::Json => {
            /// `apply --wait -o json`: the daemon's answer and how each instance came out.
            #[derive(serde::Serialize)]
            struct ApplyReport<'a, T> {
                applied: &'a crate::protocol::Applied,
                instances: &'a [T],
            }
            let body = ApplyReport { applied: &applied, instances: &outcomes };
            println!("{}", serde_json::to_string_pretty(&body).unwrap_or_default());
        }
        Output::Text => {
            for o in &outcomes {
                let pid = o.status.as_ref().and_then(|s| s.pid).map(|p| format!(" pid {p}")).unwrap_or_default();
                let line = format!("  {}  {}{pid}{}", o.id, o.outcome.word(), reason_suffix(&o.reason));
                if o.outcome == Outcome::Running {
                    crate::say!("{line}");
                } else {
                    crate::esay!("{line}");
                }
            }
        }
    }
    if let (Some(why), Output::Text) = (&failed, output) {
        crate::esay!("steward: {why}");
    }
    Ok(if all_ok { exit::OK } else { exit::FAILED })
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}

/// How an instance an apply (re)started came out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
enum Outcome {
    /// Running on the applied generation.
    Running,
    /// Its start on the applied generation ended (Failed, Exited).
    Failed,
    /// An operator stopped it; it takes the new spec at its next start.
    Stopped,
    /// Deleted while waited on.
    Deleted,
    /// Not settled within the timeout (still starting, or backing off after a failed start).
    TimedOut,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Running => "Running",
            Outcome::Failed => "Failed",
            Outcome::Stopped => "Stopped (the new spec applies at its next start)",
            Outcome::Deleted => "Deleted",
            Outcome::TimedOut => "not running in time",
        }
    }

    /// What `status` says of an instance waited on for `generation`; None while it is on its way.
    /// A `created` instance is Stopped until its first start is under way.
    fn of(s: &InstanceStatus, (generation, revision): (u64, u64), created: bool) -> Option<Outcome> {
        // Restarted onto the apply, or taking its revision without a restart (it runs the same).
        let on_new = s.run_generation >= generation || (s.revision == revision && s.run_revision == revision);
        match s.state.kind() {
            Kind::Running if on_new => Some(Outcome::Running),
            Kind::Failed | Kind::Exited if on_new => Some(Outcome::Failed),
            Kind::Stopped if on_new || !created => Some(Outcome::Stopped),
            _ => None,
        }
    }
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct InstanceOutcome {
    id: InstanceId,
    outcome: Outcome,
    reason: String,
    status: Option<InstanceStatus>,
}

/// What `--wait` waits for: instances `ids` on spec generation `generation`.
struct Waited<'a> {
    ids: &'a [InstanceId],
    created: &'a [String],
    generation: u64,
    /// The app's revision the apply made.
    revision: u64,
    /// The app whose rollout moves them (namespace, name).
    rollout_of: Option<(String, String)>,
}

/// Waits until every instance in `ids` runs spec generation `generation` (a new process,
/// Running) or has come to rest otherwise (its rollout failed, too); at `timeout`, reports those
/// still on their way.
async fn wait_for_generation(
    client: &Client,
    Waited { ids, created, generation, revision, rollout_of }: Waited<'_>,
    timeout: Duration,
    output: Output,
) -> Result<(Vec<InstanceOutcome>, Option<String>), ClientError> {
    let deadline = std::time::Instant::now() + timeout;
    let mut last_line = String::new();
    loop {
        let fate = match &rollout_of {
            Some((ns, name)) => {
                let body = client.rollout_status(ns, name).await?;
                super::rollout::fate_of(client, (ns, name), revision, &body).await?
            }
            None => Fate::Complete,
        };
        let rollout_failed = match &fate {
            Fate::Failed(why) => Some(why.clone()),
            Fate::Superseded(newer) => Some(format!("revision {newer} was applied meanwhile")),
            Fate::Complete | Fate::Unsettled => None,
        };
        let mut outcomes = Vec::with_capacity(ids.len());
        for id in ids {
            let (mut outcome, status) = match client.status(id).await {
                Ok(s) => (Outcome::of(&s, (generation, revision), created.contains(&id.to_string())), Some(s)),
                Err(ClientError::Api { status: 404, .. }) => (Some(Outcome::Deleted), None),
                Err(e) => return Err(e),
            };
            let mut reason =
                status.as_ref().map(|s| s.message.clone()).unwrap_or_else(|| "deleted while waiting".into());
            if let (None, Some(why)) = (outcome, &rollout_failed) {
                outcome = Some(Outcome::Failed);
                reason = format!("the rollout failed: {why}");
            }
            outcomes.push((id.clone(), outcome, reason, status));
        }
        let running = outcomes.iter().filter(|o| o.1 == Some(Outcome::Running)).count();
        let ended = outcomes.iter().filter(|o| matches!(o.1, Some(x) if x != Outcome::Running)).count();
        let line = format!("{running}/{} running, {ended} not", ids.len());
        if output == Output::Text && line != last_line {
            crate::say!("  {line}");
            last_line = line;
        }
        // Every instance come to rest, and the rollout moving them ended.
        let settled = outcomes.iter().all(|o| o.1.is_some()) && fate != Fate::Unsettled;
        if settled || std::time::Instant::now() > deadline {
            let outcomes = outcomes
                .into_iter()
                .map(|(id, outcome, reason, status)| InstanceOutcome {
                    id,
                    outcome: outcome.unwrap_or(Outcome::TimedOut),
                    reason: match (outcome, &status) {
                        (None, Some(s)) => {
                            format!("{} after {}s{}", s.state.kind(), timeout.as_secs(), reason_suffix(&s.message))
                        }
                        _ => reason,
                    },
                    status,
                })
                .collect();
            return Ok((outcomes, rollout_failed));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
