//! The read-only views: `steward ls` (a table), `status` (one instance in detail) and `node`
//! (the host), each as text or JSON.

use super::commands::state_word;
use super::steward::{exit, Output};
use crate::client::{parse_instance_id, Client, ClientError};
use crate::supervisor::record::{now_ms, InstanceStatus};

pub(super) async fn ls(
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
    let header = ["NAMESPACE", "NAME", "ID", "STATE", "READY", "PID", "PORTS", "RESTARTS", "AGE", "HEALTH"];
    let now = now_ms();
    let rows: Vec<[String; 10]> = list
        .iter()
        .map(|s| {
            let ports: Vec<String> = s.ports.iter().map(|(n, p)| format!("{n}:{p}")).collect();
            [
                s.id.namespace.clone(),
                s.id.name.clone(),
                s.id.index.to_string(),
                state_word(&s.state),
                // Seed 003's Ready condition, for what runs.
                match (s.state.has_processes(), s.ready) {
                    (false, _) => "-".into(),
                    (true, ready) => if ready { "yes" } else { "no" }.into(),
                },
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
        // Escaped before the widths are measured: the health text is the workload's.
        .map(|row: [String; 10]| row.map(|c| super::safe_text::safe_line(&c).into_owned()))
        .collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        crate::say!("{}", parts.join("  ").trim_end());
    };
    line(header.to_vec());
    for r in &rows {
        line(r.iter().map(String::as_str).collect());
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

pub(super) async fn node(client: &Client, output: Output) -> Result<i32, ClientError> {
    let n = client.node().await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&n).unwrap_or_default()),
        Output::Text => {
            let gib = |bytes: u64| bytes as f64 / 1073741824.0;
            crate::say!("hostname:  {}", n.hostname);
            crate::say!("ip:        {}", n.host_ip);
            crate::say!("cpus:      {} (load {:.2}, {:.0}% busy)", n.cpus, n.load_average, n.cpu_usage_percent);
            crate::say!(
                "memory:    {:.1} GiB available of {:.1} GiB",
                gib(n.memory_available_bytes),
                gib(n.memory_total_bytes)
            );
            let ports = &n.ports;
            crate::say!("ports:     {} free in {}-{}", ports.free, ports.range_start, ports.range_end);
            if let Some(p) = &ports.pending {
                crate::say!("           {}-{} configured, in effect after a restart", p.range_start, p.range_end);
            }
            if let (true, Some(e)) = (ports.overlaps_ephemeral, &ports.ephemeral) {
                crate::say!(
                    "           overlaps the kernel's ephemeral ports {}-{} (net.ipv4.ip_local_port_range): \
                     outgoing connections may hold a port an instance is then given (see stewardd's log)",
                    e.range_start,
                    e.range_end
                );
            }
            let r = &n.resources;
            let (cpu, memory) = (crate::resources::cpu_text, crate::resources::memory_text);
            crate::say!(
                "requests:  cpu {} of {} allocatable ({} reserved), memory {} of {} ({} reserved)",
                cpu(r.allocated.milli_cpu),
                cpu(r.allocatable.milli_cpu),
                cpu(r.reserved.milli_cpu),
                memory(r.allocated.memory_bytes),
                memory(r.allocatable.memory_bytes),
                memory(r.reserved.memory_bytes)
            );
            crate::say!("instances: {}", n.instances);
            let topology: Vec<String> = n.topology().iter().map(|(k, v)| format!("{k}={v}")).collect();
            crate::say!("topology:  {}", topology.join(" "));
            for (kind, map) in [("label", &n.labels), ("attribute", &n.attributes)] {
                for (k, v) in map {
                    crate::say!("{kind}:{:>width$}{k}={v}", "", width = 10 - kind.len());
                }
            }
        }
    }
    Ok(exit::OK)
}

pub(super) async fn status(client: &Client, id: &str, output: Output) -> Result<i32, ClientError> {
    let Ok(iid) = parse_instance_id(id) else {
        crate::esay!("steward: {id:?} is not an instance id (namespace/name/index)");
        return Ok(exit::USAGE);
    };
    let s = client.status(&iid).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default()),
        Output::Text => {
            crate::say!("instance:  {}", s.id);
            crate::say!("state:     {}", state_word(&s.state));
            crate::say!("pid:       {}", s.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()));
            match (&s.last_exit_reason, &s.last_exit) {
                (Some(why), _) => crate::say!("last exit: {why}"),
                (None, Some(e)) => crate::say!("last exit: {e}"),
                (None, None) => {}
            }
            if !s.message.is_empty() {
                crate::say!("message:   {}", s.message);
            }
            if s.kept {
                crate::say!("kept:      its app's rollout failed on it; kept for its logs until the app's next apply");
            }
            crate::say!("restarts:  {}", s.restarts);
            if s.revision > 0 {
                match s.run_revision {
                    r if r == s.revision || r == 0 => crate::say!("revision:  {}", s.revision),
                    r => crate::say!("revision:  {} (its run is on {r} until it restarts)", s.revision),
                }
            }
            if let Some(t) = s.last_start_ms {
                // A stopped instance was not started just now: say when its last run began.
                let ago = age(now_ms().saturating_sub(t));
                if s.state.has_processes() {
                    crate::say!("started:   {ago} ago");
                } else {
                    crate::say!("last run:  started {ago} ago");
                }
            }
            for (n, p) in &s.ports {
                crate::say!("port:      {n} = {p}");
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
                crate::say!("health:    {what}: {word}");
                if let Some(f) = &h.last_failure {
                    crate::say!("           last failure: {f}");
                }
            }
            for c in &s.containers {
                let id: String = c.id.chars().take(12).collect();
                let ip = if c.ip_address.is_empty() { String::new() } else { format!(" ip {}", c.ip_address) };
                let code = if c.is_running() { String::new() } else { format!(" (exit code {})", c.exit_code) };
                crate::say!("container: {} {id} {}{code} pid {} net {}{ip}", c.name, c.status, c.pid, c.network_mode);
            }
            if let Some(u) = &s.usage {
                let limits = s.limits.unwrap_or_default();
                let of = |limit: Option<f64>, unit: &str| match limit {
                    Some(l) => format!(" (limit {l} {unit})"),
                    None if s.limits.is_some() => " (no limit)".to_string(),
                    None => String::new(),
                };
                crate::say!("cpu:       {:.3} s{}", u.cpu_usage_usec as f64 / 1e6, of(limits.cpu_cores, "cores"));
                crate::say!("memory:    {:.1} MiB{}", u.memory_bytes as f64 / 1048576.0, of(limits.memory_mib, "MiB"));
                if u.tasks > 0 || u.tasks_max.is_some() {
                    let limit = u.tasks_max.map_or(" (no limit)".to_string(), |n| format!(" (limit {n})"));
                    crate::say!("tasks:     {}{limit}", u.tasks);
                }
                if u.oom_kills > 0 {
                    crate::say!("oom kills: {}", u.oom_kills);
                }
            }
        }
    }
    Ok(exit::OK)
}
