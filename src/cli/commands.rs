//! The `steward` commands that talk to the daemon.

use super::steward::{exit, Command, Output, Targets, ValuesCommand};
use crate::client::{parse_instance_id, Client, ClientError};
use crate::config::Config;
use crate::spec::{self, Format, InstanceId};
use crate::supervisor::record::{now_ms, InstanceStatus};
use crate::supervisor::state::{Kind, State};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

pub async fn run(command: Command, config: &Config, socket: &Path, output: Output) -> anyhow::Result<i32> {
    let client = Client::new(socket);
    let result = match command {
        Command::Apply { file, wait, timeout } => apply(&client, config, &file, wait, timeout, output).await,
        Command::Ls { namespace, name, state } => ls(&client, namespace, name, state, output).await,
        Command::Status { id } => status(&client, &id, output).await,
        Command::Start(t) => act(&client, "start", t, output).await,
        Command::Stop(t) => act(&client, "stop", t, output).await,
        Command::Restart(t) => act(&client, "restart", t, output).await,
        Command::Reload(t) => act(&client, "reload", t, output).await,
        Command::Delete(t) => delete(&client, t).await,
        Command::Events { follow, since } => events(&client, since, follow, output).await,
        Command::Logs { id, follow, tail } => return logs(config, &id, follow, tail),
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
    match e {
        ClientError::Unreachable { source, .. } => {
            eprintln!("steward: cannot reach stewardd at {}: {source}", socket.display());
            eprintln!("  start it with `systemctl start stewardd`, or in the foreground with `stewardd`");
            eprintln!("  (another socket: --socket PATH or STEWARD_SOCKET)");
            exit::UNREACHABLE
        }
        ClientError::Api { status, message, errors, .. } => {
            if errors.is_empty() {
                eprintln!("steward: {message}");
            } else {
                eprintln!("steward: {}", spec::SpecErrors(errors));
            }
            match status {
                404 => exit::NOT_FOUND,
                403 => exit::FORBIDDEN,
                422 | 400 => exit::INVALID,
                _ => exit::FAILED,
            }
        }
        ClientError::Protocol(m) => {
            eprintln!("steward: {m}");
            exit::FAILED
        }
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
            let body = serde_json::json!({"applied": applied, "instances": outcomes});
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

fn state_word(s: &State) -> String {
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
                Output::Json => println!("{summary}"),
                Output::Text => println!("{id}: {} key(s) stored", data.len()),
            }
        }
        ValuesCommand::Ls { namespace } => {
            let list = client.list_values(kind, namespace.as_deref()).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&list["items"]).unwrap_or_default()),
                Output::Text => {
                    println!("NAMESPACE  NAME  KEYS");
                    for item in list["items"].as_array().into_iter().flatten() {
                        let keys: Vec<&str> =
                            item["keys"].as_array().into_iter().flatten().filter_map(|k| k.as_str()).collect();
                        println!(
                            "{}  {}  {}",
                            item["namespace"].as_str().unwrap_or("?"),
                            item["name"].as_str().unwrap_or("?"),
                            keys.join(",")
                        );
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
            println!("{id}: removed");
        }
    }
    Ok(exit::OK)
}

async fn node(client: &Client, output: Output) -> Result<i32, ClientError> {
    let n = client.node().await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&n).unwrap_or_default()),
        Output::Text => {
            let gib = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0) / 1073741824.0;
            println!("hostname:  {}", n["hostname"].as_str().unwrap_or("?"));
            println!("ip:        {}", n["hostIp"].as_str().unwrap_or("?"));
            let busy = n["cpuUsagePercent"].as_f64().unwrap_or(0.0);
            println!(
                "cpus:      {} (load {:.2}, {busy:.0}% busy)",
                n["cpus"],
                n["loadAverage"].as_f64().unwrap_or(0.0)
            );
            println!(
                "memory:    {:.1} GiB available of {:.1} GiB",
                gib(&n["memoryAvailableBytes"]),
                gib(&n["memoryTotalBytes"])
            );
            let ports = &n["ports"];
            println!("ports:     {} free in {}-{}", ports["free"], ports["rangeStart"], ports["rangeEnd"]);
            println!("instances: {}", n["instances"]);
            for (kind, key) in [("label", "labels"), ("attribute", "attributes")] {
                for (k, v) in n[key].as_object().into_iter().flatten() {
                    println!("{kind}:{:>width$}{k}={}", "", v.as_str().unwrap_or_default(), width = 10 - kind.len());
                }
            }
        }
    }
    Ok(exit::OK)
}

