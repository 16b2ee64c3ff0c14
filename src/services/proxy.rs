//! The userspace proxy for node ports (issue 27): where nftables is missing (or the config asks
//! for it), each node port is a socket of this daemon that hands every new TCP connection, or
//! every new UDP peer, to one of the service's Ready endpoints in turn. The endpoints are
//! swapped whole at each revision: an endpoint that left takes no new connection, while
//! connections already made to it run on until they end.
//!
//! Connections are bounded (issue 51 finding 6): per node port, and overall by descriptors, so
//! that a flood of connections leaves the daemon the descriptors its own work needs (starting
//! instances, logs, the API). One over a cap is accepted and closed at once, so the listener's
//! backlog does not fill with it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a connection to an endpoint may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// A UDP peer silent this long loses its session (its upstream socket).
const UDP_IDLE: Duration = Duration::from_secs(60);

/// How long accepting pauses after an error (out of descriptors: the connection stays queued,
/// and retrying at once would spin).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Descriptors a proxied TCP connection holds: the client's and the upstream's.
const TCP_FDS: u32 = 2;
/// Descriptors a UDP session holds: its upstream socket.
const UDP_FDS: u32 = 1;
/// Refused connections are logged at the first and then every this many, per port.
const LOG_EVERY: u64 = 1000;
/// Descriptors always kept for the daemon's own work, at least.
const MIN_RESERVE: u64 = 1024;

/// Descriptors the proxy may hold overall: `max_connections` TCP connections' worth, within
/// the daemon's limit `nofile` less a reserve for its own work (1024 or a quarter of the limit,
/// whichever is larger, but at most half of it).
pub fn descriptor_budget(max_connections: usize, nofile: u64) -> usize {
    let reserve = MIN_RESERVE.max(nofile / 4).min(nofile / 2);
    let free = usize::try_from(nofile - reserve).unwrap_or(usize::MAX);
    max_connections.saturating_mul(TCP_FDS as usize).min(free)
}

/// The bounds shared by all node ports.
pub struct Limits {
    /// Descriptors all the proxy's connections and sessions may hold together.
    overall: Arc<Semaphore>,
    /// Connections (TCP) or sessions (UDP) one node port may hold.
    per_port: usize,
}

impl Limits {
    /// `budget` descriptors overall (see [`descriptor_budget`]), `per_port` connections each.
    pub fn new(budget: usize, per_port: usize) -> Limits {
        Limits { overall: Arc::new(Semaphore::new(budget)), per_port }
    }

    /// The bounds of one node port, named `name` in the log.
    pub fn port(&self, name: String) -> PortLimit {
        PortLimit {
            name,
            overall: self.overall.clone(),
            own: Arc::new(Semaphore::new(self.per_port)),
            refused: AtomicU64::new(0),
        }
    }
}

/// One node port's share of the bounds, and its count of refused connections.
pub struct PortLimit {
    name: String,
    overall: Arc<Semaphore>,
    own: Arc<Semaphore>,
    refused: AtomicU64,
}

/// A connection's place under the caps, held for its life.
pub struct Slot {
    _own: OwnedSemaphorePermit,
    _overall: OwnedSemaphorePermit,
}

impl PortLimit {
    /// A slot for a connection from `peer` holding `fds` descriptors; none over a cap (counted,
    /// and logged rate-limited: a flood must not flood the log too).
    fn admit(&self, peer: SocketAddr, fds: u32) -> Option<Slot> {
        let Ok(own) = self.own.clone().try_acquire_owned() else {
            self.refuse(peer, "the node port's, services.proxy_max_connections_per_port");
            return None;
        };
        let Ok(overall) = self.overall.clone().try_acquire_many_owned(fds) else {
            self.refuse(peer, "the proxy's, services.proxy_max_connections");
            return None;
        };
        Some(Slot { _own: own, _overall: overall })
    }

    fn refuse(&self, peer: SocketAddr, cap: &str) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 || n % LOG_EVERY == 0 {
            tracing::warn!("{}: connection from {peer} closed, over its cap ({cap}); {n} refused so far", self.name);
        }
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Where one node port forwards to now; shared with its task.
#[derive(Default)]
pub struct Targets {
    list: RwLock<Vec<SocketAddr>>,
    next: AtomicUsize,
}

impl Targets {
    pub fn set(&self, list: Vec<SocketAddr>) {
        *self.list.write().expect("targets lock") = list;
    }

