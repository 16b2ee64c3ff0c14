//! The operator's intents that must outlive an unreachable node: a delete, and stopped
//! instances. Each is stored in the desired state before anything is done on the nodes, so a
//! node away at the time gets it when it answers again (`run`), and nothing — a reschedule, a
//! resync, a returning node — revives what was deleted or started what was stopped.

use super::{instance_id, Emit, Scheduler};
use crate::client::ClientError;
pub use crate::protocol::sched_answers::Deleted;
use crate::protocol::{
    DesiredChange, Event, EventBody, InstanceChange, InstanceEvent, Kind, SchedEvent, SchedLine, State, StopGoal,
    WatchLine,
};
use crate::sched::store::{App, Deleting};
use crate::sched::SchedError;
use crate::spec::AppId;
use std::collections::BTreeSet;

/// How long a node may take to stop and remove an app's instances.
const DELETE_TIMEOUT_SECS: f64 = 60.0;

/// Stop or start, for [`Scheduler::set_stopped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    Stop,
    Start,
}

impl Scheduler {
    /// `delete APP`: the intent stored first, then the app removed from every node that
    /// answers; the record goes once no node is left to tell.
    pub async fn delete(&self, key: &AppId) -> Result<Deleted, SchedError> {
        self.stored_any(key).await?;
        let every: BTreeSet<String> = self.nodes().iter().map(|(n, _)| n.clone()).collect();
        let now = crate::clock::now_ms();
        let intent = DesiredChange::Deleting { app: key.to_string(), nodes: every.iter().cloned().collect() };
        let marked = self.update_app(key, &intent, |app| {
            let since_ms = app.deleting.as_ref().map_or(now, |d| d.since_ms);
            app.deleting = Some(Deleting { since_ms, nodes: every.clone() });
            true
        });
        if marked.await?.is_none() {
            return Err(SchedError::NoApp { app: key.to_string(), hint: "deleted meanwhile".into() });
        }
        let (views, mut pending) = self.read_nodes().await;
        let mut removed = 0;
        for v in &views {
            match self.delete_on(&v.name, key).await {
                Ok(n) => removed += n,
                Err(e) => {
                    self.note_unreachable(&v.name, &e);
                    pending.insert(v.name.clone(), e);
                }
            }
        }
        pending.retain(|n, _| every.contains(n));
        if pending.is_empty() {
            self.store.delete_app(key).await?;
        } else {
            let left: BTreeSet<String> = pending.keys().cloned().collect();
            let why = DesiredChange::Deleting { app: key.to_string(), nodes: left.iter().cloned().collect() };
            self.update_app(key, &why, |app| match app.deleting.as_mut() {
                // Only what is still owed: `run` may have given a node its delete meanwhile.
                Some(d) => {
                    d.nodes.retain(|n| left.contains(n));
                    true
                }
                None => false,
            })
            .await?;
        }
        Ok(Deleted { app: key.to_string(), removed, pending })
    }

    /// Removes app `key` from `node`: how many instances it had there.
    async fn delete_on(&self, node: &str, key: &AppId) -> Result<usize, String> {
        let client = self.client(node).ok_or_else(|| "not in the cluster file".to_string())?;
        let id = instance_id(key, 0);
        let filters = [("namespace", id.namespace.as_str()), ("name", id.name.as_str())];
        let list = client.list(&filters).await.map_err(|e| e.to_string())?;
        match client.delete_app(&id.namespace, &id.name, Some(DELETE_TIMEOUT_SECS)).await {
            // A delete still under way (past the timeout) goes on there: the daemon keeps it.
            Ok(Some(gone)) => Ok(gone.len()),
            Ok(None) | Err(ClientError::Api { status: 404, .. }) => Ok(list.len()),
            Err(e) => Err(format!("deleting {key}: {e}")),
        }
    }

    /// Gives `node` the deletes it missed; the app's record goes with the last node.
    pub(super) async fn finish_deletes(&self, node: &str, emit: &Emit) {
        let Ok(apps) = self.store.apps().await else { return };
        for app in apps {
            if app.deleting.as_ref().is_some_and(|d| d.nodes.contains(node)) {
                self.finish_delete(&app.key, node, emit).await;
            }
        }
    }

    /// Gives `node` the delete of app `key` it is owed; the record goes with the last node.
    /// Said done once, by whoever took the node off the record.
    async fn finish_delete(&self, key: &AppId, node: &str, emit: &Emit) {
        let removed = match self.delete_on(node, key).await {
            Ok(n) => n,
            Err(e) => return tracing::warn!(node, "the delete of {key} it missed: {e}"),
        };
        let why = DesiredChange::DeletedOn { app: key.to_string(), node: node.to_string() };
        let marked = self.update_app(key, &why, |a| match a.deleting.as_mut() {
            Some(d) => d.nodes.remove(node),
            None => false,
        });
        let stored = match marked.await {
            Ok(Some(a)) if a.deleting.as_ref().is_some_and(|d| d.nodes.is_empty()) => self.store.delete_app(key).await,
            Ok(Some(_)) => Ok(()),
            // Another took it off (the command that asked, a node's arrival): theirs to say.
            Ok(None) => return,
            Err(e) => Err(e),
        };
        if stored.is_ok() {
            let (app, node) = (key.to_string(), node.to_string());
            emit(&WatchLine::Sched(SchedLine::now(SchedEvent::DeleteDone { app, node, removed })));
        }
    }

