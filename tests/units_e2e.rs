//! The README's example unit, end to end: units/gamesvc.json exactly as shipped, its package
//! (units/packages/gamesvc) served from a file:// repository, run by the real daemon.

mod common;

use common::{id, Daemon};
use std::io::{Read, Write};
use std::time::Duration;
use steward::supervisor::state::{Kind, State};

fn get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test]
async fn the_gamesvc_example_fetches_starts_checks_reloads_and_stops() {
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join("examples")).unwrap();
    let package = repo.path().join("examples/gamesvc-1.0.tar.gz");
    let pkg_dir = format!("{}/units/packages/gamesvc", env!("CARGO_MANIFEST_DIR"));
    let status =
        std::process::Command::new("tar").args(["czf"]).arg(&package).args(["-C", &pkg_dir, "."]).status().unwrap();
    assert!(status.success());
    let d = Daemon::start_with("gamesvc", &format!("package_repository = \"file://{}\"\n", repo.path().display()));
    let spec = std::fs::read_to_string(format!("{}/units/gamesvc.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let ids = d.client.apply(&spec, steward::spec::Format::Json).await.unwrap();
    assert_eq!(ids, ["demo/gamesvc/0", "demo/gamesvc/1"]);

    for i in 0..2 {
        let iid = id("demo", "gamesvc", i);
        let st = d.wait(&iid, 30, |s| s.health.as_deref() == Some("healthy")).await;
        assert_eq!(st.state, State::Running);
        let pid = st.pid.unwrap();
        assert_eq!(std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap().trim(), "gamesvr");
        let port = st.ports["http_port"];
        assert!((31000..=32000).contains(&port));
        let page = get(port, "/");
        assert!(page.contains("200") && page.contains(&format!("demo/gamesvc/{i}")), "{page}");
        // The package was extracted into workPath, owned by the unit's user (nobody).
        use std::os::unix::fs::MetadataExt;
        let start = d.work_dir().join(format!("demo.gamesvc.{i}/gamesvc/start.sh"));
        let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw();
        assert_eq!(std::fs::metadata(&start).unwrap().uid(), nobody);

        // reloadCmd (./reload.sh sends SIGHUP): same pid, the server counts a reload.
        let st = d.client.action(&iid, "reload", Some(10.0)).await.unwrap();
        assert_eq!(st.pid, Some(pid));
        let mut page = get(port, "/");
        for _ in 0..50 {
            if page.contains("reloads=1") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            page = get(port, "/");
        }
        assert!(page.contains("reloads=1"), "{page}");
    }
    let metrics = d.client.metrics().await.unwrap();
    let fetched: u64 =
        metrics.lines().find_map(|l| l.strip_prefix("steward_fetch_bytes_total ")).unwrap().parse().unwrap();
    assert!(fetched > 0, "fetch bytes are counted");

    // stopCmd (./stop.sh): the server goes, nothing of the instance is left.
    let iid = id("demo", "gamesvc", 0);
    let pid = d.status(&iid).await.pid.unwrap();
    let st = d.client.action(&iid, "stop", Some(20.0)).await.unwrap();
    assert_eq!(st.state.kind(), Kind::Stopped);
    assert!(common::wait_gone(pid, 5).await);
    assert!(d.cgroup_pids(&iid).is_empty());
}

/// units/vault.toml as shipped, with the configmap and secret scripts/demo.sh creates: it runs,
/// reads both, and its output shows the greeting but never the password.
#[tokio::test]
async fn the_vault_example_reads_its_configmap_and_secret() {
    let d = Daemon::start("vault-unit");
    let unit = format!("{}/units/vault.toml", env!("CARGO_MANIFEST_DIR"));
    // Without its stores the unit cannot start, and says which one is missing.
    let (code, out, err) = d.cli(&["apply", "-f", &unit, "--wait", "--timeout", "3"]);
    assert_ne!(code, 0, "{out}{err}");
    let status = d.cli(&["status", "demo/vault/0"]).1;
    assert!(status.contains("vault-config") || status.contains("vault-creds"), "names the missing store: {status}");
    let (code, _, err) =
        d.cli(&["configmap", "create", "demo/vault-config", "--from-literal", "greeting=hello from a configmap"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = d.cli(&["secret", "create", "demo/vault-creds", "--from-literal", "password=change-me"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = d.cli(&["restart", "demo/vault/0", "--timeout", "20"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&id("demo", "vault", 0), Kind::Running, 20).await;
    let mut logs = String::new();
    for _ in 0..100 {
        logs = d.cli(&["logs", "demo/vault/0"]).1;
        if logs.contains("characters") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(logs.contains("hello from a configmap to demo/vault/0; the password has 9 characters"), "{logs}");
    assert!(!logs.contains("change-me"), "{logs}");
}

/// units/mysql-proc.json as shipped (seed 003's StatefulSet with a Static and a Dynamic volume,
/// as processes run by nobody): 3 ordinals, each with its own kept data, each writing its line
/// into the Static volume they share; a restart of one finds its data again.
#[tokio::test]
async fn the_mysql_process_twin_keeps_each_ordinals_data() {
    let d = Daemon::start("mysql-unit");
    let unit = format!("{}/units/mysql-proc.json", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = d.cli(&["apply", "-f", &unit, "--wait", "--timeout", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    let data = |i: u32, f: &str| {
        std::fs::read_to_string(d.path().join(format!("volumes/demo/mysql-proc/{i}/db-data/{f}"))).unwrap_or_default()
    };
    let shared = |i: u32| {
        std::fs::read_to_string(d.path().join(format!("volumes/demo/.static/db-volume/proc-{i}"))).unwrap_or_default()
    };
    let wait = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !ok() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    for i in 0..3 {
        wait(&format!("ordinal {i}'s line"), &|| shared(i).contains(", start 1"));
        assert!(data(i, "born").starts_with(&format!("mysql-proc-{i} born")), "{}", data(i, "born"));
    }
    let born = data(1, "born");
    let (code, out, err) = d.cli(&["restart", "demo/mysql-proc/1", "--timeout", "20"]);
    assert_eq!(code, 0, "{out}{err}");
    wait("ordinal 1's second start", &|| shared(1).contains(", start 2"));
    assert_eq!(data(1, "born"), born, "its own data, found again");
    assert!(shared(1).starts_with(born.trim()), "{}", shared(1));
}

/// units/mysql.json as shipped, on the real Docker Engine: the pod twin of the above, its
/// ordinals' lines beside each other in the Static volume, each ordinal's data its own and found
/// again by a restart.
#[tokio::test(flavor = "multi_thread")]
async fn the_mysql_pod_keeps_each_ordinals_data() {
    common::docker::shared_engine();
    let d = Daemon::start("mysql-pod-unit");
    let unit = format!("{}/units/mysql.json", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = d.cli(&["apply", "-f", &unit, "--wait", "--timeout", "60"]);
    assert_eq!(code, 0, "{out}{err}");
    let read = |p: String| std::fs::read_to_string(d.path().join(p)).unwrap_or_default();
    let wait = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !ok() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let line = |i: u32| read(format!("volumes/demo/.static/db-volume/pod-{i}"));
    for i in 0..3 {
        wait(&format!("ordinal {i}'s line"), &|| line(i).contains(", start 1"));
        let born = read(format!("volumes/demo/mysql/{i}/db-data/born"));
        assert!(born.starts_with(&format!("mysql-{i} born")), "{born}");
    }
    let born = read("volumes/demo/mysql/2/db-data/born".into());
    let (code, out, err) = d.cli(&["restart", "demo/mysql/2", "--timeout", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    wait("ordinal 2's second start", &|| line(2).contains(", start 2"));
    assert_eq!(read("volumes/demo/mysql/2/db-data/born".into()), born);
    let (code, _, err) = d.cli(&["delete", "demo/mysql", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
}

/// units/world.json with units/hooks/players-gone.toml as shipped (what scripts/demo.sh shows),
/// on the real Docker Engine: a scale 2 → 1 keeps world 1 while its server says it has players,
/// and removes it once they are gone and an operator resumes; its save stays for its return.
#[tokio::test(flavor = "multi_thread")]
async fn the_world_example_scales_in_at_its_players_word() {
    common::docker::shared_engine();
    let d = Daemon::start("world-unit");
    let dir = env!("CARGO_MANIFEST_DIR");
    let (code, out, err) = d.cli(&["hook", "template", "apply", &format!("{dir}/units/hooks/players-gone.toml")]);
    assert_eq!(code, 0, "{out}{err}");
    let unit = format!("{dir}/units/world.json");
    let (code, out, err) = d.cli(&["apply", "-f", &unit, "--wait", "--timeout", "60"]);
    assert_eq!(code, 0, "{out}{err}");
    let players = d.path().join("players");
    std::fs::write(&players, "{\"players\": 3}\n").unwrap();
    let (code, out, err) = d.cli(&["cp", players.to_str().unwrap(), "demo/world/1:/www/players"]);
    assert_eq!(code, 0, "{out}{err}");
    let one = d.path().join("world-1.json");
    std::fs::write(&one, std::fs::read_to_string(&unit).unwrap().replace("\"instance\": 2", "\"instance\": 1"))
        .unwrap();
    let (code, out, err) = d.cli(&["apply", "-f", one.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let status = || async { d.client.rollout_status("demo", "world").await.unwrap().scale_in };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let kept = loop {
        let list = status().await;
        if list.first().is_some_and(|s| s.phase == steward::protocol::ScaleInPhase::Kept) {
            break list;
        }
        assert!(std::time::Instant::now() < deadline, "{list:#?}\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(kept[0].ordinal, 1);
    assert!(kept[0].reason.contains("Failed"), "{kept:?}");
    // The kept world is listed apart, not counted among the app's instances.
    let progress = d.client.rollout_status("demo", "world").await.unwrap().progress;
    assert_eq!((progress.instances, progress.updated), (1, 1), "{progress:?}");
    d.wait_state(&id("demo", "world", 1), Kind::Running, 5).await;
    std::fs::write(&players, "{\"players\": 0}\n").unwrap();
    let (code, out, err) = d.cli(&["cp", players.to_str().unwrap(), "demo/world/1:/www/players"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = d.cli(&["rollout", "resume", "demo/world"]);
    assert_eq!(code, 0, "{out}{err}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while d.client.status(&id("demo", "world", 1)).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "world 1 still there\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(status().await.is_empty());
    assert!(d.path().join("volumes/demo/world/1/save/born").exists(), "its save stays for its return");
    let (code, _, err) = d.cli(&["delete", "demo/world", "--force", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
}
