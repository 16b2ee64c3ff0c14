//! The `steward` commands that talk to the daemon.

use super::act::{first_failure, reason};
use super::steward::{exit, Command, DeleteTargets, Output, Targets, ValuesCommand};
use crate::client::{parse_instance_id, Client, ClientError};
use crate::config::Config;
use crate::spec::{self, Format, InstanceId};
use crate::supervisor::record::{now_ms, InstanceStatus};
use crate::supervisor::state::{Kind, State};
use std::path::Path;
use std::time::Duration;

pub async fn run(command: Command, config: &Config, socket: &Path, output: Output) -> anyhow::Result<i32> {
    let client = Client::new(socket);
    let result = match command {
        Command::Apply { file, wait, timeout } => apply(&client, config, &file, wait, timeout, output).await,
        Command::Ls { namespace, name, state } => ls(&client, namespace, name, state, output).await,
        Command::Status { id } => status(&client, &id, output).await,
        Command::Start(t) => super::act::run(&client, "start", t, output).await,
        Command::Stop(t) => super::act::run(&client, "stop", t, output).await,
        Command::Restart(t) => super::act::run(&client, "restart", t, output).await,
        Command::Reload(t) => super::act::run(&client, "reload", t, output).await,
        Command::Delete(t) => delete(&client, t, output).await,
        Command::Events { follow, since } => super::events::run(&client, since, follow, output).await,
        Command::Logs { id, follow, tail, stream, container, timestamps } => {
            let request = super::logs::LogsRequest { id: &id, follow, tail, stream, process: container, timestamps };
            return super::logs::run(config, socket, request, output).await;
        }
        Command::Node => node(&client, output).await,
        Command::Secret(cmd) => values(&client, "secrets", cmd, output).await,
        Command::Configmap(cmd) => values(&client, "configmaps", cmd, output).await,
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
        Err(e) => Ok(report(e, socket)),
    }
}

/// Prints a client error the way a person needs it; returns the exit code.
fn report(e: ClientError, socket: &Path) -> i32 {
    let code = exit_code(&e);
    match e {
        ClientError::Unreachable { source, .. } => {
            eprintln!("steward: cannot reach stewardd at {}: {source}", socket.display());
            eprintln!("  start it with `systemctl start stewardd`, or in the foreground with `stewardd`");
            eprintln!("  (another socket: --socket PATH or STEWARD_SOCKET)");
        }
        ClientError::Api { message, errors, .. } => {
            if errors.is_empty() {
                eprintln!("steward: {message}");
            } else {
                eprintln!("steward: {}", spec::SpecErrors(errors));
            }
        }
        ClientError::Protocol(m) => eprintln!("steward: {m}"),
    }
    code
}

/// The one mapping from a failed request to steward(1)'s exit codes, for every verb: a verb
/// acting on several instances must not turn "no such instance" into "could not carry it out".
pub(super) fn exit_code(e: &ClientError) -> i32 {
    match e {
        ClientError::Unreachable { .. } => exit::UNREACHABLE,
        ClientError::Api { status: 404 | 410, .. } => exit::NOT_FOUND,
        ClientError::Api { status: 403, .. } => exit::FORBIDDEN,
        ClientError::Api { status: 400 | 422, .. } => exit::INVALID,
        ClientError::Api { .. } | ClientError::Protocol(_) => exit::FAILED,
    }
}

