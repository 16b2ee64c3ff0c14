//! The fetch module against a real HTTP server on 127.0.0.1 (written below: std TcpListener and
//! a thread per connection) and real archives, including hostile ones built from raw headers.
//! Ownership checks need root (they run as a user created with useradd).

mod common;

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use steward::fetch::{FetchError, FetchOptions, Fetched, Fetcher};
use steward::runtime::process::ResolvedUser;
use steward::spec::model::PullPolicy;
use steward::spec::render::{Redacted, RenderedUri};

// ---------------------------------------------------------------------------------------------
// The server

#[derive(Default, Clone)]
struct Route {
    body: Arc<Vec<u8>>,
    /// Basic auth required: (user, password).
    auth: Option<(String, String)>,
    etag: Option<String>,
    last_modified: Option<String>,
    /// Answer 500 this many times before serving.
    fail_first: Arc<AtomicU32>,
    /// Send the headers and this many bytes of the body, then go quiet.
    stall_after: Option<usize>,
}

#[derive(Debug, Clone)]
struct Request {
    path: String,
    headers: HashMap<String, String>,
}

#[derive(Default)]
struct State {
    routes: Mutex<HashMap<String, Route>>,
    requests: Mutex<Vec<Request>>,
}

struct Server {
    port: u16,
    state: Arc<State>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                std::thread::spawn(move || {
                    let _ = serve(conn, &st);
                });
            }
        });
        Server { port, state }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn route(&self, path: &str, route: Route) {
        self.state.routes.lock().unwrap().insert(path.to_string(), route);
    }

    fn file(&self, path: &str, body: Vec<u8>) {
        self.route(path, Route { body: Arc::new(body), ..Route::default() });
    }

    fn requests(&self, path: &str) -> Vec<Request> {
        self.state.requests.lock().unwrap().iter().filter(|r| r.path == path).cloned().collect()
    }
}

fn serve(conn: TcpStream, state: &State) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    state.requests.lock().unwrap().push(Request { path: path.clone(), headers: headers.clone() });
    let mut out = conn;
    let route = state.routes.lock().unwrap().get(&path).cloned();
    let Some(route) = route else {
        return out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    };
    if let Some((user, pass)) = &route.auth {
        let expected = format!("Basic {}", base64(format!("{user}:{pass}").as_bytes()));
        if headers.get("authorization") != Some(&expected) {
            return out.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"pkg\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    }
    if route.fail_first.load(Ordering::SeqCst) > 0 {
        route.fail_first.fetch_sub(1, Ordering::SeqCst);
        return out
            .write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno");
    }
    let mut validators = String::new();
    if let Some(e) = &route.etag {
        validators += &format!("ETag: {e}\r\n");
    }
    if let Some(lm) = &route.last_modified {
        validators += &format!("Last-Modified: {lm}\r\n");
    }
    let not_modified = match (&route.etag, headers.get("if-none-match")) {
        (Some(e), Some(inm)) => e == inm,
        (_, None) => route.last_modified.is_some() && route.last_modified.as_ref() == headers.get("if-modified-since"),
        _ => false,
    };
    if not_modified {
        return out.write_all(format!("HTTP/1.1 304 Not Modified\r\n{validators}Connection: close\r\n\r\n").as_bytes());
    }
    out.write_all(
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{validators}Connection: close\r\n\r\n", route.body.len())
            .as_bytes(),
    )?;
    if let Some(n) = route.stall_after {
        out.write_all(&route.body[..n])?;
        out.flush()?;
        std::thread::sleep(Duration::from_secs(20));
        return Ok(());
    }
    out.write_all(&route.body)
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Archives, written by hand so hostile ones can be made too

enum E<'a> {
    File(&'a str, &'a [u8], u32),
    Dir(&'a str, u32),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
    Fifo(&'a str),
}

fn octal(field: &mut [u8], v: u64) {
    let s = format!("{:0w$o}\0", v, w = field.len() - 1);
    field.copy_from_slice(s.as_bytes());
}

fn header(name: &str, kind: u8, link: &str, size: usize, mode: u32) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], mode as u64);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size as u64);
    octal(&mut h[136..148], 1_600_000_000);
    h[148..156].fill(b' ');
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let sum: u32 = h.iter().map(|b| *b as u32).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

fn tar(entries: &[E<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let (h, data): ([u8; 512], &[u8]) = match e {
            E::File(n, d, m) => (header(n, b'0', "", d.len(), *m), d),
            E::Dir(n, m) => (header(n, b'5', "", 0, *m), b""),
            E::Symlink(n, t) => (header(n, b'2', t, 0, 0o777), b""),
            E::HardLink(n, t) => (header(n, b'1', t, 0, 0o644), b""),
            E::Fifo(n) => (header(n, b'6', "", 0, 0o644), b""),
        };
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn xz(data: &[u8]) -> Vec<u8> {
    let mut e = xz2::write::XzEncoder::new(Vec::new(), 6);
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o640);
    for (name, data) in entries {
        w.start_file(*name, opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

fn app_v1() -> Vec<u8> {
    gz(&tar(&[
        E::Dir("app/", 0o755),
        E::File("app/start.sh", b"#!/bin/sh\necho v1\n", 0o4755),
        E::Dir("app/conf/", 0o1777),
        E::File("app/conf/app.conf", b"port=1\n", 0o2640),
        E::Symlink("app/current.conf", "conf/app.conf"),
        E::HardLink("app/start-again.sh", "app/start.sh"),
        E::File("README", b"hello\n", 0o644),
    ]))
}

// ---------------------------------------------------------------------------------------------
// Fixture

struct Fx {
    dir: tempfile::TempDir,
    fetcher: Fetcher,
}

fn owner() -> ResolvedUser {
    if nix::unistd::geteuid().is_root() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let _ = std::process::Command::new("useradd")
                .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "steward-fetch"])
                .output();
        });
        ResolvedUser::lookup("steward-fetch").expect("useradd steward-fetch")
    } else {
        let me = nix::unistd::User::from_uid(nix::unistd::geteuid()).unwrap().unwrap();
        ResolvedUser::lookup(&me.name).unwrap()
    }
}

