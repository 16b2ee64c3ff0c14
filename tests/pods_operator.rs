//! Pods as an operator meets them (issue 31), against the real Docker Engine: secret files only
//! their owner reads, logs that a daemon restart neither replays nor loses, deletes and stops
//! ordered with a start in flight, short-lived mains, PORT_<name> everywhere, checks in BRIDGE
//! mode, published ports on host_ip and bounded Docker logs.

mod common;

use common::docker::{self, IMAGE, SHARED_SOCKET};
use common::{id, Daemon};
use serde_json::{json, Value};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;
use steward::supervisor::state::Kind;

fn pod(name: &str, containers: Value, top: Value) -> Value {
    let mut s = json!({
        "apiVersion": "v4",
        "kind": "pod",
        "metadata": {"name": name, "namespace": "ops"},
        "restartPolicy": {"policy": "OnFailure", "interval": 0, "backoff": 0},
        "killPolicy": {"gracePeriod": 1},
        "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": containers}}}
    });
    if let (Some(s), Value::Object(top)) = (s.as_object_mut(), top) {
        for (k, v) in top {
            s.insert(k, v);
        }
    }
    s
}

fn sh(name: &str, script: &str) -> Value {
    json!({"name": name, "image": IMAGE, "command": {"value": "/bin/sh", "arguments": ["-c", script]}})
}

/// The output of `docker exec CONTAINER sh -c SCRIPT`.
fn exec(container: &str, script: &str) -> String {
    let (code, out, err) = docker::docker(SHARED_SOCKET, &["exec", container, "/bin/sh", "-c", script]);
    assert_eq!(code, 0, "docker exec {container} {script}: {err}");
    out
}

/// A pod's secret files: root's and 0400 (or the item's uid), below 0700 directories of root's,
/// so another user of the host cannot read them; the container still can.
#[tokio::test(flavor = "multi_thread")]
async fn secret_files_are_readable_only_by_their_owner() {
    docker::shared_engine();
    let d = Daemon::start("pods-secretfiles");
    let data = [("token".to_string(), "tok-s3cret".to_string())].into();
    d.client.put_values("secrets", "ops", "creds", &data).await.unwrap();
    let mut main = sh("main", "exec sleep 1000");
    main["secrets"] = json!([{"secretName": "creds", "items": [
        {"type": "file", "dataKey": "token", "keyOrPath": "/etc/app/token"},
        {"type": "file", "dataKey": "token", "keyOrPath": "/etc/app/token-1000", "user": "1000"}
    ]}]);
    d.apply_json(&pod("sec", json!([main]), json!({}))).await;
    let s = d.wait_state(&id("ops", "sec", 0), Kind::Running, 60).await;
    let container = &s.containers[0].id;
    assert_eq!(exec(container, "cat /etc/app/token"), "tok-s3cret");

    let values = d.run_dir().join("ops.sec.0/values");
    for dir in [values.clone(), values.join("main")] {
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o700), "{}", dir.display());
    }
    let files: Vec<_> = std::fs::read_dir(values.join("main")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut owners = Vec::new();
    for f in &files {
        let meta = std::fs::metadata(f).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o400, "{}", f.display());
        owners.push(meta.uid());
        // Another user of the host: refused.
        let out = std::process::Command::new("runuser").args(["-u", "nobody", "--", "cat"]).arg(f).output().unwrap();
        assert!(!out.status.success(), "nobody read {}", f.display());
        assert!(!String::from_utf8_lossy(&out.stdout).contains("tok-s3cret"));
    }
    owners.sort();
    assert_eq!(owners, [0, 1000]);
}

/// Containers of one instance on the shared engine, as `status name` pairs.
fn containers_of(d: &Daemon, instance: &str) -> Vec<String> {
    let owner = format!("label=io.steward.owner={}", d.path().join("state").display());
    let which = format!("label=io.steward.instance={instance}");
    let (_, out, _) = docker::docker(
        SHARED_SOCKET,
        &["ps", "-a", "--filter", &owner, "--filter", &which, "--format", "{{.State}} {{.Names}}"],
    );
    out.lines().filter(|l| !l.is_empty()).map(String::from).collect()
}

/// A delete or stop while a pod is starting, at many delays after the apply: the start's
/// containers are removed (a delete leaves none, a stop none created or running), never left
/// behind in Created state.
#[tokio::test(flavor = "multi_thread")]
async fn delete_and_stop_race_a_pod_start_and_leave_no_container() {
    docker::shared_engine();
    let d = Daemon::start("pods-race");
    let containers = json!([sh("a", "exec sleep 1000"), sh("b", "exec sleep 1000"), sh("c", "exec sleep 1000")]);
    for (round, delay_ms) in [0u64, 5, 15, 30, 50, 80, 120, 160, 200].into_iter().enumerate() {
        let name = format!("race{round}");
        let iid = id("ops", &name, 0);
        let instance = iid.to_string();
        d.apply_json(&pod(&name, containers.clone(), json!({}))).await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        let stop = round % 2 == 1;
        if stop {
            d.client.action(&iid, "stop", Some(30.0)).await.unwrap();
            assert_eq!(d.status(&iid).await.state.kind(), Kind::Stopped);
        } else {
            d.client.delete(&iid, Some(30.0)).await.unwrap();
        }
        // A create dockerd was still working on would show up within this.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let left = containers_of(&d, &instance);
        if stop {
            assert!(
                left.iter().all(|c| c.starts_with("exited")),
                "stop after {delay_ms} ms left {left:?}\n{}",
                d.log()
            );
            d.client.delete(&iid, Some(30.0)).await.unwrap();
        } else {
            assert!(left.is_empty(), "delete after {delay_ms} ms left {left:?}\n{}", d.log());
        }
    }
}
