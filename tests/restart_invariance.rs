//! The restart-invariance test: one of every kind the API can create — instances (a foreground
//! process with a random port, a forking one with a pidfile, one an operator stopped, one that
//! failed, a pod), secrets, configmaps, apps' revisions and rollouts (one rolled back), hook templates and hook runs (one
//! finished, one under way), a completed job, a cron job, a pod's kept volume, a scale-in its hook kept — then stewardd restarted by SIGTERM and by kill -9,
//! comparing every listing before and after. Any difference fails. Secrets were once lost at
//! every restart while hundreds of tests passed: each new kind joins this test as it lands.

mod common;

use common::docker::{self, IMAGE};
use common::{id, spec, Daemon};
use serde_json::{json, Value};
use steward::supervisor::state::Kind;

/// Every listing the API has, with what legitimately moves on its own left out: clocks
/// (`updatedMs`, check times), usage counters, free-port counts, the event journal's tail.
async fn listings(d: &Daemon) -> Value {
    let get = |args: &[&str]| {
        let mut full = vec!["-o", "json"];
        full.extend_from_slice(args);
        let (code, out, err) = d.cli(&full);
        assert_eq!(code, 0, "steward {args:?}: {err}");
        serde_json::from_str::<Value>(&out).unwrap_or_else(|e| panic!("steward {args:?}: {e}: {out}"))
    };
    let mut instances = get(&["ls"]);
    for s in instances.as_array_mut().unwrap() {
        let s = s.as_object_mut().unwrap();
        s.remove("updatedMs");
        s.remove("usage");
        s.remove("checks");
    }
    let mut node = get(&["node"]);
    let node = node.as_object_mut().unwrap();
    // The admitted requests (issue 25) are counted again from the specs at each start.
    let kept = json!({"apps": node["apps"], "ports": {"rangeStart": node["ports"]["rangeStart"], "rangeEnd": node["ports"]["rangeEnd"]}, "instances": node["instances"], "resources": node["resources"]});
    // Every app's revisions and rollout (issue 18).
    let apps = ["fg", "forking", "stopped", "failed", "pod", "rolling", "backed", "gated"];
    let revisions: Vec<Value> = apps.iter().map(|app| get(&["rollout", "history", &format!("keep/{app}")])).collect();
    let rollouts: Vec<Value> = apps.iter().map(|app| get(&["rollout", "status", &format!("keep/{app}")])).collect();
    let crons = get(&["cron", "status", "keep/yearly"]);
    let jobs = get(&["job", "ls"]);
    let job = get(&["job", "status", "keep/nightly"]);
    let runs: Vec<Value> =
        ["done", "going"].iter().map(|r| get(&["hook", "run", "status", &format!("keep/{r}")])).collect();
    json!({
        "instances": instances,
        "secrets": get(&["secret", "ls"]),
        "configmaps": get(&["configmap", "ls"]),
        "node": kept,
        "revisions": revisions,
        "rollouts": rollouts,
        "hookTemplates": get(&["hook", "template", "ls"]),
        "hookRuns": get(&["hook", "run", "ls"]),
        "hookRunsInFull": runs,
        "jobs": jobs,
        "cron": crons,
        "job": job,
        "endpoints": get(&["endpoints"]),
        "volumes": get(&["volume", "ls"]),
    })
}

