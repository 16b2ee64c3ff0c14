//! HTTP/1 serving for both listeners (the unix socket and the remote one), with the limits a
//! daemon open to other local users and to the network needs (issue 14), which `axum::serve`
//! does not have:
//!
//! - a request's headers must arrive within `header_timeout` of the connection's start or of the
//!   end of the previous response: hyper starts that timer whenever a connection is idle, so a
//!   half-sent request and an idle keep-alive connection both end (a response in progress, such
//!   as an event stream, is not idle);
//! - open connections are capped per peer (a local uid, a remote address) and in total; one over
//!   a cap is closed at once. Root on the local socket has no per-peer cap (it administers the
//!   daemon), only the total one.

use axum::extract::ConnectInfo;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

pub use crate::config::ServeLimits;

/// Whom a connection counts against: a local uid, or a remote address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PeerKey {
    Uid(u32),
    Ip(IpAddr),
}

/// Open connections, in total and per peer.
pub struct ConnectionLimiter {
    limits: ServeLimits,
    open: Mutex<Open>,
    refused: AtomicU64,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_peer: HashMap<PeerKey, usize>,
}

/// One open connection's place, given back when dropped.
pub struct Slot {
    limiter: Arc<ConnectionLimiter>,
    key: Option<PeerKey>,
}

impl ConnectionLimiter {
    pub fn new(limits: ServeLimits) -> Arc<ConnectionLimiter> {
        Arc::new(ConnectionLimiter { limits, open: Mutex::new(Open::default()), refused: AtomicU64::new(0) })
    }

    pub fn limits(&self) -> ServeLimits {
        self.limits
    }

    /// A place for a new connection of `key` (None: no per-peer cap), or None over a cap. A
    /// refusal is logged for the first and then every 100th, so a flood cannot flood the log.
    pub fn try_acquire(self: &Arc<Self>, key: Option<PeerKey>) -> Option<Slot> {
        let mut open = self.open.lock().expect("connection counts");
        let per_peer = key.as_ref().map_or(0, |k| open.by_peer.get(k).copied().unwrap_or(0));
        let over = if open.total >= self.limits.max_connections {
            Some(format!("{} connections are open (the most in total)", open.total))
        } else if key.is_some() && per_peer >= self.limits.max_connections_per_peer {
            Some(format!("{per_peer} connections of this peer are open (the most per peer)"))
        } else {
            None
        };
        if let Some(why) = over {
            let n = self.refused.fetch_add(1, Ordering::Relaxed);
            if n % 100 == 0 {
                tracing::warn!(peer = ?key, refused = n + 1, "connection closed: {why}");
            }
            return None;
        }
        open.total += 1;
        if let Some(k) = &key {
            *open.by_peer.entry(k.clone()).or_default() += 1;
        }
        Some(Slot { limiter: self.clone(), key })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.limiter.open.lock().expect("connection counts");
        open.total -= 1;
        if let Some(k) = &self.key {
            if let Some(n) = open.by_peer.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    open.by_peer.remove(k);
                }
            }
        }
    }
}

/// A connection's byte stream (a unix socket, a TLS stream).
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// What handlers learn of a connection's peer (`ConnectInfo<C>`).
pub trait PeerInfo: Clone + Send + Sync + 'static {}
impl<T: Clone + Send + Sync + 'static> PeerInfo for T {}

/// A connection let in: its stream, what handlers learn of its peer (`ConnectInfo<C>`), and
/// its place.
pub struct Admitted<Io, C> {
    pub io: Io,
    pub info: C,
    pub slot: Slot,
}

/// Connections a listener lets in, handed to [`serve`].
pub type Incoming<Io, C> = mpsc::Receiver<Admitted<Io, C>>;

