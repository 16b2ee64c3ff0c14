//! The lost-nodes controller: an app with instances on nodes the leader declared lost (or that
//! left the cluster file) has them marked Lost — in one write, however many of its nodes went
//! at once — and moved by its policy: placed elsewhere under Always, left where they are
//! otherwise, or, with `disconnect.replaceAfterSecs`, placed elsewhere once that wait passed on
//! a node still lost (the wait is this controller's own state, and the app's requeue).

use super::controller::Controller;
use super::liveness::Liveness;
use super::run::{kept_volume_stays, sched_line, DAEMON_SET_STAYS, MAXTIMES_REACHED};
use super::{check_spec, Emit, PassView, Scheduler, PASS_VIEW};
use crate::protocol::{DesiredChange, SchedEvent};
use crate::sched::store::{App, PlacementState};
use crate::spec::model::RestartPolicyKind;
use crate::spec::{AppId, ProcessSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Per app, per lost node: the instances waiting out `disconnect.replaceAfterSecs`, and when
/// they are placed elsewhere.
type Waiting = BTreeMap<AppId, BTreeMap<String, (Instant, Vec<u32>)>>;

#[derive(Default)]
pub(super) struct LostNodes {
    waiting: Mutex<Waiting>,
    /// The nodes as read for the apps being moved now, shared by their placements.
    burst: tokio::sync::Mutex<Option<Arc<PassView>>>,
}

/// How long one reading of the nodes serves the placements of a burst of lost apps (a fleet
/// lost at once moves hundreds of apps; reading every node per app made the burst crawl).
const BURST_VIEW_FOR: Duration = Duration::from_secs(10);

impl LostNodes {
    /// A new leadership: nothing waits (a wait a former leader began is not known here).
    pub fn forget(&self) {
        self.waiting.lock().expect("lost lock").clear();
    }

    /// Places `moves` of `app` elsewhere on the burst's view of the nodes (read again once it
    /// is older than [`BURST_VIEW_FOR`]).
    async fn reschedule(
        &self,
        sched: &Scheduler,
        app: &App,
        moves: &[(u32, String)],
        lost: &BTreeSet<String>,
        why: &str,
        emit: &Emit,
    ) {
        let view = {
            let mut burst = self.burst.lock().await;
            match burst.as_ref().filter(|v| v.read_at.elapsed() < BURST_VIEW_FOR) {
                Some(view) => view.clone(),
                None => {
                    let view = sched.pass_view().await;
                    *burst = Some(view.clone());
                    view
                }
            }
        };
        PASS_VIEW.scope(view, sched.reschedule(app, moves, lost, why, emit)).await
    }

    /// The instances of `app` waiting on `node`, due by now and still Lost there; what waits
    /// on a node heard again is dropped (its node runs it). With when the next is due.
    fn due(&self, app: &App, lost: &BTreeSet<String>) -> (Vec<(u32, String)>, Option<Instant>) {
        let mut waiting = self.waiting.lock().expect("lost lock");
        let Some(nodes) = waiting.get_mut(&app.key) else { return (Vec::new(), None) };
        nodes.retain(|node, _| lost.contains(node));
        let now = Instant::now();
        let mut due = Vec::new();
        nodes.retain(|node, (at, ids)| {
            if *at > now {
                return true;
            }
            let still = ids
                .iter()
                .filter(|i| app.placements.get(i).is_some_and(|p| p.node == *node && p.state == PlacementState::Lost));
            due.extend(still.map(|i| (*i, node.clone())));
            false
        });
        let next = nodes.values().map(|(at, _)| *at).min();
        if nodes.is_empty() {
            waiting.remove(&app.key);
        }
        (due, next)
    }
}

#[async_trait::async_trait]
impl Controller for LostNodes {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "lost nodes"
    }

    /// An app with instances on a lost node not yet marked Lost, or waiting to be replaced.
    fn wants(&self, app: &App, live: &Liveness) -> bool {
        app.deleting.is_none()
            && (app.placements.values().any(|p| p.state != PlacementState::Lost && live.is_lost(&p.node))
                || self.waiting.lock().expect("lost lock").contains_key(&app.key))
    }

    async fn sync(&self, sched: &Arc<Scheduler>, key: &AppId, emit: &Emit) -> Option<Duration> {
        let app = sched.store.app(key).await.ok().flatten()?;
        // An app being deleted is never placed again: its node gets the delete when it returns.
        if app.deleting.is_some() {
            self.waiting.lock().expect("lost lock").remove(key);
            return None;
        }
        let lost = sched.live().lost().clone();
        let (app, moving) = self.mark(sched, app, &lost, emit).await?;
        let (due, next) = self.due(&app, &lost);
        if !due.is_empty() {
            let why = "lost, and disconnect.replaceAfterSecs passed";
            self.reschedule(sched, &app, &due, &lost, why, emit).await;
        }
        if !moving.is_empty() {
            self.reschedule(sched, &app, &moving, &lost, "lost", emit).await;
        }
        next.map(|at| at.saturating_duration_since(Instant::now()))
    }
}

