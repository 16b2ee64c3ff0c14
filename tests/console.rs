//! The web console (issue 49) in a real headless chromium, driven through chromedriver
//! (WebDriver, the fantoccini crate), against `steward-sched serve` over three
//! network-namespace hosts: its files are public and carry a strict Content-Security-Policy;
//! each page renders with live data; a rollout started from the CLI is seen progressing without
//! a reload; Pause on the page pauses it (as the CLI then reads); an app's page shows what each
//! revision changed; a read-only token sees no buttons (but the diffs) and the API refuses it
//! anyway; a hook run's chart shows its measurements.
//! Screenshots of each page at 1280×800 are written to target/console-screenshots/, or with
//! `STEWARD_CONSOLE_SCREENSHOTS=1` to docs/console/ (the ones the README shows): a test run
//! leaves the checkout as it was.

mod cluster;
mod common;

use cluster::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PORT: u16 = 7480;
const DRIVER_PORT: u16 = 9515;

/// Runs a command through `client` and asserts it worked: its JSON output.
fn ok(c: &Cluster, client: &Path, args: &[&str]) -> Value {
    let (code, out, err) = c.sched_with(client, args);
    assert_eq!(code, 0, "{args:?}: {out}\n{err}");
    serde_json::from_str(&out).unwrap_or(Value::Null)
}

/// `curl -i` in the control namespace: (status, headers in lower case, body).
fn curl(c: &Cluster, token: Option<&str>, method: &str, path: &str) -> (u16, String, String) {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net=/run/netns/{}", c.ctl))
        .args(["curl", "-sS", "-i", "--cacert"])
        .arg(c.dir.path().join("ca.pem"))
        .args(["-X", method])
        .arg(format!("https://127.0.0.1:{PORT}{path}"));
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_lowercase(), body.to_string())
}

/// A loopback port of this namespace whose connections are carried to `port` on the loopback
/// of namespace `ns` (chromedriver and chromium run there, beside `serve`): a thread that
/// entered the namespace makes the connections, so its sockets live there.
fn forward(ns: &str, port: u16) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let local = listener.local_addr().unwrap().port();
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        for inbound in listener.incoming() {
            let Ok(inbound) = inbound else { return };
            let Ok(outbound) = TcpStream::connect(("127.0.0.1", port)) else { continue };
            let (a, b) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut &inbound, &mut &outbound);
                let _ = outbound.shutdown(Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut &b, &mut &a);
                let _ = a.shutdown(Shutdown::Write);
            });
        }
    });
    local
}