async fn status(client: &Client, id: &str, output: Output) -> Result<i32, ClientError> {
    let Ok(iid) = parse_instance_id(id) else {
        eprintln!("steward: {id:?} is not an instance id (namespace/name/index)");
        return Ok(exit::INVALID);
    };
    let s = client.status(&iid).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default()),
        Output::Text => {
            println!("instance:  {}", s.id);
            println!("state:     {}", state_word(&s.state));
            println!("pid:       {}", s.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()));
            if let Some(e) = &s.last_exit {
                println!("last exit: {e}");
            }
            if !s.message.is_empty() {
                println!("message:   {}", s.message);
            }
            println!("restarts:  {}", s.restarts);
            if let Some(t) = s.last_start_ms {
                println!("started:   {} ago", age(now_ms().saturating_sub(t)));
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
                println!("health:    process {i}: {word}");
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
                println!("cpu:       {:.3} s", u.cpu_usage_usec as f64 / 1e6);
                println!("memory:    {:.1} MiB", u.memory_bytes as f64 / 1048576.0);
                if u.oom_kills > 0 {
                    println!("oom kills: {}", u.oom_kills);
                }
            }
        }
    }
    Ok(exit::OK)
}

async fn targets(client: &Client, t: &Targets) -> Result<Vec<InstanceId>, i32> {
    if t.all {
        return client.list(&[]).await.map(|l| l.into_iter().map(|s| s.id).collect()).map_err(|e| {
            eprintln!("steward: {e}");
            exit::UNREACHABLE
        });
    }
    if t.ids.is_empty() {
        eprintln!("steward: name instances (namespace/name/index) or --all");
        return Err(exit::USAGE);
    }
    t.ids.iter().map(|i| parse_instance_id(i)).collect::<Result<_, _>>().map_err(|e| {
        eprintln!("steward: {e}");
        exit::INVALID
    })
}

async fn act(client: &Client, action: &str, t: Targets, output: Output) -> Result<i32, ClientError> {
    let ids = match targets(client, &t).await {
        Ok(ids) => ids,
        Err(code) => return Ok(code),
    };
    let timeout = (t.timeout > 0.0).then_some(t.timeout);
    let mut code = exit::OK;
    let mut results = Vec::new();
    for id in ids {
        match client.action(&id, action, timeout).await {
            Ok(s) => {
                if output == Output::Text {
                    println!("{}: {}", s.id, state_word(&s.state));
                }
                results.push(s);
            }
            Err(ClientError::Unreachable { socket, source }) => {
                return Err(ClientError::Unreachable { socket, source })
            }
            Err(e) => {
                eprintln!("steward: {id}: {e}");
                code = exit::FAILED;
            }
        }
    }
    if output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&results).unwrap_or_default());
    }
    Ok(code)
}

async fn delete(client: &Client, t: Targets) -> Result<i32, ClientError> {
    // NAMESPACE/NAME (no index) names a whole app.
    if !t.all && !t.ids.is_empty() && t.ids.iter().all(|i| i.matches('/').count() == 1) {
        return delete_apps(client, &t).await;
    }
    let ids = match targets(client, &t).await {
        Ok(ids) => ids,
        Err(code) => return Ok(code),
    };
    let timeout = (t.timeout > 0.0).then_some(t.timeout);
    let mut code = exit::OK;
    for id in ids {
        match client.delete(&id, timeout).await {
            Ok(()) => println!("{id}: deleted"),
            Err(ClientError::Unreachable { socket, source }) => {
                return Err(ClientError::Unreachable { socket, source })
            }
            Err(e) => {
                eprintln!("steward: {id}: {e}");
                code = exit::FAILED;
            }
        }
    }
    Ok(code)
}

