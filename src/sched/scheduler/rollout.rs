//! An app's rollout across its nodes (issue 18): when a deploy changes what runs, the nodes take
//! the new spec one at a time, in name order, each rolling its own instances out by the spec's
//! strategy; the next node gets it only once the one before has completed. Every daemon counts
//! the budget against the app's whole instance count (`spec.instance`), and only one node rolls
//! at a time, so the budget holds for the whole app: never more than maxUnavailable of all its
//! instances down, never more than maxSurge extra. The nodes not yet reached keep the previous
//! spec (with the current count and their selection), so a failed rollout stops where it is.
//!
//! The state (phase, which node took the spec at which of its revisions, which completed) is
//! in the desired store beside the app, every step journaled (`rollout*` changes): `deploy`
//! drives it to the end, and `run` resumes one that a killed `deploy` left.

use super::{app_key, check_spec, Scheduler};
use crate::client::ClientError;
pub use crate::protocol::sched_answers::{
    NodeRevisions, NodeRollout, SchedRevision, SchedRevisions, SchedRolloutStatus,
};
use crate::protocol::{DesiredChange, RolloutPhase, RolloutProgress};
use crate::sched::store::{App, SchedRollout};
use crate::sched::SchedError;
use crate::spec::AppId;
use crate::spec::Format;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How often a rollout looks at the node it waits for.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// What to do next, from the stored rollout and what the nodes say.
enum Next {
    /// Give this node the new spec.
    Apply(String),
    /// This node's rollout completed.
    Done(String),
    /// A node is rolling (or away): look again later.
    Wait,
    /// A node's rollout failed.
    Fail(String),
    /// Every node runs the new spec.
    Complete,
}

/// Whether two spec documents run the same (their template hashes as a daemon computes them:
/// count and strategy left out).
pub(super) fn same_template(a: &Value, b: &Value) -> bool {
    match (check_spec(a), check_spec(b)) {
        (Ok(a), Ok(b)) => {
            crate::supervisor::revisions::template_hash(&a) == crate::supervisor::revisions::template_hash(&b)
        }
        _ => false,
    }
}

impl SchedRollout {
    fn new(earlier: Option<&SchedRollout>) -> SchedRollout {
        let now = crate::clock::now_ms();
        let paused = earlier.is_some_and(|r| r.phase == RolloutPhase::Paused);
        SchedRollout {
            phase: if paused { RolloutPhase::Paused } else { RolloutPhase::Progressing },
            started_ms: now,
            updated_ms: now,
            applied: BTreeMap::new(),
            done: Vec::new(),
            rollback: false,
        }
    }
}

impl App {
    /// The spec document node `node` is to run now: the new one once the rollout reached it
    /// (or when there is none going), else the previous one with today's count.
    pub(super) fn doc_for(&self, node: &str) -> Value {
        match (&self.rollout, &self.previous) {
            (Some(r), Some(previous)) if r.phase != RolloutPhase::Complete && !r.applied.contains_key(node) => {
                let mut doc = for_a_node(previous);
                doc["spec"]["instance"] = self.spec["spec"]["instance"].clone();
                doc
            }
            _ => for_a_node(&self.spec),
        }
    }

    /// The nodes with instances of the app, in name order (the order a rollout takes them).
    fn nodes(&self) -> BTreeSet<String> {
        self.placements.values().map(|p| p.node.clone()).collect()
    }

    /// The instance ids placed on `node`.
    pub(super) fn ids_on(&self, node: &str) -> Vec<u32> {
        self.placements.iter().filter(|(_, p)| p.node == node).map(|(i, _)| *i).collect()
    }
}

/// A spec document as a node gets it: without `strategy.autoRollback`, which steward-sched
/// carries out for the whole app (a node going back on its own would undo what the scheduler
/// asked of it, and the scheduler would ask again).
pub(super) fn for_a_node(doc: &Value) -> Value {
    let mut doc = doc.clone();
    if let Some(strategy) = doc.get_mut("strategy").and_then(Value::as_object_mut) {
        strategy.remove("autoRollback");
    }
    doc
}

