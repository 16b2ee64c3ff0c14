//! The example workload under units/packages/gamesvc, exercised for real: start.sh daemonizes the
//! Perl server, which writes its own pidfile; the HTTP routes, check.sh, reload.sh, the refusal to
//! start twice and the idempotent stop.sh are all checked against the live process.
//! Needs only what a plain Debian host has: sh, bash, coreutils and perl-base.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Ran {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `dir/script args...` with cwd = `dir`. Output goes to files, not pipes, so a background
/// grandchild that kept a pipe open could never hang the test; a script running longer than
/// `limit` is killed and reported as a failure.
fn run(dir: &Path, script: &str, args: &[&str], limit: Duration) -> Ran {
    let out = dir.join(format!(".{script}.out"));
    let err = dir.join(format!(".{script}.err"));
    let start = Instant::now();
    let mut child = Command::new(dir.join(script))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {script}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{script} {args:?} did not finish within {limit:?}");
        }
        sleep(Duration::from_millis(20));
    };
    let ran = Ran {
        code: status.code(),
        stdout: fs::read_to_string(&out).unwrap_or_default(),
        stderr: fs::read_to_string(&err).unwrap_or_default(),
        took: start.elapsed(),
    };
    eprintln!("$ {script} {} -> {:?}\n{}{}", args.join(" "), ran.code, ran.stdout, ran.stderr);
    ran
}

/// A raw HTTP/1.0 GET; returns (status code, body).
fn get(port: u16, path: &str) -> (u16, String) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect to gamesvr");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read response");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end in {raw:?}"));
    let status_line = head.lines().next().unwrap_or("");
    let mut parts = status_line.split_whitespace();
    assert!(parts.next().is_some_and(|v| v.starts_with("HTTP/1.")), "bad status line {status_line:?}");
    let code = parts.next().and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("bad status {status_line:?}"));
    (code, body.to_string())
}

/// Alive = /proc/PID exists and is not a zombie (the server's parent is gone, so it may linger as a
/// zombie until init reaps it).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X") | None)
        }
        Err(_) => false,
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        sleep(Duration::from_millis(50));
    }
}

/// Kills every process whose cwd is the test's directory (that is the server, wherever its pid
/// went), so a failing test leaves nothing behind; prints the server's log when the test failed.
struct Guard {
    dir: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = fs::read_to_string(self.dir.join("gamesvr.log")).unwrap_or_default();
            eprintln!("--- gamesvr.log ---\n{log}-------------------");
        }
        let Ok(procs) = fs::read_dir("/proc") else { return };
        for entry in procs.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            if pid == std::process::id() {
                continue;
            }
            if fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd == self.dir) {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
        }
    }
}

#[test]
fn gamesvc_package_lifecycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("units/packages/gamesvc");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    for entry in fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            // fs::copy keeps the permission bits, so the scripts stay executable
            fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
    }
    let _guard = Guard { dir: dir.clone() };

    let port = free_port();
    let port_s = port.to_string();
    let pidfile = dir.join("run/pid/gamesvc.pid");
    let pidfile_s = pidfile.to_str().unwrap();
    let limit = Duration::from_secs(8);

    // start.sh daemonizes and returns at once, without waiting for the pidfile.
    let r = run(&dir, "start.sh", &["--port", &port_s, "--pidfile", pidfile_s], limit);
    assert!(r.ok(), "start.sh failed: {}", r.stderr);
    assert!(r.took < Duration::from_secs(2), "start.sh took {:?}", r.took);

    // The server writes its pid itself, shortly after startup, atomically.
    let pid: u32 = wait_for(Duration::from_secs(5), || {
        let text = fs::read_to_string(&pidfile).ok()?;
        Some(text.trim().parse().unwrap_or_else(|_| panic!("half-written or bad pidfile: {text:?}")))
    })
    .expect("no pidfile within 5 s");
    assert!(alive(pid), "pid {pid} from the pidfile is not running");
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv0 = String::from_utf8_lossy(cmdline.split(|b| *b == 0).next().unwrap_or(&[])).into_owned();
    let argv0_base = argv0.rsplit('/').next().unwrap_or("").to_string();
    assert!(comm.trim() == "gamesvr" || argv0_base == "gamesvr", "comm {comm:?}, argv[0] {argv0:?}");

    // Health flips with ./unhealthy in the server's cwd.
    assert_eq!(get(port, "/health"), (200, "ok\n".to_string()));
    fs::write(dir.join("unhealthy"), "").unwrap();
    assert_eq!(get(port, "/health"), (503, "unhealthy\n".to_string()));
    let r = run(&dir, "check.sh", &["--port", &port_s], limit);
    assert!(!r.ok(), "check.sh passed while unhealthy");
    fs::remove_file(dir.join("unhealthy")).unwrap();
    let r = run(&dir, "check.sh", &["--port", &port_s], limit);
    assert!(r.ok(), "check.sh failed while healthy: {}", r.stderr);
    assert_eq!(get(port, "/nope").0, 404);

    // A client that connects and says nothing must not wedge the server.
    let silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sleep(Duration::from_millis(100));
    let t = Instant::now();
    assert_eq!(get(port, "/health").0, 200);
    assert!(t.elapsed() < Duration::from_secs(4), "a silent client blocked the server for {:?}", t.elapsed());
    drop(silent);

    // Reload: SIGHUP bumps the counter, same process.
    let (code, body) = get(port, "/");
    assert_eq!(code, 200);
    assert!(body.contains("reloads=0\n"), "body before reload: {body:?}");
    assert!(body.contains(&format!("pid={pid} ")), "body: {body:?}");
    let r = run(&dir, "reload.sh", &["--pidfile", pidfile_s], limit);
    assert!(r.ok(), "reload.sh failed: {}", r.stderr);
    let body = wait_for(Duration::from_secs(3), || {
        let (_, body) = get(port, "/");
        body.contains("reloads=1\n").then_some(body)
    })
    .expect("reload counter never reached 1");
    assert!(body.contains(&format!("pid={pid} ")), "body after reload: {body:?}");
    assert!(alive(pid), "server died on SIGHUP");
    assert_eq!(fs::read_to_string(&pidfile).unwrap().trim(), pid.to_string(), "pid changed on reload");

    // A second start is refused while the first is alive.
    let r = run(&dir, "start.sh", &["--port", &port_s, "--pidfile", pidfile_s], limit);
    assert!(!r.ok(), "second start.sh succeeded");
    assert!(r.stderr.contains("already running"), "refusal message: {:?}", r.stderr);
    assert!(alive(pid));

    // Stop, then stop again (idempotent); reload now fails.
    let r = run(&dir, "stop.sh", &["--pidfile", pidfile_s], limit);
    assert!(r.ok(), "stop.sh failed: {}", r.stderr);
    assert!(!alive(pid), "pid {pid} still running after stop.sh");
    assert!(!pidfile.exists(), "pidfile left behind after a clean stop");
    let r = run(&dir, "stop.sh", &["--pidfile", pidfile_s], limit);
    assert!(r.ok(), "second stop.sh failed: {}", r.stderr);
    let r = run(&dir, "reload.sh", &["--pidfile", pidfile_s], limit);
    assert!(!r.ok(), "reload.sh succeeded with nothing running");

    let log = fs::read_to_string(dir.join("gamesvr.log")).unwrap();
    assert!(log.contains("reloaded"), "log: {log}");
    assert!(log.contains("\"GET /health\" 503"), "log: {log}");
    assert!(log.contains("exiting"), "log: {log}");
}