/// `steward delete NAMESPACE/NAME...`: every instance of each app, then its spec.
async fn delete_apps(client: &Client, t: &Targets) -> Result<i32, ClientError> {
    let timeout = (t.timeout > 0.0).then_some(t.timeout);
    let mut code = exit::OK;
    for app in &t.ids {
        let (namespace, name) = app.split_once('/').unwrap_or_default();
        match client.delete_app(namespace, name, timeout).await {
            Ok(Some(ids)) if ids.is_empty() => println!("{app}: deleted (it had no instance here)"),
            Ok(Some(ids)) => println!("{app}: deleted with {}", ids.join(", ")),
            Ok(None) => println!("{app}: deleting"),
            Err(e @ ClientError::Unreachable { .. }) => return Err(e),
            Err(ClientError::Api { status: 404, .. }) => {
                eprintln!("steward: no app {app}");
                code = code.max(exit::NOT_FOUND);
            }
            Err(e) => {
                eprintln!("steward: {app}: {e}");
                code = exit::FAILED;
            }
        }
    }
    Ok(code)
}

async fn events(client: &Client, since: u64, follow: bool, output: Output) -> Result<i32, ClientError> {
    let mut out = std::io::stdout().lock();
    client
        .events(since, follow, |e| {
            let line = match output {
                Output::Json => serde_json::to_string(&e).unwrap_or_default(),
                Output::Text => {
                    let b = &e.body;
                    let what = match b["type"].as_str() {
                        Some("transition") => {
                            format!("{} -> {}", b["from"].as_str().unwrap_or("?"), b["to"].as_str().unwrap_or("?"))
                        }
                        Some(other) => other.to_string(),
                        None => b.to_string(),
                    };
                    let subject = b["instance"].as_str().or(b["app"].as_str()).unwrap_or("-");
                    let msg =
                        b["message"].as_str().filter(|m| !m.is_empty()).map(|m| format!(" ({m})")).unwrap_or_default();
                    format!("{:>6} {} {subject} {what}{msg}", e.seq, e.at_ms)
                }
            };
            writeln!(out, "{line}").is_ok() && out.flush().is_ok()
        })
        .await?;
    Ok(exit::OK)
}

/// Prints the instance's log files (they live in its run directory).
fn logs(config: &Config, id: &str, follow: bool, tail: usize) -> anyhow::Result<i32> {
    let Ok(iid) = parse_instance_id(id) else {
        eprintln!("steward: {id:?} is not an instance id (namespace/name/index)");
        return Ok(exit::INVALID);
    };
    let dir = config.run_base_dir.join(format!("{}.{}.{}", iid.namespace, iid.name, iid.index));
    let mut files: Vec<_> = match std::fs::read_dir(&dir) {
        Ok(rd) => {
            rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "log")).collect()
        }
        Err(e) => {
            eprintln!("steward: no logs for {id} in {}: {e}", dir.display());
            return Ok(exit::NOT_FOUND);
        }
    };
    files.sort();
    let mut offsets = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let name = f.file_name().unwrap_or_default().to_string_lossy().to_string();
        for l in &lines[lines.len().saturating_sub(tail)..] {
            println!("[{name}] {l}");
        }
        offsets.push(text.len() as u64);
    }
    if !follow {
        return Ok(exit::OK);
    }
    loop {
        std::thread::sleep(Duration::from_millis(250));
        for (f, off) in files.iter().zip(offsets.iter_mut()) {
            let Ok(data) = std::fs::read(f) else { continue };
            if (data.len() as u64) < *off {
                *off = 0; // rotated (truncated)
            }
            let new = &data[*off as usize..];
            let name = f.file_name().unwrap_or_default().to_string_lossy().to_string();
            for l in String::from_utf8_lossy(new).lines() {
                println!("[{name}] {l}");
            }
            *off = data.len() as u64;
        }
    }
}
