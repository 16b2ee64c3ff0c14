//! The remote listener: the same /v1 API on TCP, TLS only, for the scheduler. Every request
//! carries a bearer token from the root-only tokens file (compared in constant time), is
//! rate-limited per client address and size-limited; then it is served by the same router as
//! the unix socket, as a caller with the token's rights.

use super::auth::{Caller, TokenRole};
use super::error::ApiError;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("remote.tokens_file {path}: {message}")]
    Tokens { path: PathBuf, message: String },
    #[error("remote.cert / remote.key: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("remote.listen {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// The accepted tokens, as SHA-256 digests (so comparing them takes the same time whatever
/// the presented token's length), with their rights.
#[derive(Debug, Default)]
pub struct Tokens(Vec<([u8; 32], TokenRole)>);

impl Tokens {
    /// Reads the tokens file: one token per line, optionally followed by `read` or `write`
    /// (the default); blank lines and `#` comments are skipped. The file must belong to root
    /// (or to the daemon's user) and be closed to group and others.
    pub fn load(path: &Path) -> Result<Tokens, RemoteError> {
        use std::os::unix::fs::MetadataExt;
        let err = |message: String| RemoteError::Tokens { path: path.to_path_buf(), message };
        let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != 0 && meta.uid() != me {
            return Err(err(format!("must be owned by root, owner is uid {}", meta.uid())));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(err(format!(
                "must be readable by its owner only (mode 0600), mode is {:04o}",
                meta.mode() & 0o7777
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let mut tokens = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let token = words.next().unwrap_or_default();
            let role = match words.next() {
                None | Some("write") => TokenRole::Write,
                Some("read") => TokenRole::Read,
                Some(other) => return Err(err(format!("line {}: {other:?} is not read or write", n + 1))),
            };
            if words.next().is_some() {
                return Err(err(format!("line {}: expected TOKEN [read|write]", n + 1)));
            }
            if token.len() < 16 {
                return Err(err(format!("line {}: a token must have at least 16 characters", n + 1)));
            }
            tokens.push((Sha256::digest(token.as_bytes()).into(), role));
        }
        if tokens.is_empty() {
            return Err(err("holds no token".into()));
        }
        Ok(Tokens(tokens))
    }

    /// The rights of `presented`, comparing it with every token in constant time.
    pub fn check(&self, presented: &str) -> Option<TokenRole> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for (known, role) in &self.0 {
            if bool::from(known.ct_eq(&digest)) {
                found = Some(*role);
            }
        }
        found
    }
}

/// A token bucket per client address.
#[derive(Debug)]
pub struct RateLimiter {
    per_sec: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn new(per_sec: f64, burst: u32) -> RateLimiter {
        RateLimiter { per_sec, burst: f64::from(burst), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one request's token for `ip`; when there is none, how long until there is.
    pub fn take(&self, ip: IpAddr) -> Result<(), Duration> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("rate limiter lock");
        if buckets.len() > 10_000 {
            // Forget addresses whose bucket has refilled: they are back to a full burst anyway.
            let full = Duration::from_secs_f64(self.burst / self.per_sec);
            buckets.retain(|_, (_, at)| now.duration_since(*at) < full);
        }
        let (tokens, at) = buckets.entry(ip).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.per_sec).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.per_sec))
        }
    }
}

/// What the remote middleware checks each request against.
#[derive(Debug)]
pub struct Guard {
    pub tokens: RwLock<Tokens>,
    pub tokens_file: PathBuf,
    pub limiter: RateLimiter,
    pub max_body: usize,
}

impl Guard {
    pub fn new(config: &crate::config::RemoteConfig) -> Result<Guard, RemoteError> {
        Ok(Guard {
            tokens: RwLock::new(Tokens::load(&config.tokens_file)?),
            tokens_file: config.tokens_file.clone(),
            limiter: RateLimiter::new(config.rate_per_sec, config.rate_burst),
            max_body: config.max_body_bytes,
        })
    }

    /// SIGHUP: re-reads the tokens file; a bad file keeps the tokens in use.
    pub fn reload_tokens(&self) {
        match Tokens::load(&self.tokens_file) {
            Ok(t) => *self.tokens.write().expect("tokens lock") = t,
            Err(e) => tracing::error!("keeping the current tokens: {e}"),
        }
    }
}

/// The peer of a remote connection.
#[derive(Debug, Clone, Copy)]
pub struct RemotePeer(pub SocketAddr);

