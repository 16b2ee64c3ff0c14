//! The remote listener on loopback, with the real stewardd and `steward cert`: TLS only, bearer
//! tokens with read/write rights, rate and body limits, and the event stream's heartbeats,
//! retention (410) and resume.

mod common;

use common::remote::{cert, free_port, start, READ_TOKEN, TOKEN};
use common::{id, spec};
use serde_json::json;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};
use steward::client::{Client, ClientError, StreamLine};
use steward::spec::Format;

fn api_status(e: &ClientError) -> Option<(u16, String)> {
    match e {
        ClientError::Api { status, code, .. } => Some((*status, code.clone())),
        _ => None,
    }
}

#[tokio::test]
async fn wrong_token_plain_tcp_and_wrong_ca_are_refused() {
    let r = start("remote-auth", "");
    // The right token reads and writes, like the unix socket.
    let c = r.client(TOKEN);
    assert_eq!(c.health().await.unwrap().status, "ok");
    let web = spec("web", 1, json!({}), json!({}));
    assert_eq!(c.apply(&web.to_string(), Format::Json).await.unwrap(), ["test/web/0"]);
    assert_eq!(c.list(&[]).await.unwrap().len(), 1);

    // A wrong or missing token: 401, nothing done.
    let e = r.client("wrong-token-0123456789abcdef").list(&[]).await.unwrap_err();
    assert_eq!(api_status(&e), Some((401, "unauthorized".into())), "{e}");
    let e = r.client("").health().await.unwrap_err();
    assert_eq!(api_status(&e), Some((401, "unauthorized".into())), "{e}");
    // A read token reads but may not change anything.
    let ro = r.client(READ_TOKEN);
    assert_eq!(ro.list(&[]).await.unwrap().len(), 1);
    let e = ro.delete(&id("test", "web", 0), Some(10.0)).await.unwrap_err();
    assert_eq!(api_status(&e), Some((403, "forbidden".into())), "{e}");
    assert_eq!(c.list(&[]).await.unwrap().len(), 1);

    // Plain HTTP on the TLS port: no HTTP answer, the connection is closed.
    let mut plain = std::net::TcpStream::connect(&r.addr).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain
        .write_all(format!("GET /v1/instances HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\n\r\n").as_bytes())
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!String::from_utf8_lossy(&answer).contains("HTTP/1.1 200"), "plain HTTP was served: {answer:?}");
    assert!(!String::from_utf8_lossy(&answer).contains("test/web"), "plain HTTP leaked data");

    // A client that trusts another CA refuses the daemon's certificate.
    let other = tempfile::tempdir().unwrap();
    cert(other.path(), "other");
    let tls = steward::tls::client_config(&other.path().join("ca.pem")).unwrap();
    let e = Client::remote(&r.addr, None, tls, TOKEN).unwrap().health().await.unwrap_err();
    assert!(matches!(e, ClientError::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    // The certificate is for 127.0.0.1, not for another name.
    let tls = steward::tls::client_config(&r.certs.join("ca.pem")).unwrap();
    let e = Client::remote(&r.addr, Some("elsewhere"), tls, TOKEN).unwrap().health().await.unwrap_err();
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    assert!(r.daemon.log().contains("TLS handshake failed"), "refusals are logged");
}

#[tokio::test]
async fn rate_and_body_limits_answer_in_the_error_shape() {
    let r = start("remote-limits", "rate_per_sec = 0.5\nrate_burst = 3\nmax_body_bytes = 2000\n");
    let c = r.client(TOKEN);
    for _ in 0..3 {
        c.health().await.unwrap();
    }
    let e = c.health().await.unwrap_err();
    assert_eq!(api_status(&e), Some((429, "rate_limited".into())), "{e}");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // Refilled: one more request, over the body limit.
    let mut big = spec("big", 1, json!({}), json!({}));
    big["metadata"]["labels"] = json!({"pad": "x".repeat(3000)});
    let e = c.apply(&big.to_string(), Format::Json).await.unwrap_err();
    assert_eq!(api_status(&e), Some((413, "too_large".into())), "{e}");
    // The unix socket keeps its own (1 MiB) limit and no rate limit.
    for _ in 0..5 {
        r.daemon.client.health().await.unwrap();
    }
    r.daemon.client.apply(&big.to_string(), Format::Json).await.unwrap();
}

#[tokio::test]
async fn event_stream_heartbeats_retention_and_resume() {
    let r = start("remote-events", "[events]\nretention = 4\nprune_secs = 1\nheartbeat_secs = 1\n");
    let c = r.client(TOKEN);
    let web = spec("web", 3, json!({}), json!({}));
    c.apply(&web.to_string(), Format::Json).await.unwrap();
    for i in 0..3 {
        r.daemon.wait_state(&id("test", "web", i), steward::supervisor::state::Kind::Running, 20).await;
    }
    // Pruned down to the newest 4.
    let deadline = Instant::now() + Duration::from_secs(10);
    let node = loop {
        let node = serde_json::to_value(c.node().await.unwrap()).unwrap();
        let (first, last) = (node["events"]["firstSeq"].as_u64().unwrap(), node["events"]["lastSeq"].as_u64().unwrap());
        if last > 4 && first == last - 3 {
            break node;
        }
        assert!(Instant::now() < deadline, "not pruned: {node}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let last = node["events"]["lastSeq"].as_u64().unwrap();
    assert_eq!(node["events"]["retention"], 4);
    assert_eq!(node["hostname"].as_str(), Some(steward::host::hostname().as_str()));
    assert_eq!(node["apps"][0]["name"], "web");
    assert_eq!(node["apps"][0]["instances"].as_array().unwrap().len(), 3);
    assert!(node["memoryUsedBytes"].as_u64().unwrap() > 0);

    // since=0 wants events that are gone: 410 naming since.
    let e = c.events(0, false, |_| true).await.unwrap_err();
    assert_eq!(api_status(&e), Some((410, "since_pruned".into())), "{e}");
    assert!(e.to_string().contains("events.retention 4"), "{e}");
    // From the oldest kept: everything, in order, no gap.
    let mut seqs = Vec::new();
    c.events(last - 4, false, |ev| {
        seqs.push(ev.seq);
        true
    })
    .await
    .unwrap();
    assert_eq!(seqs, ((last - 3)..=last).collect::<Vec<_>>());

    // An idle followed stream carries heartbeats; a new event arrives on it after them.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let follower = tokio::spawn({
        let c = c.clone();
        async move {
            c.event_stream(last, true, move |line| tx.send(line).is_ok()).await.unwrap();
        }
    });
    let first = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    match first {
        StreamLine::Heartbeat { heartbeat } => assert_eq!(heartbeat.last_seq, last),
        other => panic!("expected a heartbeat first, got {other:?}"),
    }
    r.daemon.client.action(&id("test", "web", 0), "restart", Some(20.0)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let next = loop {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap() {
            StreamLine::Event(ev) => break ev,
            StreamLine::Heartbeat { .. } => assert!(Instant::now() < deadline),
        }
    };
    assert_eq!(next.seq, last + 1, "the stream resumes right after since");
    follower.abort();
}

/// The daemon's end of every established connection to its listener on `port`.
fn established_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X} ");
    // Columns: sl local_address rem_address st ...; 01 is ESTABLISHED.
    table
        .lines()
        .skip(1)
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|a| format!("{a} ").ends_with(&local)))
        .filter(|l| l.split_whitespace().nth(3) == Some("01"))
        .count()
}

