//! Real forking daemons from Debian packages under the supervisor, each as its own user, the
//! way such daemons ordinarily run (issue 15): redis-server (`--daemonize yes --pidfile`, user
//! redis), nginx (master as root, workers as www-data, `-s reload`, `-s quit`), haproxy (`-D -p`,
//! user haproxy), and a shell daemon that double-forks through a wrapper (user nobody, SIGHUP
//! reload). Each writes its own pidfile directly in the instance's run directory, which is
//! root's. Each goes through the same life: applied and Running (timed), its main process killed
//! -9 and replaced (timed until the replacement's pidfile is read), reloaded where it can be,
//! re-adopted with the same pids across a kill -9 of stewardd, stopped gracefully, nothing left
//! in its cgroup. scripts/install-deps.sh installs the daemons; nothing is skipped.

mod common;

use common::{alive, id, spec, wait_gone, Daemon};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use steward::spec::InstanceId;
use steward::supervisor::state::{Kind, State};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// What the daemon answers to `request` on `port`, if anything.
fn ask(port: u16, request: &[u8]) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(request).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if request.starts_with(b"PING") {
            break;
        }
    }
    Some(String::from_utf8_lossy(&out).to_string())
}

/// Polls `serving` for up to 5 s.
async fn serves(serving: &dyn Fn() -> bool) -> bool {
    for _ in 0..100 {
        if serving() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn uid_of(pid: i32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap().split_whitespace().next().unwrap().parse().unwrap()
}

fn uid_of_user(name: &str) -> u32 {
    nix::unistd::User::from_name(name).unwrap().unwrap_or_else(|| panic!("user {name}")).uid.as_raw()
}

/// Whether `pid` is `ancestor` or below it.
fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut cur = pid;
    for _ in 0..64 {
        if cur == ancestor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{cur}/stat")) else { return false };
        let after_comm = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let Some(ppid) = after_comm.split_whitespace().nth(1).and_then(|p| p.parse::<i32>().ok()) else { return false };
        if ppid <= 1 {
            return false;
        }
        cur = ppid;
    }
    false
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

/// Whether a reload took effect, given the main pid and its children before the reload.
type ReloadCheck<'a> = &'a dyn Fn(i32, &[i32]) -> bool;

/// A daemon's life under Steward (see the module's doc). `main_user`: whom its main process
/// runs as; `reload`: checks a reload's effect, for daemons that reload.
struct Life<'a> {
    name: &'a str,
    main_user: &'a str,
    serving: &'a dyn Fn() -> bool,
    /// Given the main pid and its children before the reload.
    reload: Option<ReloadCheck<'a>>,
}

async fn live(d: &mut Daemon, doc: &serde_json::Value, life: Life<'_>) {
    let name = life.name;
    let iid: InstanceId = id("test", doc["metadata"]["name"].as_str().unwrap(), 0);
    let applied = Instant::now();
    d.apply_json(doc).await;
    let st = d.wait_state(&iid, Kind::Running, 30).await;
    let to_running = applied.elapsed();
    let main = st.pid.unwrap();
    assert_eq!(uid_of(main), uid_of_user(life.main_user), "{name}'s main process runs as {}", life.main_user);
    assert!(serves(life.serving).await, "{name} serves\n{}", d.log());

    // Its main process killed -9: replaced, the new pidfile read.
    let killed = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(main), nix::sys::signal::Signal::SIGKILL).unwrap();
    let st = d.wait(&iid, 30, |s| s.state.kind() == Kind::Running && s.pid.is_some_and(|p| p != main)).await;
    let to_replaced = killed.elapsed();
    assert_eq!(st.restarts, 1, "{st:#?}");
    let main = st.pid.unwrap();
    assert!(alive(main));
    assert_eq!(uid_of(main), uid_of_user(life.main_user));
    assert!(serves(life.serving).await, "{name} serves again\n{}", d.log());

    // Reloaded where it can be: the same main process, the reload's effect seen.
    if let Some(reloaded) = life.reload {
        let before = children(main);
        let st = d.client.action(&iid, "reload", Some(10.0)).await.unwrap();
        assert_eq!((st.state, st.pid), (State::Running, Some(main)));
        let mut seen = false;
        for _ in 0..100 {
            if reloaded(main, &before) {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(seen, "{name} reloaded\n{}", d.log());
        assert!(serves(life.serving).await);
    }

    // Re-adopted across a kill -9 of stewardd: the same processes, still serving.
    let before = d.cgroup_pids(&iid);
    d.restart(true);
    let st = d.wait_state(&iid, Kind::Running, 10).await;
    assert_eq!(st.pid, Some(main), "re-adopted, not restarted");
    assert_eq!(st.restarts, 1);
    // The same tree: every process in the cgroup is the main or one of its descendants (an old
    // nginx worker finishing after the reload may have gone, a shell's `sleep` come and gone).
    let after = d.cgroup_pids(&iid);
    assert!(after.contains(&main) && after.iter().all(|p| descends_from(*p, main)), "{before:?} -> {after:?}");
    assert!(serves(life.serving).await);

    // Stopped gracefully, well before the kill grace ends; nothing left.
    let stopping = Instant::now();
    let st = d.client.action(&iid, "stop", Some(30.0)).await.unwrap();
    assert_eq!(st.state, State::Stopped);
    assert!(stopping.elapsed() < Duration::from_secs(8), "{name} stopped gracefully: {:?}", stopping.elapsed());
    assert!(wait_gone(main, 5).await);
    assert!(d.cgroup_pids(&iid).is_empty());
    let deadline = Instant::now() + Duration::from_secs(3);
    while (life.serving)() {
        assert!(Instant::now() < deadline, "{name} stopped serving");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "figures: {name}: apply to Running {} ms; kill -9 to the replacement's pidfile read {} ms",
        to_running.as_millis(),
        to_replaced.as_millis()
    );
}

/// The pidfile, directly in the instance's run directory (root's), as such daemons are usually
/// configured.
const PIDFILE_IN_RUN_DIR: &str = "${run_base_dir}/${namespace}.${processname}.${instanceid}/daemon.pid";

#[tokio::test]
async fn redis_as_redis() {
    let mut d = Daemon::start("redis");
    let port = free_port();
    let doc = spec(
        "kv",
        1,
        json!({
            "procName": "redis-server",
            "user": "redis",
            "pidFile": PIDFILE_IN_RUN_DIR,
            "startCmd": format!(
                "redis-server --daemonize yes --pidfile ${{pidFile}} --port {port} --bind 127.0.0.1 \
                 --dir ${{workPath}} --save '' --appendonly no --logfile ${{workPath}}/redis.log"
            ),
            "startGracePeriod": 5
        }),
        json!({"restartPolicy": {"policy": "OnFailure", "interval": 0}, "killPolicy": {"gracePeriod": 10}}),
    );
    let serving = move || ask(port, b"PING\r\n").is_some_and(|r| r.starts_with("+PONG"));
    live(&mut d, &doc, Life { name: "redis-server", main_user: "redis", serving: &serving, reload: None }).await;
}

#[tokio::test]
async fn nginx_with_workers_as_www_data() {
    let mut d = Daemon::start("nginx");
    let port = free_port();
    let conf = d.path().join("nginx.conf");
    let scratch = d.path().join("nginx-tmp");
    std::fs::create_dir_all(&scratch).unwrap();
    let pid_file = d.run_dir().join("test.web.0/daemon.pid");
    std::fs::write(
        &conf,
        format!(
            "daemon on;\nmaster_process on;\nuser www-data;\nworker_processes 1;\npid {pid};\nerror_log {tmp}/error.log;\n\
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
    let doc = spec(
        "web",
        1,
        json!({
            "procName": "nginx",
            "startCmd": format!("nginx -c {conf}"),
            "stopCmd": format!("nginx -c {conf} -s quit"),
            "reloadCmd": format!("nginx -c {conf} -s reload"),
            "pidFile": PIDFILE_IN_RUN_DIR,
            "startGracePeriod": 5
        }),
        json!({"restartPolicy": {"policy": "Always", "interval": 0}, "killPolicy": {"gracePeriod": 10}}),
    );
    let serving =
        move || ask(port, b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").is_some_and(|r| r.contains("hello from nginx"));
    // Its workers run as www-data; a reload replaces them under the same master.
    let www = uid_of_user("www-data");
    let workers_as_www = move || {
        serving()
            && std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
                .is_some_and(|m| !children(m).is_empty() && children(m).iter().all(|w| uid_of(*w) == www))
    };
    let reload_check = |master: i32, before: &[i32]| {
        let now = children(master);
        !now.is_empty() && now != before && now.iter().all(|w| uid_of(*w) == www)
    };
    live(
        &mut d,
        &doc,
        Life { name: "nginx", main_user: "root", serving: &workers_as_www, reload: Some(&reload_check) },
    )
    .await;
}

#[tokio::test]
async fn haproxy_as_haproxy() {
    let mut d = Daemon::start("haproxy");
    let port = free_port();
    let conf = d.path().join("haproxy.cfg");
    std::fs::write(
        &conf,
        format!(
            "global\n  maxconn 64\n\ndefaults\n  mode http\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\n\n\
             frontend web\n  bind 127.0.0.1:{port}\n  http-request return status 200 content-type text/plain string \"hello from haproxy\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&conf, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let doc = spec(
        "lb",
        1,
        json!({
            "procName": "haproxy",
            "user": "haproxy",
            "pidFile": PIDFILE_IN_RUN_DIR,
            "startCmd": format!("haproxy -D -p ${{pidFile}} -f {}", conf.display()),
            "startGracePeriod": 5
        }),
        json!({"restartPolicy": {"policy": "Always", "interval": 0}, "killPolicy": {"gracePeriod": 10}}),
    );
    let serving = move || {
        ask(port, b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").is_some_and(|r| r.contains("hello from haproxy"))
    };
    live(&mut d, &doc, Life { name: "haproxy", main_user: "haproxy", serving: &serving, reload: None }).await;
}

#[tokio::test]
async fn a_shell_daemon_that_double_forks_as_nobody() {
    let mut d = Daemon::start("doublefork");
    // The wrapper forks a subshell that forks the daemon, writes its pid and exits; the wrapper
    // exits too: the daemon is a grandchild, reparented. It reloads on SIGHUP.
    let daemon = "trap 'echo reloaded >> ${workPath}/hup' HUP; trap 'exit 0' TERM; \
                  while :; do date +%s > ${workPath}/beat; sleep 0.2 & wait \\$!; done";
    let doc = spec(
        "forker",
        1,
        json!({
            "procName": "sh",
            "user": "nobody",
            "pidFile": PIDFILE_IN_RUN_DIR,
            "startCmd": format!("(sh -c \"{daemon}\" > /dev/null 2>&1 & echo $! > ${{pidFile}}) &"),
            "reloadCmd": "kill -HUP $(cat ${pidFile})",
            "startGracePeriod": 5
        }),
        json!({"restartPolicy": {"policy": "Always", "interval": 0}, "killPolicy": {"gracePeriod": 10}}),
    );
    let work = d.work_dir().join("test.forker.0");
    let beat = work.join("beat");
    let serving = move || {
        let Ok(m) = std::fs::metadata(&beat) else { return false };
        m.modified().is_ok_and(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(1))
    };
    let hup = work.join("hup");
    let reloaded = move |_: i32, _: &[i32]| std::fs::read_to_string(&hup).is_ok_and(|t| t.contains("reloaded"));
    live(
        &mut d,
        &doc,
        Life { name: "double-forking sh", main_user: "nobody", serving: &serving, reload: Some(&reloaded) },
    )
    .await;
}
