//! `steward endpoints [NAMESPACE/NAME]`: the endpoints steward-sched handed this daemon
//! (issue 27); with `--after REV`, a long poll for the next revision.

use super::steward::Output;
use crate::client::{Client, ClientError};
use crate::protocol::AppEndpoints;

pub async fn run(
    client: &Client,
    app: Option<&str>,
    after: Option<u64>,
    timeout: f64,
    output: Output,
) -> Result<i32, ClientError> {
    let Some(app) = app else {
        let all = client.endpoints(None).await?;
        match output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default()),
            Output::Text => all.iter().for_each(print_text),
        }
        return Ok(0);
    };
    let Some((namespace, name)) = app.split_once('/') else {
        crate::esay!("steward: {app:?} is not NAMESPACE/NAME");
        return Ok(super::steward::exit::USAGE);
    };
    match client.app_endpoints(namespace, name, after.map(|a| (a, timeout))).await? {
        Some(e) => match output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&e).unwrap_or_default()),
            Output::Text => print_text(&e),
        },
        None => {
            crate::esay!("steward: no endpoints for {app} on this daemon (steward-sched hands them over)");
            return Ok(super::steward::exit::NOT_FOUND);
        }
    }
    Ok(0)
}

/// An app's endpoints for people: its revision and time, then a line per port name.
pub(super) fn print_text(e: &AppEndpoints) {
    crate::say!("{} revision {} ({})", e.key(), e.revision, crate::clock::rfc3339_utc(e.updated_ms));
    for s in &e.services {
        let node = s.node_port.map(|n| format!(", node port {n}")).unwrap_or_default();
        crate::say!("  service {} {:?} port {}{node} -> {}", s.service, s.kind, s.port, s.target);
    }
    if e.ports.is_empty() {
        crate::say!("  (no ready instance)");
    }
    for (port, list) in &e.ports {
        let at: Vec<String> = list.iter().map(|p| format!("{}:{} ({}/{})", p.ip, p.port, p.node, p.instance)).collect();
        crate::say!("  {port}: {}", at.join(", "));
    }
}
