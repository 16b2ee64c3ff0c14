//! Forwarding (issue 27, seed 003 services): every host answers on each `NodePort` service's
//! node port, and on each service's cluster IP and port (an address of the host's, vips.rs), and
//! forwards to the app's Ready endpoints on any host. Follows the endpoints keeper: at every
//! change the wanted ports are worked out again and the forwarding made to match — in the
//! kernel (nft.rs) or by the userspace proxy (proxy.rs), chosen once at start.

use super::nft::{self, Rule};
use super::proxy::{self, Targets};
use super::EndpointsKeeper;
use crate::config::NodePortMode;
use crate::protocol::AppEndpoints;
use crate::runtime::reaper::Reaper;
use crate::spec::model::{Protocol, ServiceType};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;

/// The userspace proxy's ports, by (udp, cluster IP or none, port): their endpoints and their
/// task.
type Proxies = BTreeMap<(bool, Option<Ipv4Addr>, u16), (Arc<Targets>, tokio::task::JoinHandle<()>)>;

/// The mode `auto` comes to here.
pub async fn resolve(mode: NodePortMode, reaper: Option<&Reaper>) -> NodePortMode {
    match mode {
        NodePortMode::Auto if nft::available(reaper).await => NodePortMode::Nftables,
        NodePortMode::Auto => NodePortMode::Userspace,
        other => other,
    }
}

/// The ports `apps` ask forwarded, each with its Ready endpoints: node ports, and each
/// service port on its cluster IP (sorted by app: two apps asking for one node port, the first
/// keeps it and the other is logged).
pub fn wanted(apps: &[AppEndpoints]) -> Vec<Rule> {
    let mut rules: BTreeMap<(bool, Option<Ipv4Addr>, u16), (String, Rule)> = BTreeMap::new();
    for app in apps {
        for s in &app.services {
            let udp = s.protocol == Protocol::Udp;
            let endpoints: Vec<SocketAddrV4> = app
                .ports
                .get(&s.target)
                .into_iter()
                .flatten()
                .filter_map(|e| Some(SocketAddrV4::new(e.ip.parse().ok()?, e.port)))
                .collect();
            let vip = s.cluster_ip.as_deref().and_then(|ip| ip.parse::<Ipv4Addr>().ok());
            let node_port = s.node_port.filter(|_| s.kind == ServiceType::NodePort);
            let wanted = vip.map(|ip| (Some(ip), s.port)).into_iter().chain(node_port.map(|p| (None, p)));
            for (address, port) in wanted {
                let rule = Rule { udp, address, port, endpoints: endpoints.clone() };
                match rules.get(&(udp, address, port)) {
                    Some((owner, _)) if *owner != app.key() => {
                        tracing::warn!("{} is {owner}'s; {} asks for it too", rule.describe(), app.key())
                    }
                    _ => {
                        rules.insert((udp, address, port), (app.key(), rule));
                    }
                }
            }
        }
    }
    rules.into_values().map(|(_, r)| r).collect()
}

/// The cluster IPs of `rules`.
fn addresses(rules: &[Rule]) -> BTreeSet<Ipv4Addr> {
    rules.iter().filter_map(|r| r.address).collect()
}

/// Forwards by `mode` (resolved) for as long as the daemon runs; the userspace proxy within
/// `limits`.
pub async fn run(keeper: EndpointsKeeper, mode: NodePortMode, reaper: Reaper, limits: proxy::Limits) {
    let reaper = Some(&reaper);
    let mut changes = keeper.subscribe();
    let mut proxies = Proxies::new();
    let mut last: Option<Vec<Rule>> = None;
    loop {
        let rules = wanted(&keeper.list(None));
        if last.as_ref() != Some(&rules) {
            let vips = addresses(&rules);
            // Held in both modes: the kernel's rules need them local, the proxy listens on them.
            // At start with none wanted, only leftovers are looked for (quietly: a host without
            // `ip` that never had one is no error).
            let had = last.as_ref().is_none_or(|l| !addresses(l).is_empty());
            if mode != NodePortMode::Off && (!vips.is_empty() || had) {
                match super::vips::hold(reaper, &vips).await {
                    Ok(()) => tracing::info!("cluster IPs: {} on lo ({})", vips.len(), super::vips::LABEL),
                    Err(e) if vips.is_empty() && last.is_none() => tracing::debug!("cluster IPs: {e}"),
                    Err(e) => tracing::error!("cluster IPs: {e}"),
                }
            }
            match mode {
                // Nothing wanted at start: a table is removed only if one is left over (another
                // daemon sharing the host's namespace, a test's, may own none).
                NodePortMode::Nftables if last.is_none() && rules.is_empty() && !nft::table_exists(reaper).await => {}
                NodePortMode::Nftables => {
                    if rules.iter().any(|r| !r.endpoints.is_empty()) {
                        nft::ensure_forwarding();
                    }
                    match nft::apply(reaper, &rules).await {
                        Ok(()) => {
                            tracing::info!("services: {} port(s) in nftables table ip {}", rules.len(), nft::TABLE)
                        }
                        Err(e) => tracing::error!("services: {e}"),
                    }
                }
                NodePortMode::Userspace => proxy_to(&rules, &mut proxies, &limits).await,
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
async fn proxy_to(rules: &[Rule], proxies: &mut Proxies, limits: &proxy::Limits) {
    proxies.retain(|key, (_, task)| {
        let keep = rules.iter().any(|r| (r.udp, r.address, r.port) == *key);
        if !keep {
            task.abort();
        }
        keep
    });
    for r in rules {
        let targets: Vec<SocketAddr> = r.endpoints.iter().map(|e| SocketAddr::V4(*e)).collect();
        if let Some((t, _)) = proxies.get(&(r.udp, r.address, r.port)) {
            t.set(targets);
            continue;
        }
        let t = Arc::new(Targets::default());
        t.set(targets);
        let bind = SocketAddr::from((r.address.unwrap_or(Ipv4Addr::UNSPECIFIED), r.port));
        let limit = Arc::new(limits.port(r.describe()));
        let task = if r.udp {
            match tokio::net::UdpSocket::bind(bind).await {
                Ok(socket) => tokio::spawn(proxy::serve_udp(socket, t.clone(), limit)),
                Err(e) => {
                    tracing::error!("{}: cannot listen: {e}", r.describe());
                    continue;
                }
            }
        } else {
            match tokio::net::TcpListener::bind(bind).await {
                Ok(listener) => tokio::spawn(proxy::serve_tcp(listener, t.clone(), limit)),
                Err(e) => {
                    tracing::error!("{}: cannot listen: {e}", r.describe());
                    continue;
                }
            }
        };
        tracing::info!("{} forwards to {} endpoint(s)", r.describe(), r.endpoints.len());
        proxies.insert((r.udp, r.address, r.port), (t, task));
    }
}