impl Fx {
    fn new() -> Fx {
        Fx::with(|_| {})
    }

    fn with(tweak: impl FnOnce(&mut FetchOptions)) -> Fx {
        let dir = tempfile::Builder::new().prefix("steward-fetch-").tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let mut o = FetchOptions::new(dir.path().join("cache"));
        o.first_backoff = Duration::from_millis(20);
        o.stall_timeout = Duration::from_secs(5);
        tweak(&mut o);
        let fetcher = Fetcher::new(o).unwrap();
        Fx { dir, fetcher }
    }

    /// `<tmp>/work/<name>`: the parent `work` holds nothing else, so leftovers would show.
    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join("work").join(name)
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    async fn fetch(&self, uri: &RenderedUri) -> Result<Fetched, FetchError> {
        self.fetcher.fetch(uri, &owner(), &|_, _| {}).await
    }
}

fn uri(value: String, out: &Path) -> RenderedUri {
    RenderedUri {
        value,
        user: None,
        password: None,
        pull_policy: PullPolicy::IfNotPresent,
        output_dir: out.to_path_buf(),
        sha256: None,
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => vec![],
    };
    v.sort();
    v
}

/// Every path below `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).into_iter().flatten() {
            let e = e.unwrap();
            out.push(e.path().strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(base, &e.path(), out);
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

// ---------------------------------------------------------------------------------------------
// Cases

#[tokio::test]
async fn tar_gz_is_extracted_owned_by_the_user_with_modes_stripped() {
    let server = Server::start();
    server.file("/app.tar.gz", app_v1());
    let fx = Fx::new();
    let out = fx.out("inst.0");
    let calls = Mutex::new(Vec::new());
    let progress = |n: u64, total: Option<u64>| calls.lock().unwrap().push((n, total));
    let got = fx.fetcher.fetch(&uri(server.url("/app.tar.gz"), &out), &owner(), &progress).await.unwrap();
    assert!(got.downloaded);
    assert_eq!(got.sha256, sha256(&app_v1()));
    assert_eq!(got.bytes, app_v1().len() as u64);
    assert_eq!(calls.lock().unwrap().last(), Some(&(got.bytes, Some(got.bytes))));

    assert_eq!(
        tree(&out),
        ["README", "app", "app/conf", "app/conf/app.conf", "app/current.conf", "app/start-again.sh", "app/start.sh"]
    );
    assert_eq!(fs::read(out.join("app/start.sh")).unwrap(), b"#!/bin/sh\necho v1\n");
    assert_eq!(fs::read_to_string(out.join("app/current.conf")).unwrap(), "port=1\n");
    assert_eq!(mode(&out.join("app/start.sh")), 0o755, "setuid stripped");
    assert_eq!(mode(&out.join("app/conf/app.conf")), 0o640, "setgid stripped");
    assert_eq!(mode(&out.join("app/conf")), 0o777, "sticky stripped");
    assert_eq!(
        fs::metadata(out.join("app/start.sh")).unwrap().ino(),
        fs::metadata(out.join("app/start-again.sh")).unwrap().ino()
    );
    assert_eq!(fs::metadata(out.join("README")).unwrap().mtime(), 1_600_000_000);

    let user = owner();
    for p in tree(&out) {
        let md = fs::symlink_metadata(out.join(&p)).unwrap();
        assert_eq!((md.uid(), md.gid()), (user.uid, user.gid), "{p} owned by the user (lchown for links)");
    }
    // The output directory and the missing parent were created for the user.
    for d in [&out, &fx.work()] {
        assert_eq!(fs::metadata(d).unwrap().uid(), user.uid);
    }
    // Nothing else was left beside it.
    assert_eq!(listing(&fx.work()), ["inst.0"]);
}

#[tokio::test]
async fn basic_auth_and_a_clear_401_without_the_password() {
    let server = Server::start();
    server.route(
        "/secure/app.tar.gz",
        Route { body: Arc::new(app_v1()), auth: Some(("alice".into(), "correct-horse".into())), ..Route::default() },
    );
    let fx = Fx::new();
    let out = fx.out("auth");
    let mut u = uri(server.url("/secure/app.tar.gz"), &out);

    // No credentials.
    let err = fx.fetch(&u).await.unwrap_err();
    assert!(matches!(err, FetchError::Unauthorized { .. }), "{err:?}");

    // Wrong password: one request, no retry, a message that says what to check.
    u.user = Some("alice".into());
    u.password = Some(Redacted("battery-staple-WRONG".into()));
    let err = fx.fetch(&u).await.unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(text.contains("401 Unauthorized: check uris[].user/pwd"), "{text}");
    assert!(text.contains(&server.url("/secure/app.tar.gz")), "{text}");
    assert!(!text.contains("battery-staple") && !format!("{err:?}").contains("battery-staple"), "{text}");
    assert_eq!(server.requests("/secure/app.tar.gz").len(), 2);
    assert!(!out.join("app").exists());

    // Credentials in the URL itself work too and never show.
    let err = fx
        .fetch(&uri(
            format!("http://alice:hunter2@127.0.0.1:{}/secure/app.tar.gz", server.port).replace("/secure/", "/nope/"),
            &out,
        ))
        .await
        .unwrap_err();
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
    assert!(err.to_string().contains("404"), "{err}");

    u.password = Some(Redacted("correct-horse".into()));
    fx.fetch(&u).await.unwrap();
    assert!(out.join("app/start.sh").is_file());
    let auth = &server.requests("/secure/app.tar.gz")[2].headers["authorization"];
    assert_eq!(auth, &format!("Basic {}", base64(b"alice:correct-horse")));
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff() {
    let server = Server::start();
    server.route(
        "/flaky.tar.gz",
        Route { body: Arc::new(app_v1()), fail_first: Arc::new(AtomicU32::new(2)), ..Route::default() },
    );
    server.route("/down.tar.gz", Route { fail_first: Arc::new(AtomicU32::new(100)), ..Route::default() });
    let fx = Fx::with(|o| o.attempts = 3);
    let out = fx.out("flaky");
    let got = fx.fetch(&uri(server.url("/flaky.tar.gz"), &out)).await.unwrap();
    assert!(got.downloaded);
    assert_eq!(server.requests("/flaky.tar.gz").len(), 3);
    assert!(out.join("app/start.sh").is_file());

    let started = Instant::now();
    let err = fx.fetch(&uri(server.url("/down.tar.gz"), &fx.out("down"))).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, FetchError::GaveUp { attempts: 3, .. }), "{err:?}");
    eprintln!("{text}");
    assert!(text.contains("after 3 attempts") && text.contains("500 Internal Server Error"), "{text}");
    assert_eq!(server.requests("/down.tar.gz").len(), 3);
    // 20 ms, then 40 ms between attempts.
    assert!(started.elapsed() >= Duration::from_millis(60));

    // Nobody listening: retried, then a clear error.
    let err = fx.fetch(&uri("http://127.0.0.1:1/x.tar.gz".into(), &fx.out("refused"))).await.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, FetchError::GaveUp { attempts: 3, .. }), "{err:?}");
    assert!(err.to_string().contains("cannot connect"), "{err}");

    // A missing file is not retried.
    let err = fx.fetch(&uri(server.url("/missing.tar.gz"), &fx.out("missing"))).await.unwrap_err();
    assert!(err.to_string().contains("404 Not Found"), "{err}");
    assert_eq!(server.requests("/missing.tar.gz").len(), 1);
}