    /// The endpoints to try for a new connection, starting with the next in turn.
    fn in_turn(&self) -> Vec<SocketAddr> {
        let list = self.list.read().expect("targets lock");
        if list.is_empty() {
            return Vec::new();
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % list.len();
        list[start..].iter().chain(&list[..start]).copied().collect()
    }
}

/// Accepts on `listener` until the task is aborted; each connection under the caps goes to the
/// first endpoint (in turn) that answers.
pub async fn serve_tcp(listener: TcpListener, targets: Arc<Targets>, limit: Arc<PortLimit>) {
    loop {
        let (mut client, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::debug!("{}: accept: {e}", limit.name);
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        // Over a cap: dropped here, closing it.
        let Some(slot) = limit.admit(peer, TCP_FDS) else { continue };
        let _ = client.set_nodelay(true);
        let targets = targets.clone();
        tokio::spawn(async move {
            let _slot = slot;
            for to in targets.in_turn() {
                match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(to)).await {
                    Ok(Ok(mut upstream)) => {
                        let _ = upstream.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                        return;
                    }
                    _ => tracing::debug!("node port: {peer} -> {to} did not connect; trying the next"),
                }
            }
            tracing::debug!("node port: {peer}: no endpoint answered");
        });
    }
}

/// Relays datagrams on `socket` until the task is aborted: each peer under the caps gets an
/// upstream socket to one endpoint (in turn), whose answers go back to it from the node port.
/// A new peer over a cap has its datagrams dropped.
pub async fn serve_udp(socket: UdpSocket, targets: Arc<Targets>, limit: Arc<PortLimit>) {
    let socket = Arc::new(socket);
    let sessions: Arc<tokio::sync::Mutex<HashMap<SocketAddr, Arc<UdpSocket>>>> = Default::default();
    let mut buf = vec![0u8; 65536];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else { continue };
        let upstream = {
            let mut open = sessions.lock().await;
            match open.get(&peer) {
                Some(u) => u.clone(),
                None => {
                    let Some(to) = targets.in_turn().first().copied() else { continue };
                    let Some(slot) = limit.admit(peer, UDP_FDS) else { continue };
                    let bind: SocketAddr =
                        if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("an address");
                    let Ok(u) = UdpSocket::bind(bind).await else { continue };
                    if u.connect(to).await.is_err() {
                        continue;
                    }
                    let u = Arc::new(u);
                    open.insert(peer, u.clone());
                    tokio::spawn(answer_back(u.clone(), socket.clone(), peer, sessions.clone(), slot));
                    u
                }
            }
        };
        let _ = upstream.send(&buf[..n]).await;
    }
}

/// An endpoint's answers to `peer`, sent back from the node port, until the session idles out
/// (giving back its slot).
async fn answer_back(
    upstream: Arc<UdpSocket>,
    socket: Arc<UdpSocket>,
    peer: SocketAddr,
    sessions: Arc<tokio::sync::Mutex<HashMap<SocketAddr, Arc<UdpSocket>>>>,
    _slot: Slot,
) {
    let mut buf = vec![0u8; 65536];
    while let Ok(Ok(n)) = tokio::time::timeout(UDP_IDLE, upstream.recv(&mut buf)).await {
        let _ = socket.send_to(&buf[..n], peer).await;
    }
    sessions.lock().await.remove(&peer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_keeps_a_reserve_for_the_daemon() {
        // Under systemd's LimitNOFILE=1048576: the configured cap rules.
        assert_eq!(descriptor_budget(16384, 1 << 20), 32768);
        // A small limit: a quarter or 1024 kept, whichever is larger, at most half.
        assert_eq!(descriptor_budget(16384, 20000), 15000);
        assert_eq!(descriptor_budget(16384, 4096), 3072);
        assert_eq!(descriptor_budget(16384, 1024), 512);
        assert_eq!(descriptor_budget(16384, 0), 0);
    }

    #[test]
    fn a_port_admits_up_to_its_cap_and_the_overall_budget() {
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let limits = Limits::new(5, 2);
        let (a, b) = (limits.port("a".into()), limits.port("b".into()));
        let a1 = a.admit(peer, TCP_FDS).unwrap();
        let _a2 = a.admit(peer, TCP_FDS).unwrap();
        assert!(a.admit(peer, TCP_FDS).is_none(), "per port");
        // 4 of 5 descriptors taken: a UDP session fits, a TCP connection does not.
        assert!(b.admit(peer, TCP_FDS).is_none(), "overall");
        let _b1 = b.admit(peer, UDP_FDS).unwrap();
        assert_eq!((a.refused(), b.refused()), (1, 1));
        drop(a1);
        let _a3 = a.admit(peer, TCP_FDS).expect("a slot given back is free again");
        assert!(b.admit(peer, UDP_FDS).is_none(), "all 5 descriptors taken");
    }
}