/// A client keeps its connection to a daemon between requests (a scheduler asks a thousand
/// hosts many times a second: a handshake per request cost more than the request), for as long
/// as the daemon's `keep-alive` says, and never more than a few idle ones.
#[tokio::test]
async fn a_client_keeps_its_connection_between_requests() {
    let r = start("remote-keep", "[connections]\nheader_timeout_secs = 3\n");
    let port: u16 = r.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let c = r.client(TOKEN);
    for _ in 0..30 {
        c.health().await.unwrap();
        // A clone shares its connections.
        c.clone().list(&[]).await.unwrap();
    }
    assert_eq!(established_to(port), 1, "60 requests one after another, one connection");
    // Twenty at once: no more than four are kept once they are answered.
    let at_once: Vec<_> = (0..20).map(|_| c.list(&[])).collect();
    for r in futures_util::future::join_all(at_once).await {
        r.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(established_to(port) <= 4, "{} kept", established_to(port));
    // Past the daemon's keep-alive (3 s, so kept 2 s): a new connection, no error.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(established_to(port), 0, "the daemon closed what it no longer keeps");
    for _ in 0..5 {
        c.health().await.unwrap();
    }
    assert_eq!(established_to(port), 1);
}

/// A tokens file that cannot be used (open to others) or a certificate that is not there are
/// configuration errors: exit 2, as documented (systemd does not restart it in a loop).
#[test]
fn a_bad_tokens_file_or_certificate_exits_2() {
    let certs = tempfile::tempdir().unwrap();
    cert(certs.path(), "node");
    let tokens = certs.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (what, cert_file) in [("an open tokens file", "node.pem"), ("a missing certificate", "none.pem")] {
        if cert_file == "none.pem" {
            std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("stewardd.toml");
        std::fs::write(
            &config,
            format!(
                "work_base_dir = \"{0}/work\"\nrun_base_dir = \"{0}/run\"\nstate_dir = \"{0}/state\"\nsocket = \"{0}/s.sock\"\n\
                 cgroup_parent = \"steward-test-badtokens-{3}\"\n\
                 [remote]\nlisten = \"127.0.0.1:{4}\"\ncert = \"{1}/{5}\"\nkey = \"{1}/node-key.pem\"\ntokens_file = \"{2}\"\n",
                dir.path().display(),
                certs.path().display(),
                tokens.display(),
                std::process::id(),
                free_port(),
                cert_file
            ),
        )
        .unwrap();
        let out =
            std::process::Command::new(env!("CARGO_BIN_EXE_stewardd")).arg("--config").arg(&config).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains("remote."), "{what}: names the setting: {err}");
    }
}