#[tokio::test]
async fn a_stalled_download_times_out_after_the_attempts() {
    let server = Server::start();
    let body = vec![7u8; 100_000];
    server.route("/slow.tar.gz", Route { body: Arc::new(body), stall_after: Some(1000), ..Route::default() });
    let fx = Fx::with(|o| {
        o.attempts = 2;
        o.stall_timeout = Duration::from_millis(300);
    });
    let out = fx.out("slow");
    let started = Instant::now();
    let err = fx.fetch(&uri(server.url("/slow.tar.gz"), &out)).await.unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(text.contains("after 2 attempts") && text.contains("stalled"), "{text}");
    assert!(text.contains("after 1000 bytes"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(server.requests("/slow.tar.gz").len(), 2);
    assert!(!out.exists());
    // No partial download stays in the cache.
    assert!(listing(&fx.dir.path().join("cache")).is_empty());
}

#[tokio::test]
async fn a_truncated_gzip_changes_nothing() {
    let server = Server::start();
    let whole = app_v1();
    server.file("/cut.tar.gz", whole[..whole.len() / 2].to_vec());
    let fx = Fx::new();
    let out = fx.out("cut");
    fs::create_dir_all(out.join("app")).unwrap();
    fs::write(out.join("app/start.sh"), "old").unwrap();
    fs::write(out.join("keep.log"), "mine").unwrap();
    let before = tree(&out);
    let err = fx.fetch(&uri(server.url("/cut.tar.gz"), &out)).await.unwrap_err();
    let text = err.to_string();
    eprintln!("{err}");
    assert!(matches!(err, FetchError::Corrupt { .. }), "{err:?}");
    assert!(text.contains("truncated gzip") && text.contains("/cut.tar.gz"), "{text}");
    assert_eq!(tree(&out), before);
    assert_eq!(fs::read_to_string(out.join("app/start.sh")).unwrap(), "old");
    assert_eq!(listing(&fx.work()), ["cut"], "temporary directory removed");

    // A tar cut exactly at an entry boundary (no end-of-archive marker) is caught too.
    let t = tar(&[E::File("a", b"1", 0o644), E::File("b", b"2", 0o644)]);
    server.file("/cut.tar", t[..1024].to_vec());
    let err = fx.fetch(&uri(server.url("/cut.tar"), &out)).await.unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    server.file("/cut2.tar", t[..700].to_vec());
    let err = fx.fetch(&uri(server.url("/cut2.tar"), &out)).await.unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
    // And corrupt (not just short) gzip data.
    let mut bad = app_v1();
    let n = bad.len();
    bad[n / 2] ^= 0xff;
    bad[n / 2 + 1] ^= 0xff;
    server.file("/bad.tar.gz", bad);
    let err = fx.fetch(&uri(server.url("/bad.tar.gz"), &out)).await.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, FetchError::Corrupt { .. }), "{err:?}");
    assert_eq!(tree(&out), before);
}

