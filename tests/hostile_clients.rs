//! Issue 51: workloads and local clients that flood what the daemon serves — DNS queries, event
//! streams, log followers, node port connections — must not grow the daemon's memory, its
//! descriptors or its journal without bound. Real daemon, real sockets on loopback.

mod common;

use common::Daemon;
use std::time::Duration;

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A query flood at the DNS responder (names that exist nowhere) logs no line per query at the
/// default level; the per-query lines are at debug.
#[tokio::test]
async fn a_dns_query_flood_does_not_flood_the_log() {
    use hickory_server::proto::op::{Message, Query};
    use hickory_server::proto::rr::{Name, RecordType};
    let port = free_port();
    let mut d = Daemon::start_with("dns-flood", &format!("[services]\ndns = \"127.0.0.1:{port}\"\n"));
    d.env = vec![("STEWARD_LOG".into(), "info".into())];
    d.restart(false);
    let before = d.log().lines().count();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 4096];
    let mut answered = 0;
    for i in 0..3000u16 {
        let mut query = Message::query();
        let name = format!("nothing-{i}.test.steward.");
        query.add_query(Query::query(Name::from_ascii(&name).unwrap(), RecordType::A));
        query.metadata.id = i;
        socket.send_to(&query.to_vec().unwrap(), ("127.0.0.1", port)).unwrap();
        if socket.recv_from(&mut buf).is_ok() {
            answered += 1;
        }
    }
    assert!(answered > 2900, "{answered} of 3000 answered");
    let grown = d.log().lines().count() - before;
    assert!(grown < 10, "{grown} log lines for 3000 queries:\n{}", d.log());
}

/// A figure of the daemon's /proc status in KiB (`VmRSS`, `VmHWM`).
fn proc_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Ten `steward logs -f` of an instance that writes one endless line (100 MB without a
/// newline): each follower reads the file a chunk at a time and gets the line in pieces; the
/// daemon's peak memory stays bounded (it used to re-read the whole file at every look and
/// buffer the unfinished line whole, per follower).
#[tokio::test]
async fn followers_of_an_endless_line_keep_the_daemon_small() {
    let mut d = Daemon::start("logs-endless");
    let config =
        std::fs::read_to_string(&d.config).unwrap().replace("log_max_bytes = 4096", "log_max_bytes = 1073741824");
    std::fs::write(&d.config, config).unwrap();
    d.restart(false);
    let script = "head -c 100000000 /dev/zero | tr '\\0' a; exec sleep 1000";
    let process = serde_json::json!({"startCmd": script});
    d.apply_json(&common::spec("endless", 1, process, serde_json::json!({}))).await;
    let iid = common::id("test", "endless", 0);
    d.wait_state(&iid, steward::supervisor::state::Kind::Running, 30).await;
    let before = proc_kib(d.pid(), "VmRSS");
    let followers: Vec<std::process::Child> = (0..10)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
                .args(["--config", d.config.to_str().unwrap(), "logs", "test/endless/0", "-f"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let log = d.run_dir().join("test.endless.0/sh.stdout.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&log).map_or(0, |m| m.len()) < 100_000_000 {
        assert!(std::time::Instant::now() < deadline, "the workload did not write its line");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(5));
    let peak = proc_kib(d.pid(), "VmHWM");
    for mut f in followers {
        let _ = f.kill();
        let _ = f.wait();
    }
    eprintln!("daemon RSS {before} KiB before ten followers of a 100 MB line, peak {peak} KiB");
    assert!(peak < 200 * 1024, "the daemon's peak was {peak} KiB");
}

/// Event streams from a read-only user are capped per user and in all (they used to be capped
/// only as connections, 64 per user, each loading 1,000 events up front): the one over the
/// cap is refused with 429 naming it, root still gets one under the per-user cap, and a
/// closed stream gives its slot back.
#[tokio::test]
async fn event_streams_are_capped_per_user_and_per_daemon() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    let mut d = Daemon::start("event-streams");
    let config = std::fs::read_to_string(&d.config).unwrap()
        + "allow_read_for_all = true\n[connections]\nmax_streams = 6\nmax_streams_per_peer = 3\n[events]\nheartbeat_secs = 1\n";
    std::fs::write(&d.config, config).unwrap();
    d.restart(false);
    // A stream opened as root (here), or as another user (python3 through runuser: the daemon
    // reads the peer's credentials), left unread; its status line.
    let open_as = |user: Option<&str>| -> (String, Option<std::process::Child>) {
        let socket = d.socket.to_str().unwrap().to_string();
        match user {
            None => {
                let mut s = UnixStream::connect(&socket).unwrap();
                s.write_all(b"GET /v1/events?since=0 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                let mut status = String::new();
                BufReader::new(s.try_clone().unwrap()).read_line(&mut status).unwrap();
                std::mem::forget(s);
                (status, None)
            }
            Some(u) => {
                let script = format!(
                    "import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.connect({socket:?})\n\
                     s.send(b'GET /v1/events?since=0 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n\
                     print(s.recv(4096).split(b'\\r\\n')[0].decode(),flush=True)\ntime.sleep(60)\n"
                );
                use std::os::unix::process::CommandExt;
                let mut child = std::process::Command::new("runuser")
                    .args(["-u", u, "--", "python3", "-c", &script])
                    .process_group(0)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut status = String::new();
                BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut status).unwrap();
                (status, Some(child))
            }
        }
    };
    let mut children = Vec::new();
    for i in 0..3 {
        let (status, child) = open_as(Some("nobody"));
        assert!(status.contains("200"), "stream {i}: {status}");
        children.push(child.unwrap());
    }
    let (status, child) = open_as(Some("nobody"));
    assert!(status.contains("429"), "the 4th stream of one user: {status}");
    children.extend(child);
    for _ in 0..3 {
        assert!(open_as(None).0.contains("200"));
    }
    let (status, _) = open_as(None);
    assert!(status.contains("429"), "the 7th stream of the daemon: {status}");
    let (code, _, err) = d.cli(&["events", "--since", "0"]);
    assert_ne!(code, 0);
    assert!(err.contains("connections.max_streams"), "{err}");
    // A reader gone gives its slot back (seen at the stream's next heartbeat, 1 s here).
    let mut first = children.remove(0);
    let group = nix::unistd::Pid::from_raw(-(first.id() as i32));
    nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    first.wait().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let (status, child) = open_as(Some("nobody"));
    children.extend(child);
    assert!(status.contains("200"), "after one closed: {status}");
    for mut c in children {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-(c.id() as i32)), nix::sys::signal::Signal::SIGKILL);
        let _ = c.wait();
    }
}

