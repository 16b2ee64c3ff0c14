//! Issue 14, part 3: each instance's directories are its own, and the daemon, which works in
//! them as root, never reads, writes, renames, truncates or copies through a path the
//! workload's user could replace. Real daemon, real CLI; a root-only "secret" file next to
//! the daemon's directories (same filesystem, so hard links to it can be made) stands for
//! /etc/shadow. Each root-side file operation gets its links planted and is checked to have
//! read or changed nothing of the secret.

mod common;

use common::{id, spec, Daemon};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use steward::spec::Format;
use steward::supervisor::state::Kind;

const SECRET: &str = "TOP-SECRET-LINE root:$6$hash";

/// A root-only file (0600) of more than `log_max_bytes` (4096 in the test config), so that a
/// rotation through a link to it would copy it.
fn secret(d: &Daemon, name: &str) -> PathBuf {
    let path = d.path().join(name);
    std::fs::write(&path, format!("{SECRET}\n").repeat(200)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// The secret is as it was made: content, owner, mode, one link again (the planted hard link
/// gone or not), never truncated.
fn untouched(path: &Path) {
    let md = std::fs::metadata(path).unwrap();
    assert_eq!((md.uid(), md.gid(), md.mode() & 0o7777), (0, 0, 0o600), "{}", path.display());
    assert_eq!(std::fs::read_to_string(path).unwrap(), format!("{SECRET}\n").repeat(200), "{}", path.display());
}

/// Every file below `dir` that holds the secret.
fn leaks(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let md = std::fs::symlink_metadata(e.path()).unwrap();
        if md.is_file() && md.nlink() == 1 && std::fs::read_to_string(e.path()).unwrap_or_default().contains(SECRET) {
            found.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

fn nobody(process: serde_json::Value) -> serde_json::Value {
    let mut p = process;
    p["user"] = json!("nobody");
    p
}

fn replace_with_symlink(link: &Path, target: &Path) {
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).unwrap();
}

fn replace_with_hard_link(link: &Path, target: &Path) {
    let _ = std::fs::remove_file(link);
    std::fs::hard_link(target, link).unwrap();
}

/// The refusal's message; 409 (conflict) for another instance's directories, 422 (invalid)
/// for Steward's own.
async fn apply_err(d: &Daemon, s: &serde_json::Value) -> String {
    match d.client.apply(&s.to_string(), Format::Json).await {
        Ok(ids) => panic!("applied {ids:?}, expected a refusal\n{}", d.log()),
        Err(steward::client::ClientError::Api { status, code, message, .. }) => {
            let want = if message.contains("Steward's own") { (422, "invalid") } else { (409, "conflict") };
            assert_eq!((status, code.as_str()), want, "{message}");
            message
        }
        Err(e) => panic!("{e}"),
    }
}

/// The defect: an instance's workPath set to another instance's run directory (created owned
/// by its user, where the daemon then rotates the other's logs as root). Refused at apply,
/// naming the field and the instance, whichever was applied first; so are a pidFile or an
/// outputDir in another instance's directories, and any of them in Steward's own.
#[tokio::test]
async fn an_instance_cannot_claim_another_instances_or_stewards_directories() {
    let mut d = Daemon::start("claims");
    d.apply_json(&spec("victim", 1, json!({}), json!({}))).await;
    d.wait_state(&id("test", "victim", 0), Kind::Running, 10).await;

    let thief = |p: serde_json::Value| spec("thief", 1, nobody(p), json!({}));
    let err = apply_err(&d, &thief(json!({"workPath": "${run_base_dir}/test.victim.0"}))).await;
    assert!(err.contains("spec.template.spec.processes[0].workPath"), "{err}");
    assert!(err.contains("test/victim/0's run directory"), "{err}");
    let err = apply_err(&d, &thief(json!({"workPath": "${run_base_dir}/test.victim.0/sub"}))).await;
    assert!(err.contains("falls inside instance test/victim/0's run directory"), "{err}");
    let err = apply_err(&d, &thief(json!({"pidFile": "${run_base_dir}/test.victim.0/sh.stdout.log"}))).await;
    assert!(err.contains("processes[0].pidFile") && err.contains("test/victim/0's run directory"), "{err}");
    let err = apply_err(
        &d,
        &thief(
            json!({"uris": [{"value": "file:///nonexistent.tgz", "outputDir": "${work_base_dir}/test.victim.0/x"}]}),
        ),
    )
    .await;
    assert!(err.contains("processes[0].uris[0].outputDir") && err.contains("test/victim/0's workPath"), "{err}");
    // Whichever comes first: a workPath where a later instance's run directory will be.
    d.apply_json(&thief(json!({"workPath": "${run_base_dir}/test.later.0"}))).await;
    let err = apply_err(&d, &spec("later", 1, json!({}), json!({}))).await;
    assert!(err.contains("test/thief/0's workPath") && err.contains("run directory"), "{err}");
    // Instances of one spec, too.
    let err = apply_err(&d, &spec("shared", 2, json!({"workPath": "${work_base_dir}/shared"}), json!({}))).await;
    assert!(err.contains("test/shared/1's workPath"), "{err}");
    let (code, _, stderr) = d.cli(&["list"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(d.client.status(&id("test", "later", 0)).await.is_err(), "nothing of a refused spec was applied");

    // Steward's own: the package cache placed below the work root.
    let cache = d.work_dir().join("steward-cache");
    let mut config = std::fs::read_to_string(&d.config).unwrap();
    config += &format!("fetch_cache_dir = \"{}\"\n", cache.display());
    std::fs::write(&d.config, config).unwrap();
    d.restart(false);
    let err =
        apply_err(&d, &spec("cachey", 1, json!({"workPath": "${work_base_dir}/steward-cache/x"}), json!({}))).await;
    assert!(err.contains("processes[0].workPath") && err.contains("Steward's own fetch_cache_dir"), "{err}");
    let err = apply_err(&d, &spec("cachey", 1, json!({"workPath": "${work_base_dir}/steward-cache"}), json!({}))).await;
    assert!(err.contains("Steward's own fetch_cache_dir"), "{err}");
}

/// Log rotation (as root, every log_check_secs) through a log file replaced by a symlink to a
/// root-only file, and by a hard link to it: nothing is copied into a rotated log, the secret
/// is not truncated.
#[tokio::test]
async fn log_rotation_never_copies_or_truncates_through_planted_links() {
    let d = Daemon::start("rotlinks");
    let target = secret(&d, "secret-rot");
    d.apply_json(&spec("rot", 1, nobody(json!({})), json!({}))).await;
    let iid = id("test", "rot", 0);
    d.wait_state(&iid, Kind::Running, 10).await;
    let run = d.run_dir().join("test.rot.0");
    replace_with_symlink(&run.join("sh.stdout.log"), &target);
    replace_with_hard_link(&run.join("sh.stderr.log"), &target);
    // Another name, not the process's: rotation goes by the .log suffix.
    replace_with_symlink(&run.join("other.stdout.log"), &target);
    tokio::time::sleep(Duration::from_millis(3500)).await; // three rounds of rotation
    assert_eq!(leaks(&run), Vec::<String>::new(), "rotated copies of the secret");
    assert!(!run.join("sh.stdout.log.1").exists() && !run.join("sh.stderr.log.1").exists());
    assert_eq!(std::fs::metadata(&target).unwrap().nlink(), 2, "the hard link is left alone, not used");
    std::fs::remove_file(run.join("sh.stderr.log")).unwrap();
    untouched(&target);
    assert!(d.log().contains("hard links, not one"), "the refusal is logged");
}

/// Reading logs for the API (`steward logs`, as root): a planted symlink or hard link named like
/// a log gives nothing of what it points to.
#[tokio::test]
async fn steward_logs_never_reads_through_planted_links() {
    let d = Daemon::start("readlinks");
    let target = secret(&d, "secret-read");
    d.apply_json(&spec("reader", 1, nobody(json!({"startCmd": "echo hello; exec sleep 1000"})), json!({}))).await;
    d.wait_state(&id("test", "reader", 0), Kind::Running, 10).await;
    let run = d.run_dir().join("test.reader.0");
    replace_with_symlink(&run.join("sh.stderr.log"), &target);
    replace_with_hard_link(&run.join("evil.stdout.log"), &target);
    for args in [&["logs", "test/reader/0"][..], &["logs", "test/reader/0", "--tail", "5"][..]] {
        let (code, out, err) = d.cli(args);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("hello"), "{out}");
        assert!(!out.contains("TOP-SECRET") && !err.contains("TOP-SECRET"), "{out}{err}");
    }
    std::fs::remove_file(run.join("evil.stdout.log")).unwrap();
    untouched(&target);
}

/// Opening the log files at a (re)start, as root, and giving them to the workload's user: a
/// hard link or symlink planted in their place is replaced by a new file; the secret keeps its
/// owner (the old code chowned it to the user), mode and content.
#[tokio::test]
async fn log_files_opened_at_start_are_never_a_planted_link() {
    let d = Daemon::start("openlinks");
    let (hard, soft) = (secret(&d, "secret-hard"), secret(&d, "secret-soft"));
    d.apply_json(&spec("opener", 1, nobody(json!({"startCmd": "echo started; exec sleep 1000"})), json!({}))).await;
    let iid = id("test", "opener", 0);
    d.wait_state(&iid, Kind::Running, 10).await;
    let run = d.run_dir().join("test.opener.0");
    replace_with_hard_link(&run.join("sh.stdout.log"), &hard);
    replace_with_symlink(&run.join("sh.stderr.log"), &soft);
    let (code, out, err) = d.cli(&["restart", "test/opener/0", "--timeout", "20"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&iid, Kind::Running, 10).await;
    untouched(&hard);
    untouched(&soft);
    assert_eq!(std::fs::metadata(&hard).unwrap().nlink(), 1, "the planted link was replaced");
    // Root's, readable by the workload's group: the workload cannot hard-link it (issue 51).
    let nogroup = nix::unistd::User::from_name("nobody").unwrap().unwrap().gid.as_raw();
    for f in ["sh.stdout.log", "sh.stderr.log"] {
        let md = std::fs::symlink_metadata(run.join(f)).unwrap();
        let owned = (md.uid(), md.gid(), md.mode() & 0o777);
        assert!(md.is_file() && md.nlink() == 1 && owned == (0, nogroup, 0o640), "{f}: {md:?}");
    }
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(run.join("sh.stdout.log")).unwrap();
        if text.contains("started") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(text.contains("--- steward: run started") && text.contains("started"), "{text}");
}

/// Reading the pidfile (as root): one the workload made a symlink to a root-only file, or a
/// hard link to it planted in its workPath, is refused without a word of what it points to.
#[tokio::test]
async fn a_planted_pidfile_link_reveals_nothing() {
    let d = Daemon::start("pidlinks");
    let target = secret(&d, "secret-pid");
    let never = json!({"restartPolicy": {"policy": "Never"}});
    // The workload itself, as nobody, plants the symlink.
    let p = nobody(json!({
        "pidFile": "${workPath}/app.pid",
        "startCmd": format!("ln -s {} ${{pidFile}}; exec sleep 1000", target.display()),
        "startGracePeriod": 1
    }));
    d.apply_json(&spec("pidsym", 1, p, never.clone())).await;
    let st = d.wait_state(&id("test", "pidsym", 0), Kind::Failed, 15).await;
    assert!(!st.message.contains("TOP-SECRET"), "{}", st.message);
    assert!(st.message.contains("app.pid") && st.message.contains("symlink"), "{}", st.message);

    // A hard link where the pidfile will be, in a workPath that exists already.
    let work = d.work_dir().join("test.pidhard.0");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::hard_link(&target, work.join("app.pid")).unwrap();
    let p = nobody(json!({"pidFile": "${workPath}/app.pid", "startCmd": "exec sleep 1000", "startGracePeriod": 1}));
    d.apply_json(&spec("pidhard", 1, p, never)).await;
    let st = d.wait_state(&id("test", "pidhard", 0), Kind::Failed, 15).await;
    assert!(!st.message.contains("TOP-SECRET"), "{}", st.message);
    assert!(st.message.contains("hard links"), "{}", st.message);
    std::fs::remove_file(work.join("app.pid")).unwrap();
    untouched(&target);
}

/// Secret and configmap files (written as root into the workPath): a file the workload
/// replaced by a symlink, or a directory on the way it replaced by one, never makes the daemon
/// write elsewhere; a file it replaced by a hard link is replaced, not written through.
#[tokio::test]
async fn secret_files_are_never_written_through_planted_links() {
    let d = Daemon::start("valuelinks");
    let (code, _, err) = d.cli(&["secret", "create", "test/creds", "--from-literal", "password=hunter2"]);
    assert_eq!(code, 0, "{err}");
    let target = secret(&d, "secret-values");
    let p = nobody(json!({
        "startCmd": "exec sleep 1000",
        "secrets": [{"secretName": "creds", "items": [
            {"type": "file", "dataKey": "password", "keyOrPath": "${workPath}/app.key"},
            {"type": "file", "dataKey": "password", "keyOrPath": "${workPath}/conf/db.key"}
        ]}]
    }));
    d.apply_json(&spec("valued", 1, p, json!({}))).await;
    let iid = id("test", "valued", 0);
    d.wait_state(&iid, Kind::Running, 10).await;
    let work = d.work_dir().join("test.valued.0");
    assert_eq!(std::fs::read_to_string(work.join("app.key")).unwrap(), "hunter2");
    replace_with_hard_link(&work.join("app.key"), &target);
    let (code, out, err) = d.cli(&["restart", "test/valued/0", "--timeout", "20"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&iid, Kind::Running, 10).await;
    assert_eq!(std::fs::read_to_string(work.join("app.key")).unwrap(), "hunter2");
    untouched(&target);

    replace_with_symlink(&work.join("app.key"), &target);
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::remove_dir_all(work.join("conf")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, work.join("conf")).unwrap();
    std::os::unix::fs::lchown(work.join("conf"), Some(65534), Some(65534)).unwrap();
    let (code, out, err) = d.cli(&["restart", "test/valued/0", "--timeout", "5"]);
    assert_ne!(code, 0, "a symlinked directory on the way fails the start: {out}{err}");
    let st = d.status(&iid).await;
    assert!(st.message.contains("conf") && st.message.contains("symlink"), "{}", st.message);
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the symlink");
    untouched(&target);
}

/// A pod's log files and log position file (written by the daemon as root in the run
/// directory while it follows the containers' output): planted symlinks and hard links are
/// replaced when the follower starts, never appended to or overwritten.
#[tokio::test(flavor = "multi_thread")]
async fn pod_log_and_position_files_are_never_written_through_planted_links() {
    common::docker::shared_engine();
    let d = Daemon::start("podlinks");
    let (a, b, c) = (secret(&d, "secret-a"), secret(&d, "secret-b"), secret(&d, "secret-c"));
    let talker = common::docker::sh("talk", "while true; do echo talk-line; echo err-line >&2; sleep 0.2; done");
    d.apply_json(&common::docker::pod("pods", "podlog", json!([talker]), json!({}))).await;
    let iid = id("pods", "podlog", 0);
    d.wait_state(&iid, Kind::Running, 60).await;
    let run = d.run_dir().join("pods.podlog.0");
    for _ in 0..100 {
        if run.join(".talk.stdout.logpos").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Planted while no follower runs: the next one (after the restart) opens them.
    let (code, out, err) = d.cli(&["stop", "pods/podlog/0", "--timeout", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    replace_with_symlink(&run.join("talk.stdout.log"), &a);
    replace_with_hard_link(&run.join("talk.stderr.log"), &b);
    replace_with_symlink(&run.join(".talk.stdout.logpos"), &c);
    let (code, out, err) = d.cli(&["start", "pods/podlog/0", "--timeout", "60"]);
    assert_eq!(code, 0, "{out}{err}");
    d.wait_state(&iid, Kind::Running, 60).await;
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(run.join("talk.stdout.log")).unwrap_or_default();
        if text.contains("talk-line") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(text.contains("talk-line") && !text.contains("TOP-SECRET"), "{text}");
    for f in ["talk.stdout.log", "talk.stderr.log", ".talk.stdout.logpos", ".talk.stderr.logpos"] {
        let md = std::fs::symlink_metadata(run.join(f)).unwrap();
        assert!(md.is_file() && md.nlink() == 1, "{f}: {md:?}");
    }
    for s in [&a, &b, &c] {
        untouched(s);
    }
}