    /// `stop APP [INDEX]` / `start APP [INDEX]`: the intent stored, then done on the nodes that
    /// answer. A stopped instance keeps its node and is never rescheduled or started by the
    /// scheduler; a node away at the stop stops it when it answers again (`run`).
    pub async fn set_stopped(
        &self,
        key: &AppId,
        index: Option<u32>,
        intent: Intent,
    ) -> Result<Vec<super::PlacedInstance>, SchedError> {
        let app = self.stored(key).await?;
        let indexes: Vec<u32> = match index {
            Some(i) if app.placements.contains_key(&i) => vec![i],
            Some(i) => {
                return Err(SchedError::Apply {
                    app: key.to_string(),
                    message: format!("no instance {i} (it has {})", app.placements.len()),
                })
            }
            None => app.placements.keys().copied().collect(),
        };
        let change = match intent {
            Intent::Stop => DesiredChange::Stopped { app: key.to_string(), instances: indexes.clone() },
            Intent::Start => DesiredChange::Started { app: key.to_string(), instances: indexes.clone() },
        };
        let marked = self.update_app(key, &change, |a| {
            match intent {
                Intent::Stop => a.stopped.extend(&indexes),
                Intent::Start => a.stopped.retain(|i| !indexes.contains(i)),
            }
            a.deleting.is_none()
        });
        let Some(app) = marked.await? else {
            return Err(SchedError::NoApp { app: key.into(), hint: "deleted meanwhile".into() });
        };
        let action = if intent == Intent::Stop { "stop" } else { "start" };
        for i in &indexes {
            let node = &app.placements[i].node;
            let Some(client) = self.client(node) else { continue };
            match client.action(&instance_id(key, *i), action, Some(DELETE_TIMEOUT_SECS)).await {
                Ok(_) | Err(ClientError::Api { status: 404, .. }) => {}
                Err(e @ ClientError::Api { .. }) => {
                    return Err(SchedError::Node { node: node.clone(), message: format!("{action} {key}/{i}: {e}") })
                }
                Err(e) => self.note_unreachable(node, &e.to_string()),
            }
        }
        let (views, _) = self.read_nodes().await;
        Ok(self.describe(&app, &views).await)
    }

    /// Stops, on a node that answers again, the instances the operator stopped while it was away.
    pub(super) async fn enforce_stops(&self, node: &str, app: &App) {
        let Some(client) = self.client(node) else { return };
        for i in &app.stopped {
            if app.placements.get(i).is_some_and(|p| p.node == node) {
                let id = instance_id(&app.key, *i);
                if let Ok(s) = client.status(&id).await {
                    if !matches!(s.state, State::Stopped | State::Stopping { .. }) {
                        if let Err(e) = client.action(&id, "stop", Some(DELETE_TIMEOUT_SECS)).await {
                            tracing::warn!(node, "stopping {id}, stopped while its node was away: {e}");
                        }
                    }
                }
            }
        }
    }

    /// Notes an operator's stop (or start) seen on a node, so the scheduler never undoes it.
    pub(super) async fn note_stop_event(&self, node: &str, ev: &Event, emit: &Emit) {
        let EventBody::Instance(InstanceEvent { instance, change: InstanceChange::Transition(t) }) = &ev.body else {
            return;
        };
        let intent = match (t.from, t.to, &t.state) {
            (_, Kind::Stopping, Some(State::Stopping { goal: StopGoal::Stop })) => Intent::Stop,
            (Kind::Stopped, Kind::Staging, _) => Intent::Start,
            _ => return,
        };
        let Ok(id) = crate::client::parse_instance_id(instance) else { return };
        let key = id.app();
        let (instances, instance, on) = (vec![id.index], id.to_string(), node.to_string());
        let (change, line) = match intent {
            Intent::Stop => (
                DesiredChange::Stopped { app: key.to_string(), instances },
                SchedEvent::InstanceStopped { instance, node: on },
            ),
            Intent::Start => (
                DesiredChange::Started { app: key.to_string(), instances },
                SchedEvent::InstanceStarted { instance, node: on },
            ),
        };
        let noted = self.update_app(&key, &change, |a| {
            if a.deleting.is_some() || a.placements.get(&id.index).is_none_or(|p| p.node != node) {
                return false;
            }
            match intent {
                Intent::Stop => a.stopped.insert(id.index),
                Intent::Start => a.stopped.remove(&id.index),
            }
        });
        if let Ok(Some(_)) = noted.await {
            emit(&WatchLine::Sched(SchedLine::now(line)));
        }
    }
}

/// How long a delete is left to the command that asked for it before the leader gives it to
/// the nodes still owed it (a node heard again gets it at once).
const OWN_DELETE_MS: u64 = 10_000;

/// Finishes deletes the nodes missed and then failed to take, once the command that asked for
/// it had its time to do it itself (racing it would only take its count of what it removed),
/// on the nodes heard and not lost (one lost gets it when it is back).
pub(super) struct FinishDeletes;

#[async_trait::async_trait]
impl super::controller::Controller for FinishDeletes {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "deletes"
    }

    fn wants(&self, app: &App, live: &super::liveness::Liveness) -> bool {
        app.deleting.as_ref().is_some_and(|d| d.nodes.iter().any(|n| live.is_ready(n)))
    }

    async fn sync(&self, sched: &std::sync::Arc<Scheduler>, key: &AppId, emit: &Emit) -> Option<std::time::Duration> {
        let deleting = sched.store.app(key).await.ok().flatten()?.deleting?;
        let settled_at = deleting.since_ms.saturating_add(OWN_DELETE_MS);
        let now = crate::clock::now_ms();
        if now < settled_at {
            return Some(std::time::Duration::from_millis(settled_at - now));
        }
        let ready: Vec<String> = deleting.nodes.into_iter().filter(|n| sched.live().is_ready(n)).collect();
        for node in ready {
            sched.finish_delete(key, &node, emit).await;
        }
        None
    }
}