/// The fuzz target of the event path (`steward::fuzz::event_body`, also run by libFuzzer from
/// `fuzz/`), on stable: 3000 event bodies grown and mutated from real shapes (long strings,
/// many keys, deep nesting, invalid JSON); each journaled within the bound, or as it was.
#[test]
fn the_event_body_fuzz_target_over_mutated_inputs() {
    let mut rng = common::Rng(0x51);
    let mut next = move || rng.next();
    let seeds: Vec<String> = vec![
        r#"{"type":"stateChanged","instance":"a/b/0","message":"ok"}"#.into(),
        format!(r#"{{"type":"hookMeasured","value":"{}"}}"#, "x".repeat(20_000)),
        format!("{{{}\"end\":1}}", (0..500).map(|i| format!("\"k{i}\":\"{}\",", "v".repeat(100))).collect::<String>()),
        format!("{}1{}", "[".repeat(100), "]".repeat(100)),
        format!(r#"{{"list":[{}0]}}"#, "\"abcdefgh\",".repeat(5000)),
        "not json at all \u{1b}[2J".into(),
    ];
    let mut shortened = 0;
    for i in 0..3000 {
        let mut data = seeds[(next() as usize) % seeds.len()].clone().into_bytes();
        for _ in 0..if i % 3 == 0 { 0 } else { 1 + next() % 3 } {
            let at = (next() as usize) % (data.len() + 1);
            match next() % 3 {
                0 if at < data.len() => data[at] = next() as u8,
                1 => data.truncate(at),
                _ => {
                    let piece: Vec<u8> = data[at..].iter().take(200).copied().collect();
                    for _ in 0..next() % 100 {
                        data.extend_from_slice(&piece);
                    }
                }
            }
        }
        if steward::fuzz::event_body(&data) {
            shortened += 1;
        }
    }
    assert!(shortened > 100, "{shortened} of 3000 were over the bound");
}