/// Fetches a hostile archive and checks it was refused naming `entry`, and that nothing at all
/// changed: not the output directory, not its parent, not `/etc`.
async fn refused(server: &Server, path: &str, body: Vec<u8>, entry: &str) {
    server.file(path, body);
    let fx = Fx::new();
    let out = fx.out("victim");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("keep"), "x").unwrap();
    let passwd = fs::metadata("/etc/passwd").unwrap();
    let etc = listing(Path::new("/etc"));
    let err = fx.fetch(&uri(server.url(path), &out)).await.unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, FetchError::Refused { .. }), "{path}: {err:?}");
    assert!(text.contains(&format!("{entry:?}")), "{path}: {text}");
    assert_eq!(listing(&out), ["keep"], "{path}");
    assert_eq!(listing(&fx.work()), ["victim"], "{path}");
    assert_eq!(listing(fx.dir.path()), ["cache", "work"], "{path}");
    assert_eq!(listing(Path::new("/etc")), etc, "{path}");
    let now = fs::metadata("/etc/passwd").unwrap();
    assert_eq!(
        (now.uid(), now.mode(), now.nlink(), now.len()),
        (passwd.uid(), passwd.mode(), passwd.nlink(), passwd.len())
    );
}

#[tokio::test]
async fn hostile_archives_are_refused() {
    let server = Server::start();
    let body = zip(&[("fine.txt", b"ok"), ("../../evil", b"pwned")]);
    refused(&server, "/slip.zip", body, "../../evil").await;

    let abs = "/tmp/steward-fetch-absolute-evil";
    refused(&server, "/abs.tar", tar(&[E::File("ok", b"1", 0o644), E::File(abs, b"pwned", 0o644)]), abs).await;
    assert!(!Path::new(abs).exists());

    let body = tar(&[E::File("a/../../evil", b"pwned", 0o644)]);
    refused(&server, "/dotdot.tar", body, "a/../../evil").await;

    // A symlink to /etc followed by a file written through it.
    let body = gz(&tar(&[E::Symlink("etc", "/etc"), E::File("etc/steward-evil", b"pwned", 0o644)]));
    refused(&server, "/symlink-abs.tar.gz", body, "etc").await;
    assert!(!Path::new("/etc/steward-evil").exists());

    let body = tar(&[E::Dir("d/", 0o755), E::Symlink("d/up", "../../.."), E::File("d/up/evil", b"x", 0o644)]);
    refused(&server, "/symlink-rel.tar", body, "d/up").await;

    // A symlink that stays inside, but a later entry writes through it.
    let body = tar(&[E::Dir("real/", 0o755), E::Symlink("alias", "real"), E::File("alias/x", b"x", 0o644)]);
    refused(&server, "/through.tar", body, "alias/x").await;

    // Hard links to a file outside, or to anything but an extracted file.
    let body = tar(&[E::HardLink("passwd", "/etc/passwd")]);
    refused(&server, "/hard-abs.tar", body, "passwd").await;
    let body = tar(&[E::HardLink("passwd", "../../../../../../etc/passwd")]);
    refused(&server, "/hard-rel.tar", body, "passwd").await;
    let body = tar(&[E::Symlink("l", "x"), E::HardLink("h", "l")]);
    refused(&server, "/hard-to-link.tar", body, "h").await;

    refused(&server, "/fifo.tar", tar(&[E::Fifo("pipe")]), "pipe").await;
}

#[tokio::test]
async fn if_not_present_reuses_the_cache_without_a_request() {
    let server = Server::start();
    server.file("/app.tar.gz", app_v1());
    let fx = Fx::new();
    let u = uri(server.url("/app.tar.gz"), &fx.out("a"));
    assert!(fx.fetch(&u).await.unwrap().downloaded);
    let again = fx.fetch(&uri(server.url("/app.tar.gz"), &fx.out("b"))).await.unwrap();
    assert!(!again.downloaded);
    assert_eq!(again.sha256, sha256(&app_v1()));
    assert_eq!(server.requests("/app.tar.gz").len(), 1);
    assert!(fx.out("b").join("app/start.sh").is_file());

    // Concurrent fetches of one URL share one download.
    server.file("/shared.tar.gz", app_v1());
    let outs: Vec<_> = (0..4).map(|i| uri(server.url("/shared.tar.gz"), &fx.out(&format!("s{i}")))).collect();
    let results = futures_util::future::join_all(outs.iter().map(|u| fx.fetch(u))).await;
    assert_eq!(results.iter().filter(|r| r.as_ref().unwrap().downloaded).count(), 1);
    assert_eq!(server.requests("/shared.tar.gz").len(), 1);
}