/// Accepts on the unix socket, with each peer's credentials (SO_PEERCRED) as its caller.
pub fn accept_local(
    listener: tokio::net::UnixListener,
    limiter: Arc<ConnectionLimiter>,
) -> (Incoming<tokio::net::UnixStream, super::auth::Caller>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(64);
    let task = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors, say: wait a little rather than spin.
                    tracing::warn!("local socket: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let caller = super::auth::Caller::of_local(&stream);
            let key = (caller.uid != 0).then_some(PeerKey::Uid(caller.uid));
            let Some(slot) = limiter.try_acquire(key) else { continue };
            if tx.send(Admitted { io: stream, info: caller, slot }).await.is_err() {
                return; // serving has ended
            }
        }
    });
    (rx, task)
}

/// Serves `router` on the connections of `incoming` until `shutdown` turns true. Then no more
/// are taken, open ones finish the request in progress (graceful shutdown), and this returns
/// once all have ended.
pub async fn serve<Io: Stream, C: PeerInfo>(
    mut incoming: Incoming<Io, C>,
    router: axum::Router,
    header_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            admitted = incoming.recv() => match admitted {
                Some(a) => {
                    connections.spawn(connection(a, router.clone(), header_timeout, shutdown.clone()));
                }
                None => break,
            },
            _ = stopping(&mut shutdown) => break,
            // Reap finished connections as they go, so the set holds only open ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(incoming);
    while connections.join_next().await.is_some() {}
}

/// Returns once `shutdown` has turned true (its guard is not held across an await).
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}

async fn connection<Io: Stream, C: PeerInfo>(
    admitted: Admitted<Io, C>,
    router: axum::Router,
    header_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let Admitted { io, info, slot } = admitted;
    // Clients keep an idle connection for the next request until just before this closes it.
    let keep_alive = hyper::header::HeaderValue::from_str(&format!("timeout={}", header_timeout.as_secs()))
        .expect("a number is a header value");
    let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ConnectInfo(info.clone()));
        let (req, read_to_end) = TrackedBody::wrap(req);
        let answer = router.clone().oneshot(req);
        let keep_alive = keep_alive.clone();
        async move {
            let mut resp = answer.await?;
            // A body left unread (a route, a path or a token refused before it) ends the
            // connection once answered — hyper cannot find the next request past it — and the
            // answer says so, or the client sends its next request into a closed connection.
            let header = if read_to_end.load(Ordering::Acquire) {
                ("keep-alive", keep_alive)
            } else {
                ("connection", hyper::header::HeaderValue::from_static("close"))
            };
            resp.headers_mut().insert(header.0, header.1);
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(conn);
    let ended = tokio::select! {
        r = conn.as_mut() => r,
        _ = stopping(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        // A header timeout, a client that went away: the connection's business, not the daemon's.
        tracing::debug!("connection ended: {e}");
    }
    drop(slot);
}

/// A request's body that tells whether it was read to its end.
struct TrackedBody {
    inner: hyper::body::Incoming,
    read_to_end: Arc<std::sync::atomic::AtomicBool>,
}

impl TrackedBody {
    fn wrap(
        req: hyper::Request<hyper::body::Incoming>,
    ) -> (hyper::Request<TrackedBody>, Arc<std::sync::atomic::AtomicBool>) {
        use hyper::body::Body;
        let read_to_end = Arc::new(std::sync::atomic::AtomicBool::new(req.body().is_end_stream()));
        let flag = read_to_end.clone();
        (req.map(|inner| TrackedBody { inner, read_to_end: flag }), read_to_end)
    }
}

impl hyper::body::Body for TrackedBody {
    type Data = hyper::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<hyper::body::Bytes>, hyper::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read_to_end.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_per_peer_and_in_total_and_slots_give_their_place_back() {
        let limits =
            ServeLimits { header_timeout: Duration::from_secs(1), max_connections: 3, max_connections_per_peer: 2 };
        let l = ConnectionLimiter::new(limits);
        let a = Some(PeerKey::Uid(1000));
        let s1 = l.try_acquire(a.clone()).unwrap();
        let _s2 = l.try_acquire(a.clone()).unwrap();
        assert!(l.try_acquire(a.clone()).is_none(), "per peer");
        let _root = l.try_acquire(None).unwrap();
        assert!(l.try_acquire(Some(PeerKey::Uid(1001))).is_none(), "in total");
        drop(s1);
        assert!(l.try_acquire(a).is_some());
    }
}