/// For a deploy of `doc` over `previous`: the spec the nodes not yet reached run, and the
/// rollout — a new one when what runs changed on an app that runs somewhere, or when an
/// operator's `deploy` (`retry`) brings the spec a failed rollout left again: node by node,
/// each node's daemon retries what failed there (a node done takes it unchanged).
pub(super) fn rollout_for(previous: Option<&App>, doc: &Value, retry: bool) -> (Option<Value>, Option<SchedRollout>) {
    let Some(p) = previous else { return (None, None) };
    // A job or cron job does not roll out: changed, it starts over on its one node.
    if check_spec(doc).is_ok_and(|s| s.runs_to_completion()) {
        return (None, None);
    }
    if !p.placements.is_empty() && !same_template(&p.spec, doc) {
        // Over an unfinished rollout, most nodes it did not reach run its previous spec (the
        // ones it reached keep theirs until this one reaches them: see `deploy_doc`).
        let unfinished = p.rollout.as_ref().is_some_and(|r| r.phase != RolloutPhase::Complete);
        let runs = if unfinished { p.previous.clone().unwrap_or_else(|| p.spec.clone()) } else { p.spec.clone() };
        return (Some(runs), Some(SchedRollout::new(p.rollout.as_ref())));
    }
    if retry && p.rollout.as_ref().is_some_and(|r| matches!(r.phase, RolloutPhase::Failed { .. })) {
        return (p.previous.clone(), Some(SchedRollout::new(None)));
    }
    (p.previous.clone(), p.rollout.clone())
}

impl App {
    /// Whether a deploy applies to `node` now: when no rollout holds it back, or the rollout
    /// reached it; else only when its selection changed (new or removed placements there).
    pub(super) fn deploy_reaches(&self, node: &str, selection_changed: bool) -> bool {
        match &self.rollout {
            Some(r) if r.phase != RolloutPhase::Complete => r.applied.contains_key(node) || selection_changed,
            _ => true,
        }
    }
}

impl Scheduler {
    /// Drives `key`'s rollout until it is no longer progressing (complete, failed, paused, or
    /// taken over), telling `note` each step. Returns the phase it ended in.
    /// A rollout that failed and went back (autoRollback) ends Failed, once back.
    pub async fn drive_rollout(&self, key: &AppId, note: &(dyn Fn(&str) + Sync)) -> Result<RolloutPhase, SchedError> {
        let mut went_back: Option<String> = None;
        loop {
            let app = self.stored(key).await?;
            let Some(rollout) = app.rollout.clone() else { return Ok(RolloutPhase::Complete) };
            if rollout.phase != RolloutPhase::Progressing {
                return Ok(rollout.phase);
            }
            match self.next_step(&app, &rollout).await {
                Next::Apply(node) => {
                    let client = self.client(&node).expect("placements name cluster nodes");
                    let text = for_a_node(&app.spec).to_string();
                    // A retry's step: a daemon whose rollout of this spec failed tries it again.
                    let options = crate::client::ApplyOptions { retry: true, ..Default::default() };
                    match client.apply_with(&text, Format::Json, Some(&app.ids_on(&node)), options).await {
                        Ok(applied) => {
                            note(&format!("{node}: takes the new spec (revision {} there)", applied.revision));
                            let change = DesiredChange::RolloutNode {
                                app: key.into(),
                                node: node.clone(),
                                revision: applied.revision,
                            };
                            self.change_rollout(key, &change, |r| {
                                r.applied.insert(node.clone(), applied.revision);
                            })
                            .await?;
                        }
                        Err(e) => {
                            note(&format!("{node}: applying the new spec: {e}; trying again"));
                            tokio::time::sleep(LOOK_EVERY).await;
                        }
                    }
                }
                Next::Done(node) => {
                    note(&format!("{node}: rolled out"));
                    self.change_rollout(key, &DesiredChange::Applied { app: key.into() }, |r| {
                        r.done.push(node.clone())
                    })
                    .await?;
                }
                Next::Wait => tokio::time::sleep(LOOK_EVERY).await,
                Next::Complete => {
                    note("every node runs the new spec");
                    let change = DesiredChange::RolloutCompleted { app: key.into() };
                    self.change_rollout(key, &change, |r| r.phase = RolloutPhase::Complete).await?;
                    return Ok(match went_back {
                        Some(reason) => RolloutPhase::Failed {
                            reason: format!("{reason}; autoRollback went back to the previous spec"),
                        },
                        None => RolloutPhase::Complete,
                    });
                }
                Next::Fail(reason) => {
                    note(&format!("failed: {reason}"));
                    let change = DesiredChange::RolloutFailed { app: key.into(), reason: reason.clone() };
                    let failed = RolloutPhase::Failed { reason };
                    self.change_rollout(key, &change, |r| r.phase = failed.clone()).await?;
                    let auto = check_spec(&app.spec).is_ok_and(|s| s.strategy.auto_rollback);
                    if !auto || rollout.rollback || app.previous.is_none() {
                        return Ok(failed);
                    }
                    note("autoRollback: deploying the previous spec again");
                    went_back = match failed {
                        RolloutPhase::Failed { reason } => Some(reason),
                        _ => None,
                    };
                    self.undo_rollout(key).await?;
                    self.change_rollout(key, &DesiredChange::Applied { app: key.into() }, |r| r.rollback = true)
                        .await?;
                }
            }
        }
    }