#[tokio::test]
async fn always_revalidates_and_uses_the_cache_on_304() {
    let server = Server::start();
    server.route("/etag.tar.gz", Route { body: Arc::new(app_v1()), etag: Some("\"v1\"".into()), ..Route::default() });
    server.route(
        "/lm.tar.gz",
        Route {
            body: Arc::new(app_v1()),
            last_modified: Some("Wed, 21 Oct 2015 07:28:00 GMT".into()),
            ..Route::default()
        },
    );
    let fx = Fx::new();
    for path in ["/etag.tar.gz", "/lm.tar.gz"] {
        let mut u = uri(server.url(path), &fx.out("always"));
        u.pull_policy = PullPolicy::Always;
        assert!(fx.fetch(&u).await.unwrap().downloaded);
        let again = fx.fetch(&u).await.unwrap();
        assert!(!again.downloaded, "{path}: 304 uses the cache");
        let reqs = server.requests(path);
        assert_eq!(reqs.len(), 2, "{path}");
        assert!(!reqs[0].headers.contains_key("if-none-match"));
        if path == "/etag.tar.gz" {
            assert_eq!(reqs[1].headers["if-none-match"], "\"v1\"");
        } else {
            assert_eq!(reqs[1].headers["if-modified-since"], "Wed, 21 Oct 2015 07:28:00 GMT");
        }
    }
    // A new version on the server is downloaded.
    let v2 = gz(&tar(&[E::File("app/start.sh", b"v2", 0o755)]));
    server.route("/etag.tar.gz", Route { body: Arc::new(v2.clone()), etag: Some("\"v2\"".into()), ..Route::default() });
    let mut u = uri(server.url("/etag.tar.gz"), &fx.out("always"));
    u.pull_policy = PullPolicy::Always;
    let got = fx.fetch(&u).await.unwrap();
    assert!(got.downloaded);
    assert_eq!(got.sha256, sha256(&v2));
    assert_eq!(fs::read(fx.out("always").join("app/start.sh")).unwrap(), b"v2");
}

#[tokio::test]
async fn sha256_is_verified_before_extraction() {
    let server = Server::start();
    server.file("/app.tar.gz", app_v1());
    let fx = Fx::new();
    let out = fx.out("sha");
    let mut u = uri(server.url("/app.tar.gz"), &out);
    let wrong = "0".repeat(64);
    u.sha256 = Some(wrong.clone());
    let err = fx.fetch(&u).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, FetchError::Sha256Mismatch { .. }), "{err:?}");
    eprintln!("{text}");
    assert!(text.contains(&wrong) && text.contains(&sha256(&app_v1())), "{text}");
    assert!(!out.exists());
    // Nothing was cached either: the next fetch (right hash) downloads again.
    u.sha256 = Some(sha256(&app_v1()));
    assert!(fx.fetch(&u).await.unwrap().downloaded);
    assert!(out.join("app/start.sh").is_file());
    // A cached copy is checked against the hash again before use.
    assert!(!fx.fetch(&u).await.unwrap().downloaded);
    assert_eq!(server.requests("/app.tar.gz").len(), 2);
}

#[tokio::test]
async fn file_urls_and_the_repository() {
    let fx0 = Fx::new();
    let repo = fx0.dir.path().join("repo");
    fs::create_dir_all(repo.join("prod")).unwrap();
    fs::write(repo.join("prod/app.tar.gz"), app_v1()).unwrap();
    let fx = Fx::with(|o| o.repository = Some(format!("file://{}", repo.display())));

    let out = fx.out("file");
    let got = fx.fetch(&uri(format!("file://{}/prod/app.tar.gz", repo.display()), &out)).await.unwrap();
    assert!(got.downloaded);
    assert!(out.join("app/start.sh").is_file());

    let out = fx.out("repo");
    let mut u = uri("/prod/app.tar.gz".into(), &out);
    u.pull_policy = PullPolicy::Always;
    let got = fx.fetch(&u).await.unwrap();
    assert!(out.join("app/start.sh").is_file());
    assert_eq!(got.sha256, sha256(&app_v1()));
    // Unchanged file: not copied again. Changed: copied.
    assert!(!fx.fetch(&u).await.unwrap().downloaded);
    fs::write(repo.join("prod/app.tar.gz"), gz(&tar(&[E::File("app/start.sh", b"v2", 0o755)]))).unwrap();
    assert!(fx.fetch(&u).await.unwrap().downloaded);
    assert_eq!(fs::read(out.join("app/start.sh")).unwrap(), b"v2");

    let err = fx.fetch(&uri("/prod/nope.tar.gz".into(), &out)).await.unwrap_err();
    assert!(matches!(err, FetchError::NotFound { .. }), "{err:?}");
    let err = Fx::new().fetch(&uri("/prod/app.tar.gz".into(), &out)).await.unwrap_err();
    assert!(matches!(err, FetchError::NoRepository { .. }), "{err:?}");
}

