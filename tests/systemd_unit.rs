//! stewardd under systemd: the shipped unit, tmpfiles and sysusers snippets are valid for
//! systemd's own tools (scripts/check-systemd.sh), keep the settings that let instances outlive
//! the daemon, and the real daemon speaks sd_notify as the unit expects (Type=notify,
//! NotifyAccess=main, WatchdogSec=, ExecReload= by SIGHUP, stop by SIGTERM).

mod common;

use common::Daemon;
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{setsockopt, sockopt};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use steward::config::Config;

fn repo_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The unit's settings as (key, value), comments and section headers left out.
fn unit_settings() -> Vec<(String, String)> {
    repo_file("systemd/stewardd.service")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';') && !l.starts_with('['))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("not a setting: {l}"));
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect()
}

fn has_command(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

#[test]
fn systemd_tools_accept_the_unit_tmpfiles_and_sysusers() {
    if !has_command("systemd-analyze") {
        // scripts/test.sh runs the check script first, which installs systemd's tools.
        eprintln!("SKIP: systemd-analyze is not installed (apt-get install systemd; scripts/check-systemd.sh does)");
        return;
    }
    let out = Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/check-systemd.sh"))
        .arg(env!("CARGO_BIN_EXE_stewardd"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/check-systemd.sh failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn unit_keeps_instances_alive_and_speaks_notify() {
    let settings = unit_settings();
    let value =
        |key: &str| -> Vec<&str> { settings.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect() };
    for (key, want) in [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("ExecStart", "/usr/bin/stewardd"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("KillMode", "process"),
        ("Delegate", "yes"),
        ("Restart", "on-failure"),
        ("TasksMax", "infinity"),
        ("OOMPolicy", "continue"),
        ("Documentation", "man:stewardd(8)"),
        ("WantedBy", "multi-user.target"),
    ] {
        assert_eq!(value(key), vec![want], "{key}=");
    }
    for key in ["WatchdogSec", "RestartSec", "TimeoutStopSec", "LimitNOFILE", "OOMScoreAdjust"] {
        assert_eq!(value(key).len(), 1, "{key}= must be set once");
    }
    let nofile: u64 = value("LimitNOFILE")[0].parse().expect("LimitNOFILE is a number");
    assert!(nofile >= 65536, "LimitNOFILE={nofile} is too low for thousands of instances");
    assert!(value("OOMScoreAdjust")[0].parse::<i32>().unwrap() < 0);
    // What every workload would inherit from the daemon (see the comments in the unit).
    for key in [
        "NoNewPrivileges",
        "PrivateTmp",
        "ProtectHome",
        "ProtectSystem",
        "ProtectControlGroups",
        "PrivateDevices",
        "PrivateNetwork",
        "MemoryDenyWriteExecute",
        "SystemCallFilter",
        "CapabilityBoundingSet",
        "MemoryMax",
    ] {
        assert!(value(key).is_empty(), "{key}= would apply to every instance, not only to stewardd");
    }
}

#[test]
fn tmpfiles_and_sysusers_match_the_default_config() {
    let config = Config::default();
    let tmpfiles = repo_file("systemd/steward.tmpfiles");
    let lines: Vec<Vec<&str>> = tmpfiles
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let entry = |path: &Path| {
        lines
            .iter()
            .find(|f| f.get(1) == Some(&path.to_str().unwrap()))
            .unwrap_or_else(|| panic!("steward.tmpfiles has no line for {}", path.display()))
    };
    let socket_dir = entry(config.socket.parent().unwrap());
    assert_eq!(socket_dir[..5], ["d", "/run/steward", "0755", "root", config.socket_group.as_str()]);
    assert_eq!(entry(&config.state_dir)[..5], ["d", "/var/lib/steward/state", "0700", "root", "root"]);
    for root in [&config.work_base_dir, &config.run_base_dir] {
        assert_eq!(entry(root)[0], "d");
    }
    // Nothing of Steward's is temporary: no age, so systemd-tmpfiles --clean never touches it.
    for f in &lines {
        assert_eq!(f.get(5), Some(&"-"), "{f:?} must have age -");
    }
    let sysusers = repo_file("systemd/steward.sysusers");
    assert!(
        sysusers.lines().any(|l| l.split_whitespace().take(2).eq(["g", config.socket_group.as_str()])),
        "steward.sysusers does not create group {}",
        config.socket_group
    );
}

/// systemd's side of sd_notify: a datagram socket that learns each sender's pid (SO_PASSCRED),
/// as systemd does to enforce NotifyAccess=main.
struct NotifySocket {
    sock: UnixDatagram,
    seen: Vec<String>,
}

impl NotifySocket {
    fn bind(path: &Path) -> NotifySocket {
        let sock = UnixDatagram::bind(path).unwrap();
        setsockopt(&sock, sockopt::PassCred, &true).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        NotifySocket { sock, seen: Vec::new() }
    }

    /// The next message and its sender's pid, or None at `deadline`.
    fn recv(&mut self, deadline: Instant) -> Option<(i32, String)> {
        while Instant::now() < deadline {
            let mut buf = [0u8; 4096];
            let (len, pid) = match recv_with_pid(self.sock.as_raw_fd(), &mut buf) {
                Ok(got) => got,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) => {
                    continue
                }
                Err(e) => panic!("recvmsg: {e}"),
            };
            let text = String::from_utf8(buf[..len].to_vec()).expect("sd_notify messages are text");
            self.seen.push(text.clone());
            return Some((pid, text));
        }
        None
    }

    /// Reads until a message from `pid` satisfies `pred` (others must come from `pid` too).
    fn wait_for(&mut self, pid: i32, what: &str, secs: u64, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while let Some((from, text)) = self.recv(deadline) {
            assert_eq!(from, pid, "{text:?} came from pid {from}, not stewardd: NotifyAccess=main would drop it");
            if pred(&text) {
                return text;
            }
        }
        panic!("no {what} within {secs}s; got {:#?}", self.seen);
    }
}

/// One datagram and its sender's pid (SCM_CREDENTIALS, which SO_PASSCRED attaches to every one).
fn recv_with_pid(fd: RawFd, buf: &mut [u8]) -> std::io::Result<(usize, i32)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u64; 16];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: msg describes live buffers of the lengths given.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut pid = None;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel just filled in, within
    // msg_controllen; ucred is read unaligned from its data.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                let cred: libc::ucred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                pid = Some(cred.pid);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, pid.expect("SO_PASSCRED gives every message its sender")))
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// A test daemon (as common::Daemon::start_with, so its cleanup applies) started the way systemd
/// starts it: NOTIFY_SOCKET and WATCHDOG_USEC set, WATCHDOG_PID unset.
fn daemon_under_notify(name: &str, notify: &Path, watchdog_usec: u64) -> Daemon {
    let dir = tempfile::Builder::new().prefix(&format!("steward-{name}-")).tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("stewardd.sock");
    let cgroup_parent = format!("steward-test-{name}-{}", std::process::id());
    let config = dir.path().join("stewardd.toml");
    std::fs::write(
        &config,
        format!(
            "work_base_dir = \"{0}/work\"\nrun_base_dir = \"{0}/run\"\nstate_dir = \"{0}/state\"\nsocket = \"{1}\"\n\
             cgroup_parent = \"{2}\"\nhost_ip = \"127.0.0.1\"\n",
            dir.path().display(),
            socket.display(),
            cgroup_parent
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("stewardd.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_stewardd"))
        .arg("--config")
        .arg(&config)
        .env("STEWARD_LOG", "debug")
        .env("NOTIFY_SOCKET", notify)
        .env("WATCHDOG_USEC", watchdog_usec.to_string())
        .env_remove("WATCHDOG_PID")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let docker_socket = common::docker::SHARED_SOCKET.to_string();
    Daemon {
        child: Some(child),
        client: steward::client::Client::new(&socket),
        dir,
        socket,
        config,
        cgroup_parent,
        netns: None,
        docker_socket,
        env: Vec::new(),
    }
}

#[test]
fn sd_notify_ready_watchdog_reload_and_stop() {
    let notify_dir = tempfile::tempdir().unwrap();
    let notify_path = notify_dir.path().join("notify.sock");
    let mut systemd = NotifySocket::bind(&notify_path);
    let mut d = daemon_under_notify("notify", &notify_path, 200_000);
    let pid = d.pid();

    // READY=1 with a STATUS= line for `systemctl status`, once the socket is up.
    let ready = systemd.wait_for(pid, "READY=1", 30, |t| lines(t).contains(&"READY=1"));
    assert!(lines(&ready).iter().any(|l| l.starts_with("STATUS=")), "READY=1 without STATUS=: {ready:?}");
    assert!(
        std::os::unix::net::UnixStream::connect(&d.socket).is_ok(),
        "READY=1 came before the API socket accepts connections\n{}",
        d.log()
    );

    // WATCHDOG=1, again and again (every 100 ms for WATCHDOG_USEC=200000).
    for _ in 0..3 {
        systemd.wait_for(pid, "WATCHDOG=1", 5, |t| lines(t).contains(&"WATCHDOG=1"));
    }

    // systemctl reload (ExecReload=kill -HUP): RELOADING=1, then READY=1 when done.
    kill(nix::unistd::Pid::from_raw(pid), Signal::SIGHUP).unwrap();
    systemd.wait_for(pid, "RELOADING=1 after SIGHUP", 10, |t| {
        assert!(!lines(t).contains(&"READY=1"), "READY=1 before RELOADING=1: {t:?}");
        lines(t).contains(&"RELOADING=1")
    });
    systemd.wait_for(pid, "READY=1 after the reload", 10, |t| lines(t).contains(&"READY=1"));
    // Still pinging after a reload.
    systemd.wait_for(pid, "WATCHDOG=1 after the reload", 5, |t| lines(t).contains(&"WATCHDOG=1"));

    // systemctl stop (SIGTERM): STOPPING=1, then a clean exit.
    kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    systemd.wait_for(pid, "STOPPING=1 after SIGTERM", 10, |t| lines(t).contains(&"STOPPING=1"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "stewardd did not exit within 10 s of SIGTERM\n{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "stewardd exited with {status} after SIGTERM\n{}", d.log());
    d.child = None;
}

/// A restart in place (SIGUSR2, what package upgrades send) is a reload to systemd: RELOADING=1
/// from the main pid, never STOPPING=1 (systemd would take the unit down), then READY=1 from the
/// same pid, now the new image, and the watchdog pings go on.
#[test]
fn sd_notify_restart_in_place_is_a_reload_of_the_same_main_pid() {
    let notify_dir = tempfile::tempdir().unwrap();
    let notify_path = notify_dir.path().join("notify.sock");
    let mut systemd = NotifySocket::bind(&notify_path);
    let d = daemon_under_notify("notifyreexec", &notify_path, 2_000_000);
    let pid = d.pid();
    systemd.wait_for(pid, "READY=1", 30, |t| lines(t).contains(&"READY=1"));

    kill(nix::unistd::Pid::from_raw(pid), Signal::SIGUSR2).unwrap();
    systemd.wait_for(pid, "RELOADING=1 after SIGUSR2", 10, |t| {
        assert!(!lines(t).contains(&"STOPPING=1"), "STOPPING=1 on a restart in place: {t:?}");
        lines(t).contains(&"RELOADING=1")
    });
    systemd.wait_for(pid, "READY=1 from the new image", 20, |t| {
        assert!(!lines(t).contains(&"STOPPING=1"), "STOPPING=1 on a restart in place: {t:?}");
        lines(t).contains(&"READY=1")
    });
    assert!(d.log().contains("restarting in place"), "{}", d.log());
    systemd.wait_for(pid, "WATCHDOG=1 after the restart", 5, |t| lines(t).contains(&"WATCHDOG=1"));
}

/// The unit protects stewardd with OOMScoreAdjust=; instances are forked by it and must not keep
/// that protection, or the OOM killer would spare a runaway workload and kill the host's
/// services instead.
/// (The test moves the daemon's score up, to 500, as lowering it needs CAP_SYS_RESOURCE, which
/// a container may lack; inheritance is the same either way.)
#[tokio::test]
async fn instances_do_not_inherit_the_daemons_oom_score() {
    let d = Daemon::start("oomscore");
    std::fs::write(format!("/proc/{}/oom_score_adj", d.pid()), "500").unwrap();
    let process = serde_json::json!({"startCmd": "exec sleep 1000", "procName": "sleep"});
    d.apply_json(&common::spec("oom", 1, process, serde_json::json!({}))).await;
    let st = d.wait_state(&common::id("test", "oom", 0), steward::supervisor::state::Kind::Running, 20).await;
    let score = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", st.pid.unwrap())).unwrap();
    assert_eq!(score.trim(), "0", "the instance kept stewardd's oom_score_adj");
}

/// systemctl stop must not wait for API clients: `steward events -f` and steward-sched follow
/// /v1/events for good, so a stop that waits for them runs into TimeoutStopSec and SIGKILL.
#[test]
fn sigterm_exits_promptly_while_a_client_follows_events() {
    use std::io::{Read, Write};
    let mut d = Daemon::start("stopfollow");
    let mut follower = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    follower.write_all(b"GET /v1/events HTTP/1.1\r\nHost: stewardd\r\n\r\n").unwrap();
    follower.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 12];
    follower.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "events did not answer");

    kill(nix::unistd::Pid::from_raw(d.pid()), Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = d.child.as_mut().unwrap().try_wait().unwrap() {
            assert!(status.success(), "stewardd exited with {status}\n{}", d.log());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stewardd still runs 10 s after SIGTERM, waiting for the events follower\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    d.child = None;
    drop(follower);
}
