//! Real forking daemons from Debian packages under the supervisor: nginx (pidfile,
//! `nginx -s reload`, `nginx -s quit`) and redis-server (`--daemonize yes --pidfile`).
//! scripts/install-deps.sh installs both.

mod common;

use common::{alive, id, spec, wait_gone, Daemon};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use steward::supervisor::state::{Kind, State};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn http_get(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The children of `pid` (nginx's workers).
fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    out.sort();
    out
}

#[tokio::test]
async fn nginx_runs_reloads_and_quits() {
    let d = Daemon::start("nginx");
    let port = free_port();
    let conf = d.path().join("nginx.conf");
    let scratch = d.path().join("nginx-tmp");
    std::fs::create_dir_all(&scratch).unwrap();
    let pid_file = d.run_dir().join("test.web.0/nginx.pid");
    std::fs::write(
        &conf,
        format!(
            "daemon on;\nmaster_process on;\nworker_processes 1;\npid {pid};\nerror_log {tmp}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {tmp}/body;\n  proxy_temp_path {tmp}/proxy;\n  \
             fastcgi_temp_path {tmp}/fastcgi;\n  uwsgi_temp_path {tmp}/uwsgi;\n  scgi_temp_path {tmp}/scgi;\n  \
             server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"hello from nginx\\n\"; }} }}\n}}\n",
            pid = pid_file.display(),
            tmp = scratch.display(),
        ),
    )
    .unwrap();
    let conf = conf.display().to_string();
    let s = spec(
        "web",
        1,
        json!({
            "procName": "nginx",
            "startCmd": format!("nginx -c {conf}"),
            "stopCmd": format!("nginx -c {conf} -s quit"),
            "reloadCmd": format!("nginx -c {conf} -s reload"),
            "pidFile": "${run_base_dir}/${namespace}.${processname}.${instanceid}/nginx.pid",
            "startGracePeriod": 5
        }),
        json!({"killPolicy": {"gracePeriod": 5}}),
    );
    d.apply_json(&s).await;
    let iid = id("test", "web", 0);
    let st = d.wait_state(&iid, Kind::Running, 20).await;
    let master = st.pid.unwrap();
    assert_eq!(std::fs::read_to_string(format!("/proc/{master}/comm")).unwrap().trim(), "nginx");
    assert!(http_get(port).unwrap().contains("hello from nginx"));
    let workers_before = children(master);
    assert_eq!(workers_before.len(), 1, "one worker");

    // Reload: same master, new worker, still serving.
    let st = d.client.action(&iid, "reload", Some(10.0)).await.unwrap();
    assert_eq!(st.state, State::Running);
    assert_eq!(st.pid, Some(master));
    let mut workers_after = children(master);
    for _ in 0..100 {
        if !workers_after.is_empty() && workers_after != workers_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        workers_after = children(master);
    }
    assert_ne!(workers_after, workers_before, "reload replaced the worker");
    assert!(http_get(port).unwrap().contains("hello from nginx"));

    // Quit through stopCmd: everything of the instance goes, before the grace period ends.
    let t = std::time::Instant::now();
    let st = d.client.action(&iid, "stop", Some(20.0)).await.unwrap();
    assert_eq!(st.state, State::Stopped);
    assert!(t.elapsed() < Duration::from_secs(5), "nginx -s quit ended it: {:?}", t.elapsed());
    assert!(wait_gone(master, 5).await);
    assert!(d.cgroup_pids(&iid).is_empty());
    assert!(http_get(port).is_none(), "the port is closed");
}

fn redis_ping(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"PING\r\n").ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).to_string())
}

#[tokio::test]
async fn redis_daemonizes_is_restarted_after_a_crash_and_stops() {
    let d = Daemon::start("redis");
    let port = free_port();
    let s = spec(
        "kv",
        1,
        json!({
            "procName": "redis-server",
            "pidFile": "${run_base_dir}/${namespace}.${processname}.${instanceid}/redis.pid",
            "startCmd": format!(
                "redis-server --daemonize yes --pidfile ${{pidFile}} --port {port} --bind 127.0.0.1 \
                 --dir ${{workPath}} --save '' --appendonly no --logfile ${{workPath}}/redis.log"
            ),
            "startGracePeriod": 5
        }),
        json!({"restartPolicy": {"policy": "OnFailure", "interval": 0}}),
    );
    d.apply_json(&s).await;
    let iid = id("test", "kv", 0);
    let st = d.wait_state(&iid, Kind::Running, 20).await;
    let pid = st.pid.unwrap();
    assert!(redis_ping(port).unwrap().starts_with("+PONG"));

    // A crash (kill -9) is seen at once and restarted with a new pid.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let st = d.wait(&iid, 20, |s| s.state.kind() == Kind::Running && s.pid.is_some_and(|p| p != pid)).await;
    assert_eq!(st.restarts, 1);
    let new_pid = st.pid.unwrap();
    assert!(alive(new_pid));
    let mut pong = None;
    for _ in 0..50 {
        pong = redis_ping(port);
        if pong.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(pong.unwrap().starts_with("+PONG"));

    // Stop without stopCmd: SIGTERM, and redis shuts down cleanly.
    let st = d.client.action(&iid, "stop", Some(20.0)).await.unwrap();
    assert_eq!(st.state, State::Stopped);
    assert!(wait_gone(new_pid, 5).await);
    assert!(d.cgroup_pids(&iid).is_empty());
}