#[tokio::test]
async fn xz_zip_and_plain_files() {
    let server = Server::start();
    server.file("/app.tar.xz", xz(&tar(&[E::File("bin/x", b"xz!", 0o755)])));
    server.file("/app.zip", zip(&[("lib/", b""), ("lib/z.txt", b"zip!")]));
    server.file("/tools/run%20me.sh", b"#!/bin/sh\n".to_vec());
    let fx = Fx::new();
    let out = fx.out("mixed");
    fx.fetch(&uri(server.url("/app.tar.xz"), &out)).await.unwrap();
    fx.fetch(&uri(server.url("/app.zip"), &out)).await.unwrap();
    fx.fetch(&uri(server.url("/tools/run%20me.sh"), &out)).await.unwrap();
    assert_eq!(fs::read(out.join("bin/x")).unwrap(), b"xz!");
    assert_eq!(fs::read(out.join("lib/z.txt")).unwrap(), b"zip!");
    assert_eq!(mode(&out.join("lib/z.txt")), 0o640);
    assert_eq!(fs::read(out.join("run me.sh")).unwrap(), b"#!/bin/sh\n");
    assert_eq!(mode(&out.join("run me.sh")), 0o644);
    assert_eq!(fs::metadata(out.join("run me.sh")).unwrap().uid(), owner().uid);
    assert_eq!(listing(&out), ["bin", "lib", "run me.sh"]);

    // A truncated xz is refused as such.
    let whole = xz(&tar(&[E::File("bin/x", &[1u8; 50_000], 0o755)]));
    server.file("/cut.tar.xz", whole[..whole.len() - 20].to_vec());
    let err = fx.fetch(&uri(server.url("/cut.tar.xz"), &fx.out("cutxz"))).await.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, FetchError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("xz"), "{err}");
}

#[tokio::test]
async fn application_files_outside_the_archive_survive_a_refetch() {
    let server = Server::start();
    server.file("/v1.tar.gz", gz(&tar(&[E::File("bin/app", b"v1", 0o755), E::File("VERSION", b"1", 0o644)])));
    server.file("/v2.tar.gz", gz(&tar(&[E::File("bin/app", b"v2", 0o755), E::File("VERSION", b"2", 0o644)])));
    let fx = Fx::new();
    let out = fx.out("app");
    fx.fetch(&uri(server.url("/v1.tar.gz"), &out)).await.unwrap();
    fs::create_dir_all(out.join("logs")).unwrap();
    fs::write(out.join("logs/app.log"), "running").unwrap();
    fs::write(out.join("pid"), "42").unwrap();
    fx.fetch(&uri(server.url("/v2.tar.gz"), &out)).await.unwrap();
    assert_eq!(fs::read(out.join("bin/app")).unwrap(), b"v2");
    assert_eq!(fs::read(out.join("VERSION")).unwrap(), b"2");
    assert_eq!(fs::read(out.join("logs/app.log")).unwrap(), b"running");
    assert_eq!(fs::read(out.join("pid")).unwrap(), b"42");
    assert_eq!(listing(&out), ["VERSION", "bin", "logs", "pid"]);
    assert_eq!(listing(&fx.work()), ["app"]);
}

#[tokio::test]
async fn a_symlink_planted_in_the_output_path_is_not_followed() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let server = Server::start();
    server.file("/app.tar.gz", app_v1());
    let fx = Fx::new();
    let elsewhere = fx.dir.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::create_dir_all(fx.work()).unwrap();
    // The application (which owns its directory) points a subdirectory somewhere else.
    let link = fx.work().join("sub");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let user = owner();
    std::os::unix::fs::lchown(&link, Some(user.uid), Some(user.gid)).unwrap();
    let err = fx.fetch(&uri(server.url("/app.tar.gz"), &link.join("pkg"))).await.unwrap_err();
    assert!(matches!(err, FetchError::OutputDir { .. }), "{err:?}");
    eprintln!("{err}");
    assert!(err.to_string().contains("symlink owned by uid"), "{err}");
    assert!(listing(&elsewhere).is_empty());

    // A root-owned symlink (an administrator's) is followed.
    let admin = fx.work().join("admin");
    std::os::unix::fs::symlink(&elsewhere, &admin).unwrap();
    fx.fetch(&uri(server.url("/app.tar.gz"), &admin.join("pkg"))).await.unwrap();
    assert!(elsewhere.join("pkg/app/start.sh").is_file());
}

// ---------------------------------------------------------------------------------------------
// Extraction limits (issue 14): a bomb is stopped by the configured limits and leaves nothing

/// A real gzip bomb: a .tar.gz of one file of `gib` GiB of zeros. Built as concatenated gzip
/// members (valid gzip: `gzip -d` and every decoder read them as one stream), so the test
/// compresses 16 MiB once instead of a gigabyte.
fn gzip_bomb(gib: u64) -> Vec<u8> {
    let size = gib << 30;
    let chunk = gz_best(&vec![0u8; 16 << 20]);
    let mut out = Vec::new();
    // The size set by hand (and the checksum again): `header` takes a usize.
    let mut h = header("zeros.bin", b'0', "", 0, 0o644);
    octal(&mut h[124..136], size);
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|b| *b as u32).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    out.extend(gz_best(&h));
    for _ in 0..size / (16 << 20) {
        out.extend_from_slice(&chunk);
    }
    out.extend(gz_best(&[0u8; 1024]));
    out
}

