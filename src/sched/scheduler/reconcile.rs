//! The leader's reconcile (issue 21, after Lain deployd's, seed 002): desired state compared
//! with what every daemon reports, on a period, after an instance of a known app is deleted on
//! its node, and a second after the desired state changes (a scale down's strays go then). A
//! placed instance its node lacks is applied again (an unchanged apply makes the instances a
//! daemon lacks); an instance of a known app on a node it is not placed on is deleted there; an
//! instance rescheduled before that has run healthy 30 minutes has its reschedule count reset
//! (seed 000). Apps being changed (placements not applied yet, a rollout under way, a delete
//! pending) and jobs (their runs have ids of their own) are left to what changes them.

use super::{check_spec, instance_id, Emit, Scheduler};
use crate::client::ClientError;
use crate::protocol::{DeployCause, DesiredChange, RolloutPhase, SchedEvent, SchedLine, WatchLine};
use crate::sched::store::{App, Placement, PlacementState};
use crate::spec::AppId;
use std::collections::{BTreeMap, BTreeSet};

/// How often the leader reconciles without being asked.
pub const RECONCILE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a Failed instance reconcile finds stays unheard (no event about it handled)
/// before reconcile acts on it itself.
pub const EVENT_LATE: std::time::Duration = std::time::Duration::from_secs(5);

/// Failed instances a pass found still placed with no event about them handled, by (node,
/// instance), with when first found: acted on once one is older than [`EVENT_LATE`] (the event
/// is normally only late, not lost).
pub(super) type Unheard = std::sync::Mutex<BTreeMap<(String, String), std::time::Instant>>;

/// What one pass finds on a node, before acting.
#[derive(Debug, Default, PartialEq)]
struct Findings<'a> {
    /// Instances the node runs that are not placed there (placed elsewhere, or beyond the
    /// app's count).
    strays: Vec<crate::spec::InstanceId>,
    /// Per app, the instances placed (and applied) there that the node lacks.
    missing: BTreeMap<AppId, Vec<u32>>,
    /// Apps the node runs another spec of than the one meant for it.
    behind: Vec<&'a App>,
    /// Instances Failed there with no word of it reaching the leader.
    failed: Vec<crate::spec::InstanceId>,
    /// Instances rescheduled before and healthy now (node, app, index).
    healthy: Vec<(String, AppId, u32)>,
}

/// Compares `node`, as its document `doc` says it is, with `settled` (the apps nothing is
/// changing, read after the document: an instance placed on the node since is not there yet,
/// so nothing new is taken for a stray) and `before` (read before it: an instance the node
/// lacks is missing only if it was Placed, so applied, before the node was read — one placed
/// since may be on its way).
fn compare<'a>(
    node: &str,
    doc: &crate::protocol::NodeDocument,
    before: Option<&[App]>,
    settled: &BTreeMap<&AppId, &'a App>,
) -> Findings<'a> {
    let mut found = Findings::default();
    let mut present: BTreeSet<(AppId, u32)> = BTreeSet::new();
    for on_node in &doc.apps {
        let key = AppId::new(&on_node.namespace, &on_node.name);
        let Some(app) = settled.get(&key).copied() else { continue };
        // It runs another spec than the one meant for it here (it missed a rollout, or one
        // was undone there): applied again, rolled out there by the spec's strategy.
        if !on_node.hash.is_empty() && app.placements.values().any(|p| p.node == node) {
            let meant = check_spec(&app.doc_for(node)).map(|s| crate::supervisor::revisions::template_hash(&s));
            if meant.is_ok_and(|h| h != on_node.hash) {
                found.behind.push(app);
            }
        }
        for inst in &on_node.instances {
            if app.placements.get(&inst.index).is_some_and(|p| p.node == node) {
                present.insert((key.clone(), inst.index));
                // Failed there with no word of it reaching the leader (an event missed across
                // a failover): its policy decides.
                let placed = app.placements.get(&inst.index).is_some_and(|p| p.state == PlacementState::Placed);
                if inst.state == crate::protocol::Kind::Failed && placed && !app.stopped.contains(&inst.index) {
                    found.failed.push(instance_id(&key, inst.index));
                }
                // Rescheduled before and healthy now: its start time decides a reset.
                let counted = app.placements.get(&inst.index).is_some_and(|p| p.reschedules > 0);
                if counted && placed && inst.state == crate::protocol::Kind::Running && inst.ready {
                    found.healthy.push((node.to_string(), key.clone(), inst.index));
                }
                continue;
            }
            // Kept by a failed rollout for its output: it runs nothing, and goes with the
            // app's next apply there.
            if inst.kept {
                continue;
            }
            found.strays.push(instance_id(&key, inst.index));
        }
    }
    let placed_before: BTreeSet<(&AppId, u32)> = before
        .unwrap_or_default()
        .iter()
        .flat_map(|a| a.placements.iter().map(move |(i, p)| (a, *i, p)))
        .filter(|(_, _, p)| p.node == node && p.state == PlacementState::Placed)
        .map(|(a, i, _)| (&a.key, i))
        .collect();
    for app in settled.values() {
        for (i, p) in &app.placements {
            let placed_here = p.node == node && p.state == PlacementState::Placed;
            let applied = placed_before.contains(&(&app.key, *i));
            if placed_here && applied && !present.contains(&(app.key.clone(), *i)) {
                found.missing.entry(app.key.clone()).or_default().push(*i);
            }
        }
    }
    found
}

