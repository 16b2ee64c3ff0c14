//! REMOTE_HTTP and REMOTE_TCP checks (seed 000: run by the scheduler, not the host): probes
//! from here to the instance's host IP and port, with the same grace period and consecutive
//! failures as local checks; when the failures add up, the instance is failed through its
//! daemon, whose restart policy restarts it (counted in RESTARTS, after its backoff) or gives up.
//!
//! A controller of the leader, app by app: an app's sync starts the checks of its placed
//! instances and stops those of instances gone, moved, stopped or on lost nodes.

use super::controller::Controller;
use super::liveness::Liveness;
use super::{check_spec, Scheduler};
use crate::clock::now_ms;
use crate::health::{Outcome, Prober, Tracker, Verdict};
use crate::protocol::{SchedEvent, SchedLine, State, WatchLine};
use crate::sched::store::{App, PlacementState};
use crate::spec::model::{CheckType, HealthCheck, ProcessSpec};
use crate::spec::render::render_check;
use crate::spec::{AppId, InstanceId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Emit;

/// One check's task: the node it probes, and the task.
type Running = (String, tokio::task::JoinHandle<()>);

/// The running remote checks: per app, one task per (instance, check).
pub(super) struct RemoteChecks {
    prober: Prober,
    running: Mutex<BTreeMap<AppId, BTreeMap<String, Running>>>,
}

/// One remote check of one placed instance.
#[derive(Clone)]
struct Wanted {
    id: InstanceId,
    node: String,
    check: HealthCheck,
    /// Fixed host ports of the spec, by name (allocated ones come from the daemon).
    fixed_ports: BTreeMap<String, u16>,
}

/// The app's checks to run: none when it is being deleted.
fn wanted(app: &App, lost: &BTreeSet<String>) -> BTreeMap<String, Wanted> {
    let mut out = BTreeMap::new();
    {
        let Ok(spec) = check_spec(&app.spec) else { return out };
        if app.deleting.is_some() {
            return out;
        }
        for (index, p) in &app.placements {
            if p.state != PlacementState::Placed || lost.contains(&p.node) || app.stopped.contains(index) {
                continue;
            }
            let id = InstanceId {
                namespace: spec.metadata.namespace.clone(),
                name: spec.metadata.name.clone(),
                index: *index,
            };
            for (pi, proc_) in spec.spec.template.spec.processes.iter().enumerate() {
                for (ci, check) in proc_.health_checks.iter().enumerate() {
                    if !matches!(check.kind, Some(CheckType::RemoteHttp | CheckType::RemoteTcp)) {
                        continue;
                    }
                    let key = format!("{id}#{pi}.{ci}");
                    out.insert(
                        key,
                        Wanted {
                            id: id.clone(),
                            node: p.node.clone(),
                            check: check.clone(),
                            fixed_ports: fixed_ports(&spec),
                        },
                    );
                }
            }
        }
    }
    out
}

fn fixed_ports(spec: &ProcessSpec) -> BTreeMap<String, u16> {
    spec.spec
        .template
        .spec
        .processes
        .iter()
        .flat_map(|p| &p.ports)
        .filter_map(|p| u16::try_from(p.host_port).ok().filter(|n| *n > 0).map(|n| (p.name.clone(), n)))
        .collect()
}

/// Whether the spec document may hold a remote check: a look for the check types' names,
/// much cheaper than parsing it (the sync parses it).
fn may_check_remotely(doc: &serde_json::Value) -> bool {
    match doc {
        serde_json::Value::String(s) => s == "REMOTE_HTTP" || s == "REMOTE_TCP",
        serde_json::Value::Array(items) => items.iter().any(may_check_remotely),
        serde_json::Value::Object(fields) => fields.values().any(may_check_remotely),
        _ => false,
    }
}

impl RemoteChecks {
    pub fn new() -> RemoteChecks {
        RemoteChecks { prober: Prober::new(), running: Mutex::new(BTreeMap::new()) }
    }

    /// Starts the checks of app `key`'s placed instances (`app`: as now stored; None: gone)
    /// and stops those of instances gone, moved, stopped or on `lost` nodes. A check that
    /// ended (its instance gave up) is started again while its instance is still wanted.
    fn sync_app(&self, sched: &Arc<Scheduler>, emit: &Emit, key: &AppId, app: Option<&App>, lost: &BTreeSet<String>) {
        let wanted = app.map(|a| wanted(a, lost)).unwrap_or_default();
        let mut all = self.running.lock().expect("checks lock");
        let running = all.entry(key.clone()).or_default();
        running.retain(|key, (node, task)| {
            let keep = wanted.get(key).is_some_and(|w| w.node == *node) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for (check, w) in wanted {
            if running.contains_key(&check) {
                continue;
            }
            let task = tokio::spawn(run_check(sched.clone(), emit.clone(), self.prober.clone(), w.clone()));
            running.insert(check, (w.node, task));
        }
        if running.is_empty() {
            all.remove(key);
        }
    }

    /// Stops the checks of every app but `apps` (those gone from the store: no sync of theirs
    /// comes).
    pub fn keep_only(&self, apps: &[App]) {
        let stored: BTreeSet<&AppId> = apps.iter().map(|a| &a.key).collect();
        self.running.lock().expect("checks lock").retain(|key, checks| {
            let keep = stored.contains(key);
            if !keep {
                checks.values().for_each(|(_, task)| task.abort());
            }
            keep
        });
    }

    /// Stops every check (the lead lost, maintenance begun).
    pub fn stop_all(&self) {
        self.keep_only(&[]);
    }
}

impl Drop for RemoteChecks {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[async_trait::async_trait]
impl Controller for RemoteChecks {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "remote checks"
    }

    fn wants(&self, app: &App, _live: &Liveness) -> bool {
        may_check_remotely(&app.spec) || self.running.lock().expect("checks lock").contains_key(&app.key)
    }

    async fn sync(&self, sched: &Arc<Scheduler>, key: &AppId, emit: &Emit) -> Option<Duration> {
        let app = sched.store.app(key).await.ok()?;
        let lost = sched.live().lost().clone();
        self.sync_app(sched, emit, key, app.as_ref(), &lost);
        None
    }
}

/// The port a check probes: its own `port`, else its `portName` among the instance's ports.
fn check_port(
    port: i64,
    port_name: &str,
    allocated: &BTreeMap<String, u16>,
    fixed: &BTreeMap<String, u16>,
) -> Option<u16> {
    if port > 0 {
        return u16::try_from(port).ok();
    }
    allocated.get(port_name).or_else(|| fixed.get(port_name)).copied()
}

async fn run_check(sched: Arc<Scheduler>, emit: Emit, prober: Prober, w: Wanted) {
    let Some(client) = sched.client(&w.node) else { return };
    let instance = w.id.to_string();
    // The host's address and the instance's ports, from its daemon, once it runs.
    let (host, status) = loop {
        let node = client.node().await;
        let status = client.status(&w.id).await;
        if let (Ok(n), Ok(s)) = (node, status) {
            if let (Ok(ip), State::Running) = (n.host_ip.parse(), &s.state) {
                break (ip, s);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    // Only REMOTE_HTTP and REMOTE_TCP checks are watched here (filtered where they are listed).
    let port_of = |port: i64, name: &str| check_port(port, name, &status.ports, &w.fixed_ports);
    let Some(rendered) = render_check(&w.check, &port_of, &|text: &str| text.to_string()) else {
        let message = "the check names no port the instance has".to_string();
        emit(&WatchLine::Sched(SchedLine::now(SchedEvent::RemoteCheckInvalid { instance, message })));
        return;
    };
    let mut started = status.last_start_ms.unwrap_or_else(now_ms);
    let mut tracker = Tracker::new(&rendered, started);
    let mut healthy: Option<bool> = None;
    tokio::time::sleep(Duration::from_secs(rendered.delay_seconds)).await;
    loop {
        let outcome = prober.probe_at(host, &rendered).await.unwrap_or(Outcome::Fail("no probe".into()));
        let message = match &outcome {
            Outcome::Pass => String::new(),
            Outcome::Fail(m) => m.clone(),
        };
        let verdict = tracker.record(outcome, now_ms());
        let now_healthy = tracker.health.healthy;
        if now_healthy != healthy {
            healthy = now_healthy;
            let (instance, node) = (instance.clone(), w.node.clone());
            emit(&WatchLine::Sched(SchedLine::now(SchedEvent::RemoteHealth { instance, node, healthy, message })));
        }
        if let Verdict::Kill { reason } = verdict {
            // Failed through its daemon, whose restart policy counts it and decides.
            let r = client.fail(&w.id, &format!("REMOTE check from the scheduler: {reason}")).await;
            let (instance, node, ok) = (instance.clone(), w.node.clone(), r.is_ok());
            emit(&WatchLine::Sched(SchedLine::now(SchedEvent::RemoteCheckRestart { instance, node, reason, ok })));
            // Checked again once its policy has started it again (this task ends if it gave up
            // or it was stopped: `sync` starts another while the instance is still wanted).
            let Some(restarted) = next_run(&client, &w.id, started).await else { return };
            started = restarted;
            tracker = Tracker::new(&rendered, started);
            healthy = None;
            tokio::time::sleep(Duration::from_secs(rendered.delay_seconds)).await;
            continue;
        }
        tokio::time::sleep(Duration::from_secs(rendered.interval_seconds.max(1))).await;
    }
}

/// Waits for the instance's next run after the one started at `started_ms`: its start time,
/// or None when it will not run again by itself (it failed for good, exited, was stopped).
async fn next_run(client: &crate::client::Client, id: &InstanceId, started_ms: u64) -> Option<u64> {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Ok(s) = client.status(id).await else { continue };
        match s.state {
            State::Running if s.last_start_ms.is_some_and(|t| t > started_ms) => return s.last_start_ms,
            State::Failed { .. } | State::Exited { .. } | State::Stopped => return None,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_port_is_its_own_or_the_named_one() {
        let allocated = BTreeMap::from([("http".to_string(), 31005)]);
        let fixed = BTreeMap::from([("admin".to_string(), 8080)]);
        assert_eq!(check_port(9000, "http", &allocated, &fixed), Some(9000));
        assert_eq!(check_port(0, "http", &allocated, &fixed), Some(31005));
        assert_eq!(check_port(0, "admin", &allocated, &fixed), Some(8080));
        assert_eq!(check_port(0, "nope", &allocated, &fixed), None);
    }
}