    /// Sees `key`'s rollout to its end: drives it here, unless a `run` leads the cluster (it
    /// drives rollouts: two drivers would apply each step twice), in which case this follows
    /// what the leader does, telling `note` each node's step. Returns the phase it ended in (a
    /// rollout that failed and went back: Failed).
    pub async fn finish_rollout(&self, key: &AppId, note: &(dyn Fn(&str) + Sync)) -> Result<RolloutPhase, SchedError> {
        match self.follow_rollout(key, note).await? {
            Some(phase) => Ok(phase),
            None => self.drive_rollout(key, note).await,
        }
    }

    /// Follows `key`'s rollout as the leading `run` drives it, to its end, telling `note` each
    /// node's step; the phase it ended in (one that failed and went back: Failed). None: it is
    /// progressing and no `run` leads (nothing followed).
    pub(super) async fn follow_rollout(
        &self,
        key: &AppId,
        note: &(dyn Fn(&str) + Sync),
    ) -> Result<Option<RolloutPhase>, SchedError> {
        let first = self.stored(key).await?.rollout;
        match &first {
            None => return Ok(Some(RolloutPhase::Complete)),
            Some(r) if r.phase != RolloutPhase::Progressing => return Ok(Some(r.phase.clone())),
            Some(_) => {}
        }
        let Some(leader) = self.store.leader().await else { return Ok(None) };
        note(&format!("the leading run ({leader}) drives it"));
        let mut told: BTreeSet<String> = BTreeSet::new();
        let mut failed: Option<String> = None;
        loop {
            let app = self.stored(key).await?;
            let Some(rollout) = app.rollout.clone() else { return Ok(Some(RolloutPhase::Complete)) };
            for node in rollout.applied.keys() {
                if told.insert(format!("applied {node}")) {
                    note(&format!("{node}: takes the new spec"));
                }
            }
            for node in &rollout.done {
                if told.insert(format!("done {node}")) {
                    note(&format!("{node}: rolled out"));
                }
            }
            let went_back = rollout.rollback && first.as_ref().is_none_or(|f| f.started_ms != rollout.started_ms);
            match &rollout.phase {
                RolloutPhase::Progressing => {}
                RolloutPhase::Failed { reason } => {
                    let auto = check_spec(&app.spec).is_ok_and(|s| s.strategy.auto_rollback);
                    if !auto || rollout.rollback || app.previous.is_none() {
                        return Ok(Some(rollout.phase));
                    }
                    // The leader goes back next (autoRollback): followed to its end.
                    failed.get_or_insert_with(|| reason.clone());
                }
                RolloutPhase::Complete if went_back => {
                    let reason = failed.unwrap_or_else(|| "the rollout failed".into());
                    let reason = format!("{reason}; autoRollback went back to the previous spec");
                    return Ok(Some(RolloutPhase::Failed { reason }));
                }
                phase => return Ok(Some(phase.clone())),
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }

    /// The first node (by name) not done decides: it needs the spec, it rolls, it failed.
    async fn next_step(&self, app: &App, rollout: &SchedRollout) -> Next {
        let (namespace, name) = (app.key.namespace.as_str(), app.key.name.as_str());
        for node in app.nodes() {
            if rollout.done.contains(&node) {
                continue;
            }
            let Some(revision) = rollout.applied.get(&node) else { return Next::Apply(node) };
            let Some(client) = self.client(&node) else { return Next::Wait };
            let body = match tokio::time::timeout(super::NODE_TIMEOUT, client.rollout_status(namespace, name)).await {
                Ok(Ok(body)) => body,
                // Its instances were deleted there meanwhile (rescheduled elsewhere): nothing to roll.
                Ok(Err(ClientError::Api { status: 404, .. })) => return Next::Done(node),
                _ => return Next::Wait,
            };
            if body.revision != *revision {
                // Changed there since (an operator's apply or undo on that node): asking again
                // could undo what they did, and they again; the rollout stops for a person.
                return Next::Fail(format!(
                    "{node}: the app's revision there changed from {revision} to {} meanwhile",
                    body.revision
                ));
            }
            return match body.rollout.map(|r| r.phase) {
                None | Some(RolloutPhase::Complete) => Next::Done(node),
                Some(RolloutPhase::Failed { reason }) => Next::Fail(format!("{node}: {reason}")),
                Some(RolloutPhase::Progressing | RolloutPhase::Paused) => Next::Wait,
            };
        }
        Next::Complete
    }

    /// Changes the stored rollout of `key` and journals `why` with it (over whatever another
    /// writer changed meanwhile: a pause stays a pause).
    async fn change_rollout(
        &self,
        key: &AppId,
        why: &DesiredChange,
        change: impl Fn(&mut SchedRollout),
    ) -> Result<(), SchedError> {
        self.update_app(key, why, |app| {
            let Some(rollout) = app.rollout.as_mut() else { return false };
            change(rollout);
            rollout.updated_ms = crate::clock::now_ms();
            true
        })
        .await
        .map(|_| ())
    }

    /// Each node's revision history of the app, asked of all its nodes at once.
    pub async fn revisions(&self, key: &AppId) -> Result<SchedRevisions, SchedError> {
        let app = self.stored(key).await?;
        let asks = app.nodes().into_iter().filter_map(|node| {
            let client = self.client(&node)?;
            Some(async move {
                let asked = tokio::time::timeout(super::NODE_TIMEOUT, client.revisions(&key.namespace, &key.name));
                let answer = match asked.await {
                    Ok(Ok(list)) => NodeRevisions::Answered(list),
                    Ok(Err(e)) => NodeRevisions::Unreachable { unreachable: e.to_string() },
                    Err(_) => NodeRevisions::Unreachable { unreachable: "no answer".to_string() },
                };
                (node, answer)
            })
        });
        let nodes = futures_util::future::join_all(asks).await.into_iter().collect();
        Ok(SchedRevisions { app: key.to_string(), nodes })
    }

    /// Revision `n` of the app with its spec, asked of `node`, else of its nodes in name order
    /// until one keeps it (each node numbers its own revisions: the console names the node).
    pub async fn revision(&self, key: &AppId, n: u64, node: Option<&str>) -> Result<SchedRevision, SchedError> {
        let nodes = self.stored(key).await?.nodes();
        let asked: Vec<&String> = nodes.iter().filter(|n| node.is_none_or(|want| *n == want)).collect();
        if let (Some(want), true) = (node, asked.is_empty()) {
            return Err(SchedError::NotFound(format!("{key} has no instance on node {want}")));
        }
        // Why each node asked had none; a node's 404 names the app, the revision and those it keeps.
        let mut missed = Vec::new();
        for node in asked {
            let Some(client) = self.client(node) else {
                missed.push(format!("{node}: not in the cluster file"));
                continue;
            };
            let call = tokio::time::timeout(super::NODE_TIMEOUT, client.revision(&key.namespace, &key.name, n));
            match call.await {
                Ok(Ok(revision)) => return Ok(SchedRevision { node: node.clone(), revision }),
                Ok(Err(e @ ClientError::Api { status: 404, .. })) => missed.push(format!("{node}: {e}")),
                Ok(Err(e)) => missed.push(format!("{node}: did not answer ({e})")),
                Err(_) => missed.push(format!("{node}: did not answer")),
            }
        }
        if missed.is_empty() {
            return Err(SchedError::NotFound(format!("no revision {n} of {key}: it has no instances on any node")));
        }
        Err(SchedError::NotFound(missed.join("; ")))
    }

    /// `rollout status APP`.
    pub async fn rollout_status(&self, key: &AppId) -> Result<SchedRolloutStatus, SchedError> {
        let app = self.stored(key).await?;
        let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
        let mut nodes = BTreeMap::new();
        let mut progress = RolloutProgress::default();
        for node in app.nodes() {
            let Some(client) = self.client(&node) else { continue };
            let body = match tokio::time::timeout(super::NODE_TIMEOUT, client.rollout_status(namespace, name)).await {
                Ok(Ok(body)) => NodeRollout::Answered(Box::new(body)),
                Ok(Err(e)) => NodeRollout::Unreachable { unreachable: e.to_string() },
                Err(_) => NodeRollout::Unreachable { unreachable: "no answer".to_string() },
            };
            if let NodeRollout::Answered(b) = &body {
                // A node the rollout has not reached runs the previous spec: none updated.
                let reached = app.rollout.as_ref().is_none_or(|r| r.reached(&node, b.revision));
                progress.instances += b.progress.instances;
                progress.spares += b.progress.spares;
                if reached {
                    progress.updated += b.progress.updated;
                    progress.ready += b.progress.ready;
                }
            }
            nodes.insert(node, body);
        }
        Ok(SchedRolloutStatus { app: key.to_string(), rollout: app.rollout, progress, nodes })
    }

    /// `rollout pause APP`: no node gets the spec until resumed, and the node rolling pauses.
    pub async fn pause_rollout(&self, key: &AppId) -> Result<(), SchedError> {
        self.set_phase(key, RolloutPhase::Paused, "pause").await
    }

    /// `rollout resume APP`: the node that was rolling goes on, then the next ones.
    pub async fn resume_rollout(&self, key: &AppId) -> Result<(), SchedError> {
        self.set_phase(key, RolloutPhase::Progressing, "resume").await
    }

    async fn set_phase(&self, key: &AppId, phase: RolloutPhase, action: &str) -> Result<(), SchedError> {
        let app = self.stored(key).await?;
        let Some(rollout) = app.rollout.clone() else {
            return Err(SchedError::Apply { app: key.into(), message: "it has no rollout".into() });
        };
        if !matches!(rollout.phase, RolloutPhase::Progressing | RolloutPhase::Paused) {
            return Err(SchedError::Apply {
                app: key.into(),
                message: format!("its rollout is {}; nothing to {action}", rollout.phase.name()),
            });
        }
        let why = match phase {
            RolloutPhase::Paused => DesiredChange::RolloutPaused { app: key.into() },
            _ => DesiredChange::RolloutResumed { app: key.into() },
        };
        self.change_rollout(key, &why, |r| {
            // Only a rollout still under way is paused or resumed (it may have ended meanwhile).
            if matches!(r.phase, RolloutPhase::Progressing | RolloutPhase::Paused) {
                r.phase = phase.clone();
            }
        })
        .await?;
        let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
        for node in rollout.applied.keys().filter(|n| !rollout.done.contains(n)) {
            let Some(client) = self.client(node) else { continue };
            match client.rollout_action(namespace, name, action).await {
                // Nothing to pause or resume there (it completed meanwhile).
                Ok(_) | Err(ClientError::Api { status: 409, .. }) => {}
                Err(e) => tracing::warn!("{action} of {key} on {node}: {e}"),
            }
        }
        Ok(())
    }

    /// `rollout undo APP`: the spec deployed before the current one, deployed again (with
    /// today's count), rolled out the same way.
    pub async fn undo_rollout(&self, key: &AppId) -> Result<(), SchedError> {
        let app = self.stored(key).await?;
        let Some(mut previous) = app.previous.clone() else {
            return Err(SchedError::Apply { app: key.into(), message: "no earlier spec to go back to".into() });
        };
        previous["spec"]["instance"] = app.spec["spec"]["instance"].clone();
        // Rolled out as the app rolls out now.
        if let Some(strategy) = app.spec.get("strategy") {
            previous["strategy"] = strategy.clone();
        } else if let Some(doc) = previous.as_object_mut() {
            doc.remove("strategy");
        }
        let spec =
            check_spec(&previous).map_err(|errors| SchedError::Spec { path: "(previous spec)".into(), errors })?;
        debug_assert_eq!(&app_key(&spec), key);
        self.deploy_doc(previous, &BTreeSet::new(), crate::protocol::DeployCause::Deployed).await?;
        Ok(())
    }
}
