//! REMOTE_HTTP and REMOTE_TCP checks (seed 000: run by the scheduler, not the host): probes
//! from here to the instance's host IP and port, with the same grace period and consecutive
//! failures as local checks; when the failures add up, the instance is failed through its
//! daemon, whose restart policy restarts it (counted in RESTARTS, after its backoff) or gives up.

use super::scheduler::{check_spec, Scheduler};
use super::store::{App, PlacementState};
use crate::clock::now_ms;
use crate::health::{Outcome, Prober, Tracker, Verdict};
use crate::protocol::{SchedEvent, SchedLine, State, WatchLine};
use crate::spec::model::{CheckType, HealthCheck, ProcessSpec};
use crate::spec::render::render_check;
use crate::spec::InstanceId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Emit = Arc<dyn Fn(&WatchLine) + Send + Sync>;

/// The running remote checks, one task per (instance, check).
pub struct RemoteChecks {
    sched: Arc<Scheduler>,
    emit: Emit,
    prober: Prober,
    running: Mutex<BTreeMap<String, (String, tokio::task::JoinHandle<()>)>>,
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

fn wanted(apps: &[App], lost: &BTreeSet<String>) -> BTreeMap<String, Wanted> {
    let mut out = BTreeMap::new();
    for app in apps {
        let Ok(spec) = check_spec(&app.spec) else { continue };
        if app.deleting.is_some() {
            continue;
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

impl RemoteChecks {
    pub fn new(sched: Arc<Scheduler>, emit: Emit) -> RemoteChecks {
        RemoteChecks { sched, emit, prober: Prober::new(), running: Mutex::new(BTreeMap::new()) }
    }

    /// Starts the checks of every placed instance and stops those of instances gone, moved
    /// or on lost nodes.
    pub async fn sync(&self, apps: &[App], lost: &BTreeSet<String>) {
        let wanted = wanted(apps, lost);
        let mut running = self.running.lock().expect("checks lock");
        running.retain(|key, (node, task)| {
            let keep = wanted.get(key).is_some_and(|w| w.node == *node) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for (key, w) in wanted {
            if running.contains_key(&key) {
                continue;
            }
            let task = tokio::spawn(run_check(self.sched.clone(), self.emit.clone(), self.prober.clone(), w.clone()));
            running.insert(key, (w.node, task));
        }
    }
}

impl Drop for RemoteChecks {
    fn drop(&mut self) {
        for (_, (_, task)) in self.running.lock().expect("checks lock").iter() {
            task.abort();
        }
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
