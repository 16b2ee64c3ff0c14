//! The operator's intents that must outlive an unreachable node: a delete, and stopped
//! instances. Each is stored in the desired state before anything is done on the nodes, so a
//! node away at the time gets it when it answers again (`run`), and nothing — a reschedule, a
//! resync, a returning node — revives what was deleted or started what was stopped.

use super::{instance_id, Emit, Scheduler};
use crate::client::ClientError;
use crate::plugin::store::{App, Deleting};
use crate::plugin::PluginError;
use crate::protocol::{
    DesiredChange, Event, EventBody, InstanceChange, InstanceEvent, Kind, SchedEvent, SchedLine, State, StopGoal,
    WatchLine,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How long a node may take to stop and remove an app's instances.
const DELETE_TIMEOUT_SECS: f64 = 60.0;

/// What `delete` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    pub app: String,
    /// Instances removed from the nodes that answered.
    pub removed: usize,
    /// Node → why it did not answer: it gets the delete when it answers again (`run`).
    pub pending: BTreeMap<String, String>,
}

/// Stop or start, for [`Scheduler::set_stopped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    Stop,
    Start,
}

impl Scheduler {
    /// `delete APP`: the intent stored first, then the app removed from every node that
    /// answers; the record goes once no node is left to tell.
    pub async fn delete(&self, key: &str) -> Result<Deleted, PluginError> {
        let mut app = self.stored_any(key).await?;
        let every: BTreeSet<String> = self.nodes().iter().map(|(n, _)| n.clone()).collect();
        let since_ms = app.deleting.as_ref().map_or_else(crate::clock::now_ms, |d| d.since_ms);
        app.deleting = Some(Deleting { since_ms, nodes: every.clone() });
        let nodes: Vec<String> = every.iter().cloned().collect();
        self.store.put_app(&mut app, &DesiredChange::Deleting { app: key.to_string(), nodes }).await?;
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
            app.deleting = Some(Deleting { since_ms, nodes: pending.keys().cloned().collect() });
            let nodes = pending.keys().cloned().collect();
            self.store.put_app(&mut app, &DesiredChange::Deleting { app: key.to_string(), nodes }).await?;
        }
        Ok(Deleted { app: key.to_string(), removed, pending })
    }

    /// Removes app `key` from `node`: how many instances it had there.
    async fn delete_on(&self, node: &str, key: &str) -> Result<usize, String> {
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
        for mut app in apps {
            let Some(deleting) = app.deleting.as_mut() else { continue };
            if !deleting.nodes.contains(node) {
                continue;
            }
            let removed = match self.delete_on(node, &app.key).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(node, "the delete of {} it missed: {e}", app.key);
                    continue;
                }
            };
            deleting.nodes.remove(node);
            let done = deleting.nodes.is_empty();
            let stored = if done {
                self.store.delete_app(&app.key).await
            } else {
                let (key, node) = (app.key.clone(), node.to_string());
                self.store.put_app(&mut app, &DesiredChange::DeletedOn { app: key, node }).await
            };
            if stored.is_ok() {
                let (app, node) = (app.key.clone(), node.to_string());
                emit(&WatchLine::Sched(SchedLine::now(SchedEvent::DeleteDone { app, node, removed })));
            }
        }
    }

    /// `stop APP [INDEX]` / `start APP [INDEX]`: the intent stored, then done on the nodes that
    /// answer. A stopped instance keeps its node and is never rescheduled or started by the
    /// scheduler; a node away at the stop stops it when it answers again (`run`).
    pub async fn set_stopped(
        &self,
        key: &str,
        index: Option<u32>,
        intent: Intent,
    ) -> Result<Vec<super::PlacedInstance>, PluginError> {
        let mut app = self.stored(key).await?;
        let indexes: Vec<u32> = match index {
            Some(i) if app.placements.contains_key(&i) => vec![i],
            Some(i) => {
                return Err(PluginError::Apply {
                    app: key.to_string(),
                    message: format!("no instance {i} (it has {})", app.placements.len()),
                })
            }
            None => app.placements.keys().copied().collect(),
        };
        let change = match intent {
            Intent::Stop => {
                app.stopped.extend(&indexes);
                DesiredChange::Stopped { app: key.to_string(), instances: indexes.clone() }
            }
            Intent::Start => {
                app.stopped.retain(|i| !indexes.contains(i));
                DesiredChange::Started { app: key.to_string(), instances: indexes.clone() }
            }
        };
        self.store.put_app(&mut app, &change).await?;
        let action = if intent == Intent::Stop { "stop" } else { "start" };
        for i in &indexes {
            let node = &app.placements[i].node;
            let Some(client) = self.client(node) else { continue };
            match client.action(&instance_id(key, *i), action, Some(DELETE_TIMEOUT_SECS)).await {
                Ok(_) | Err(ClientError::Api { status: 404, .. }) => {}
                Err(e @ ClientError::Api { .. }) => {
                    return Err(PluginError::Node { node: node.clone(), message: format!("{action} {key}/{i}: {e}") })
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
        let key = format!("{}/{}", id.namespace, id.name);
        let Ok(Some(mut app)) = self.store.app(&key).await else { return };
        if app.deleting.is_some() || app.placements.get(&id.index).is_none_or(|p| p.node != node) {
            return;
        }
        let (instances, instance, node) = (vec![id.index], id.to_string(), node.to_string());
        let (change, line) = match intent {
            Intent::Stop if app.stopped.insert(id.index) => {
                (DesiredChange::Stopped { app: key, instances }, SchedEvent::InstanceStopped { instance, node })
            }
            Intent::Start if app.stopped.remove(&id.index) => {
                (DesiredChange::Started { app: key, instances }, SchedEvent::InstanceStarted { instance, node })
            }
            _ => return,
        };
        if self.store.put_app(&mut app, &change).await.is_ok() {
            emit(&WatchLine::Sched(SchedLine::now(line)));
        }
    }
}
