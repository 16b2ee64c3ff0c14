//! Seed 003 pod volumes, GPUs and `steward cp` against a real Docker Engine and the real
//! stewardd and steward binaries: Temp and Memory volumes shared by name between containers,
//! subpaths (a symlink planted by a container refused), configmap and secret files with their
//! modes, the tmpfs's size enforced by the kernel and unmounted with the instance; a GPU request
//! shaped as `docker run --gpus` makes it; files copied into a process and a pod.

mod common;

use common::docker::{self, IMAGE, SHARED_SOCKET};
use common::{id, Daemon};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use steward::supervisor::state::Kind;

fn pod(name: &str, containers: Value) -> Value {
    docker::pod("vols", name, containers, json!({}))
}

/// `sh -c SCRIPT` in container `id` on the shared engine: (exit code, stdout, stderr).
fn exec(id: &str, script: &str) -> (i32, String, String) {
    docker::docker(SHARED_SOCKET, &["exec", id, "sh", "-c", script])
}

/// `steward validate` refuses `spec` (written as NAME.json), saying each of `expected`.
fn refused(d: &Daemon, name: &str, spec: &Value, expected: &[&str]) {
    let file = d.path().join(format!("{name}.json"));
    std::fs::write(&file, spec.to_string()).unwrap();
    let (code, _, err) = d.cli(&["validate", file.to_str().unwrap()]);
    assert_ne!(code, 0);
    for expected in expected {
        assert!(err.contains(expected), "{expected} in:\n{err}");
    }
}

