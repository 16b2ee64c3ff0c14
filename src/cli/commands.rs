//! The `steward` commands that talk to the daemon: which verb runs where, how a failed request
//! is told and its exit code, and the helpers the verbs share. The verbs' bodies are in
//! apply.rs, show.rs (ls, status, node), delete.rs, values.rs, act.rs, events.rs, logs.rs,
//! rollout.rs and hook.rs.

use super::apply::apply;
use super::delete::delete;
use super::endpoint::Endpoint;
use super::show::{ls, node, status};
use super::steward::{exit, Command, Output, Targets};
use super::values::values;
use crate::client::{parse_instance_id, Client, ClientError};
use crate::config::Config;
use crate::spec::{self, InstanceId};
use crate::supervisor::record::now_ms;
use crate::supervisor::state::State;

pub async fn run(command: Command, endpoint: &Endpoint, output: Output) -> anyhow::Result<i32> {
    let client = endpoint.client();
    let result = match command {
        Command::Apply { file, wait, timeout, auto_rollback } => {
            let how = super::apply::How { wait, timeout, auto_rollback };
            // A remote daemon checks the paths against its own roots, which this host does not know.
            let roots = endpoint.local_config().map(Config::roots);
            apply(client, roots.as_ref(), &file, how, output).await
        }
        Command::Ls { namespace, name, state } => ls(client, namespace, name, state, output).await,
        Command::Status { id } => status(client, &id, output).await,
        Command::Start(t) => super::act::run(client, "start", t, output).await,
        Command::Stop(t) => super::act::run(client, "stop", t, output).await,
        Command::Restart(t) => super::act::run(client, "restart", t, output).await,
        Command::Reload(t) => super::act::run(client, "reload", t, output).await,
        Command::Delete(t) => delete(client, t, output).await,
        Command::Crash { ids, exit_code, signal } => crash(client, &ids, exit_code, signal, output).await,
        Command::Events { follow, since } => super::events::run(client, since, follow, output).await,
        Command::Logs { id, follow, tail, stream, container, timestamps } => {
            let request = super::logs::LogsRequest { id: &id, follow, tail, stream, process: container, timestamps };
            return super::logs::run(endpoint, request, output).await;
        }
        Command::Node => node(client, output).await,
        Command::Endpoints { app, after, timeout } => {
            super::services::run(client, app.as_deref(), after, timeout, output).await
        }
        Command::Cp { file, target, mode, user, container } => {
            let request = super::cp::CopyRequest { file: &file, target: &target, mode, user, container };
            match super::cp::run(client, request, output).await {
                Ok(code) => return Ok(code),
                Err(e) => return Ok(report(e, endpoint)),
            }
        }
        Command::Rollout(cmd) => super::rollout::run(client, cmd, output).await,
        Command::Hook(cmd) => super::hook::run(client, cmd, output).await,
        Command::Job(super::steward::JobCommand::Logs { job, run, tail, stream }) => {
            let id = match super::job::run_for_logs(client, &job, run).await {
                Ok(id) => id,
                Err(e) => return Ok(report(e, endpoint)),
            };
            let request =
                super::logs::LogsRequest { id: &id, follow: false, tail, stream, process: None, timestamps: false };
            return super::logs::run(endpoint, request, output).await;
        }
        Command::Job(cmd) => super::job::run(client, cmd, output).await,
        Command::Cron(cmd) => super::job::cron(client, cmd, output).await,
        Command::Secret(cmd) => values(client, "secrets", cmd, output).await,
        Command::Configmap(cmd) => values(client, "configmaps", cmd, output).await,
        Command::Volume(cmd) => super::values::volumes(client, cmd, output).await,
        Command::Validate { .. }
        | Command::Render { .. }
        | Command::Completions { .. }
        | Command::Cert { .. }
        | Command::Man { .. } => {
            unreachable!("handled without the daemon")
        }
    };
    match result {
        Ok(code) => Ok(code),
        Err(e) => Ok(report(e, endpoint)),
    }
}

