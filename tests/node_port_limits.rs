//! Issue 51 finding 6: the userspace proxy's connections are bounded per node port and overall,
//! so a flood of connections to node ports cannot take the daemon's descriptors. The daemon's
//! descriptor limit is lowered (prlimit) to what the flood would pass without the caps: while
//! the flood is held the daemon still starts an instance and answers `steward ls`, and once it
//! is released the node ports forward again.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use steward::protocol::{AppEndpoints, Endpoint, ServiceEntry};
use steward::spec::model::{Protocol, ServiceType};
use steward::supervisor::state::Kind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PER_PORT: usize = 10;
const OVERALL: usize = 15;
/// Connections opened to each node port (many more than the caps).
const FLOOD: usize = 200;
/// The daemon's descriptor limit during the flood: enough for its own work, not for the flood.
const NOFILE: usize = 384;

/// An echo server on loopback; counts the connections it accepted.
async fn echo_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, accepted)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port()
}

/// test/flood's endpoints: one TCP NodePort service per node port, all to `upstream`.
fn endpoints(node_ports: &[u16], upstream: u16) -> AppEndpoints {
    let services = node_ports
        .iter()
        .enumerate()
        .map(|(i, np)| ServiceEntry {
            service: format!("s{i}"),
            kind: ServiceType::NodePort,
            export: true,
            protocol: Protocol::Tcp,
            port: 80 + i as u16,
            node_port: Some(*np),
            target: "http".into(),
            cluster_ip: None,
        })
        .collect();
    AppEndpoints {
        namespace: "test".into(),
        name: "flood".into(),
        revision: 1,
        updated_ms: 1_700_000_000_000,
        ports: [(
            "http".to_string(),
            vec![Endpoint { ip: "127.0.0.1".into(), port: upstream, node: "h".into(), instance: 0 }],
        )]
        .into(),
        services,
        port_protocols: Default::default(),
        ordinals: None,
        pod_names: None,
    }
}

/// One round trip through `port`.
async fn echoes(port: u16) -> bool {
    let trip = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.ok()?;
        Some(&buf == b"ping")
    };
    tokio::time::timeout(Duration::from_secs(2), trip).await.ok().flatten() == Some(true)
}

async fn wait_echoes(port: u16, secs: u64, log: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !echoes(port).await {
        assert!(Instant::now() < deadline, "node port {port} does not forward\n{}", log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Whether the proxy closed `s` (EOF or reset) by `deadline`.
async fn closed(s: &mut TcpStream, deadline: tokio::time::Instant) -> bool {
    let mut buf = [0u8; 16];
    matches!(tokio::time::timeout_at(deadline, s.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_on_node_ports_leaves_the_daemon_its_descriptors() {
    let (upstream, accepted) = echo_server().await;
    let extra = format!(
        "[services]\nnode_ports = \"userspace\"\nproxy_max_connections = {OVERALL}\n\
         proxy_max_connections_per_port = {PER_PORT}\n"
    );
    let d = Daemon::start_with("nplimits", &extra);
    let node_ports = [free_port(), free_port()];
    d.client.put_endpoints(&endpoints(&node_ports, upstream)).await.unwrap();
    for np in node_ports {
        wait_echoes(np, 10, || d.log()).await;
    }
    let pid = d.pid();
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={NOFILE}:{NOFILE}")])
        .status()
        .unwrap();
    assert!(status.success(), "prlimit");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let baseline = open_fds(pid);
    let upstream_before = accepted.load(Ordering::Relaxed);

    // The flood: every connection held open.
    let mut held = Vec::new();
    for np in node_ports {
        for _ in 0..FLOOD {
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(("127.0.0.1", np))).await
            {
                held.push(s);
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = open_fds(pid);
    let forwarded = accepted.load(Ordering::Relaxed) - upstream_before;
    let mut refused = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    for s in &mut held {
        if closed(s, deadline).await {
            refused += 1;
        }
    }
    eprintln!(
        "figures: limit {NOFILE}, baseline {baseline} fds, during the flood {during} fds; {} connections \
         opened, {forwarded} forwarded, {refused} closed by the proxy",
        held.len()
    );
    let margin = 16;
    assert!(during <= baseline + 2 * OVERALL + margin, "daemon holds {during} descriptors (baseline {baseline})");
    assert!(forwarded <= OVERALL, "{forwarded} connections forwarded, the overall cap is {OVERALL}");

    // The daemon's own work goes on.
    let after = spec("after", 1, json!({}), json!({}));
    let apply = d.apply_json(&after);
    tokio::time::timeout(Duration::from_secs(30), apply).await.expect("the API answers during the flood");
    d.wait_state(&id("test", "after", 0), Kind::Running, 30).await;
    let (code, out, err) = d.cli(&["ls"]);
    assert_eq!(code, 0, "steward ls during the flood: {out}\n{err}");
    assert!(out.contains("after"), "{out}");
    let log = d.log();
    let refusals = log.lines().filter(|l| l.contains("over its cap")).count();
    assert!((1..=4).contains(&refusals), "refusals are logged rate-limited, {refusals} lines:\n{log}");

    // Released, the node ports forward again.
    drop(held);
    for np in node_ports {
        wait_echoes(np, 10, || d.log()).await;
    }
    eprintln!("figures: after the release {} fds", open_fds(pid));
}