async fn apply(
    client: &Client,
    config: &Config,
    file: &Path,
    wait: bool,
    timeout: u64,
    output: Output,
) -> Result<i32, ClientError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("steward: cannot read {}: {e}", file.display());
            return Ok(exit::INVALID);
        }
    };
    let format = Format::for_path(file, &text);
    // Validate locally first, so mistakes are named with the file.
    if let Err(e) = spec::parse(&text, format, &config.roots()) {
        eprintln!("{}: {e}", file.display());
        return Ok(exit::INVALID);
    }
    let applied = client.apply_outcome(&text, format, None).await?;
    if output == Output::Text {
        if applied.unchanged {
            println!(
                "{}: unchanged ({} instance(s), generation {})",
                file.display(),
                applied.instances.len(),
                applied.generation
            );
        } else {
            println!(
                "applied {} (generation {}): {}; {} to (re)start",
                file.display(),
                applied.generation,
                applied.instances.join(", "),
                applied.changed.len()
            );
        }
    }
    if !wait {
        if output == Output::Json {
            println!("{}", serde_json::to_string_pretty(&applied).unwrap_or_default());
        }
        return Ok(exit::OK);
    }
    let ids: Vec<InstanceId> = applied.changed.iter().filter_map(|i| parse_instance_id(i).ok()).collect();
    let outcomes =
        wait_for_generation(client, &ids, &applied.created, applied.generation, Duration::from_secs(timeout), output)
            .await?;
    let all_ok = outcomes.iter().all(|o| o.outcome == Outcome::Running);
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
                    println!("{line}");
                } else {
                    eprintln!("{line}");
                }
            }
        }
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
    fn of(s: &InstanceStatus, generation: u64, created: bool) -> Option<Outcome> {
        let on_new = s.run_generation >= generation;
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

/// Waits until every instance in `ids` runs spec generation `generation` (a new process,
/// Running) or has come to rest otherwise; at `timeout`, reports those still on their way.
async fn wait_for_generation(
    client: &Client,
    ids: &[InstanceId],
    created: &[String],
    generation: u64,
    timeout: Duration,
    output: Output,
) -> Result<Vec<InstanceOutcome>, ClientError> {
    let deadline = std::time::Instant::now() + timeout;
    let mut last_line = String::new();
    loop {
        let mut outcomes = Vec::with_capacity(ids.len());
        for id in ids {
            let (outcome, status) = match client.status(id).await {
                Ok(s) => (Outcome::of(&s, generation, created.contains(&id.to_string())), Some(s)),
                Err(ClientError::Api { status: 404, .. }) => (Some(Outcome::Deleted), None),
                Err(e) => return Err(e),
            };
            let reason = status.as_ref().map(|s| s.message.clone()).unwrap_or_else(|| "deleted while waiting".into());
            outcomes.push((id.clone(), outcome, reason, status));
        }
        let running = outcomes.iter().filter(|o| o.1 == Some(Outcome::Running)).count();
        let ended = outcomes.iter().filter(|o| matches!(o.1, Some(x) if x != Outcome::Running)).count();
        let line = format!("{running}/{} running, {ended} not", ids.len());
        if output == Output::Text && line != last_line {
            println!("  {line}");
            last_line = line;
        }
        let settled = outcomes.iter().all(|o| o.1.is_some());
        if settled || std::time::Instant::now() > deadline {
            return Ok(outcomes
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
                .collect());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ls(
    client: &Client,
    namespace: Option<String>,
    name: Option<String>,
    state: Option<String>,
    output: Output,
) -> Result<i32, ClientError> {
    let mut filters = Vec::new();
    if let Some(n) = &namespace {
        filters.push(("namespace", n.as_str()));
    }
    if let Some(n) = &name {
        filters.push(("name", n.as_str()));
    }
    if let Some(s) = &state {
        filters.push(("state", s.as_str()));
    }
    let list = client.list(&filters).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default()),
        Output::Text => print_table(&list),
    }
    Ok(exit::OK)
}

fn print_table(list: &[InstanceStatus]) {
    let header = ["NAMESPACE", "NAME", "ID", "STATE", "PID", "PORTS", "RESTARTS", "AGE", "HEALTH"];
    let now = now_ms();
    let rows: Vec<[String; 9]> = list
        .iter()
        .map(|s| {
            let ports: Vec<String> = s.ports.iter().map(|(n, p)| format!("{n}:{p}")).collect();
            [
                s.id.namespace.clone(),
                s.id.name.clone(),
                s.id.index.to_string(),
                state_word(&s.state),
                s.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                if ports.is_empty() { "-".into() } else { ports.join(",") },
                s.restarts.to_string(),
                s.last_start_ms
                    .filter(|_| s.state.has_processes())
                    .map(|t| age(now.saturating_sub(t)))
                    .unwrap_or_else(|| "-".into()),
                s.health.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.to_vec());
    for r in &rows {
        line(r.iter().map(String::as_str).collect());
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
        Unknown => "?".into(),
    }
}

/// 45s, 12m, 3h, 2d.
fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn split_store_id(id: &str) -> Option<(&str, &str)> {
    id.split_once('/').filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
}

async fn values(client: &Client, kind: &str, cmd: ValuesCommand, output: Output) -> Result<i32, ClientError> {
    match cmd {
        ValuesCommand::Create { id, literals, files } => {
            let Some((namespace, name)) = split_store_id(&id) else {
                eprintln!("steward: {id:?} is not namespace/name");
                return Ok(exit::INVALID);
            };
            let mut data = std::collections::BTreeMap::new();
            data.extend(literals);
            for (key, path) in files {
                match std::fs::read_to_string(&path) {
                    Ok(text) => {
                        data.insert(key, text);
                    }
                    Err(e) => {
                        eprintln!("steward: cannot read {path} for key {key}: {e}");
                        return Ok(exit::INVALID);
                    }
                }
            }
            let summary = client.put_values(kind, namespace, name, &data).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string(&summary).unwrap_or_default()),
                Output::Text => println!("{id}: {} key(s) stored", data.len()),
            }
        }
        ValuesCommand::Ls { namespace } => {
            let list = client.list_values(kind, namespace.as_deref()).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default()),
                Output::Text => {
                    println!("NAMESPACE  NAME  KEYS");
                    for item in &list {
                        println!("{}  {}  {}", item.namespace, item.name, item.keys.join(","));
                    }
                }
            }
        }
        ValuesCommand::Rm { id } => {
            let Some((namespace, name)) = split_store_id(&id) else {
                eprintln!("steward: {id:?} is not namespace/name");
                return Ok(exit::INVALID);
            };
            client.delete_values(kind, namespace, name).await?;
            match output {
                Output::Json => {
                    /// `rm -o json`: what was removed.
                    #[derive(serde::Serialize)]
                    struct Removed<'a> {
                        namespace: &'a str,
                        name: &'a str,
                        removed: bool,
                    }
                    let removed = Removed { namespace, name, removed: true };
                    println!("{}", serde_json::to_string(&removed).unwrap_or_default())
                }
                Output::Text => println!("{id}: removed"),
            }
        }
    }
    Ok(exit::OK)
}