impl LostNodes {
    /// Marks the app's instances on `lost` nodes Lost (one write, one journal entry per node)
    /// and says which its policy places elsewhere now. None: the store failed, or the app is
    /// gone or being deleted.
    async fn mark(
        &self,
        sched: &Scheduler,
        app: App,
        lost: &BTreeSet<String>,
        emit: &Emit,
    ) -> Option<(App, Vec<(u32, String)>)> {
        let mut mine: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (i, p) in &app.placements {
            if p.state != PlacementState::Lost && lost.contains(&p.node) {
                mine.entry(p.node.clone()).or_default().push(*i);
            }
        }
        if mine.is_empty() {
            return Some((app, Vec::new()));
        }
        let whys: Vec<DesiredChange> = mine
            .iter()
            .map(|(node, ids)| DesiredChange::Lost {
                app: app.key.to_string(),
                node: node.clone(),
                instances: ids.clone(),
            })
            .collect();
        let marked = sched.update_app_noting(&app.key, &whys, |a| {
            let mut any = false;
            for (node, ids) in &mine {
                for i in ids {
                    if let Some(p) = a.placements.get_mut(i).filter(|p| p.node == *node) {
                        p.state = PlacementState::Lost;
                        any = true;
                    }
                }
            }
            any && a.deleting.is_none()
        });
        let app = match marked.await {
            Ok(Some(app)) => app,
            // Nothing to mark (moved meanwhile): as it was.
            Ok(None) => return sched.store.app(&app.key).await.ok().flatten().map(|a| (a, Vec::new())),
            Err(e) => {
                tracing::warn!("marking the lost instances of {}: {e}", app.key);
                return None;
            }
        };
        // Parsed once for all its nodes.
        let spec = check_spec(&app.spec).ok();
        let mut moving = Vec::new();
        for (node, ids) in &mine {
            for i in ids {
                let instance = format!("{}/{i}", app.key);
                emit(&sched_line(SchedEvent::InstanceLost { instance, node: node.clone() }));
            }
            match by_policy(&app, spec.as_ref(), node, ids, emit) {
                Lost::Move(ids) => moving.extend(ids.into_iter().map(|i| (i, node.clone()))),
                Lost::Wait(after, ids) => {
                    let due = Instant::now() + after;
                    let mut waiting = self.waiting.lock().expect("lost lock");
                    waiting.entry(app.key.clone()).or_default().insert(node.clone(), (due, ids));
                }
                Lost::Stay => {}
            }
        }
        Some((app, moving))
    }
}