impl Scheduler {
    /// One pass over `node`, as its document `doc` says it is, against the desired state read
    /// after it (`apps`) and before it (`before`): see [`compare`]. Acts only on apps still
    /// stored as read.
    pub(super) async fn reconcile_node(
        &self,
        node: &str,
        doc: &crate::protocol::NodeDocument,
        before: Option<&[App]>,
        apps: &[App],
        unheard: &Unheard,
        emit: &Emit,
    ) {
        let settled: BTreeMap<&AppId, &App> = apps.iter().filter(|a| is_settled(a)).map(|a| (&a.key, a)).collect();
        let Findings { strays, mut missing, behind, failed, healthy } = compare(node, doc, before, &settled);
        // An app a deploy or a controller changed since it was read (a reschedule, a scale)
        // is left to the next pass: acting on the old record would delete a new instance as
        // a stray or apply an old spec.
        let acted: BTreeSet<AppId> = strays
            .iter()
            .map(|id| id.app())
            .chain(missing.keys().cloned())
            .chain(behind.iter().map(|a| a.key.clone()))
            .collect();
        let unchanged = self.unchanged_since(&settled, &acted).await;
        for id in strays {
            if !unchanged.contains(&id.app()) {
                continue;
            }
            let Some(client) = self.client(node) else { continue };
            let ok = match client.delete(&id, Some(60.0)).await {
                Ok(()) | Err(ClientError::Api { status: 404, .. }) => true,
                Err(e) => {
                    tracing::warn!(node, "deleting the stray {id}: {e}");
                    false
                }
            };
            emit(&line(SchedEvent::StrayDeleted { instance: id.to_string(), node: node.to_string(), ok }));
        }
        missing.retain(|key, _| unchanged.contains(key));
        for app in behind {
            if unchanged.contains(&app.key) {
                self.update_behind(node, app, emit).await;
            }
        }
        self.reset_reschedules(healthy).await;
        // A failure just seen may have its event on the way (the node's event stream and this
        // pass race): acted on only once it has stayed unheard for a while.
        let overdue: BTreeSet<String> = {
            let mut unheard = unheard.lock().expect("failures lock");
            let now = std::time::Instant::now();
            let found: BTreeMap<(String, String), std::time::Instant> = failed
                .iter()
                .map(|id| {
                    let k = (node.to_string(), id.to_string());
                    let since = unheard.get(&k).copied().unwrap_or(now);
                    (k, since)
                })
                .collect();
            unheard.retain(|(n, _), _| n != node);
            let overdue =
                found.iter().filter(|(_, since)| now - **since >= EVENT_LATE).map(|((_, id), _)| id.clone()).collect();
            unheard.extend(found);
            overdue
        };
        for id in failed {
            if overdue.contains(&id.to_string()) {
                self.instance_failed(node, &id, false, &BTreeSet::new(), "reconcile: failed", emit).await;
            }
        }
        for (key, lacking) in missing {
            let Some(app) = settled.get(&key) else { continue };
            for i in &lacking {
                emit(&line(SchedEvent::InstanceMissing { instance: format!("{key}/{i}"), node: node.to_string() }));
            }
            let what: Vec<String> = lacking.iter().map(|i| format!("{i} on {node}")).collect();
            let why = DeployCause::Rescheduled { reason: format!("reconcile: missing {}", what.join(", ")) };
            if let Err(e) = self.deploy_doc(app.spec.clone(), &BTreeSet::new(), why).await {
                emit(&line(SchedEvent::RescheduleFailed {
                    app: key.to_string(),
                    from: node.to_string(),
                    error: format!("reconcile: {e}"),
                }));
            }
        }
    }
}