#[tokio::test]
async fn every_kind_survives_sigterm_and_kill9_unchanged() {
    docker::shared_engine();
    let mut d = Daemon::start("invariance");
    for (verb, name) in [("secret", "keep/creds"), ("configmap", "keep/conf")] {
        let (code, _, err) = d.cli(&[verb, "create", name, "--from-literal", "k=v"]);
        assert_eq!(code, 0, "{err}");
    }
    let ns = |mut s: Value| {
        s["metadata"]["namespace"] = json!("keep");
        s
    };
    d.apply_json(&ns(spec(
        "fg",
        2,
        json!({
            "startCmd": "exec sleep 1000",
            "ports": [{"name": "http", "hostPort": 0}],
            "secrets": [{"secretName": "creds", "items": [{"type": "env", "dataKey": "k", "keyOrPath": "K"}]}],
            "configmaps": [{"name": "conf", "items": [{"type": "env", "dataKey": "k", "keyOrPath": "C"}]}],
            "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"cpu": "0.5"}}
        }),
        json!({"restartPolicy": {"policy": "Always"},
               "schedule": {"labels": {"tier": "keep"}, "tolerations": [{"operator": "Exists"}]}}),
    )))
    .await;
    d.apply_json(&ns(spec(
        "forking",
        1,
        json!({
            "procName": "sleep",
            "pidFile": "${run_base_dir}/keep.forking.${instanceid}/forking.pid",
            "startCmd": "sleep 1000 & echo $! > ${pidFile}",
            "startGracePeriod": 5
        }),
        json!({}),
    )))
    .await;
    d.apply_json(&ns(spec("stopped", 1, json!({}), json!({})))).await;
    d.apply_json(&ns(spec(
        "failed",
        1,
        json!({"startCmd": "exit 3"}),
        json!({"restartPolicy": {"policy": "OnFailure", "maxtimes": 1}}),
    )))
    .await;
    d.apply_json(&json!({
        "apiVersion": "v4", "kind": "pod",
        "metadata": {"name": "pod", "namespace": "keep"},
        "killPolicy": {"gracePeriod": 1},
        "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": [
            {"name": "main", "image": IMAGE, "command": {"value": "/bin/sh", "arguments": ["-c", "exec sleep 1000"]},
             "mounts": [{"name": "save", "path": "/data"}]},
            {"name": "side", "image": IMAGE, "command": {"value": "/bin/sh", "arguments": ["-c", "exec sleep 1000"]}}
        ], "volumes": [{"name": "save", "type": "Dynamic"}]}}}
    }))
    .await;
    for (name, i) in [("fg", 0), ("fg", 1), ("forking", 0), ("pod", 0)] {
        d.wait_state(&id("keep", name, i), Kind::Running, 30).await;
    }
    d.wait_state(&id("keep", "stopped", 0), Kind::Running, 10).await;
    let (code, _, err) = d.cli(&["stop", "keep/stopped/0"]);
    assert_eq!(code, 0, "{err}");
    // A second revision (the stopped instance takes it at its next start).
    d.apply_json(&ns(spec("stopped", 1, json!({"env": [{"name": "V", "value": "2"}]}), json!({})))).await;
    assert_eq!(d.client.revisions("keep", "stopped").await.unwrap().revisions.len(), 2);
    d.wait_state(&id("keep", "failed", 0), Kind::Failed, 20).await;
    // A rollout paused half-way: one instance moved, waiting out its minReadySeconds, when paused.
    let rolling = |v: &str| {
        ns(spec(
            "rolling",
            3,
            json!({"env": [{"name": "V", "value": v}], "startCmd": "exec sleep 1000"}),
            json!({"strategy": {"maxUnavailable": 1, "maxSurge": 0, "minReadySeconds": 600, "progressDeadlineSeconds": 1200}}),
        ))
    };
    d.apply_json(&rolling("1")).await;
    for i in 0..3 {
        d.wait_state(&id("keep", "rolling", i), Kind::Running, 20).await;
    }
    d.apply_json(&rolling("2")).await;
    d.wait(&id("keep", "rolling", 0), 20, |s| s.run_revision == 2 && s.ready).await;
    let (code, _, err) = d.cli(&["rollout", "pause", "keep/rolling"]);
    assert_eq!(code, 0, "{err}");
    // A rollout that failed and went back by itself (issue 42): the revisions' outcomes, the
    // last good revision and the rollback's record.
    let backed = |cmd: &str| {
        let mut s = ns(spec("backed", 2, json!({"startCmd": cmd}), json!({"strategy": {"autoRollback": true}})));
        s["restartPolicy"] = json!({"policy": "Never"});
        s
    };
    d.apply_json(&backed("exec sleep 1000")).await;
    for i in 0..2 {
        d.wait_state(&id("keep", "backed", i), Kind::Running, 20).await;
    }
    d.apply_json(&backed("exit 3")).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = d.client.rollout("keep", "backed").await.unwrap();
        if r.is_some_and(|r| r.target == 3 && r.phase == steward::protocol::RolloutPhase::Complete) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no rollback");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // A job that ran to completion (issue 20).
    let mut nightly = ns(spec("nightly", 1, json!({"startCmd": "exit 0", "startGracePeriod": 0}), json!({})));
    nightly["job"] = json!({"completions": 2, "parallelism": 2});
    nightly["restartPolicy"] = json!({"policy": "Never"});
    d.apply_json(&nightly).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let job = d.client.job("keep", "nightly").await.unwrap();
        if job.status.phase == steward::protocol::JobPhase::Complete {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the job did not complete: {job:?}\n{}", d.log());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A cron job (its next tick a year away) with one triggered tick that ran.
    let mut yearly = ns(spec("yearly", 1, json!({"startCmd": "exit 0", "startGracePeriod": 0}), json!({})));
    yearly["cronJob"] = json!({"rule": "@yearly", "history": {"success": 1}});
    yearly["restartPolicy"] = json!({"policy": "Never"});
    d.apply_json(&yearly).await;
    let (code, _, err) = d.cli(&["cron", "trigger", "keep/yearly"]);
    assert_eq!(code, 0, "{err}");
    while d.client.cron("keep", "yearly").await.unwrap().status.succeeded < 1 {
        assert!(std::time::Instant::now() < deadline, "the triggered tick did not run");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A HookTemplate, a run of it that has finished and one waiting out its hour-long interval.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let template = json!({"kind": "HookTemplate", "metadata": {"name": "check", "namespace": "keep"},
        "spec": {"args": [{"name": "port"}, {"name": "limit", "value": "0"}],
                 "metrics": [{"name": "m", "interval": "1h", "consecutiveErrorLimit": 0,
                              "provider": {"web": {"url": "http://127.0.0.1:{{ args.port }}/"}}}]}});
    let file = d.path().join("check.json");
    std::fs::write(&file, template.to_string()).unwrap();
    let (code, _, err) = d.cli(&["hook", "template", "apply", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let port_arg = format!("port={closed}");
    let (code, out, err) = d.cli(&["hook", "run", "create", "keep/check", "--name", "done", "--arg", &port_arg, "-w"]);
    assert_eq!(code, 6, "an Error run: {out}{err}");
    let slow = template
        .to_string()
        .replace("\"consecutiveErrorLimit\":0", "\"consecutiveErrorLimit\":5")
        .replace("check", "slow");
    std::fs::write(&file, slow).unwrap();
    assert_eq!(d.cli(&["hook", "template", "apply", file.to_str().unwrap()]).0, 0);
    let (code, _, err) = d.cli(&["hook", "run", "create", "keep/slow", "--name", "going", "--arg", &port_arg]);
    assert_eq!(code, 0, "{err}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while d.client.hook_run("keep", "going", None).await.unwrap().status.metric_results[0].count == 0 {
        assert!(std::time::Instant::now() < deadline, "no first measurement");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // A scale-in its hook refused (issue 47): ordinal 1 kept, its run's verdict recorded.
    let gated = |n: u32| {
        let hook = json!({"hook": {"template": "check", "args": [{"name": "port", "value": closed.to_string()}]}});
        ns(spec("gated", n, json!({"startCmd": "exec sleep 1000"}), json!({"strategy": {"scaleIn": hook}})))
    };
    d.apply_json(&gated(2)).await;
    for i in 0..2 {
        d.wait_state(&id("keep", "gated", i), Kind::Running, 20).await;
    }
    d.apply_json(&gated(1)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !d
        .client
        .rollout_status("keep", "gated")
        .await
        .unwrap()
        .scale_in
        .iter()
        .any(|s| s.ordinal == 1 && s.phase == steward::protocol::ScaleInPhase::Kept)
    {
        assert!(std::time::Instant::now() < deadline, "ordinal 1 not kept by its hook");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Endpoints steward-sched handed this daemon (issue 27).
    let endpoints = steward::protocol::AppEndpoints {
        namespace: "keep".into(),
        name: "fg".into(),
        revision: 7,
        updated_ms: 1_700_000_000_000,
        ports: [(
            "http".to_string(),
            vec![steward::protocol::Endpoint { ip: "127.0.0.1".into(), port: 31000, node: "h1".into(), instance: 0 }],
        )]
        .into(),
        services: vec![steward::protocol::ServiceEntry {
            service: "fg".into(),
            // ClusterIP: a node port would put rules into this host's own nftables.
            kind: steward::spec::model::ServiceType::ClusterIP,
            export: true,
            protocol: steward::spec::model::Protocol::Tcp,
            port: 80,
            node_port: None,
            target: "http".into(),
            // None: a cluster IP would put an address on this host's own link.
            cluster_ip: None,
        }],
        port_protocols: [("http".to_string(), steward::spec::model::Protocol::Udp)].into(),
        ordinals: Some(steward::protocol::OrdinalNames { name: "fg".into(), domain: "box".into() }),
        pod_names: Some(steward::protocol::PodNames { hostname: String::new(), subdomain: "edge".into() }),
    };
    d.client.put_endpoints(&endpoints).await.unwrap();

    let holder =
        || docker::docker(docker::SHARED_SOCKET, &["inspect", "-f", "{{.Id}}", "steward-keep.pod.0-network"]).1;
    let pod_network = holder();
    assert!(!pod_network.is_empty(), "the pod has a network holder");
    let before = listings(&d).await;
    assert_eq!(before["endpoints"].as_array().unwrap().len(), 1, "{}", before["endpoints"]);
    let admitted = &before["node"]["resources"]["allocated"];
    assert!(admitted["milliCpu"].as_u64().unwrap() >= 200, "keep/fg's requests are admitted: {admitted}");
    let fg = before["node"]["apps"].as_array().unwrap().iter().find(|a| a["name"] == "fg").unwrap();
    assert_eq!(fg["labels"]["tier"], "keep", "schedule.labels reported: {fg}");
    for kill9 in [false, true] {
        d.restart(kill9);
        let after = listings(&d).await;
        let how = if kill9 { "kill -9" } else { "SIGTERM" };
        assert_eq!(
            after,
            before,
            "listings changed across a restart by {how}:\nbefore {}\nafter {}",
            serde_json::to_string_pretty(&before).unwrap(),
            serde_json::to_string_pretty(&after).unwrap()
        );
        assert_eq!(holder(), pod_network, "the pod's network holder is kept across a restart by {how}");
    }
}