/// Rate limit, size limit and token check; the request then runs as a [`Caller`] with the
/// token's rights.
pub async fn guard(
    State(guard): State<Arc<Guard>>,
    ConnectInfo(peer): ConnectInfo<RemotePeer>,
    mut req: Request,
    next: Next,
) -> Response {
    if let Err(wait) = guard.limiter.take(peer.0.ip()) {
        let retry = wait.as_secs().max(1).to_string();
        let e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", "too many requests from this address");
        return ([(header::RETRY_AFTER, retry)], e).into_response();
    }
    let length = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if length.is_some_and(|l| l > guard.max_body) {
        let message = format!("the body is over {} bytes (remote.max_body_bytes)", guard.max_body);
        return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message).into_response();
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let role = presented.and_then(|t| guard.tokens.read().expect("tokens lock").check(t));
    let Some(role) = role else {
        let message =
            if presented.is_some() { "the bearer token is not accepted" } else { "a bearer token is required" };
        tracing::info!(peer = %peer.0, "remote request refused: {message}");
        let e = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
        return ([(header::WWW_AUTHENTICATE, "Bearer")], e).into_response();
    };
    req.extensions_mut().insert(ConnectInfo(Caller::remote(role)));
    next.run(req).await
}

/// Accepts TCP connections and hands them to [`super::serve::serve`] once their TLS handshake
/// is done. A connection takes its place among the listener's (per address and in total) as it
/// is accepted, before the handshake: a flood of silent connections is capped too. Handshakes run
/// in their own tasks, so a slow or silent client holds up no one else.
pub async fn accept_tls(
    addr: SocketAddr,
    config: Arc<rustls::ServerConfig>,
    limiter: Arc<super::serve::ConnectionLimiter>,
) -> Result<(super::serve::Incoming<TlsStream<TcpStream>, RemotePeer>, tokio::task::JoinHandle<()>), RemoteError> {
    use super::serve::{Admitted, PeerKey};
    let tcp = TcpListener::bind(addr).await.map_err(|source| RemoteError::Bind { addr, source })?;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let handshake_timeout = limiter.limits().header_timeout;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let accepting = tokio::spawn(async move {
        loop {
            let (stream, peer) = match tcp.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("remote listener: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Some(slot) = limiter.try_acquire(Some(PeerKey::Ip(peer.ip()))) else { continue };
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Admitted { io: tls, info: RemotePeer(peer), slot }).await;
                    }
                    Ok(Err(e)) => tracing::info!(%peer, "remote connection refused: TLS handshake failed: {e}"),
                    Err(_) => tracing::info!(%peer, "remote connection dropped: no TLS handshake in time"),
                }
            });
        }
    });
    Ok((rx, accepting))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tokens_file(text: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn tokens_are_checked_with_their_rights() {
        let (_d, path) = tokens_file("# scheduler\nabcdefghijklmnop0123\nreadonly-token-4567 read\n", 0o600);
        let t = Tokens::load(&path).unwrap();
        assert_eq!(t.check("abcdefghijklmnop0123"), Some(TokenRole::Write));
        assert_eq!(t.check("readonly-token-4567"), Some(TokenRole::Read));
        assert_eq!(t.check("abcdefghijklmnop012"), None);
        assert_eq!(t.check(""), None);
    }

    #[test]
    fn open_or_empty_or_short_token_files_are_refused() {
        let (_d, path) = tokens_file("abcdefghijklmnop0123\n", 0o644);
        assert!(Tokens::load(&path).unwrap_err().to_string().contains("mode is 0644"));
        let (_d, path) = tokens_file("# nothing\n", 0o600);
        assert!(Tokens::load(&path).unwrap_err().to_string().contains("no token"));
        let (_d, path) = tokens_file("short\n", 0o600);
        assert!(Tokens::load(&path).unwrap_err().to_string().contains("16 characters"));
        let (_d, path) = tokens_file("abcdefghijklmnop0123 admin\n", 0o600);
        assert!(Tokens::load(&path).unwrap_err().to_string().contains("\"admin\""));
    }

    #[test]
    fn rate_limiter_allows_a_burst_then_refuses() {
        let r = RateLimiter::new(1.0, 3);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..3 {
            r.take(ip).unwrap();
        }
        let wait = r.take(ip).unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1));
        r.take("10.0.0.2".parse().unwrap()).unwrap();
    }
}