/// An app nothing is changing right now: its placements applied, no rollout under way, no
/// delete pending, not a job (its runs have ids of their own).
pub(super) fn is_settled(app: &App) -> bool {
    app.deleting.is_none()
        && !app.placements.values().any(|p| matches!(p.state, PlacementState::Pending { .. }))
        && !app.rollout.as_ref().is_some_and(|r| r.phase == RolloutPhase::Progressing)
        && !check_spec(&app.spec).is_ok_and(|s| s.runs_to_completion())
}

impl Scheduler {
    /// Of `acted` (apps of `apps` as read), those still stored as read: same version, still
    /// settled. Each is read alone (a pass acts on few).
    async fn unchanged_since(&self, apps: &BTreeMap<&AppId, &App>, acted: &BTreeSet<AppId>) -> BTreeSet<AppId> {
        let reads = acted.iter().map(|key| async move { (key, self.store.app(key).await) });
        let mut unchanged = BTreeSet::new();
        for (key, now) in futures_util::future::join_all(reads).await {
            let Ok(Some(now)) = now else { continue };
            if is_settled(&now) && apps.get(key).is_some_and(|read| read.version == now.version) {
                unchanged.insert(key.clone());
            }
        }
        unchanged
    }

    /// Applies to `node` the spec meant for it (its instances there), which its daemon rolls
    /// out by the spec's strategy.
    async fn update_behind(&self, node: &str, app: &App, emit: &Emit) {
        let Some(client) = self.client(node) else { return };
        let text = app.doc_for(node).to_string();
        let r = client.apply_outcome(&text, crate::spec::Format::Json, Some(&app.ids_on(node))).await;
        emit(&line(SchedEvent::RevisionBehind {
            app: app.key.to_string(),
            node: node.to_string(),
            revision: r.as_ref().ok().map(|a| a.revision),
            error: r.err().map(|e| e.to_string()),
        }));
    }
}

fn line(body: SchedEvent) -> WatchLine {
    WatchLine::Sched(SchedLine::now(body))
}

/// How long an instance runs healthy (Running and ready, not restarted) before its reschedule
/// count starts again from zero (seed 000: "正常运行30分钟后重启次数清零"), as the daemon's own
/// restart count does; long-lived apps would otherwise reach `maxtimes` over months.
pub const RESCHEDULES_RESET_AFTER_MS: u64 = crate::supervisor::policy::RESET_AFTER_MS;

/// For tests only (docs/remote.md): the window in seconds instead of 30 minutes, so an
/// end-to-end test need not wait half an hour.
const RESET_WINDOW_ENV: &str = "STEWARD_SCHED_TEST_RESCHEDULE_RESET_SECS";

fn reset_window_ms() -> u64 {
    let secs = std::env::var(RESET_WINDOW_ENV).ok().and_then(|v| v.parse::<u64>().ok());
    secs.map_or(RESCHEDULES_RESET_AFTER_MS, |s| s.saturating_mul(1000))
}

/// Whether `p`'s reschedule count goes back to 0: it has some, and its instance has run ready
/// on its node since `started_ms` (its last start there) for `window_ms`.
fn reschedules_reset(p: &Placement, running_ready: bool, started_ms: Option<u64>, now_ms: u64, window_ms: u64) -> bool {
    p.reschedules > 0
        && p.state == PlacementState::Placed
        && running_ready
        && started_ms.is_some_and(|since| now_ms.saturating_sub(since) >= window_ms)
}

