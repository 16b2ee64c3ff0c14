//! Node ports (issue 27, seed 003 `NodePort`): every host answers on a service's `nodePort` and
//! forwards to the app's Ready endpoints on any host. Follows the endpoints keeper: at every
//! change the wanted node ports are worked out again and the forwarding made to match — in the
//! kernel (nft.rs) or by the userspace proxy (proxy.rs), chosen once at start.

use super::nft::{self, Rule};
use super::proxy::{self, Targets};
use super::EndpointsKeeper;
use crate::config::NodePortMode;
use crate::protocol::AppEndpoints;
use crate::runtime::reaper::Reaper;
use crate::spec::model::{Protocol, ServiceType};
use std::collections::BTreeMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;

/// The userspace proxy's node ports, by (udp, port): their endpoints and their task.
type Proxies = BTreeMap<(bool, u16), (Arc<Targets>, tokio::task::JoinHandle<()>)>;

/// The mode `auto` comes to here.
pub async fn resolve(mode: NodePortMode, reaper: Option<&Reaper>) -> NodePortMode {
    match mode {
        NodePortMode::Auto if nft::available(reaper).await => NodePortMode::Nftables,
        NodePortMode::Auto => NodePortMode::Userspace,
        other => other,
    }
}

/// The node ports `apps` ask for, each with its Ready endpoints (sorted by app: two apps
/// asking for one port, the first keeps it and the other is logged).
pub fn wanted(apps: &[AppEndpoints]) -> Vec<Rule> {
    let mut rules: BTreeMap<(bool, u16), (String, Rule)> = BTreeMap::new();
    for app in apps {
        for s in app.services.iter().filter(|s| s.kind == ServiceType::NodePort) {
            let Some(node_port) = s.node_port else { continue };
            let udp = s.protocol == Protocol::Udp;
            let endpoints: Vec<SocketAddrV4> = app
                .ports
                .get(&s.target)
                .into_iter()
                .flatten()
                .filter_map(|e| Some(SocketAddrV4::new(e.ip.parse().ok()?, e.port)))
                .collect();
            match rules.get(&(udp, node_port)) {
                Some((owner, _)) if *owner != app.key() => {
                    tracing::warn!("node port {node_port} is {owner}'s; {} asks for it too", app.key())
                }
                _ => {
                    rules.insert((udp, node_port), (app.key(), Rule { udp, node_port, endpoints }));
                }
            }
        }
    }
    rules.into_values().map(|(_, r)| r).collect()
}

/// Forwards node ports by `mode` (resolved) for as long as the daemon runs.
pub async fn run(keeper: EndpointsKeeper, mode: NodePortMode, reaper: Reaper) {
    let reaper = Some(&reaper);
    let mut changes = keeper.subscribe();
    let mut proxies = Proxies::new();
    let mut last: Option<Vec<Rule>> = None;
    loop {
        let rules = wanted(&keeper.list(None));
        if last.as_ref() != Some(&rules) {
            match mode {
                // Nothing wanted at start: a table is removed only if one is left over (another
                // daemon sharing the host's namespace, a test's, may own none).
                NodePortMode::Nftables if last.is_none() && rules.is_empty() && !nft::table_exists(reaper).await => {}
                NodePortMode::Nftables => {
                    if rules.iter().any(|r| !r.endpoints.is_empty()) {
                        nft::ensure_forwarding();
                    }
                    match nft::apply(reaper, &rules).await {
                        Ok(()) => tracing::info!("node ports: {} in nftables table ip {}", rules.len(), nft::TABLE),
                        Err(e) => tracing::error!("node ports: {e}"),
                    }
                }
                NodePortMode::Userspace => proxy_to(&rules, &mut proxies).await,
                NodePortMode::Auto | NodePortMode::Off => {}
            }
            last = Some(rules);
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// The userspace proxy made to match `rules`: new ports bound, gone ones closed, the others'
/// endpoints swapped.
async fn proxy_to(rules: &[Rule], proxies: &mut Proxies) {
    proxies.retain(|key, (_, task)| {
        let keep = rules.iter().any(|r| (r.udp, r.node_port) == *key);
        if !keep {
            task.abort();
        }
        keep
    });
    for r in rules {
        let targets: Vec<SocketAddr> = r.endpoints.iter().map(|e| SocketAddr::V4(*e)).collect();
        if let Some((t, _)) = proxies.get(&(r.udp, r.node_port)) {
            t.set(targets);
            continue;
        }
        let t = Arc::new(Targets::default());
        t.set(targets);
        let bind = SocketAddr::from(([0, 0, 0, 0], r.node_port));
        let task = if r.udp {
            match tokio::net::UdpSocket::bind(bind).await {
                Ok(socket) => tokio::spawn(proxy::serve_udp(socket, t.clone())),
                Err(e) => {
                    tracing::error!("node port {}/udp: cannot listen: {e}", r.node_port);
                    continue;
                }
            }
        } else {
            match tokio::net::TcpListener::bind(bind).await {
                Ok(listener) => tokio::spawn(proxy::serve_tcp(listener, t.clone())),
                Err(e) => {
                    tracing::error!("node port {}/tcp: cannot listen: {e}", r.node_port);
                    continue;
                }
            }
        };
        tracing::info!(
            "node port {}/{} forwards to {} endpoint(s)",
            r.node_port,
            if r.udp { "udp" } else { "tcp" },
            r.endpoints.len()
        );
        proxies.insert((r.udp, r.node_port), (t, task));
    }
}
