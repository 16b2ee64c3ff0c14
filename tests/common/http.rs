//! A plain HTTP/1.1 server on 127.0.0.1 for tests: hook endpoints, readiness targets.

use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTP/1.1 server on 127.0.0.1 answering every request with `body()`; returns its port.
pub async fn serve(body: impl Fn() -> String + Send + Sync + 'static) -> u16 {
    serve_targets(move |_| body()).await
}

/// As [`serve`], the answer made from the request's target (`/check?pod=...`): a test sees
/// what it was called with.
pub async fn serve_targets(body: impl Fn(&str) -> String + Send + Sync + 'static) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = Arc::new(body);
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else { return };
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                // `GET /target HTTP/1.1`
                let target = request.lines().next().and_then(|l| l.split(' ').nth(1)).unwrap_or_default();
                let text = body(target);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}