/// chromedriver in the control namespace, killed when dropped.
struct Driver(std::process::Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A headless chromium at 1280×800 in the control namespace, and its chromedriver.
async fn browser(c: &Cluster) -> (Client, Driver) {
    let log = std::fs::File::create(c.dir.path().join("chromedriver.log")).unwrap();
    let driver = Driver(
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", c.ctl))
            .args(["chromedriver", &format!("--port={DRIVER_PORT}")])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("chromedriver (scripts/install-deps.sh installs chromium-driver)"),
    );
    let local = forward(&c.ctl, DRIVER_PORT);
    let mut caps = serde_json::Map::new();
    // Root in a test namespace: no sandbox; the test CA is not in chromium's store, so the
    // server's certificate (made for 127.0.0.1 by `steward cert`) is taken as it is.
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": "/usr/bin/chromium", "args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--ignore-certificate-errors", "--window-size=1280,800", "--hide-scrollbars",
            "--force-device-scale-factor=1", "--lang=en-US"]}),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{local}"))
            .await
        {
            Ok(client) => {
                viewport(&client, 1280, 800).await;
                return (client, driver);
            }
            Err(e) => {
                let log = std::fs::read_to_string(c.dir.path().join("chromedriver.log")).unwrap_or_default();
                assert!(Instant::now() < deadline, "no browser session: {e}\n{log}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

/// Sizes the window so that the page itself (the screenshots) is `width`×`height`.
async fn viewport(b: &Client, width: u32, height: u32) {
    b.set_window_size(width, height).await.unwrap();
    let inner = b.execute("return [window.innerWidth, window.innerHeight]", vec![]).await.unwrap();
    let (w, h) = (inner[0].as_u64().unwrap() as u32, inner[1].as_u64().unwrap() as u32);
    b.set_window_size(2 * width - w, 2 * height - h).await.unwrap();
}

/// Evaluates `expr` in the page until it is true (or a non-empty, non-false value): that value.
async fn wait_js(b: &Client, secs: u64, what: &str, expr: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last;
    loop {
        match b.execute(&format!("try {{ return ({expr}); }} catch (e) {{ return null; }}"), vec![]).await {
            Ok(v) if !matches!(v, Value::Null | Value::Bool(false)) && v != json!("") && v != json!(0) => return v,
            Ok(v) => last = v,
            Err(e) => last = json!(e.to_string()),
        }
        if Instant::now() > deadline {
            let text = b.execute("return document.body.innerText", vec![]).await.unwrap_or_default();
            panic!("{what}: not within {secs}s (last {last}); the page reads:\n{}", text.as_str().unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The page's screenshot, as NAME.png (a page that showed an error fails first): in
/// docs/console/ when asked for (see the module docs), else under target/.
async fn shot(b: &Client, name: &str) {
    let errors = b.execute("return [...document.querySelectorAll('#toast .bad')].map(e => e.textContent)", vec![]);
    assert_eq!(errors.await.unwrap(), json!([]), "{name}: the page showed errors");
    let png = b.screenshot().await.unwrap();
    let into_docs = std::env::var("STEWARD_CONSOLE_SCREENSHOTS").is_ok_and(|v| v == "1");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(if into_docs {
        "docs/console"
    } else {
        "target/console-screenshots"
    });
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Opens `steward-sched serve`'s console at `path` in the browser (a fresh load: a deep link).
async fn open(b: &Client, path: &str) {
    b.goto(&format!("https://127.0.0.1:{PORT}{path}")).await.unwrap();
}

async fn sign_in(b: &Client, token: &str) {
    open(b, "/ui/login").await;
    sign_in_here(b, token).await;
}

/// Fills in the sign-in form the browser shows.
async fn sign_in_here(b: &Client, token: &str) {
    let input = b.wait().for_element(Locator::Css("#token")).await.unwrap();
    input.send_keys(token).await.unwrap();
    b.find(Locator::Css("#sign-in")).await.unwrap().click().await.unwrap();
    wait_js(b, 20, "signed in", "document.querySelector('#role') && document.querySelector('#role').dataset.role")
        .await;
}

/// JavaScript: true once the page's diff shows the line `"value": "FROM"` removed and
/// `"value": "TO"` added (VERSION's, as the specs' JSON has it), and no other version's line.
fn diff_shows(from: &str, to: &str) -> String {
    format!(
        "(() => {{ const t = (sel) => [...document.querySelectorAll(sel)].map(l => l.textContent.replace(/\\s+/g, ' ').trim()); \
         const del = t('#diff .del'), add = t('#diff .add'), all = t('#diff span').join('\\n'); \
         return del.includes('- \"value\": \"{from}\"') && add.includes('+ \"value\": \"{to}\"') \
           && !/\"value\": \"v[0-9]\"/.test(all.replace(/\"value\": \"({from}|{to})\"/g, '')); }})()"
    )
}

/// JavaScript: true once button `shown` is on the page and button `hidden` is not.
fn only_button(shown: &str, hidden: &str) -> String {
    format!(
        "document.querySelector('button[data-action={shown}]') !== null && document.querySelector('button[data-action={hidden}]') === null"
    )
}

async fn buttons(b: &Client) -> u64 {
    b.execute("return document.querySelectorAll('button[data-action]').length", vec![]).await.unwrap().as_u64().unwrap()
}

/// An app of 6 sleepers whose rollouts take a while: a new instance counts once it has been
/// ready 3 s, one surge instance at a time, through the strategy's `steps` when given.
fn web(version: &str, steps: Option<Value>) -> Value {
    let mut a = app("web", 6, json!({"strategy": {"maxUnavailable": 0, "maxSurge": 1, "minReadySeconds": 3}}));
    if let Some(steps) = steps {
        a["strategy"]["steps"] = steps;
    }
    let p = &mut a["spec"]["template"]["spec"]["processes"][0];
    p["env"] = json!([{"name": "VERSION", "value": version}]);
    p["resources"] = json!({"requests": {"cpu": "250m", "memory": "256Mi"}});
    a
}

/// One instance serving `v.json`, whose number changes every 300 ms: what the hook measures.
fn probe() -> Value {
    common::spec(
        "probe",
        1,
        json!({"procName": "python3", "ports": [{"name": "http", "hostPort": 0}],
               "startCmd": "(i=0; while :; do i=$((i+7)); echo \"{\\\"v\\\": $((i % 50))}\" > v.tmp; mv v.tmp v.json; sleep 0.3; done) & \
                            exec python3 -m http.server ${ports.http} --bind ${hostip}"}),
        json!({}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_fleet_live_and_acts_with_the_tokens_rights() {
    let c = Cluster::start("w", ["a", "a", "b"]);
    let (_serve, client) = c.serve(&c.file, PORT);

    // The files: public (no token), typed, revalidated by ETag, under a strict CSP; `/` leads
    // to them; data is the API's, with a token.
    let (status, head, _) = curl(&c, None, "GET", "/");
    assert_eq!(status, 302, "{head}");
    assert!(head.contains("location: /ui/"), "{head}");
    let (status, head, body) = curl(&c, None, "GET", "/ui/apps/test/web/rollout");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("content-type: text/html; charset=utf-8"), "{head}");
    assert!(head.contains("content-security-policy: default-src 'none'; script-src 'self'"), "{head}");
    if std::env::var_os("STEWARD_CONSOLE_DIR").is_none() {
        assert!(head.contains("etag: \"") && head.contains("cache-control: no-cache"), "{head}");
    }
    assert!(body.contains("/ui/static/console.js") && !body.contains("<script>"), "no inline script: {body}");
    let (status, head, _) = curl(&c, None, "GET", "/ui/static/console.js");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("content-type: text/javascript"), "{head}");
    let (status, _, body) = curl(&c, None, "GET", "/ui/static/nothing.js");
    assert_eq!(status, 404, "{body}");
    let (status, _, _) = curl(&c, None, "GET", "/v1/whoami");
    assert_eq!(status, 401);
    let (status, _, body) = curl(&c, Some(READ_TOKEN), "GET", "/v1/whoami");
    assert_eq!(
        (status, serde_json::from_str::<Value>(&body).unwrap()),
        (200, json!({"role": "read", "server": "steward-sched"})),
        "{body}"
    );
    let (_, _, body) = curl(&c, Some(TOKEN), "GET", "/v1/whoami");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["role"], "write", "{body}");

    // What the pages show: an app on every host, a probe and a hook run made by hand on it.
    let path = c.dir.path().join("web.json");
    std::fs::write(&path, web("v1", None).to_string()).unwrap();
    ok(&c, &client, &["deploy", path.to_str().unwrap()]);
    std::fs::write(c.dir.path().join("probe.json"), probe().to_string()).unwrap();
    ok(&c, &client, &["deploy", c.dir.path().join("probe.json").to_str().unwrap()]);
    wait_running(&c, "web").await;
    wait_running(&c, "probe").await;
    let template = json!({"kind": "HookTemplate", "metadata": {"name": "answers", "namespace": "test"},
        "spec": {"args": [{"name": "host"}, {"name": "port"}],
                 "metrics": [{"name": "value", "count": 8, "interval": "500ms", "failureLimit": 4,
                              "successCondition": "asInt(result) < 40",
                              "provider": {"web": {"url": "http://{{ args.host }}:{{ args.port }}/v.json",
                                                   "jsonPath": "{$.v}", "timeoutSeconds": 2}}}]}});
    std::fs::write(c.dir.path().join("answers.json"), template.to_string()).unwrap();
    ok(&c, &client, &["hook", "template", "apply", c.dir.path().join("answers.json").to_str().unwrap()]);
    // A gate for rollouts: the probe answers (any number will do), three times.
    let mut gate = template.clone();
    gate["metadata"]["name"] = json!("gate");
    gate["spec"]["metrics"] = json!([{"name": "answers", "count": 3, "interval": "1s",
        "provider": {"web": {"url": "http://{{ args.host }}:{{ args.port }}/v.json", "jsonPath": "{$.v}", "timeoutSeconds": 2}}}]);
    std::fs::write(c.dir.path().join("gate.json"), gate.to_string()).unwrap();
    ok(&c, &client, &["hook", "template", "apply", c.dir.path().join("gate.json").to_str().unwrap()]);
    let (host, port) = {
        let mut found = None;
        for h in &c.hosts {
            if let Some(s) = h.daemon.client.list(&[("name", "probe")]).await.unwrap().first() {
                found = Some((h, *s.ports.values().next().unwrap()));
            }
        }
        found.expect("the probe runs somewhere")
    };
    let (host_arg, port_arg) = (format!("host={}", host.ip), format!("port={port}"));
    let create = ["hook", "run", "create", "test/answers", "--name", "by-hand", "--node", &host.name];
    let args: Vec<&str> = create.into_iter().chain(["--arg", &host_arg, "--arg", &port_arg, "-w"]).collect();
    let (code, out, err) = c.sched_with(&client, &args);
    assert!(code == 0 || code == 6, "{out}\n{err}");

    let (b, _driver) = browser(&c).await;
    // Without a token, any page asks for one first, and comes back to it after.
    open(&b, "/ui/cluster").await;
    wait_js(&b, 20, "the sign-in form", "document.querySelector('#token') !== null").await;
    shot(&b, "login").await;
    sign_in(&b, TOKEN).await;

    // The cluster: every node up, with its capacity bars.
    open(&b, "/ui/cluster").await;
    wait_js(&b, 20, "three nodes up", "document.querySelector('#nodes-up').textContent === '3 of 3'").await;
    let rows =
        wait_js(&b, 10, "a row per node", "document.querySelectorAll('tbody tr[data-key]').length === 3 && 3").await;
    assert_eq!(rows, json!(3));
    wait_js(&b, 10, "capacity bars", "document.querySelectorAll('tbody [role=meter]').length === 6").await;
    assert_eq!(buttons(&b).await, 3, "a write token sees a cordon button per node");
    // The keyboard: the first Tab reaches the skip link, Enter on it moves to the page's content.
    let body = b.find(Locator::Css("body")).await.unwrap();
    body.send_keys(&fantoccini::key::Key::Tab.to_string()).await.unwrap();
    wait_js(&b, 5, "the skip link focused", "document.activeElement.className === 'skip'").await;
    b.active_element().await.unwrap().send_keys(&fantoccini::key::Key::Enter.to_string()).await.unwrap();
    wait_js(
        &b,
        5,
        "the content focused",
        "document.activeElement.id === 'main' && location.pathname === '/ui/cluster'",
    )
    .await;
    shot(&b, "cluster").await;

    // The apps, then one app by following its link (no reload: the app's own routing).
    open(&b, "/ui/apps").await;
    wait_js(&b, 20, "test/web listed 6 of 6 ready", "[...document.querySelectorAll('tbody tr')].some(r => r.dataset.key === 'test/web' && r.textContent.includes('6 of 6'))").await;
    shot(&b, "apps").await;
    b.execute("window.__stay = 42", vec![]).await.unwrap();
    b.find(Locator::Css("a[href='/ui/apps/test/web']")).await.unwrap().click().await.unwrap();
    wait_js(
        &b,
        20,
        "the app's instances",
        "document.querySelectorAll('tbody tr[data-key^=\"test/web/\"]').length === 6",
    )
    .await;
    wait_js(&b, 10, "its spec", "document.querySelector('#spec').textContent.includes('\"VERSION\"')").await;
    assert_eq!(b.execute("return window.__stay", vec![]).await.unwrap(), json!(42), "the link reloaded the page");
    b.back().await.unwrap();
    wait_js(
        &b,
        10,
        "Back returns to the apps",
        "location.pathname === '/ui/apps' && document.querySelector('h1').textContent === 'Apps'",
    )
    .await;
    open(&b, "/ui/apps/test/web").await;
    wait_js(&b, 20, "the app page", "document.querySelectorAll('tbody tr[data-key^=\"test/web/\"]').length === 6")
        .await;
    let everywhere =
        "[...document.querySelectorAll('tbody tr[data-key^=\"1/\"]')].some(r => r.textContent.includes('h1, h2, h3'))";
    wait_js(&b, 10, "its revision on every node", everywhere).await;

    // The engine, and events streaming in.
    open(&b, "/ui/engine").await;
    wait_js(
        &b,
        20,
        "the leader",
        "document.querySelector('#leader') && document.querySelector('#leader').textContent !== 'none'",
    )
    .await;
    shot(&b, "engine").await;
    open(&b, "/ui/events").await;
    wait_js(
        &b,
        30,
        "events of test/web",
        "[...document.querySelectorAll('#events tr')].some(r => r.textContent.includes('test/web/'))",
    )
    .await;
    // Filtered by type, in the address too (a deep link).
    let typed = b.find(Locator::Css("#f-type")).await.unwrap();
    typed.send_keys("transition").await.unwrap();
    wait_js(&b, 10, "only transitions shown", "[...document.querySelectorAll('#events tr')].filter(r => !r.hidden).every(r => r.dataset.type === 'transition') && location.search.includes('type=transition')").await;
    // Newest first by the events' own times, whichever node's backlog came first.
    let by_time = "[...document.querySelectorAll('#events tr')].map(r => Number(r.dataset.at))";
    let times = b.execute(&format!("return {by_time}"), vec![]).await.unwrap();
    let times: Vec<u64> = serde_json::from_value(times).unwrap();
    assert!(times.len() > 10 && times.windows(2).all(|w| w[0] >= w[1]), "not newest first: {times:?}");
    shot(&b, "events").await;

    // The hook run: a point per measurement, the condition's bound drawn.
    open(&b, "/ui/hookruns").await;
    wait_js(&b, 20, "the run listed", "document.querySelector('a[href=\"/ui/hookruns/test/by-hand\"]') !== null").await;
    open(&b, "/ui/hookruns/test/by-hand").await;
    let points = wait_js(
        &b,
        20,
        "the chart's points",
        "document.querySelector('svg.chart') && Number(document.querySelector('svg.chart').dataset.points)",
    )
    .await;
    assert_eq!(points, json!(8), "8 measurements charted");
    let circles = b.execute("return document.querySelectorAll('svg.chart circle').length", vec![]).await.unwrap();
    assert_eq!(circles, json!(8));
    wait_js(&b, 5, "the condition's bound", "document.querySelector('svg.chart line.threshold') !== null").await;
    wait_js(&b, 5, "the measurements' table", "document.querySelectorAll('tbody tr[data-key]').length >= 8 + 2").await;
    shot(&b, "hookrun").await;

    // A rollout started from the CLI, seen progressing on the page without a reload.
    open(&b, "/ui/apps/test/web/rollout").await;
    wait_js(&b, 20, "the rollout page", "document.querySelector('#phase').dataset.phase !== ''").await;
    b.execute("window.__stay = 7", vec![]).await.unwrap();
    // Layout shifts from here on, as the data streams in (the Layout Instability API).
    let observe = "window.__cls = 0; new PerformanceObserver((l) => { for (const e of l.getEntries()) \
                   if (!e.hadRecentInput) window.__cls += e.value; }).observe({type: 'layout-shift'});";
    b.execute(observe, vec![]).await.unwrap();
    let steps = json!([{"partition": 1}, {"hook": {"template": "gate", "args": [
        {"name": "host", "value": host.ip}, {"name": "port", "value": port.to_string()}]}}]);
    std::fs::write(&path, web("v2", Some(steps)).to_string()).unwrap();
    let mut deploy = c.sched_cmd_with(&client, &["deploy", path.to_str().unwrap()]).spawn().unwrap();
    wait_js(&b, 30, "progressing", "document.querySelector('#phase').dataset.phase === 'progressing'").await;
    wait_js(&b, 10, "Pause, not Resume, while it progresses", &only_button("pause", "resume")).await;
    // The steps, and a node waiting on its hook run (linked to the run's page).
    wait_js(&b, 10, "the steps", "document.querySelector('#steps').textContent.includes('hook: gate')").await;
    wait_js(
        &b,
        60,
        "a node waiting on its hook",
        "document.querySelector('tbody a[href^=\"/ui/hookruns/test/\"]') !== null",
    )
    .await;
    shot(&b, "rollout-hook").await;
    wait_js(
        &b,
        60,
        "some instances updated",
        "Number(document.querySelector('#updated [role=meter]').dataset.value) >= 2",
    )
    .await;
    shot(&b, "rollout").await;
    assert_eq!(b.execute("return window.__stay", vec![]).await.unwrap(), json!(7), "the page was reloaded");

    // Pause from the page: the API says paused.
    b.find(Locator::Css("button[data-action=pause]")).await.unwrap().click().await.unwrap();
    wait_js(&b, 20, "paused on the page", "document.querySelector('#phase').dataset.phase === 'paused'").await;
    wait_js(&b, 10, "Resume, not Pause, while it is paused", &only_button("resume", "pause")).await;
    let status = ok(&c, &client, &["rollout", "status", "test/web"]);
    assert_eq!(status["rollout"]["phase"], "paused", "{status:#}");
    b.find(Locator::Css("button[data-action=resume]")).await.unwrap().click().await.unwrap();
    wait_js(&b, 120, "complete", "document.querySelector('#phase').dataset.phase === 'complete'").await;
    let toggles = "document.querySelectorAll('button[data-action=pause], button[data-action=resume]').length";
    assert_eq!(b.execute(&format!("return {toggles}"), vec![]).await.unwrap(), json!(0), "complete: nothing to pause");
    let shift = b.execute("return window.__cls", vec![]).await.unwrap().as_f64().unwrap();
    assert!(shift < 0.01, "the page moved as data came in: cumulative layout shift {shift}");
    assert_eq!(b.execute("return window.__stay", vec![]).await.unwrap(), json!(7), "the page was reloaded");
    // On a phone: the same page, narrower.
    viewport(&b, 390, 844).await;
    wait_js(&b, 5, "nothing wider than the phone", "document.documentElement.scrollWidth <= 390 + 1").await;
    shot(&b, "rollout-phone").await;
    viewport(&b, 1280, 800).await;
    let _ = deploy.kill();
    let _ = deploy.wait();

    // A third revision (rolled out quickly), then the app: what each revision changed.
    let mut v3 = web("v3", None);
    v3["strategy"] = json!({"maxUnavailable": 1, "maxSurge": 1});
    std::fs::write(&path, v3.to_string()).unwrap();
    ok(&c, &client, &["deploy", path.to_str().unwrap()]);
    open(&b, "/ui/apps/test/web").await;
    let third = "[...document.querySelectorAll('tbody tr[data-key^=\"3/\"]')].some(r => r.textContent.includes('(current)') && r.textContent.includes('h1, h2, h3'))";
    wait_js(&b, 30, "revision 3, current on every node", third).await;
    // Without a revision chosen, the current one's changes.
    wait_js(&b, 20, "revision 3's diff", &diff_shows("v2", "v3")).await;
    let caption = b.find(Locator::Css("#diff-caption")).await.unwrap().text().await.unwrap();
    assert_eq!(caption, "What revision 3 changed from revision 2 (as h1 keeps them)");
    // Revision 2's, by the keyboard (Enter on its link): in place, its address a deep link, and
    // nothing on the page moves.
    b.execute("window.__stay = 8", vec![]).await.unwrap();
    b.execute(observe, vec![]).await.unwrap();
    let link = b.find(Locator::Css("tr[data-key^='2/'] a[data-rev]")).await.unwrap();
    assert_eq!(link.text().await.unwrap(), "diff from 1");
    link.send_keys(&fantoccini::key::Key::Enter.to_string()).await.unwrap();
    wait_js(&b, 20, "revision 2's diff", &diff_shows("v1", "v2")).await;
    wait_js(&b, 5, "its row chosen", "document.querySelector('tr.chosen').dataset.key.startsWith('2/')").await;
    assert_eq!(
        b.execute("return location.pathname + location.search", vec![]).await.unwrap(),
        json!("/ui/apps/test/web/revisions/2?node=h1")
    );
    assert_eq!(
        b.execute("return document.activeElement.dataset.rev", vec![]).await.unwrap(),
        json!("2"),
        "focus stays on the link"
    );
    assert_eq!(b.execute("return window.__stay", vec![]).await.unwrap(), json!(8), "the page was reloaded");
    let shift = b.execute("return window.__cls", vec![]).await.unwrap().as_f64().unwrap();
    assert!(shift < 0.01, "choosing a revision moved the page: cumulative layout shift {shift}");
    // The revisions and the diff in view.
    b.execute("document.querySelector('#diff').scrollIntoView({block: 'end'})", vec![]).await.unwrap();
    shot(&b, "app").await;
    // serve's read of one revision: a node's, and a 404 naming the app, the revision and the
    // revisions kept.
    let (status, _, body) = curl(&c, Some(READ_TOKEN), "GET", "/v1/apps/test/web/revisions/2");
    let found: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, &found["node"], &found["revision"]), (200, &json!("h1"), &json!(2)), "{body}");
    assert_eq!(found["spec"]["spec"]["template"]["spec"]["processes"][0]["env"][0]["value"], "v2", "{body}");
    let (status, _, body) = curl(&c, Some(READ_TOKEN), "GET", "/v1/apps/test/web/revisions/9?node=h2");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("h2: no revision 9 of test/web (kept: 1, 2, 3)"), "{body}");

    // A read-only token: the same pages, no buttons; the API refuses its changes anyway.
    b.find(Locator::Css("#who button")).await.unwrap().click().await.unwrap();
    wait_js(&b, 10, "signed out", "document.querySelector('#token') !== null").await;
    sign_in(&b, READ_TOKEN).await;
    for (page, ready) in [
        ("/ui/apps/test/web/rollout", "document.querySelector('#phase').dataset.phase === 'complete'"),
        ("/ui/cluster", "document.querySelector('#nodes-up').textContent === '3 of 3'"),
        ("/ui/engine", "document.querySelector('#leader').textContent !== 'none'"),
        ("/ui/hookruns/test/by-hand", "document.querySelector('svg.chart') !== null"),
    ] {
        open(&b, page).await;
        wait_js(&b, 20, page, ready).await;
        assert_eq!(buttons(&b).await, 0, "{page}: a read-only token sees no buttons");
    }
    let (status, _, body) = curl(&c, Some(READ_TOKEN), "POST", "/v1/apps/test/web/rollout/pause");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("this token may only read"), "{body}");
    // It reads the diffs: a deep link to revision 2's, as another node keeps it.
    open(&b, "/ui/apps/test/web/revisions/2?node=h3").await;
    wait_js(&b, 20, "revision 2's diff, read-only", &diff_shows("v1", "v2")).await;
    let caption = b.find(Locator::Css("#diff-caption")).await.unwrap().text().await.unwrap();
    assert_eq!(caption, "What revision 2 changed from revision 1 (as h3 keeps them)");

    // One host's console: its stewardd's remote listener serves the same files, and the pages
    // are that host's — its instances, an app's revisions and rollout, its node, its hook run.
    let base = format!("https://{}:7443", host.ip);
    b.goto(&format!("{base}/ui/apps/test/web")).await.unwrap();
    sign_in_here(&b, TOKEN).await;
    wait_js(
        &b,
        20,
        "the host's name",
        &format!("document.querySelector('.brand').textContent.includes('{}')", host.name),
    )
    .await;
    wait_js(&b, 20, "back on the app after signing in", "location.pathname === '/ui/apps/test/web'").await;
    wait_js(&b, 20, "three revisions", "document.querySelectorAll('tbody tr[data-key]').length >= 3 && document.querySelector('tr[data-key=\"3\"]').textContent.includes('(current)')").await;
    wait_js(&b, 10, "its rollout complete", "document.querySelector('#phase').dataset.phase === 'complete'").await;
    wait_js(&b, 20, "the host's diff of revision 3", &diff_shows("v2", "v3")).await;
    b.find(Locator::Css("tr[data-key='2'] a[data-rev]")).await.unwrap().click().await.unwrap();
    wait_js(&b, 20, "the host's diff of revision 2", &diff_shows("v1", "v2")).await;
    assert_eq!(b.execute("return location.pathname", vec![]).await.unwrap(), json!("/ui/apps/test/web/revisions/2"));
    shot(&b, "host-app").await;
    b.goto(&format!("{base}/ui/instances")).await.unwrap();
    wait_js(
        &b,
        20,
        "the host's instances",
        "[...document.querySelectorAll('tbody tr[data-key]')].some(r => r.dataset.key.startsWith('test/probe/'))",
    )
    .await;
    shot(&b, "host-instances").await;
    b.goto(&format!("{base}/ui/hookruns/test/by-hand")).await.unwrap();
    let points = wait_js(
        &b,
        20,
        "the host's chart",
        "document.querySelector('svg.chart') && Number(document.querySelector('svg.chart').dataset.points)",
    )
    .await;
    assert_eq!(points, json!(8));
    b.goto(&format!("{base}/ui/node")).await.unwrap();
    wait_js(&b, 20, "the node", "document.querySelector('#node-instances') !== null").await;
    shot(&b, "host-node").await;
    // The host's read token (its remote.tokens_file's `TOKEN read`): the app's diffs, no button.
    b.find(Locator::Css("#who button")).await.unwrap().click().await.unwrap();
    wait_js(&b, 10, "signed out of the host", "document.querySelector('#token') !== null").await;
    b.goto(&format!("{base}/ui/apps/test/web/revisions/2")).await.unwrap();
    sign_in_here(&b, READ_TOKEN).await;
    wait_js(&b, 20, "a read-only token", "document.querySelector('#role').dataset.role === 'read'").await;
    wait_js(&b, 20, "the host's diff, read-only", &diff_shows("v1", "v2")).await;
    wait_js(&b, 10, "its rollout", "document.querySelector('#phase').dataset.phase === 'complete'").await;
    assert_eq!(buttons(&b).await, 0, "a read-only token sees no buttons on the host's app");
    b.close().await.unwrap();
}