async fn node(client: &Client, output: Output) -> Result<i32, ClientError> {
    let n = client.node().await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&n).unwrap_or_default()),
        Output::Text => {
            let gib = |bytes: u64| bytes as f64 / 1073741824.0;
            println!("hostname:  {}", n.hostname);
            println!("ip:        {}", n.host_ip);
            println!("cpus:      {} (load {:.2}, {:.0}% busy)", n.cpus, n.load_average, n.cpu_usage_percent);
            println!(
                "memory:    {:.1} GiB available of {:.1} GiB",
                gib(n.memory_available_bytes),
                gib(n.memory_total_bytes)
            );
            let ports = &n.ports;
            println!("ports:     {} free in {}-{}", ports.free, ports.range_start, ports.range_end);
            if let Some(p) = &ports.pending {
                println!("           {}-{} configured, in effect after a restart", p.range_start, p.range_end);
            }
            println!("instances: {}", n.instances);
            for (kind, map) in [("label", &n.labels), ("attribute", &n.attributes)] {
                for (k, v) in map {
                    println!("{kind}:{:>width$}{k}={v}", "", width = 10 - kind.len());
                }
            }
        }
    }
    Ok(exit::OK)
}

async fn status(client: &Client, id: &str, output: Output) -> Result<i32, ClientError> {
    let Ok(iid) = parse_instance_id(id) else {
        eprintln!("steward: {id:?} is not an instance id (namespace/name/index)");
        return Ok(exit::USAGE);
    };
    let s = client.status(&iid).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default()),
        Output::Text => {
            println!("instance:  {}", s.id);
            println!("state:     {}", state_word(&s.state));
            println!("pid:       {}", s.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()));
            match (&s.last_exit_reason, &s.last_exit) {
                (Some(why), _) => println!("last exit: {why}"),
                (None, Some(e)) => println!("last exit: {e}"),
                (None, None) => {}
            }
            if !s.message.is_empty() {
                println!("message:   {}", s.message);
            }
            println!("restarts:  {}", s.restarts);
            if let Some(t) = s.last_start_ms {
                // A stopped instance was not started just now: say when its last run began.
                let ago = age(now_ms().saturating_sub(t));
                if s.state.has_processes() {
                    println!("started:   {ago} ago");
                } else {
                    println!("last run:  started {ago} ago");
                }
            }
            for (n, p) in &s.ports {
                println!("port:      {n} = {p}");
            }
            for (i, h) in s.checks.iter().enumerate() {
                let Some(h) = h else { continue };
                let word = match h.healthy {
                    Some(true) => "healthy".to_string(),
                    Some(false) => format!("unhealthy ({} in a row)", h.consecutive_failures),
                    None => "not checked yet".to_string(),
                };
                let what = match s.containers.get(i) {
                    Some(c) => format!("container {}", crate::spec::render::pod::short_container_name(&s.id, &c.name)),
                    None => format!("process {i}"),
                };
                println!("health:    {what}: {word}");
                if let Some(f) = &h.last_failure {
                    println!("           last failure: {f}");
                }
            }
            for c in &s.containers {
                let id: String = c.id.chars().take(12).collect();
                let ip = if c.ip_address.is_empty() { String::new() } else { format!(" ip {}", c.ip_address) };
                let code = if c.is_running() { String::new() } else { format!(" (exit code {})", c.exit_code) };
                println!("container: {} {id} {}{code} pid {} net {}{ip}", c.name, c.status, c.pid, c.network_mode);
            }
            if let Some(u) = &s.usage {
                let limits = s.limits.unwrap_or_default();
                let of = |limit: Option<f64>, unit: &str| match limit {
                    Some(l) => format!(" (limit {l} {unit})"),
                    None if s.limits.is_some() => " (no limit)".to_string(),
                    None => String::new(),
                };
                println!("cpu:       {:.3} s{}", u.cpu_usage_usec as f64 / 1e6, of(limits.cpu_cores, "cores"));
                println!("memory:    {:.1} MiB{}", u.memory_bytes as f64 / 1048576.0, of(limits.memory_mib, "MiB"));
                if u.oom_kills > 0 {
                    println!("oom kills: {}", u.oom_kills);
                }
            }
        }
    }
    Ok(exit::OK)
}