/// Prints a client error the way a person needs it; returns the exit code.
pub(super) fn report(e: ClientError, endpoint: &Endpoint) -> i32 {
    let code = exit_code(&e);
    match e {
        ClientError::Unreachable { source, .. } => endpoint.explain_unreachable(&source),
        ClientError::Api { status: 401, message, .. } => endpoint.explain_refused_token(&message),
        ClientError::Api { message, errors, .. } => {
            if errors.is_empty() {
                crate::esay!("steward: {message}");
            } else {
                // One error a line.
                eprintln!("{}", crate::cli::safe_text::safe_text(&format!("steward: {}", spec::SpecErrors(errors))));
            }
        }
        ClientError::Protocol(m) => crate::esay!("steward: {m}"),
    }
    code
}

/// Whether no other request of the command can fare better: the daemon cannot be reached, or
/// refuses the token. A verb acting on several instances stops at once and reports it.
pub(super) fn ends_the_command(e: &ClientError) -> bool {
    matches!(e, ClientError::Unreachable { .. } | ClientError::Api { status: 401, .. })
}

/// The one mapping from a failed request to steward(1)'s exit codes, for every verb: a verb
/// acting on several instances must not turn "no such instance" into "could not carry it out".
pub(super) fn exit_code(e: &ClientError) -> i32 {
    match e {
        ClientError::Unreachable { .. } => exit::UNREACHABLE,
        ClientError::Api { status: 404 | 410, .. } => exit::NOT_FOUND,
        ClientError::Api { status: 401 | 403, .. } => exit::FORBIDDEN,
        ClientError::Api { status: 400 | 422, .. } => exit::INVALID,
        ClientError::Api { .. } | ClientError::Protocol(_) => exit::FAILED,
    }
}

pub(super) fn state_word(s: &State) -> String {
    match s {
        State::Exited { status } => format!("Exited({})", short_status(status)),
        State::Stopping { .. } => "Stopping".into(),
        State::Backoff { until_ms } => format!("Backoff({}s)", until_ms.saturating_sub(now_ms()).div_ceil(1000)),
        other => other.kind().to_string(),
    }
}

fn short_status(s: &crate::supervisor::state::ExitStatus) -> String {
    use crate::supervisor::state::ExitStatus::*;
    match s {
        Code(c) => c.to_string(),
        Signal(sig) => format!("sig{sig}"),
        Unknown | Removed => "?".into(),
    }
}

pub(super) async fn targets(client: &Client, t: &Targets) -> Result<Vec<InstanceId>, ClientError> {
    if t.all {
        return client.list(&[]).await.map(|l| l.into_iter().map(|s| s.id).collect());
    }
    Ok(t.ids.iter().map(|i| parse_instance_id(i).expect("clap checked the instance ids")).collect())
}

/// `steward crash`: each instance in turn; the exit code is the first failure's.
async fn crash(
    client: &Client,
    ids: &[String],
    exit_code: i32,
    signal: Option<i32>,
    output: super::steward::Output,
) -> Result<i32, ClientError> {
    let how = match signal {
        Some(s) => format!("signal {s}"),
        None => format!("exit code {exit_code}"),
    };
    let mut code = exit::OK;
    let mut results = Vec::new();
    for id in ids {
        let id = parse_instance_id(id).expect("clap checked the instance ids");
        match client.crash(&id, exit_code, signal).await {
            Ok(s) => {
                if output == super::steward::Output::Text {
                    crate::say!("{id}: crashed ({how}); its restart policy follows");
                }
                results.push(s);
            }
            Err(e) if ends_the_command(&e) => return Err(e),
            Err(e) => {
                crate::esay!("steward: {id}: {e}");
                if code == exit::OK {
                    code = self::exit_code(&e);
                }
            }
        }
    }
    if output == super::steward::Output::Json {
        println!("{}", serde_json::to_string_pretty(&results).unwrap_or_default());
    }
    Ok(code)
}