/// Mount points below `dir` in the host's mount table.
fn mounts_below(dir: &std::path::Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let prefix = dir.display().to_string();
    table.lines().filter_map(|l| l.split(' ').nth(4)).filter(|m| m.starts_with(&prefix)).map(String::from).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_are_shared_by_name_with_subpaths_modes_and_a_memory_limit() {
    docker::shared_engine();
    let mut d = Daemon::start("pod-volumes");
    let (code, _, err) =
        d.cli(&["configmap", "create", "vols/conf", "--from-literal", "app.ini=level=7", "--from-literal", "other=x"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = d.cli(&["secret", "create", "vols/creds", "--from-literal", "token=s3cret"]);
    assert_eq!(code, 0, "{err}");
    let mut writer = docker::sh("writer", "echo hello > /data/hello; echo deep > /data/sub/x; exec sleep 1000");
    writer["mounts"] = json!([
        {"name": "scratch", "path": "/data"},
        {"name": "ram", "path": "/ram"}
    ]);
    let mut reader = docker::sh("reader", "exec sleep 1000");
    reader["mounts"] = json!([
        {"name": "scratch", "path": "/shared"},
        {"name": "scratch", "path": "/sub", "subpath": "sub"},
        {"name": "scratch", "path": "/ro", "readonly": true},
        {"name": "ram", "path": "/ram"},
        {"name": "conf", "path": "/etc/app"},
        {"name": "all-conf", "path": "/etc/all"},
        {"name": "creds", "path": "/run/creds"},
        {"name": "maybe", "path": "/etc/maybe"}
    ]);
    let mut p = pod("shared", json!([writer, reader]));
    p["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "scratch", "type": "Temp"},
        {"name": "ram", "type": "Temp", "source": {"medium": "Memory"}, "storage": {"limit": "1Mi"}},
        {"name": "conf", "type": "Config", "source": {"target": "conf", "items": [{"key": "app.ini", "path": "cfg/app.ini", "mode": "0600"}]}},
        {"name": "all-conf", "type": "Config", "source": {"target": "conf", "default": "0640"}},
        {"name": "creds", "type": "Secret", "source": {"target": "creds", "default": "0400"}},
        {"name": "maybe", "type": "Config", "source": {"target": "absent", "optional": true}}
    ]);
    d.apply_json(&p).await;
    let iid = id("vols", "shared", 0);
    let s = d.wait_state(&iid, Kind::Running, 30).await;
    let (w, r) = (s.containers[0].id.clone(), s.containers[1].id.clone());
    // What the writer wrote, the reader reads (through the whole volume and through a subpath).
    let mut seen = String::new();
    for _ in 0..50 {
        seen = exec(&r, "cat /shared/hello /sub/x").1;
        if seen.contains("deep") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(seen, "hello\ndeep");
    let (code, _, err) = exec(&r, "echo no > /ro/nope");
    assert_ne!(code, 0, "a readonly mount took a write");
    assert!(err.contains("Read-only file system"), "{err}");
    // Config and secret files: the items with their modes, every key at the default mode.
    assert_eq!(exec(&r, "stat -c '%a %s' /etc/app/cfg/app.ini; cat /etc/app/cfg/app.ini").1, "600 7\nlevel=7");
    assert_eq!(exec(&r, "ls /etc/app").1, "cfg", "only the item's key");
    assert_eq!(
        exec(&r, "stat -c '%a %n' /etc/all/app.ini /etc/all/other").1,
        "640 /etc/all/app.ini\n640 /etc/all/other"
    );
    assert_eq!(exec(&r, "stat -c %a /run/creds/token; cat /run/creds/token").1, "400\ns3cret");
    assert_eq!(exec(&r, "ls -A /etc/maybe | wc -l").1, "0", "a missing optional store is an empty volume");
    let (code, _, err) = exec(&r, "echo x > /etc/app/new");
    assert_ne!(code, 0, "a configmap volume is read-only");
    assert!(err.contains("Read-only file system"), "{err}");
    // The Memory volume: a tmpfs on the host of the limit, shared, and full at 1 MiB.
    let run_dir = d.run_dir().join("vols.shared.0");
    let ram = run_dir.join("volumes/ram");
    // The subpath is handed to the engine as a bind mount of what was checked, staged in a
    // root-only directory: never as the path a container could swap.
    let staged = run_dir.join("mounts/reader/1");
    let expected = vec![ram.display().to_string(), staged.display().to_string()];
    assert_eq!(mounts_below(&run_dir), expected);
    let mode = std::fs::metadata(run_dir.join("mounts")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let df = std::process::Command::new("df").args(["-B1", "--output=size,fstype"]).arg(&ram).output().unwrap();
    let df = String::from_utf8_lossy(&df.stdout).to_string();
    assert!(df.contains("1048576") && df.contains("tmpfs"), "{df}");
    let (code, _, err) = exec(&w, "dd if=/dev/zero of=/ram/big bs=1024 count=2048");
    assert_ne!(code, 0, "2 MiB fit a 1 MiB tmpfs");
    assert!(err.contains("No space left on device"), "{err}");
    exec(&w, "rm /ram/big; echo kept > /ram/note");
    assert_eq!(exec(&r, "cat /ram/note").1, "kept");
    // The host side: the volumes' directory is root's alone; the secret's file is not readable
    // by anyone else there either.
    let mode = std::fs::metadata(run_dir.join("volumes")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    // The daemon's kill -9 and restart: the pod is re-adopted, its volumes as they were.
    d.restart(true);
    let s = d.wait_state(&iid, Kind::Running, 30).await;
    assert_eq!(s.containers[1].id, r, "re-adopted, not restarted");
    assert_eq!(exec(&r, "cat /shared/hello /ram/note").1, "hello\nkept");
    assert_eq!(mounts_below(&run_dir), expected);

    // A restart keeps the Temp volumes (disk and memory) and writes the files afresh.
    let (code, _, err) = d.cli(&["configmap", "create", "vols/conf", "--from-literal", "app.ini=level=8"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = d.cli(&["restart", "vols/shared/0", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    let s = d.wait_state(&iid, Kind::Running, 30).await;
    let r = s.containers[1].id.clone();
    assert_eq!(exec(&r, "cat /shared/hello /ram/note /etc/app/cfg/app.ini").1, "hello\nkept\nlevel=8");

    // A container turns the subpath into a symlink to the host's /etc: the next start refuses it.
    let w = s.containers[0].id.clone();
    let (code, _, err) = exec(&w, "rm -r /data/sub && ln -s /etc /data/sub");
    assert_eq!(code, 0, "{err}");
    d.cli(&["restart", "vols/shared/0", "--timeout", "30"]);
    let s = d.wait(&iid, 30, |s| s.message.contains("symlink") || s.state.kind() == Kind::Failed).await;
    assert!(s.message.contains("volume \"scratch\" subpath \"sub\"") && s.message.contains("is a symlink"), "{s:?}");
    assert!(!std::path::Path::new("/etc/x").exists(), "nothing was written through the symlink");

    // Deleting the instance unmounts its tmpfs and removes its directories.
    d.client.delete(&iid, Some(30.0)).await.unwrap();
    assert!(mounts_below(&run_dir).is_empty(), "{:?}", mounts_below(&run_dir));
    assert!(!run_dir.exists());
}

/// A required configmap that does not exist fails the start naming it; a Static volume in the
/// host's own directories, bad Temp and Secret sources and a mount of no volume are refused
/// with their field paths.
#[tokio::test(flavor = "multi_thread")]
async fn missing_stores_and_unsupported_volume_types_are_clear_errors() {
    docker::shared_engine();
    let d = Daemon::start("pod-volumes-errors");
    let mut c = docker::sh("main", "exec sleep 1000");
    c["mounts"] = json!([{"name": "conf", "path": "/etc/app"}]);
    let mut p = pod("needs", json!([c]));
    p["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "conf", "type": "Config", "source": {"target": "nowhere"}}]);
    d.apply_json(&p).await;
    let s = d.wait(&id("vols", "needs", 0), 30, |s| s.message.contains("nowhere")).await;
    assert!(s.message.contains("volume \"conf\": configmap vols/nowhere does not exist"), "{s:?}");

    let mut c = docker::sh("main", "exec sleep 1000");
    c["mounts"] = json!([{"name": "nope", "path": "/x"}, {"name": "disk", "path": "rel", "subpath": "../up"}]);
    let mut p = pod("bad", json!([c]));
    p["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "disk", "type": "Static", "source": {"target": "/etc/pv1"}},
        {"name": "tmp", "type": "Temp", "source": {"medium": "SSD"}, "storage": {"limit": "lots"}},
        {"name": "cfg", "type": "Secret", "source": {"items": [{"key": "k", "path": "/abs", "mode": "999"}]}}
    ]);
    refused(
        &d,
        "bad",
        &p,
        &[
            "spec.template.spec.volumes[0].source.target: \"/etc/pv1\" lies in the host's own /etc",
            "spec.template.spec.volumes[1].source.medium: \"SSD\"",
            "spec.template.spec.volumes[1].storage.limit: \"lots\"",
            "spec.template.spec.volumes[2].source.target: is required",
            "spec.template.spec.volumes[2].source.items[0].path: \"/abs\" must be relative",
            "spec.template.spec.volumes[2].source.items[0].mode: \"999\" is not a file mode",
            "spec.template.spec.containers[0].mounts[0].name: no volume \"nope\"",
            "spec.template.spec.containers[0].mounts[1].path: \"rel\" must be an absolute path",
            "spec.template.spec.containers[0].mounts[1].subpath: \"../up\" must stay inside the volume",
        ],
    );
}

/// `gpus`: the engine is asked exactly as `docker run --gpus` asks it (the request compared
/// with the one the docker CLI stores), and an engine without a GPU driver fails the pod with
/// the engine's own reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_gpu_request_is_the_engines_own_and_a_host_without_gpus_fails_the_pod() {
    docker::shared_engine();
    let (code, created, err) = docker::docker(SHARED_SOCKET, &["create", "--gpus", "2", IMAGE, "true"]);
    assert_eq!(code, 0, "{err}");
    let cli_request: Value =
        serde_json::from_str(&docker::inspect(SHARED_SOCKET, &created, "{{json .HostConfig.DeviceRequests}}")).unwrap();
    docker::docker(SHARED_SOCKET, &["rm", "-f", &created]);
    let ours = serde_json::to_value(vec![steward::runtime::docker::gpu_request(2)]).unwrap();
    // The CLI's null fields are ones the API leaves out.
    let without_nulls = |v: &Value| -> Value {
        let items = v.as_array().unwrap().iter();
        let objects = items.map(|o| o.as_object().unwrap().iter().filter(|(_, v)| !v.is_null()));
        Value::Array(objects.map(|o| Value::Object(o.map(|(k, v)| (k.clone(), v.clone())).collect())).collect())
    };
    assert_eq!(without_nulls(&ours), without_nulls(&cli_request));

    let (_, _, cli_err) = docker::docker(SHARED_SOCKET, &["run", "--rm", "--gpus", "1", IMAGE, "true"]);
    assert!(cli_err.contains("could not select device driver"), "this host has a GPU driver? {cli_err}");
    let d = Daemon::start("pod-gpus");
    let mut c = docker::sh("main", "exec sleep 1000");
    c["resources"] = json!({"limits": {"gpu": "1"}});
    d.apply_json(&pod("gpu", json!([c]))).await;
    let s = d.wait(&id("vols", "gpu", 0), 30, |s| s.message.contains("device driver")).await;
    assert!(s.message.contains("could not select device driver \"\" with capabilities: [[gpu]]"), "{s:?}");
    assert_ne!(s.state.kind(), Kind::Running);
}

/// `steward cp` into a process (below its workPath, owned by its user, r or rw) and into a pod's
/// container (archive API, root's unless asked); refused outside the instance's directories.
#[tokio::test(flavor = "multi_thread")]
async fn cp_puts_a_file_into_a_process_and_a_pod_and_nowhere_else() {
    docker::shared_engine();
    let d = Daemon::start("pod-cp");
    d.apply_json(&common::spec("proc", 1, json!({"user": "nobody"}), json!({}))).await;
    let pid = id("test", "proc", 0);
    d.wait_state(&pid, Kind::Running, 30).await;
    let local = d.path().join("settings.ini");
    std::fs::write(&local, "rate=3\n").unwrap();
    let (code, out, err) = d.cli(&["cp", local.to_str().unwrap(), "test/proc/0:conf/settings.ini"]);
    assert_eq!(code, 0, "{err}");
    let work = d.work_dir().join("test.proc.0");
    let target = work.join("conf/settings.ini");
    assert!(out.contains(&target.display().to_string()) && out.contains("mode 0400"), "{out}");
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&target).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (nobody.uid.as_raw(), 0o400));
    assert_eq!(std::fs::metadata(work.join("conf")).unwrap().uid(), nobody.uid.as_raw());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "rate=3\n");
    let (code, _, err) = d.cli(&["cp", local.to_str().unwrap(), "test/proc/0:rw.ini", "--mode", "rw", "--user", "0:0"]);
    assert_eq!(code, 0, "{err}");
    let meta = std::fs::metadata(work.join("rw.ini")).unwrap();
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o600));
    // Outside the instance's own directories: refused, naming the path; nothing written.
    for outside in ["/etc/steward-cp-test", "../escape.ini", "/tmp/x"] {
        let (code, _, err) = d.cli(&["cp", local.to_str().unwrap(), &format!("test/proc/0:{outside}")]);
        assert_ne!(code, 0, "{outside} was taken");
        assert!(err.contains("workPath"), "{err}");
    }
    assert!(!std::path::Path::new("/etc/steward-cp-test").exists());
    assert!(!d.work_dir().join("escape.ini").exists());
    // A symlink the workload planted is not followed.
    std::os::unix::fs::symlink("/etc", work.join("link")).unwrap();
    let (code, _, err) = d.cli(&["cp", local.to_str().unwrap(), "test/proc/0:link/planted"]);
    assert_ne!(code, 0);
    assert!(err.contains("link"), "{err}");
    assert!(!std::path::Path::new("/etc/planted").exists());

    // Into a pod's second container, as a user named in the container's /etc/passwd.
    let main = docker::sh("main", "exec sleep 1000");
    let side = docker::sh("side", "exec sleep 1000");
    d.apply_json(&pod("cp", json!([main, side]))).await;
    let s = d.wait_state(&id("vols", "cp", 0), Kind::Running, 30).await;
    // The image knows root only: the side container gets a user of its own.
    let (code, _, err) = exec(&s.containers[1].id, "echo 'game:x:4242:4243::/:/bin/sh' >> /etc/passwd");
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = d.cli(&[
        "cp",
        local.to_str().unwrap(),
        "vols/cp/0:/tmp/settings.ini",
        "--container",
        "side",
        "--user",
        "game",
        "--mode",
        "rw",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("in container side") && out.contains("owner 4242:4243"), "{out}");
    let (_, seen, _) = exec(&s.containers[1].id, "stat -c '%u %a' /tmp/settings.ini; cat /tmp/settings.ini");
    assert_eq!(seen, "4242 600\nrate=3");
    let (_, absent, _) = exec(&s.containers[0].id, "ls /tmp/settings.ini 2>&1");
    assert!(absent.contains("No such file"), "{absent}");
    let (code, _, err) = d.cli(&["cp", local.to_str().unwrap(), "vols/cp/0:relative.ini"]);
    assert_ne!(code, 0);
    assert!(err.contains("absolute"), "{err}");
    let (code, _, err) = d.cli(&["cp", local.to_str().unwrap(), "vols/cp/0:/nowhere/dir/x"]);
    assert_ne!(code, 0);
    assert!(err.contains("nowhere"), "{err}");
    // The copies are in the journal (path and size, never the content).
    let (_, events, _) = d.cli(&["events", "-o", "json"]);
    assert!(events.contains("fileCopied") && events.contains("/tmp/settings.ini"), "{events}");
    assert!(!events.contains("rate=3"));
    d.client.delete(&id("vols", "cp", 0), None).await.unwrap();
}

/// Issue 47: seed 003's Dynamic (and, in a stateful set, Isolated) volumes are kept per
/// ordinal below the daemon's `volume_root`: each ordinal's data survives a restart of the
/// instance, a daemon kill -9, a scale 2 → 1 → 2 (ordinal 1 gets its own data back) and the
/// app's delete and deploy again. A limit that cannot be enforced, a mode a host directory
/// cannot give and Isolated outside a stateful set are refused by name.
#[tokio::test(flavor = "multi_thread")]
async fn a_dynamic_volume_is_kept_per_ordinal_across_restarts_scale_and_delete() {
    docker::shared_engine();
    // Every test daemon keeps its volumes in its own directory (tests/common).
    let mut d = Daemon::start("pod-kept");
    let root = d.path().join("volumes");
    let mut c = docker::sh(
        "world",
        "[ -f /data/who ] || echo \"${ORD##*.}\" > /data/who; echo start >> /data/starts; exec sleep 1000",
    );
    // seed 003's $BCS_POD_ID: namespace.name.ordinal.
    c["env"] = json!([{"name": "ORD", "value": "$BCS_POD_ID"}]);
    c["mounts"] = json!([{"name": "save", "path": "/data"}]);
    let world = |n: u32| {
        let mut p = pod("world", json!([c.clone()]));
        p["spec"]["instance"] = json!(n);
        p["spec"]["template"]["spec"]["volumes"] =
            json!([{"name": "save", "type": "Dynamic", "source": {"class": "local"}}]);
        p
    };
    let data = |i: u32, file: &str| {
        std::fs::read_to_string(root.join(format!("vols/world/{i}/save/{file}"))).unwrap_or_default()
    };
    let starts = |i: u32| data(i, "starts").lines().count();
    d.apply_json(&world(2)).await;
    for i in 0..2 {
        d.wait_state(&id("vols", "world", i), Kind::Running, 60).await;
    }
    let wait_starts = |i: u32, n: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while starts(i) < n {
            assert!(std::time::Instant::now() < deadline, "ordinal {i}: {} starts, not {n}", starts(i));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_starts(0, 1);
    wait_starts(1, 1);
    assert_eq!((data(0, "who").trim(), data(1, "who").trim()), ("0", "1"));

    // A restart of the instance: the same directory, its data kept.
    let (code, _, err) = d.cli(&["restart", "vols/world/0"]);
    assert_eq!(code, 0, "{err}");
    wait_starts(0, 2);
    assert_eq!(data(0, "who").trim(), "0");

    // A daemon kill -9: re-adopted, nothing of the volume touched.
    d.kill9();
    d.spawn();
    d.wait_state(&id("vols", "world", 1), Kind::Running, 60).await;
    assert_eq!((starts(1), data(1, "who").trim().to_string()), (1, "1".to_string()));

    // Scale 2 → 1 → 2: ordinal 1 goes, its data stays, and it comes back to it.
    d.apply_json(&world(1)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while d.client.status(&id("vols", "world", 1)).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "ordinal 1 still there after the scale in");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(data(1, "who").trim(), "1", "kept when its instance went");
    d.apply_json(&world(2)).await;
    d.wait_state(&id("vols", "world", 1), Kind::Running, 60).await;
    wait_starts(1, 2);
    assert_eq!(data(1, "who").trim(), "1");

    // The app deleted and deployed again: each ordinal finds its own.
    let (code, _, err) = d.cli(&["delete", "vols/world", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((data(0, "who").trim(), data(1, "who").trim()), ("0", "1"), "kept on the app's delete");
    d.apply_json(&world(2)).await;
    wait_starts(0, 3);
    wait_starts(1, 3);
    // steward volume: in use while its instance exists, listed with it, removed once it is gone.
    let (code, _, err) = d.cli(&["volume", "rm", "vols/world/0", "save"]);
    assert_ne!(code, 0);
    assert!(err.contains("in use by instance vols/world/0"), "{err}");
    let (code, _, err) = d.cli(&["delete", "vols/world", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = d.cli(&["-o", "json", "volume", "ls"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let rows: Vec<(u64, &str, bool)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["ordinal"].as_u64().unwrap(), v["volume"].as_str().unwrap(), v["instance"].is_null()))
        .collect();
    assert_eq!(rows, [(0, "save", true), (1, "save", true)], "{out}");
    let (code, _, err) = d.cli(&["volume", "rm", "vols/world/0", "save"]);
    assert_eq!(code, 0, "{err}");
    assert!(!root.join("vols/world/0").exists() && root.join("vols/world/1/save/who").exists());
    let (_, events, _) = d.cli(&["-o", "json", "events", "--since", "0"]);
    assert!(events.contains("\"volumeRemoved\""), "{events}");

    // What cannot be kept as asked is refused by name.
    let mut bad = world(1);
    bad["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "save", "type": "Dynamic", "source": {"mode": "ReadWriteMany"}, "storage": {"limit": "1Gi"}},
        {"name": "iso", "type": "Isolated"},
        {"name": "pol", "type": "Dynamic", "source": {"whenDeleted": "Forget", "whenScaled": "delete"}},
        {"name": "tmp", "type": "Temp", "source": {"whenDeleted": "Delete"}}
    ]);
    refused(
        &d,
        "bad-kept",
        &bad,
        &[
            "spec.template.spec.volumes[0].source.mode: \"ReadWriteMany\": a kept volume is a directory on one host",
            "spec.template.spec.volumes[0].storage.limit: is not enforced on a plain directory",
            "spec.template.spec.volumes[1].type: Isolated is for a stateful set",
            "spec.template.spec.volumes[2].source.whenDeleted: \"Forget\" must be \"Retain\"",
            "spec.template.spec.volumes[2].source.whenScaled: \"delete\" must be \"Retain\"",
            "spec.template.spec.volumes[3].source.whenDeleted: is not read by a Temp volume",
        ],
    );
}

/// Seed 003 Static volumes: a host directory named by path (made with the owner and mode the
/// spec asks, shared by every ordinal), one read-only, and a named one Steward keeps per
/// namespace; never removed with the app. A target that is, holds or lies in Steward's own
/// directories or the host's, or that is reached through a symlink a user planted, is refused
/// by name.
#[tokio::test(flavor = "multi_thread")]
async fn static_volumes_are_host_directories_shared_by_their_mounts() {
    use std::os::unix::fs::MetadataExt;
    docker::shared_engine();
    let d = Daemon::start("pod-static");
    let srv = d.path().join("srv");
    std::fs::create_dir_all(&srv).unwrap();
    std::fs::write(srv.join("motd"), "welcome").unwrap();
    let shelf = srv.join("shelf");
    let mut c = docker::sh(
        "shelf",
        "n=${ORD##*.}; echo $n > /shared/$n; echo $n > /named/$n; \
         if touch /ro/x 2>/dev/null; then echo writable; else echo refused; fi > /shared/ro-$n; \
         cat /ro/motd > /shared/motd-$n; exec sleep 1000",
    );
    c["env"] = json!([{"name": "ORD", "value": "$BCS_POD_ID"}]);
    c["mounts"] = json!([
        {"name": "shared", "path": "/shared"},
        {"name": "motd", "path": "/ro"},
        {"name": "named", "path": "/named"}
    ]);
    let shelf_pod = |volumes: Value| {
        let mut p = pod("shelf", json!([c.clone()]));
        p["spec"]["instance"] = json!(3);
        p["spec"]["template"]["spec"]["volumes"] = volumes;
        p
    };
    let volumes = json!([
        {"name": "shared", "type": "Static",
         "source": {"target": shelf.to_str().unwrap(), "owner": "1000:1001", "dirMode": "0770"}},
        {"name": "motd", "type": "Static", "source": {"target": srv.to_str().unwrap(), "readonly": true}},
        {"name": "named", "type": "Static"}
    ]);
    d.apply_json(&shelf_pod(volumes.clone())).await;
    for i in 0..3 {
        d.wait_state(&id("vols", "shelf", i), Kind::Running, 60).await;
    }
    let named = d.path().join("volumes/vols/.static/named");
    let read = |p: std::path::PathBuf| std::fs::read_to_string(&p).unwrap_or_default().trim().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while (0..3).any(|i| read(shelf.join(format!("motd-{i}"))).is_empty()) {
        assert!(std::time::Instant::now() < deadline, "the ordinals did not all write");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for i in 0..3 {
        assert_eq!(read(shelf.join(i.to_string())), i.to_string(), "ordinal {i} in the shared directory");
        assert_eq!(read(named.join(i.to_string())), i.to_string(), "ordinal {i} in the named one");
        assert_eq!(read(shelf.join(format!("ro-{i}"))), "refused", "ordinal {i}: readonly");
        assert_eq!(read(shelf.join(format!("motd-{i}"))), "welcome", "ordinal {i}");
    }
    let meta = std::fs::metadata(&shelf).unwrap();
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (1000, 1001, 0o770), "made as the spec asks");
    assert!(!srv.join("x").exists());

    // The app's delete leaves them: they are the host's.
    let (code, _, err) = d.cli(&["delete", "vols/shelf", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((read(shelf.join("2")), read(named.join("2"))), ("2".to_string(), "2".to_string()));
    assert_eq!(read(srv.join("motd")), "welcome");

    // Refused by name: the host's own, Steward's own, a name no volume can have, a limit.
    let state = d.path().join("state");
    let run_dir = d.path().join("run/x");
    let cases = [
        (
            json!({"target": "/usr/local/data"}),
            json!({}),
            "source.target: \"/usr/local/data\" lies in the host's own /usr",
        ),
        (json!({"target": "/"}), json!({}), "source.target: \"/\" is the whole host"),
        (json!({"target": "Data/x"}), json!({}), "source.target: \"Data/x\" may hold only"),
        (json!({"target": state.to_str().unwrap()}), json!({}), "is Steward's own state_dir"),
        (json!({"target": run_dir.to_str().unwrap()}), json!({}), "falls inside Steward's own run_base_dir"),
        (json!({"target": d.path().to_str().unwrap()}), json!({}), "holds Steward's own"),
        (json!({"owner": "a:b"}), json!({}), "source.owner: \"a:b\" is not uid:gid"),
        (json!({"dirMode": "999"}), json!({}), "source.dirMode: \"999\" is not a file mode"),
        (json!({}), json!({"limit": "1Gi"}), "storage.limit: is not enforced on a Static volume"),
    ];
    for (source, storage, expected) in cases {
        let volumes = json!([{"name": "bad", "type": "Static", "source": source, "storage": storage}]);
        let mut p = pod("bad", json!([docker::sh("main", "exec sleep 1000")]));
        p["spec"]["template"]["spec"]["volumes"] = volumes;
        let answer = d.client.apply(&p.to_string(), steward::spec::Format::Json).await;
        let err = answer.expect_err(expected).to_string();
        assert!(err.contains("spec.template.spec.volumes[0]"), "{expected}: {err}");
        assert!(err.contains(expected), "{expected} in: {err}");
    }
    assert!(d.client.list(&[]).await.unwrap().is_empty(), "nothing refused was made");

    // A way through a symlink a user planted (a directory they own, a link to /etc): the
    // start fails naming it, and nothing is made in /etc.
    let theirs = d.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(1000), Some(1000)).unwrap();
    std::os::unix::fs::symlink("/etc", theirs.join("link")).unwrap();
    std::os::unix::fs::lchown(theirs.join("link"), Some(1000), Some(1000)).unwrap();
    let target = theirs.join("link/steward-static-test");
    let mut p = pod("planted", json!([docker::sh("main", "exec sleep 1000")]));
    p["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "v", "type": "Static", "source": {"target": target.to_str().unwrap()}}]);
    p["spec"]["template"]["spec"]["containers"][0]["mounts"] = json!([{"name": "v", "path": "/v"}]);
    d.apply_json(&p).await;
    let s = d.wait(&id("vols", "planted", 0), 30, |s| s.message.contains("volume \"v\"")).await;
    assert!(s.message.contains("link"), "{s:?}");
    assert!(!std::path::Path::new("/etc/steward-static-test").exists());
}

/// How many times `path` is a mount point in the host's mount table.
fn mounted(path: &std::path::Path) -> usize {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = path.to_str().unwrap();
    table.lines().filter(|l| l.split(' ').nth(4) == Some(want)).count()
}

/// The loop devices that hold `image`.
fn loop_devices(image: &std::path::Path) -> String {
    let out = std::process::Command::new("losetup").arg("-j").arg(image).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The size of the filesystem mounted on `path`, in bytes.
fn filesystem_bytes(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("df").args(["-B1", "--output=size"]).arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
}

/// A kept volume's `storage.limit` with class `image` (issue 47): the ordinal's data in an ext4
/// image of the limit, loop-mounted, so a write past it fails; mounted once across a daemon
/// kill -9, grown online when the limit grows, a smaller one refused, unmounted (its loop
/// device freed) when the instance goes and mounted again with its data by the next; removed
/// with `steward volume rm`. A limit on a plain directory, and dropping the limit of an image,
/// are refused by name.
#[tokio::test(flavor = "multi_thread")]
async fn a_kept_volume_limit_is_a_filesystem_image_that_stops_writes_past_it() {
    docker::shared_engine();
    let mut d = Daemon::start("pod-kept-limit");
    let dir = d.path().join("volumes/vols/vault/0/save");
    let (image, mount) = (dir.join("disk.img"), dir.join("data"));
    let c = {
        let mut c = docker::sh(
            "vault",
            "if [ ! -f /data/report ]; then dd if=/dev/zero of=/data/big bs=1M count=64 2>/dev/null; rc=$?; \
             size=$(stat -c %s /data/big); rm -f /data/big; echo \"$rc $size\" > /data/report; echo kept > /data/keep; fi; \
             echo start >> /data/starts; exec sleep 1000",
        );
        c["mounts"] = json!([{"name": "save", "path": "/data"}]);
        c
    };
    let vault = |class: &str, limit: &str| {
        let mut p = pod("vault", json!([c.clone()]));
        let storage = if limit.is_empty() { json!({}) } else { json!({"limit": limit}) };
        p["spec"]["template"]["spec"]["volumes"] =
            json!([{"name": "save", "type": "Dynamic", "source": {"class": class}, "storage": storage}]);
        p
    };
    let read = |f: &str| std::fs::read_to_string(mount.join(f)).unwrap_or_default().trim().to_string();
    let wait_for = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !ok() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let vid = id("vols", "vault", 0);
    d.apply_json(&vault("image", "16Mi")).await;
    d.wait_state(&vid, Kind::Running, 60).await;
    wait_for("the report", &|| !read("report").is_empty());
    let report = read("report");
    let (rc, written) = report.split_once(' ').unwrap();
    let written: u64 = written.parse().unwrap();
    assert_ne!(rc, "0", "a 64 MiB write into a 16 MiB volume must fail: {report}");
    assert!(written < 16 << 20 && written > 8 << 20, "stopped at the limit: {report}");
    assert_eq!(mounted(&mount), 1);
    assert!(!loop_devices(&image).is_empty());
    assert_eq!(std::fs::metadata(&image).unwrap().len(), 16 << 20);
    let (code, out, err) = d.cli(&["-o", "json", "volume", "ls"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let bytes = listed[0]["bytes"].as_u64().unwrap();
    assert!(bytes > 0 && bytes < 16 << 20, "the image's blocks, not its size: {listed}");

    // A daemon kill -9: re-adopted, mounted once.
    d.kill9();
    d.spawn();
    d.wait_state(&vid, Kind::Running, 60).await;
    assert_eq!((mounted(&mount), read("starts").lines().count()), (1, 1));

    // A larger limit grows it online at the next start; a smaller one is refused by the start.
    d.apply_json(&vault("image", "32Mi")).await;
    let grown =
        d.wait(&vid, 60, |s| s.run_revision == 2 && s.state.kind() == Kind::Running || !s.message.is_empty()).await;
    assert!(grown.message.is_empty(), "{grown:?}");
    wait_for("the start on the grown image", &|| read("starts").lines().count() == 2);
    if filesystem_bytes(&mount) < 24 << 20 {
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    assert!(
        filesystem_bytes(&mount) > 24 << 20,
        "grown: {} {:?}\n{}",
        filesystem_bytes(&mount),
        read("starts"),
        d.log()
    );
    assert_eq!((mounted(&mount), read("keep")), (1, "kept".to_string()));
    d.apply_json(&vault("image", "16Mi")).await;
    let s = d.wait(&vid, 60, |s| s.message.contains("never shrunk")).await;
    assert!(s.message.contains("volume \"save\": storage.limit 16Mi is below its filesystem image's 32Mi"), "{s:?}");

    // Its instance gone: unmounted, the loop device freed, the image kept; the next finds its data.
    let (code, _, err) = d.cli(&["delete", "vols/vault", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((mounted(&mount), loop_devices(&image)), (0, String::new()));
    assert!(image.exists());
    // Dropping the limit would show the image's file, not its data: refused.
    d.apply_json(&vault("local", "")).await;
    let s = d.wait(&vid, 60, |s| s.message.contains("filesystem image")).await;
    assert!(s.message.contains("was made with a storage limit"), "{s:?}");
    d.apply_json(&vault("image", "32Mi")).await;
    wait_for("the start after the delete", &|| read("starts").lines().count() == 3);
    assert_eq!((read("keep"), mounted(&mount)), ("kept".to_string(), 1));
    let (code, _, err) = d.cli(&["delete", "vols/vault", "--timeout", "30"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = d.cli(&["volume", "rm", "vols/vault/0", "save"]);
    assert_eq!(code, 0, "{err}");
    assert!(!image.exists() && !dir.exists());
    assert_eq!(loop_devices(&image), "");

    // A limit a plain directory cannot enforce, an image without one, a class unknown: refused.
    let mut p = vault("local", "1Gi");
    let volumes = p["spec"]["template"]["spec"]["volumes"].as_array_mut().unwrap();
    volumes.push(json!({"name": "x", "type": "Dynamic", "source": {"class": "image"}}));
    volumes.push(json!({"name": "y", "type": "Dynamic", "source": {"class": "ceph"}}));
    refused(
        &d,
        "vault-bad",
        &p,
        &[
            "spec.template.spec.volumes[0].storage.limit: is not enforced on a plain directory",
            "spec.template.spec.volumes[1].storage.limit: is required by class \"image\"",
            "spec.template.spec.volumes[2].source.class: \"ceph\" is no storage class here",
        ],
    );
}