pub(super) async fn targets(client: &Client, t: &Targets) -> Result<Vec<InstanceId>, ClientError> {
    if t.all {
        return client.list(&[]).await.map(|l| l.into_iter().map(|s| s.id).collect());
    }
    Ok(t.ids.iter().map(|i| parse_instance_id(i).expect("clap checked the instance ids")).collect())
}

async fn delete(client: &Client, t: DeleteTargets, output: Output) -> Result<i32, ClientError> {
    if let Some(apps) = t.apps() {
        return delete_apps(client, &apps, t.timeout, output).await;
    }
    if t.ids.iter().any(|i| parse_instance_id(i).is_err()) {
        eprintln!("steward: name instances (namespace/name/index) or apps (namespace/name), not both");
        return Ok(exit::USAGE);
    }
    let t = t.instances();
    let ids = targets(client, &t).await?;
    let timeout = (t.timeout > 0.0).then_some(t.timeout);
    let mut code = exit::OK;
    let mut deleted = Vec::new();
    for id in ids {
        match client.delete_finished(&id, timeout).await {
            Ok(true) => {
                if output == Output::Text {
                    println!("{id}: deleted");
                }
                deleted.push(id.to_string());
            }
            Ok(false) if timeout.is_none() => {
                if output == Output::Text {
                    println!("{id}: deleting");
                }
                deleted.push(id.to_string());
            }
            Ok(false) => {
                // Still stopping: the instance's own state and message say why.
                let now = match client.status(&id).await {
                    Ok(s) => format!(": still {}{}", state_word(&s.state), reason(&s)),
                    Err(_) => String::new(),
                };
                eprintln!("steward: {id}: delete did not finish in {} s{now}", t.timeout);
                code = first_failure(code, exit::FAILED);
            }
            Err(e @ ClientError::Unreachable { .. }) => return Err(e),
            // Listed a moment ago (--all), gone since (its own delete completed): as asked.
            Err(ClientError::Api { status: 404, .. }) if t.all => {
                if output == Output::Text {
                    println!("{id}: already gone");
                }
            }
            Err(e) => {
                eprintln!("steward: {id}: {e}");
                code = first_failure(code, exit_code(&e));
            }
        }
    }
    if output == Output::Json {
        println!("{}", serde_json::to_string(&crate::protocol::Deleted { deleted }).unwrap_or_default());
    }
    Ok(code)
}

/// `steward delete NAMESPACE/NAME...`: every instance of each app, then its spec.
async fn delete_apps(
    client: &Client,
    apps: &[(String, String)],
    timeout: f64,
    output: Output,
) -> Result<i32, ClientError> {
    let timeout = (timeout > 0.0).then_some(timeout);
    let mut code = exit::OK;
    let mut deleted = Vec::new();
    for (namespace, name) in apps {
        let app = format!("{namespace}/{name}");
        match client.delete_app(namespace, name, timeout).await {
            Ok(Some(ids)) => {
                if output == Output::Text {
                    match ids.is_empty() {
                        true => println!("{app}: deleted (it had no instance here)"),
                        false => println!("{app}: deleted with {}", ids.join(", ")),
                    }
                }
                deleted.extend(ids);
            }
            Ok(None) if timeout.is_none() => {
                if output == Output::Text {
                    println!("{app}: deleting");
                }
            }
            Ok(None) => {
                eprintln!("steward: {app}: delete did not finish in {} s", timeout.unwrap_or_default());
                code = first_failure(code, exit::FAILED);
            }
            Err(e @ ClientError::Unreachable { .. }) => return Err(e),
            Err(ClientError::Api { status: 404, .. }) => {
                eprintln!("steward: no app {app}");
                code = first_failure(code, exit::NOT_FOUND);
            }
            Err(e) => {
                eprintln!("steward: {app}: {e}");
                code = first_failure(code, exit_code(&e));
            }
        }
    }
    if output == Output::Json {
        println!("{}", serde_json::to_string(&crate::protocol::Deleted { deleted }).unwrap_or_default());
    }
    Ok(code)
}