/// What an app's policy makes of its instances lost on a node.
#[derive(Debug, PartialEq, Eq)]
enum Lost {
    /// Placed elsewhere now.
    Move(Vec<u32>),
    /// Placed elsewhere after a while, unless the node returns (`disconnect`).
    Wait(Duration, Vec<u32>),
    /// Left where they are.
    Stay,
}

/// What the app's policy says of its instances `mine` marked Lost on `node` (`spec`: the
/// app's, None when it no longer parses), each instance it keeps said with why.
fn by_policy(app: &App, spec: Option<&ProcessSpec>, node: &str, mine: &[u32], emit: &Emit) -> Lost {
    let policy = spec.map(|s| s.restart_policy.policy).unwrap_or_default();
    let not_moved = |instance: Option<u32>, reason: String| {
        emit(&sched_line(SchedEvent::NotRescheduled {
            app: instance.is_none().then(|| app.key.to_string()),
            instance: instance.map(|i| format!("{}/{i}", app.key)),
            node: node.to_string(),
            policy,
            reason,
        }))
    };
    if spec.is_some_and(|s| s.runs_to_completion()) {
        not_moved(
            None,
            "a job or cron job is not moved while its node may still run it (one host per tick); \
             deploy it again to move it"
                .into(),
        );
        return Lost::Stay;
    }
    if spec.is_some_and(|s| s.daemon_set.is_some()) {
        not_moved(None, DAEMON_SET_STAYS.into());
        return Lost::Stay;
    }
    if let Some(kept) = spec.map(|s| s.kept_volumes()).filter(|k| !k.is_empty()) {
        not_moved(None, kept_volume_stays(&kept));
        return Lost::Stay;
    }
    if policy != RestartPolicyKind::Always {
        not_moved(None, "restartPolicy reschedules on Lost only when Always".into());
        return Lost::Stay;
    }
    // Stopped by the operator: they stay where they are, stopped.
    let (stopped, moving): (Vec<u32>, Vec<u32>) = mine.iter().partition(|i| app.stopped.contains(i));
    for i in stopped {
        not_moved(Some(i), "stopped by the operator: it stays stopped on its node".into());
    }
    // Seed 000's maxtimes counts an instance's reschedules across hosts (DESIGN § 7).
    let maxtimes = spec.map(|s| s.restart_policy.maxtimes).unwrap_or(0);
    let (spent, moving): (Vec<u32>, Vec<u32>) =
        moving.iter().partition(|i| maxtimes > 0 && app.placements[*i].reschedules >= maxtimes);
    for i in spent {
        not_moved(Some(i), format!("{MAXTIMES_REACHED}: rescheduled {} already", crate::wording::times(maxtimes)));
    }
    let wait =
        spec.and_then(|s| s.disconnect.as_ref().map(|d| d.replace_after(s.kill_policy.grace_period))).unwrap_or(0);
    if moving.is_empty() {
        return Lost::Stay;
    }
    if wait > 0 {
        // disconnect: the host may still run them (and stops them itself by then).
        not_moved(None, format!("disconnect: placed elsewhere {wait} s after the node was lost, unless it returns"));
        return Lost::Wait(Duration::from_secs(wait), moving);
    }
    Lost::Move(moving)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::store::Placement;

    fn app(policy: &str, extra: serde_json::Value) -> (App, ProcessSpec) {
        let mut doc = serde_json::json!({
            "apiVersion": "v4", "kind": "process", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 3, "template": {"spec": {"processes": [{"procName": "p", "workPath": "/srv", "startCmd": "sleep 1"}]}}},
            "restartPolicy": {"policy": policy}
        });
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        let spec = check_spec(&doc).unwrap();
        let mut app: App =
            serde_json::from_value(serde_json::json!({"key": "ns/web", "spec": doc, "placements": {}, "stopped": [2]}))
                .unwrap();
        for i in 0..3 {
            let placed = Placement { node: "a".into(), state: PlacementState::Placed, reschedules: 0 };
            app.placements.insert(i, placed);
        }
        (app, spec)
    }

    /// An `emit` that keeps every line it is given, as JSON.
    fn said() -> (Arc<Mutex<Vec<String>>>, Emit) {
        let said: Arc<Mutex<Vec<String>>> = Default::default();
        let kept = said.clone();
        (said, Arc::new(move |l| kept.lock().unwrap().push(serde_json::to_string(l).unwrap())))
    }

    #[test]
    fn a_lost_nodes_instances_move_stay_or_wait_by_their_policy() {
        let (said, emit) = said();
        let (always, spec) = app("Always", serde_json::json!({}));
        // The operator's stopped instance 2 stays; 0 and 1 move.
        assert_eq!(by_policy(&always, Some(&spec), "a", &[0, 1, 2], &emit), Lost::Move(vec![0, 1]));
        assert!(said.lock().unwrap().iter().any(|l| l.contains("stopped by the operator")));
        let (never, spec) = app("Never", serde_json::json!({}));
        assert_eq!(by_policy(&never, Some(&spec), "a", &[0, 1], &emit), Lost::Stay);
        let (waits, spec) =
            app("Always", serde_json::json!({"disconnect": {"stopAfterSecs": 5, "replaceAfterSecs": 40}}));
        assert_eq!(
            by_policy(&waits, Some(&spec), "a", &[0, 1], &emit),
            Lost::Wait(Duration::from_secs(40), vec![0, 1])
        );
    }

    /// Issue 47: an ordinal whose kept volume is on the lost node stays there, said why, under
    /// Always too; `disconnect` waits for nothing then.
    #[test]
    fn an_instance_with_a_kept_volume_stays_on_its_lost_node() {
        let (said, emit) = said();
        let doc = serde_json::json!({
            "apiVersion": "v4", "kind": "pod", "metadata": {"name": "world", "namespace": "ns"},
            "restartPolicy": {"policy": "Always"},
            "disconnect": {"stopAfterSecs": 5, "replaceAfterSecs": 40},
            "spec": {"instance": 2, "template": {"spec": {
                "containers": [{"name": "c", "image": "busybox", "mounts": [{"name": "save", "path": "/data"}]}],
                "volumes": [{"name": "save", "type": "Dynamic"}]}}}
        });
        let spec = check_spec(&doc).unwrap();
        let (always, _) = app("Always", serde_json::json!({}));
        assert_eq!(by_policy(&always, Some(&spec), "a", &[0, 1], &emit), Lost::Stay);
        let said = said.lock().unwrap().join("\n");
        assert!(said.contains("its kept volume (save) holds its data on this node"), "{said}");
    }

    #[test]
    fn a_wait_is_due_once_past_and_dropped_when_its_node_is_back() {
        let (mut app, _) = app("Always", serde_json::json!({}));
        for p in app.placements.values_mut() {
            p.state = PlacementState::Lost;
        }
        let lost_nodes = LostNodes::default();
        let past = Instant::now() - Duration::from_secs(1);
        let later = Instant::now() + Duration::from_secs(3600);
        lost_nodes.waiting.lock().unwrap().insert(
            app.key.clone(),
            BTreeMap::from([("a".to_string(), (past, vec![0, 1])), ("b".to_string(), (later, vec![2]))]),
        );
        let lost = BTreeSet::from(["a".to_string(), "b".to_string()]);
        let (due, next) = lost_nodes.due(&app, &lost);
        // Instance 2 is placed on a, not b: only a's are due; b's wait is an hour away.
        assert_eq!(due, vec![(0, "a".to_string()), (1, "a".to_string())]);
        assert_eq!(next, Some(later));
        // b heard again: its wait is dropped, nothing is left to look at again.
        let (due, next) = lost_nodes.due(&app, &BTreeSet::from(["a".to_string()]));
        assert!(due.is_empty() && next.is_none());
        assert!(lost_nodes.waiting.lock().unwrap().is_empty());
    }
}
