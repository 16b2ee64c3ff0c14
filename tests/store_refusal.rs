//! A respawn whose commit the store refuses once: the actor retries the same commit, the new
//! process keeps running, and the journal holds each transition exactly once, without a gap.
//! In-process (the store's failure hook is not reachable through the daemon's API); this test
//! binary becomes a child subreaper, as stewardd does.

use std::time::{Duration, Instant};
use steward::cgroups::CgroupConfig;
use steward::spec::{Format, InstanceId, Roots};
use steward::supervisor::state::Kind;
use steward::supervisor::{LogRotation, Supervisor, SupervisorConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_respawn_commit_is_retried_once_and_journaled_once() {
    let dir = tempfile::tempdir().unwrap();
    let roots = Roots {
        work_base_dir: dir.path().join("work"),
        run_base_dir: dir.path().join("run"),
        volume_root: dir.path().join("volumes"),
    };
    let parent = format!("steward-test-refusal-{}", std::process::id());
    let cgroups = CgroupConfig { mount_root: "/sys/fs/cgroup".into(), parent: parent.clone() };
    let supervisor = Supervisor::open(SupervisorConfig {
        state_dir: dir.path().join("state"),
        roots: roots.clone(),
        host_ip: "127.0.0.1".into(),
        cgroups: cgroups.clone(),
        logs: LogRotation { max_bytes: 1 << 20, keep: 1, every: Duration::from_secs(60) },
        port_range: (31000, 31100),
        fetch: steward::fetch::FetchOptions::new(dir.path().join("cache")),
        docker_socket: dir.path().join("no-docker.sock"),
        numa_root: dir.path().join("numa"),
        own_paths: vec![("state_dir".into(), dir.path().join("state"))],
        revision_history: 10,
        cni: Default::default(),
        resources: steward::resources::HostResources::detect(Default::default()),
        hook_max_response_bytes: 1 << 20,
        default_tasks_max: None,
        hollow: false,
        pod_dns: None,
    })
    .await
    .unwrap();
    let spec = r#"{"apiVersion": "v4", "kind": "process",
        "restartPolicy": {"policy": "Always", "interval": 0},
        "metadata": {"name": "refused", "namespace": "test"},
        "spec": {"instance": 1, "template": {"spec": {"processes": [
            {"procName": "sleep", "startCmd": "exec sleep 1000", "startGracePeriod": 0,
             "workPath": "${work_base_dir}/${namespace}.${processname}.${instanceid}"}]}}}}"#;
    supervisor.apply(steward::spec::parse(spec, Format::Json, &roots).unwrap()).await.unwrap();
    let iid = InstanceId { namespace: "test".into(), name: "refused".into(), index: 0 };
    let wait = |pred: &dyn Fn(&steward::supervisor::record::InstanceStatus) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = supervisor.status(&iid).unwrap();
            if pred(&st) {
                return st;
            }
            assert!(Instant::now() < deadline, "timed out: {st:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let first = wait(&|s| s.state.kind() == Kind::Running).pid.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = supervisor.store().last_seq();

    // The next write transaction (the respawn's: Backoff, Staging, Starting) fails.
    supervisor.store().inject_commit_failure();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGKILL).unwrap();
    let st = wait(&|s| s.state.kind() == Kind::Running && s.pid.is_some_and(|p| p != first));
    assert_eq!(st.restarts, 1);
    assert_eq!(supervisor.store().stats().failed_txns, 1, "the injected failure was hit");
    let second = st.pid.unwrap();
    assert!(std::path::Path::new(&format!("/proc/{second}")).exists());

    let events = supervisor.store().events_since(before, 100).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, ((before + 1)..=(before + seqs.len() as u64)).collect::<Vec<_>>(), "a gap: {seqs:?}");
    let to: Vec<&str> = events.iter().filter_map(|e| e.body["to"].as_str()).collect();
    assert_eq!(to, ["Backoff", "Staging", "Starting", "Running"], "{events:#?}");

    // Leave nothing behind: the instance's processes and cgroups.
    let hierarchy = steward::cgroups::Hierarchy::detect(&cgroups).unwrap();
    for key in hierarchy.list_instances() {
        let cg = hierarchy.instance(&key);
        let _ = cg.kill_all();
        let _ = cg.remove();
    }
    let _ = hierarchy.remove_parent();
}
