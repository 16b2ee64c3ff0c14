//! `steward endpoints [NAMESPACE/NAME]`: the endpoints steward-sched handed this daemon
//! (issue 27), and its services with their cluster IP and node port; with `--after REV`, a long poll for the next revision.

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
    for line in text(e) {
        crate::say!("{line}");
    }
}

fn text(e: &AppEndpoints) -> Vec<String> {
    let mut out = vec![format!("{} revision {} ({})", e.key(), e.revision, crate::clock::rfc3339_utc(e.updated_ms))];
    for s in &e.services {
        let node = s.node_port.map(|n| format!(", node port {n}")).unwrap_or_default();
        // The cluster IP is where a client asks; without one, the port alone.
        let at = s.cluster_ip.as_ref().map_or(format!("port {}", s.port), |ip| format!("{ip}:{}", s.port));
        out.push(format!("  service {} {:?} {at}{node} -> {}", s.service, s.kind, s.target));
    }
    if e.ports.is_empty() {
        out.push("  (no ready instance)".into());
    }
    for (port, list) in &e.ports {
        let at: Vec<String> = list.iter().map(|p| format!("{}:{} ({}/{})", p.ip, p.port, p.node, p.instance)).collect();
        out.push(format!("  {port}: {}", at.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43, item 10: a service's cluster IP is shown (it was left out of the text).
    #[test]
    fn a_services_cluster_ip_is_shown() {
        let e: AppEndpoints = serde_json::from_value(serde_json::json!({
            "namespace": "tf", "name": "api", "revision": 3, "updatedMs": 0, "ports": {},
            "services": [{"service": "api", "type": "NodePort", "export": true, "protocol": "TCP",
                "port": 80, "nodePort": 30001, "target": "http", "clusterIP": "10.96.0.5"}]
        }))
        .unwrap();
        let lines = text(&e);
        assert!(lines[1].contains("10.96.0.5:80") && lines[1].contains("node port 30001"), "{lines:?}");
    }
}
