//! Seed 003 volumes of a process instance (issue 47), with the real stewardd and steward
//! binaries: a stateful set of processes run by a user of their own, each ordinal with a kept
//! (Dynamic) volume and a Static host directory they share, found as `VOLUME_<NAME>`; the data
//! survives a restart, a rollout, a daemon kill -9 and scale 3 → 1 → 3; a class `image` limit
//! stops writes past it; what a process cannot be given is refused by name.

mod common;

use common::{id, spec, Daemon};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use steward::supervisor::state::Kind;

/// A host user for the workload (the volumes must be its, not root's).
fn user(name: &str) -> u32 {
    // Once per test binary: two useradds at once contend for /etc/passwd's lock.
    static MADE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let _ = std::process::Command::new("useradd").args(["--system", "--no-create-home", name]).output();
    nix::unistd::User::from_name(name).unwrap().expect("useradd made it").uid.as_raw()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

/// Waits until `ok`, or fails saying `what`.
fn wait_for(what: &str, ok: &dyn Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ok() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

async fn wait_gone(d: &Daemon, name: &str, index: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while d.client.status(&id("test", name, index)).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "ordinal {index} still there after the scale in");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Seed 003's StatefulSet with a Static and a Dynamic volume, as processes: 3 ordinals each
/// write their own data in their kept volume (owned by the process's user, reached at
/// `$VOLUME_SAVE`) and their own file in the Static one they share; a restart, a rollout, a
/// daemon kill -9 and scale 3 → 1 → 3 each leave every ordinal with its own data; another user
/// in the spec is given each volume's top directory.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_stateful_set_keeps_each_ordinals_data() {
    let uid = user("steward-pvol");
    let mut d = Daemon::start("proc-vols");
    let (root, shelf) = (d.path().join("volumes"), d.path().join("srv/shelf"));
    std::fs::create_dir_all(shelf.parent().unwrap()).unwrap();
    let world_as = |n: u32, rev: &str, user: &str| {
        let script = "[ -f \"$VOLUME_SAVE/who\" ] || echo ${instanceid} > \"$VOLUME_SAVE/who\"; \
                      echo \"$REV\" >> \"$VOLUME_SAVE/starts\"; echo ${instanceid} > \"$VOLUME_SHELF/${instanceid}\"; \
                      echo \"$VOLUME_SAVE\" > \"$VOLUME_SAVE/where\"; exec sleep 1000";
        let process = json!({"user": user, "startCmd": script, "env": [{"name": "REV", "value": rev}]});
        let mut s = spec("world", n, process, json!({"statefulSet": {}}));
        s["spec"]["template"]["spec"]["volumes"] = json!([
            {"name": "save", "type": "Isolated", "source": {"class": "local"}},
            {"name": "shelf", "type": "Static", "source": {"target": shelf.to_str().unwrap()}}
        ]);
        s
    };
    let world = |n: u32, rev: &str| world_as(n, rev, "steward-pvol");
    let save = |i: u32| root.join(format!("test/world/{i}/save"));
    let starts = |i: u32| read(&save(i).join("starts")).lines().map(String::from).collect::<Vec<_>>();
    let wait_starts = |i: u32, n: usize| wait_for(&format!("ordinal {i}: {n} starts"), &|| starts(i).len() >= n);
    d.apply_json(&world(3, "1")).await;
    for i in 0..3 {
        d.wait_state(&id("test", "world", i), Kind::Running, 60).await;
        wait_starts(i, 1);
        assert_eq!(read(&save(i).join("who")), i.to_string());
        assert_eq!(read(&save(i).join("where")), save(i).display().to_string(), "VOLUME_SAVE is its directory");
        assert_eq!(read(&shelf.join(i.to_string())), i.to_string());
        assert_eq!(std::fs::metadata(save(i)).unwrap().uid(), uid, "a kept volume is the process's user's");
    }
    // The Static directory Steward made is the process's user's (no source.owner).
    assert_eq!(std::fs::metadata(&shelf).unwrap().uid(), uid);
    // Each ordinal is reported to a scheduler as keeping its data here (GET /v1/node).
    let kept = d.client.node().await.unwrap().kept_volumes;
    assert_eq!(kept, ["test/world/0", "test/world/1", "test/world/2"]);

    // A restart of the instance: the same directory, its data kept.
    let (code, _, err) = d.cli(&["restart", "test/world/0"]);
    assert_eq!(code, 0, "{err}");
    wait_starts(0, 2);
    assert_eq!(read(&save(0).join("who")), "0");

    // A rollout (its env changed): each ordinal restarted in place on its own data.
    d.apply_json(&world(3, "2")).await;
    for i in 0..3 {
        wait_for(&format!("ordinal {i} rolled out"), &|| starts(i).last().map(String::as_str) == Some("2"));
        assert_eq!(read(&save(i).join("who")), i.to_string());
    }
    for i in 0..3 {
        d.wait_state(&id("test", "world", i), Kind::Running, 60).await;
    }

    // A daemon kill -9: re-adopted, not started again.
    let before = starts(1).len();
    d.kill9();
    d.spawn();
    d.wait_state(&id("test", "world", 1), Kind::Running, 60).await;
    assert_eq!(starts(1).len(), before, "re-adopted, not restarted");

    // Scale 3 → 1 → 3: ordinals 1 and 2 go, their data stays, and they come back to it.
    d.apply_json(&world(1, "2")).await;
    wait_gone(&d, "world", 2).await;
    wait_gone(&d, "world", 1).await;
    assert_eq!((read(&save(1).join("who")), read(&save(2).join("who"))), ("1".into(), "2".into()));
    let (before1, before2) = (starts(1).len(), starts(2).len());
    d.apply_json(&world(3, "2")).await;
    for i in 1..3 {
        d.wait_state(&id("test", "world", i), Kind::Running, 60).await;
    }
    wait_starts(1, before1 + 1);
    wait_starts(2, before2 + 1);
    assert_eq!((read(&save(1).join("who")), read(&save(2).join("who"))), ("1".into(), "2".into()));

    // Listed by steward volume with the instance using each.
    let (code, out, err) = d.cli(&["-o", "json", "volume", "ls"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let used: Vec<(u64, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["ordinal"].as_u64().unwrap(), v["instance"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(used, [(0, "test/world/0"), (1, "test/world/1"), (2, "test/world/2")], "{out}");

    // Another user in the spec: each kept volume's top directory is given to it at its next
    // start; what the first user wrote stays that user's.
    let other = user("steward-pvol2");
    d.apply_json(&world_as(3, "3", "steward-pvol2")).await;
    for i in 0..3 {
        wait_for(&format!("ordinal {i} given to the new user"), &|| {
            std::fs::metadata(save(i)).is_ok_and(|m| m.uid() == other)
        });
        assert_eq!(std::fs::metadata(save(i).join("who")).unwrap().uid(), uid);
    }
    let (code, _, err) = d.cli(&["delete", "test/world", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    assert!(save(2).join("who").exists() && shelf.join("2").exists(), "kept on the app's delete");
}

/// A process's kept volume with class `image`: an ext4 image of the limit, loop-mounted in the
/// host's mount namespace, where the process (not root) finds it owned by it; a write past the
/// limit fails; a daemon kill -9 leaves it mounted once; unmounted when the instance goes, the data kept. A Temp volume beside it is the
/// user's alone (0700). What a process cannot be
/// given (a configmap volume, a read-only Static one) is refused by name.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_kept_volume_limit_stops_writes_past_it() {
    let uid = user("steward-pvol");
    let mut d = Daemon::start("proc-vol-limit");
    let mount = d.path().join("volumes/test/vault/0/save/data");
    let script = "if [ ! -f \"$VOLUME_SAVE/report\" ]; then dd if=/dev/zero of=\"$VOLUME_SAVE/big\" bs=1M count=64 2>/dev/null; \
                  rc=$?; size=$(stat -c %s \"$VOLUME_SAVE/big\"); rm -f \"$VOLUME_SAVE/big\"; \
                  echo \"$rc $size\" > \"$VOLUME_SAVE/report\"; fi; echo scratch > \"$VOLUME_SCRATCH/x\"; exec sleep 1000";
    let mut s = spec("vault", 1, json!({"user": "steward-pvol", "startCmd": script}), json!({}));
    s["spec"]["template"]["spec"]["volumes"] = json!([{"name": "save", "type": "Dynamic", "source": {"class": "image"}, "storage": {"limit": "16Mi"}},
               {"name": "scratch", "type": "Temp"}]);
    d.apply_json(&s).await;
    d.wait_state(&id("test", "vault", 0), Kind::Running, 60).await;
    wait_for("the report", &|| !read(&mount.join("report")).is_empty());
    let report = read(&mount.join("report"));
    let (rc, written) = report.split_once(' ').unwrap();
    let written: u64 = written.parse().unwrap();
    assert_ne!(rc, "0", "a 64 MiB write into a 16 MiB volume must fail: {report}");
    assert!(written < 16 << 20 && written > 8 << 20, "stopped at the limit: {report}");
    assert_eq!(std::fs::metadata(&mount).unwrap().uid(), uid, "the image's root is the process's user's");
    // A Temp volume: below the run directory, the user's alone.
    let scratch = d.run_dir().join("test.vault.0/volumes/scratch");
    wait_for("the scratch file", &|| read(&scratch.join("x")) == "scratch");
    let meta = std::fs::metadata(&scratch).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (uid, 0o700));
    let mounts =
        || read(Path::new("/proc/self/mountinfo")).lines().filter(|l| l.split(' ').nth(4) == mount.to_str()).count();
    let mounted = || mounts() > 0;
    // A daemon kill -9: re-adopted, the image mounted once still, its data there.
    d.kill9();
    d.spawn();
    d.wait_state(&id("test", "vault", 0), Kind::Running, 60).await;
    assert_eq!((mounts(), read(&mount.join("report"))), (1, report.clone()));
    let (code, _, err) = d.cli(&["delete", "test/vault", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    assert!(!mounted(), "unmounted with its instance");
    assert!(mount.parent().unwrap().join("disk.img").exists(), "the image kept");

    // Refused by name: what needs a mount namespace, and a Static path of Steward's own (where
    // the instances' run directories and workPaths, its own among them, are).
    let cases = [
        (json!({"name": "c", "type": "Config", "source": {"target": "cm"}}), "type: Config is for a pod's containers"),
        (
            json!({"name": "r", "type": "Static", "source": {"target": "/srv/x", "readonly": true}}),
            "source.readonly: cannot be kept for a process",
        ),
        (
            json!({"name": "w", "type": "Static", "source": {"target": d.run_dir().to_str().unwrap()}}),
            "is Steward's own run_base_dir",
        ),
        (
            json!({"name": "o", "type": "Static", "source": {"target": d.work_dir().join("test.bad.0/data").to_str().unwrap()}}),
            "falls inside Steward's own work_base_dir",
        ),
    ];
    for (volume, expected) in cases {
        let mut bad = spec("bad", 1, json!({}), json!({}));
        bad["spec"]["template"]["spec"]["volumes"] = json!([volume]);
        let answer = d.client.apply(&bad.to_string(), steward::spec::Format::Json).await;
        let err = answer.expect_err(expected).to_string();
        assert!(err.contains("spec.template.spec.volumes[0]") && err.contains(expected), "{expected} in: {err}");
    }
}

/// The kept volumes listed, as `namespace/name/ordinal/volume`.
async fn listed_volumes(d: &Daemon) -> Vec<String> {
    let listed = d.client.volumes(None).await.unwrap();
    listed.iter().map(|v| format!("{}/{}/{}/{}", v.namespace, v.name, v.ordinal, v.volume)).collect()
}

/// The `volumeRemoved` events the journal holds, as `ordinal/volume`.
async fn removals(d: &Daemon) -> Vec<String> {
    use steward::protocol::{DaemonEvent, EventBody};
    let mut told = Vec::new();
    d.client
        .events(0, false, |ev| {
            if let EventBody::Daemon(DaemonEvent::VolumeRemoved { ordinal, volume, .. }) = &ev.body {
                told.push(format!("{ordinal}/{volume}"));
            }
            true
        })
        .await
        .unwrap();
    told.sort();
    told
}

/// A kept volume's policy (`whenScaled`, `whenDeleted`: Delete) removes it with its instance,
/// exactly once, even when the daemon is killed between the instance's removal and its
/// volume's (failpoint `delete-committed`): a scale 3 → 1 removes ordinals 1 and 2's `save`
/// (their `keep`, Retain by default, stays), a scale back to 3 starts them on an empty one; the
/// app's delete, cut by a kill -9, removes every `save` once the daemon is back and keeps every
/// `keep`. An operator's delete of one instance by its id removes no volume.
#[tokio::test(flavor = "multi_thread")]
async fn kept_volumes_go_with_their_instance_as_their_policy_says() {
    let mut d = Daemon::start("proc-vol-policy");
    let root = d.path().join("volumes/test/realm");
    let realm = |n: u32| {
        let script = "[ -f \"$VOLUME_SAVE/born\" ] || date +%s%N > \"$VOLUME_SAVE/born\"; \
                      echo ${instanceid} > \"$VOLUME_KEEP/who\"; exec sleep 1000";
        let mut s = spec("realm", n, json!({"startCmd": script}), json!({"statefulSet": {}}));
        s["spec"]["template"]["spec"]["volumes"] = json!([
            {"name": "save", "type": "Isolated", "source": {"whenScaled": "Delete", "whenDeleted": "Delete"}},
            {"name": "keep", "type": "Isolated", "source": {"whenScaled": "Retain"}}
        ]);
        s
    };
    let born = |i: u32| read(&root.join(format!("{i}/save/born")));
    let all = |vols: &[&str], ordinals: std::ops::Range<u32>| -> Vec<String> {
        let mut v: Vec<String> =
            ordinals.flat_map(|i| vols.iter().map(move |vol| format!("test/realm/{i}/{vol}"))).collect();
        v.sort();
        v
    };
    d.apply_json(&realm(3)).await;
    for i in 0..3 {
        d.wait_state(&id("test", "realm", i), Kind::Running, 60).await;
        wait_for(&format!("ordinal {i} wrote"), &|| !born(i).is_empty() && root.join(format!("{i}/keep/who")).exists());
    }
    let first_born: Vec<String> = (0..3).map(born).collect();

    // Scale 3 → 1: ordinals 1 and 2 take their `save` with them, not their `keep`.
    d.apply_json(&realm(1)).await;
    wait_gone(&d, "realm", 2).await;
    wait_gone(&d, "realm", 1).await;
    let mut expect = all(&["keep"], 0..3);
    expect.push("test/realm/0/save".into());
    expect.sort();
    assert_eq!(listed_volumes(&d).await, expect);
    assert_eq!(removals(&d).await, ["1/save", "2/save"]);
    assert!(!root.join("1/save").exists() && root.join("1/keep/who").exists());

    // Back to 3: they start on an empty `save` and their old `keep`.
    d.apply_json(&realm(3)).await;
    for i in 1..3 {
        d.wait_state(&id("test", "realm", i), Kind::Running, 60).await;
        wait_for(&format!("ordinal {i} born again"), &|| !born(i).is_empty());
        assert_ne!(born(i), first_born[i as usize], "ordinal {i} started on an empty save");
    }
    assert_eq!(born(0), first_born[0], "ordinal 0 stayed");

    // An operator's delete of one instance by its id keeps its volumes (it may come back).
    let (code, _, err) = d.cli(&["delete", "test/realm/2", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(listed_volumes(&d).await, all(&["keep", "save"], 0..3));
    d.apply_json(&realm(3)).await;
    d.wait_state(&id("test", "realm", 2), Kind::Running, 60).await;

    // The app's delete, the daemon killed right after an instance's removal is committed and
    // before its volume went: the restart finishes it; the rest of the delete, asked again,
    // removes the others' `save`; each removal told once.
    d.env = vec![("STEWARD_FAILPOINTS".into(), "delete-committed@1".into())];
    d.restart(false);
    for i in 0..3 {
        d.wait_state(&id("test", "realm", i), Kind::Running, 60).await;
    }
    let _ = d.client.delete_app("test", "realm", Some(30.0)).await;
    let pid = d.pid();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while common::alive(pid) {
        assert!(std::time::Instant::now() < deadline, "the failpoint was not reached\n{}", d.log());
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    d.kill9();
    d.env.clear();
    d.spawn();
    let _ = d.client.delete_app("test", "realm", Some(30.0)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !d.client.list(&[]).await.unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the app's delete did not finish");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = d.client.delete_app("test", "realm", Some(30.0)).await;
    assert_eq!(listed_volumes(&d).await, all(&["keep"], 0..3), "every save gone, every keep kept");
    assert_eq!(removals(&d).await, ["0/save", "1/save", "1/save", "2/save", "2/save"], "each removal told once");
    assert!(!d.path().join("volumes/.removing").read_dir().is_ok_and(|mut e| e.next().is_some()), "nothing left aside");
    d.restart(true);
    assert_eq!(listed_volumes(&d).await, all(&["keep"], 0..3));
    assert_eq!(removals(&d).await.len(), 5);
}
