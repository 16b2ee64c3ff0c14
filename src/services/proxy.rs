//! The userspace proxy for node ports (issue 27): where nftables is missing (or the config asks
//! for it), each node port is a socket of this daemon that hands every new TCP connection, or
//! every new UDP peer, to one of the service's Ready endpoints in turn. The endpoints are
//! swapped whole at each revision: an endpoint that left takes no new connection, while
//! connections already made to it run on until they end.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// How long a connection to an endpoint may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// A UDP peer silent this long loses its session (its upstream socket).
const UDP_IDLE: Duration = Duration::from_secs(60);

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

/// Accepts on `listener` until the task is aborted; each connection goes to the first endpoint
/// (in turn) that answers.
pub async fn serve_tcp(listener: TcpListener, targets: Arc<Targets>) {
    loop {
        let Ok((mut client, peer)) = listener.accept().await else { continue };
        let _ = client.set_nodelay(true);
        let targets = targets.clone();
        tokio::spawn(async move {
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

/// Relays datagrams on `socket` until the task is aborted: each peer gets an upstream socket
/// to one endpoint (in turn), whose answers go back to it from the node port.
pub async fn serve_udp(socket: UdpSocket, targets: Arc<Targets>) {
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
                    let bind: SocketAddr =
                        if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("an address");
                    let Ok(u) = UdpSocket::bind(bind).await else { continue };
                    if u.connect(to).await.is_err() {
                        continue;
                    }
                    let u = Arc::new(u);
                    open.insert(peer, u.clone());
                    tokio::spawn(answer_back(u.clone(), socket.clone(), peer, sessions.clone()));
                    u
                }
            }
        };
        let _ = upstream.send(&buf[..n]).await;
    }
}

/// An endpoint's answers to `peer`, sent back from the node port, until the session idles out.
async fn answer_back(
    upstream: Arc<UdpSocket>,
    socket: Arc<UdpSocket>,
    peer: SocketAddr,
    sessions: Arc<tokio::sync::Mutex<HashMap<SocketAddr, Arc<UdpSocket>>>>,
) {
    let mut buf = vec![0u8; 65536];
    while let Ok(Ok(n)) = tokio::time::timeout(UDP_IDLE, upstream.recv(&mut buf)).await {
        let _ = socket.send_to(&buf[..n], peer).await;
    }
    sessions.lock().await.remove(&peer);
}