impl Scheduler {
    /// Resets, durably, the reschedule count of each instance (node, app, index) that has run
    /// healthy for the window on its node, by its status there (its last start).
    async fn reset_reschedules(&self, healthy: Vec<(String, AppId, u32)>) {
        let (now, window) = (crate::clock::now_ms(), reset_window_ms());
        for (node, key, i) in healthy {
            let (Some(client), Some(limit)) = (self.client(&node), self.node_timeout(&node)) else { continue };
            let Ok(Ok(s)) = tokio::time::timeout(limit, client.status(&instance_id(&key, i))).await else {
                continue;
            };
            let running_ready = s.state.kind() == crate::protocol::Kind::Running && s.ready;
            let why = DesiredChange::Rescheduled {
                reason: format!("reschedule count reset: ran healthy {}", crate::clock::span(window)),
                app: key.to_string(),
                placements: BTreeMap::from([(i.to_string(), node.clone())]),
            };
            let reset = self.update_app(&key, &why, |a| match a.placements.get_mut(&i) {
                Some(p) if p.node == node && reschedules_reset(p, running_ready, s.last_start_ms, now, window) => {
                    p.reschedules = 0;
                    true
                }
                _ => false,
            });
            if let Err(e) = reset.await {
                tracing::warn!(node, "resetting {key}/{i}'s reschedule count: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(placed: &[(u32, &str)]) -> App {
        let mut app: App =
            serde_json::from_value(serde_json::json!({"key": "test/web", "spec": {}, "placements": {}})).unwrap();
        for (i, node) in placed {
            let p = Placement { node: node.to_string(), state: PlacementState::Placed, reschedules: 0 };
            app.placements.insert(*i, p);
        }
        app
    }

    fn running(indexes: &[u32]) -> crate::protocol::NodeDocument {
        let instances: Vec<serde_json::Value> =
            indexes.iter().map(|i| serde_json::json!({"index": i, "state": "Running", "ready": true})).collect();
        let app = serde_json::json!({"namespace": "test", "name": "web", "labels": {}, "instances": instances});
        serde_json::from_value(serde_json::json!({"apps": [app]})).unwrap()
    }

    /// Issue 46: a pass compares a node with the desired state read after it (strays) and
    /// before it (missing): an instance placed on the node after it was read is neither a stray
    /// nor missing; one it runs that the later reading places elsewhere is a stray; one placed
    /// there in both readings that it lacks is missing.
    #[test]
    fn a_pass_takes_nothing_placed_since_the_node_was_read_for_a_stray_or_missing() {
        // Read before the node: 0 and 1 on h1. The node: runs 0 and 2 (2 applied just before
        // it was read, while the earlier reading was not Placed yet). Read after: 0, 1, 2 and 3
        // (3 placed since) on h1, and 4 elsewhere.
        let before = [app(&[(0, "h1"), (1, "h1")])];
        let after = app(&[(0, "h1"), (1, "h1"), (2, "h1"), (3, "h1"), (4, "h2")]);
        let settled = BTreeMap::from([(&after.key, &after)]);
        let found = compare("h1", &running(&[0, 2]), Some(&before), &settled);
        assert_eq!(found.strays, Vec::<crate::spec::InstanceId>::new(), "2 is placed there in the later reading");
        assert_eq!(found.missing, BTreeMap::from([(after.key.clone(), vec![1])]), "3 may be on its way");
        // The node runs 4, which the later reading places on h2 (moved): a stray.
        let found = compare("h1", &running(&[0, 1, 4]), Some(&before), &settled);
        assert_eq!(found.strays, vec![instance_id(&after.key, 4)]);
        // No earlier reading yet (the first pass of a leadership): nothing is called missing.
        let found = compare("h1", &running(&[]), None, &settled);
        assert!(found.missing.is_empty(), "{found:?}");
    }

    /// Issue 43, item 9: the count resets once the instance has run healthy 30 minutes (an
    /// instance started 31 minutes ago, not one started 29 minutes ago, nor one not ready).
    #[test]
    fn reschedules_reset_after_thirty_minutes_healthy() {
        let now = 10 * RESCHEDULES_RESET_AFTER_MS;
        let minutes = |m: u64| Some(now - m * 60_000);
        let p = Placement { node: "h1".into(), state: PlacementState::Placed, reschedules: 2 };
        assert!(reschedules_reset(&p, true, minutes(31), now, RESCHEDULES_RESET_AFTER_MS));
        assert!(!reschedules_reset(&p, true, minutes(29), now, RESCHEDULES_RESET_AFTER_MS));
        assert!(!reschedules_reset(&p, false, minutes(31), now, RESCHEDULES_RESET_AFTER_MS), "not ready");
        assert!(!reschedules_reset(&p, true, None, now, RESCHEDULES_RESET_AFTER_MS), "no start known");
        let none = Placement { reschedules: 0, ..p.clone() };
        assert!(!reschedules_reset(&none, true, minutes(31), now, RESCHEDULES_RESET_AFTER_MS), "nothing to reset");
        let failed = Placement { state: PlacementState::Failed, ..p };
        assert!(!reschedules_reset(&failed, true, minutes(31), now, RESCHEDULES_RESET_AFTER_MS));
    }
}