fn gz_best(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Nothing of a refused archive anywhere: not in the output directory (or its parent: no
/// temporary extraction directory), not in the cache.
fn nothing_left(out: &Path, cache: &Path) {
    assert_eq!(tree(out), Vec::<String>::new(), "nothing extracted into {}", out.display());
    let parent = out.parent().unwrap();
    assert_eq!(listing(parent), [out.file_name().unwrap().to_string_lossy().into_owned()], "{}", parent.display());
    assert_eq!(listing(cache), Vec::<String>::new(), "no cache entry in {}", cache.display());
}

/// The bomb of issue 14 (1 GiB of zeros in a ~1 MB .tar.gz) through the real daemon, whose
/// config sets `fetch_max_extracted_bytes`: the instance fails naming the URL and the limit,
/// after at most that many bytes, and nothing of the archive stays on disk.
#[tokio::test]
async fn a_gzip_bomb_is_refused_by_the_configured_size_limit_through_the_daemon() {
    let repo = tempfile::tempdir().unwrap();
    let bomb = gzip_bomb(1);
    eprintln!("bomb: 1 GiB of zeros in {} bytes", bomb.len());
    assert!(bomb.len() < 1_100_000, "{}", bomb.len());
    fs::write(repo.path().join("bomb.tar.gz"), &bomb).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let limit = 32u64 << 20;
    let d = common::Daemon::start_with(
        "fetch-bomb",
        &format!(
            "package_repository = \"file://{}\"\nfetch_cache_dir = \"{}\"\nfetch_max_extracted_bytes = {limit}\n",
            repo.path().display(),
            cache.path().display()
        ),
    );
    let spec = common::spec(
        "bomb",
        1,
        serde_json::json!({"uris": [{"value": "/bomb.tar.gz", "outputDir": "${workPath}/pkg"}]}),
        serde_json::json!({"restartPolicy": {"policy": "Never"}}),
    );
    let started = Instant::now();
    d.apply_json(&spec).await;
    let iid = common::id("test", "bomb", 0);
    let st = d.wait(&iid, 60, |s| s.message.contains("fetch_max_extracted_bytes")).await;
    let took = started.elapsed();
    eprintln!("refused in {took:?}: {}", st.message);
    assert!(st.message.contains("/bomb.tar.gz") && st.message.contains(&limit.to_string()), "{}", st.message);
    assert!(st.message.contains("nothing was installed"), "{}", st.message);
    assert!(st.pid.is_none(), "nothing started: {st:?}");
    let work = d.work_dir().join("test.bomb.0");
    let left = tree(&work);
    assert!(left.iter().all(|p| p == "pkg"), "at most the (empty) outputDir, no partial extraction: {left:?}");
    assert_eq!(listing(&d.work_dir()), ["test.bomb.0"], "no temporary directory left");
    let cached: Vec<String> = listing(cache.path()).into_iter().filter(|n| !n.ends_with(".part")).collect();
    assert!(cached.is_empty(), "the bomb is not kept in the cache: {cached:?}");
}

/// With the default limits a bomb that expands more than 1000x is stopped by the ratio.
#[tokio::test]
async fn default_limits_stop_a_bomb_by_its_ratio_and_leave_nothing() {
    let server = Server::start();
    // 64 MiB of zeros: ~1030x at gzip's best, above the default 1000x.
    let mut data = header("zeros.bin", b'0', "", 64 << 20, 0o644).to_vec();
    data.resize(512 + (64 << 20), 0);
    data.extend_from_slice(&[0u8; 1024]);
    let bomb = gz_best(&data);
    let ratio = data.len() as f64 / bomb.len() as f64;
    assert!(ratio > 1000.0, "the test's bomb must be above the default ratio: {ratio}");
    server.file("/small-bomb.tar.gz", bomb.clone());
    let fx = Fx::new();
    assert_eq!(fx.fetcher.options().max_extraction_ratio, 1000);
    assert_eq!(fx.fetcher.options().max_extracted_bytes, 10 << 30);
    assert_eq!(fx.fetcher.options().max_extracted_entries, 1_000_000);
    let out = fx.out("app");
    let started = Instant::now();
    let err = fx.fetch(&uri(server.url("/small-bomb.tar.gz"), &out)).await.unwrap_err();
    let text = err.to_string();
    eprintln!("{} bytes ({ratio:.0}x) refused in {:?}: {text}", bomb.len(), started.elapsed());
    assert!(matches!(err, FetchError::Limit { .. }), "{err:?}");
    assert!(text.contains("/small-bomb.tar.gz") && text.contains("fetch_max_extraction_ratio"), "{text}");
    assert!(text.contains(&format!("({} bytes)", bomb.len())) && text.contains("1000 times"), "{text}");
    nothing_left(&out, &fx.dir.path().join("cache"));

    // An ordinary archive is well within the defaults.
    server.file("/app.tar.gz", app_v1());
    fx.fetch(&uri(server.url("/app.tar.gz"), &fx.out("ok"))).await.unwrap();
}

/// A lower configured ratio refuses an archive of repetitive text (xz too), and the error says
/// which limit; the same archive passes with the default.
#[tokio::test]
async fn the_ratio_limit_is_configurable_and_applies_to_xz_and_zip() {
    let server = Server::start();
    // Log-like text: a constant line with a little randomness, some 10-30x compressible.
    let mut seed = 7;
    let mut text = Vec::new();
    while text.len() < 4 << 20 {
        text.extend_from_slice(b"2026-11-24 INFO request served from the cache in 0.1 ms, status ok id=");
        text.extend(random_text(4, &mut seed));
        text.push(b'\n');
    }
    let t = tar(&[E::File("log.txt", &text, 0o644)]);
    let (xzed, zipped) = (xz(&t), zip(&[("log.txt", &text)]));
    for packed in [&xzed, &zipped] {
        let ratio = text.len() / packed.len();
        assert!((6..500).contains(&ratio), "ratio {ratio}");
    }
    server.file("/text.tar.xz", xzed);
    server.file("/text.zip", zipped);
    let fx = Fx::with(|o| o.max_extraction_ratio = 5);
    for path in ["/text.tar.xz", "/text.zip"] {
        let out = fx.out("t");
        let err = fx.fetch(&uri(server.url(path), &out)).await.unwrap_err();
        eprintln!("{err}");
        assert!(matches!(err, FetchError::Limit { .. }), "{path}: {err:?}");
        assert!(err.to_string().contains("5 times") && err.to_string().contains(path), "{err}");
        nothing_left(&out, &fx.dir.path().join("cache"));
    }
    let fx = Fx::new();
    fx.fetch(&uri(server.url("/text.tar.xz"), &fx.out("t"))).await.unwrap();
    assert_eq!(fs::read(fx.out("t").join("log.txt")).unwrap(), text);
}

/// Too many entries: refused at the configured count, naming it; one fewer is fine.
#[tokio::test]
async fn the_file_count_limit_refuses_and_leaves_nothing() {
    let server = Server::start();
    let names: Vec<String> = (0..101).map(|i| format!("f{i}")).collect();
    let many: Vec<E<'_>> = names.iter().map(|n| E::File(n, b"", 0o644)).collect();
    server.file("/many.tar.gz", gz(&tar(&many)));
    server.file("/enough.tar.gz", gz(&tar(&many[..100])));
    let fx = Fx::with(|o| o.max_extracted_entries = 100);
    let out = fx.out("m");
    let err = fx.fetch(&uri(server.url("/many.tar.gz"), &out)).await.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, FetchError::Limit { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("/many.tar.gz") && text.contains("more than 100 entries"), "{text}");
    assert!(text.contains("fetch_max_extracted_files"), "{text}");
    nothing_left(&out, &fx.dir.path().join("cache"));
    fx.fetch(&uri(server.url("/enough.tar.gz"), &out)).await.unwrap();
    assert_eq!(listing(&out).len(), 100);
}

// ---------------------------------------------------------------------------------------------
// Measurement: cargo test --release --test fetch -- --ignored --nocapture

/// Base64 of pseudo-random bytes: compresses to about three quarters, like real packages.
fn random_text(len: usize, seed: &mut u64) -> Vec<u8> {
    let mut raw = Vec::with_capacity(len * 3 / 4 + 3);
    while raw.len() < len * 3 / 4 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        raw.extend_from_slice(&seed.to_le_bytes());
    }
    let mut t = base64(&raw).into_bytes();
    t.truncate(len);
    t
}

#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn measure_100mb_tar_gz_against_curl_and_tar() {
    let mut seed = 0x9e3779b97f4a7c15u64;
    let files: Vec<(String, Vec<u8>)> =
        (0..136).map(|i| (format!("pkg/data/part-{i:03}.txt"), random_text(1 << 20, &mut seed))).collect();
    let entries: Vec<E<'_>> = files.iter().map(|(n, d)| E::File(n, d, 0o644)).collect();
    let body = gz(&tar(&entries));
    println!("archive: {:.1} MB compressed, {:.1} MB of files", body.len() as f64 / 1e6, (136 << 20) as f64 / 1e6);
    let server = Server::start();
    server.file("/big.tar.gz", body);
    let fx = Fx::new();

    let out = fx.out("ours");
    let t = Instant::now();
    let got = fx.fetch(&uri(server.url("/big.tar.gz"), &out)).await.unwrap();
    let ours = t.elapsed();
    assert!(got.downloaded);
    assert_eq!(fs::read(out.join("pkg/data/part-007.txt")).unwrap(), files[7].1);

    let out2 = fx.out("again");
    let t = Instant::now();
    fx.fetch(&uri(server.url("/big.tar.gz"), &out2)).await.unwrap();
    let cached = t.elapsed();

    let out3 = fx.out("curl");
    fs::create_dir_all(&out3).unwrap();
    let t = Instant::now();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("curl -sf {} | tar xz -C {}", server.url("/big.tar.gz"), out3.display()))
        .status()
        .unwrap();
    let curl = t.elapsed();
    assert!(status.success());
    assert_eq!(tree(&out), tree(&out3));
    println!("steward fetch (download + sha256 + fsync + extract): {ours:?}");
    println!("steward fetch from the cache (IfNotPresent hit):      {cached:?}");
    println!("curl -s URL | tar xz -C dir:                          {curl:?}");
}
