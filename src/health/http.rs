//! A plain-HTTP probe with a connection of its own, kept alive between probes: a probe every
//! second of a thousand instances is a thousand requests a second, and a pooled client's
//! per-request work (URL parsing, pool checkout, connector layers) cost more than the request.
//! HTTPS goes through the shared client (see `Prober::http`).

use super::Outcome;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;

/// Bytes read from the connection at a time.
const READ_BUF: usize = 1024;

/// A response body read beyond this is not read: the connection is dropped instead.
const BODY_LIMIT: usize = 64 << 10;

pub struct HttpProbe {
    addr: SocketAddr,
    path: String,
    host: String,
    headers: Vec<(String, String)>,
    conn: tokio::sync::Mutex<Option<SendRequest<Empty<Bytes>>>>,
}

impl HttpProbe {
    /// GET `path` at `addr`; `host`: the Host header (else `addr`).
    pub fn new(addr: SocketAddr, path: &str, host: Option<&str>, headers: &[(String, String)]) -> HttpProbe {
        HttpProbe {
            addr,
            path: path.to_string(),
            host: host.map_or_else(|| addr.to_string(), str::to_string),
            headers: headers.to_vec(),
            conn: Default::default(),
        }
    }

    /// One GET within `timeout`: 200–399 passes. The connection is kept for the next probe
    /// unless anything went wrong. A kept connection the server closed meanwhile (idle
    /// timeouts, servers without keep-alive) is no failure: the GET goes again on a new one.
    pub async fn probe(&self, timeout: Duration) -> Outcome {
        let url = || format!("http://{}{}", self.addr, self.path);
        let mut slot = self.conn.lock().await;
        let result = tokio::time::timeout(timeout, async {
            let kept = slot.as_ref().is_some_and(|s| !s.is_closed());
            match self.get(&mut slot).await {
                Err(_) if kept => {
                    *slot = None;
                    self.get(&mut slot).await
                }
                other => other,
            }
        })
        .await;
        if !matches!(result, Ok(Ok(_))) {
            *slot = None;
        }
        match result {
            Ok(Ok(status)) if (200..400).contains(&status) => Outcome::Pass,
            Ok(Ok(status)) => Outcome::Fail(format!("GET {}: HTTP {status}{}", url(), reason(status))),
            Ok(Err(e)) => Outcome::Fail(format!("GET {}: {e}", url())),
            Err(_) => Outcome::Fail(format!("GET {}: no answer within {}s", url(), timeout.as_secs())),
        }
    }

    /// The GET's status, on the kept connection or a new one.
    async fn get(&self, slot: &mut Option<SendRequest<Empty<Bytes>>>) -> Result<u16, String> {
        if slot.as_ref().is_none_or(|s| s.is_closed()) {
            *slot = Some(self.connect().await?);
        }
        let sender = slot.as_mut().expect("connected above");
        sender.ready().await.map_err(|e| root_cause(&e))?;
        let mut request = hyper::Request::get(self.path.as_str()).header(hyper::header::HOST, self.host.as_str());
        for (k, v) in &self.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let request = request.body(Empty::new()).map_err(|e| e.to_string())?;
        let response = sender.send_request(request).await.map_err(|e| root_cause(&e))?;
        let status = response.status().as_u16();
        // Read to its end, so that the connection can carry the next request.
        let mut body = response.into_body();
        let mut read = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| root_cause(&e))?;
            read += frame.data_ref().map_or(0, Bytes::len);
            if read > BODY_LIMIT {
                *slot = None;
                break;
            }
        }
        Ok(status)
    }

    async fn connect(&self) -> Result<SendRequest<Empty<Bytes>>, String> {
        let stream = tokio::net::TcpStream::connect(self.addr).await.map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        // A probe's answers are small: a small read buffer keeps a thousand kept connections
        // light (hyper's default starts at 8 KiB and grows).
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .read_buf_exact_size(Some(READ_BUF))
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| root_cause(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }
}

fn reason(status: u16) -> String {
    hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map_or_else(String::new, |r| format!(" {r}"))
}

fn root_cause(e: &dyn std::error::Error) -> String {
    super::root_cause(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// An HTTP/1.1 server on 127.0.0.1 answering `status` to every request, counting the
    /// connections it accepted and keeping each request's head; `close` closes every connection
    /// after its answer.
    async fn server(status: u16, close: bool) -> (SocketAddr, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, heads) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
        let (a, h) = (accepted.clone(), heads.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                a.fetch_add(1, Ordering::SeqCst);
                let h = h.clone();
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    let mut head = String::new();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if !line.is_empty() {
                            head.push_str(&line);
                            head.push('\n');
                            continue;
                        }
                        h.lock().unwrap().push(std::mem::take(&mut head));
                        let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nok");
                        write.write_all(answer.as_bytes()).await.unwrap();
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted, heads)
    }

    #[tokio::test]
    async fn probes_share_one_kept_connection_with_host_and_headers() {
        let (addr, accepted, heads) = server(200, false).await;
        let headers = [("X-Probe".to_string(), "1".to_string())];
        let probe = HttpProbe::new(addr, "/ready", Some("web.local"), &headers);
        for _ in 0..3 {
            assert_eq!(probe.probe(Duration::from_secs(1)).await, Outcome::Pass);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for three probes");
        let heads = heads.lock().unwrap();
        assert_eq!(heads.len(), 3);
        let head = heads[0].to_ascii_lowercase();
        assert!(head.starts_with("get /ready http/1.1\n"), "{head}");
        assert!(head.contains("host: web.local\n") && head.contains("x-probe: 1\n"), "{head}");
    }

    #[tokio::test]
    async fn a_closed_connection_is_made_again_and_a_bad_status_fails() {
        let (addr, accepted, _) = server(200, true).await;
        let probe = HttpProbe::new(addr, "/", None, &[]);
        // No pause between: the close may not have been seen when the next probe goes.
        for _ in 0..5 {
            assert_eq!(probe.probe(Duration::from_secs(1)).await, Outcome::Pass);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 5, "the server closes each one");
        let (addr, _, _) = server(503, false).await;
        let probe = HttpProbe::new(addr, "/", None, &[]);
        match probe.probe(Duration::from_secs(1)).await {
            Outcome::Fail(why) => assert!(why.contains("HTTP 503 Service Unavailable"), "{why}"),
            Outcome::Pass => panic!("503 passed"),
        }
        let nothing = HttpProbe::new(SocketAddr::from(([127, 0, 0, 1], 1)), "/", None, &[]);
        assert!(matches!(nothing.probe(Duration::from_secs(1)).await, Outcome::Fail(_)));
    }
}
