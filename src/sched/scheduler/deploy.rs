//! `deploy`: a spec placed by its constraints on the nodes that answer, stored as the desired
//! state, then applied node by node (each its selection), stale placements deleted.

use super::{app_key, check_spec, instance_id, PlacedInstance, Scheduler};
use crate::client::ClientError;
use crate::protocol::{DeployCause, DesiredChange};
use crate::sched::placement::{self, Request};
use crate::sched::store::{App, Placement, PlacementState, RoomWait};
use crate::sched::SchedError;
use crate::spec::source::Document;
use crate::spec::AppId;
use crate::spec::{Format, SpecErrors};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// (total, stopped, kept: index → node, placed: index → node).
type Placed = (u32, BTreeSet<u32>, BTreeMap<u32, String>, BTreeMap<u32, String>);

/// How long a deploy on a shared store waits for the leading `run` to apply it.
const HAND_OFF_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

impl Scheduler {
    /// Places every instance of the spec in `document` (checked as `spec`) and applies the
    /// placements.
    /// `wait_for_room`: instances that fit nowhere are held Pending (placed by the leading
    /// `run` once they fit) instead of the deploy being refused. `warn` is told of affinity
    /// terms on keys no node reports, before anything is placed.
    pub async fn deploy_document(
        &self,
        document: &Document,
        spec: crate::spec::ProcessSpec,
        wait_for_room: bool,
        warn: &(dyn Fn(&crate::spec::SpecError) + Sync),
    ) -> Result<Vec<PlacedInstance>, SchedError> {
        let spec_err = |errors: SpecErrors| SchedError::Spec { path: PathBuf::new(), errors }.in_document(document);
        let doc = document.value.clone();
        // Each node's rollout runs the steps' hooks: their templates must be stored (and so on
        // the nodes) first, with every arg they need given.
        let stored: BTreeMap<String, crate::hooks::HookTemplate> =
            self.store.hook_templates().await?.into_iter().map(|t| (t.key(), t)).collect();
        let namespace = &spec.metadata.namespace;
        let template = |name: &str| stored.get(&crate::hooks::run::key(namespace, name)).cloned();
        let errors = crate::hooks::steps::check(&spec, template, "steward-sched hook template apply");
        if !errors.is_empty() {
            return Err(spec_err(SpecErrors(errors)));
        }
        self.check_dependencies(&spec).await.map_err(spec_err)?;
        if !spec.schedule.is_empty() {
            let (views, _) = self.read_nodes().await;
            crate::sched::unreported_keys::unreported_keys(&spec.schedule, &views).iter().for_each(warn);
        }
        let doc = self.assign_service_addresses(doc, &spec).await.map_err(spec_err)?;
        let spec = check_spec(&doc).map_err(spec_err)?;
        self.deploy_and_roll_out(doc, &spec, DeployCause::Deployed, Some(wait_for_room)).await
    }

    /// Places and applies `doc` (checked as `spec`), then rolls a change of what runs out
    /// node by node before it returns (a stateful set: started in order).
    pub(super) async fn deploy_and_roll_out(
        &self,
        doc: Value,
        spec: &crate::spec::ProcessSpec,
        cause: DeployCause,
        wait_for_room: Option<bool>,
    ) -> Result<Vec<PlacedInstance>, SchedError> {
        let placed = self.deploy_doc_with(doc, &BTreeSet::new(), cause, wait_for_room).await?;
        let key = app_key(spec);
        let note = |what: &str| super::tell(&format!("rollout of {key}: {what}"));
        if self.hands_off() {
            // The leader rolls it out: followed to its end, each node's step told as when the
            // deploy went through the leader (a server that does not lead told nothing).
            if let Some(crate::protocol::RolloutPhase::Failed { reason }) = self.follow_rollout(&key, &note).await? {
                let message = format!("the rollout failed: {reason}");
                return Err(SchedError::Apply { app: key.to_string(), message });
            }
            return self.wait_applied(&key).await;
        }
        if spec.stateful_set.is_some() {
            // In order: each instance once the one before it is ready.
            self.start_in_order(&key, &|what: &str| super::tell(&format!("{key}: {what}"))).await?;
        }
        // A change of what runs: rolled out node by node before `deploy` returns.
        match self.finish_rollout(&key, &note).await? {
            crate::protocol::RolloutPhase::Failed { reason } => {
                Err(SchedError::Apply { app: key.to_string(), message: format!("the rollout failed: {reason}") })
            }
            _ => {
                let (views, _) = self.read_nodes().await;
                let app = self.stored(&key).await?;
                Ok(if app.rollout.is_some() { self.describe(&app, &views).await } else { placed })
            }
        }
    }

    /// Starts again the instances just applied to their nodes that their nodes had given up on
    /// (Failed): a deploy placing a failed instance where it is — the same spec or not — is
    /// the operator asking for it to run, which an unchanged apply alone would not do.
    async fn start_failed(&self, key: &AppId, applied: &BTreeMap<String, Vec<u32>>) {
        let id = instance_id(key, 0);
        let starts = applied.iter().filter_map(|(node, ids)| Some((node, ids, self.client(node)?))).map(
            |(node, ids, client)| {
                let id = &id;
                async move {
                    let filters = [("namespace", id.namespace.as_str()), ("name", id.name.as_str())];
                    let Ok(list) = client.list(&filters).await else { return };
                    for s in list.iter().filter(|s| ids.contains(&s.id.index)) {
                        if s.state.kind() == crate::protocol::Kind::Failed {
                            if let Err(e) = client.action(&s.id, "start", None).await {
                                tracing::warn!(node, "starting {} again: {e}", s.id);
                            }
                        }
                    }
                }
            },
        );
        // Every node at once: a deploy over many hosts waits for the slowest, not the sum.
        futures_util::future::join_all(starts).await;
    }

    /// Waits while the leading `run` applies what a deploy or scale stored (its placements no
    /// longer Pending, its rollout no longer progressing, no instance left on a node it is no
    /// longer placed on: a scale down is done once the removed instances are gone), then
    /// describes it.
    pub(super) async fn wait_applied(&self, key: &AppId) -> Result<Vec<PlacedInstance>, SchedError> {
        let deadline = std::time::Instant::now() + HAND_OFF_WAIT;
        let mut strays = Vec::new();
        // The store's watch says when the leader wrote (taken before the first read: a write
        // between them wakes the first wait at once).
        let mut changes = self.store.changes();
        loop {
            let app = self.stored(key).await?;
            let pending = app.placements.values().any(|p| matches!(p.state, PlacementState::Pending { .. }));
            let rolling = app.rollout.as_ref().is_some_and(|r| r.phase == crate::protocol::RolloutPhase::Progressing);
            if !pending && !rolling {
                if let Some(crate::protocol::RolloutPhase::Failed { reason }) = app.rollout.as_ref().map(|r| &r.phase) {
                    let message = format!("the rollout failed: {reason}");
                    return Err(SchedError::Apply { app: key.to_string(), message });
                }
                let (views, _) = self.read_nodes().await;
                let described = self.describe(&app, &views).await;
                strays = described
                    .iter()
                    .filter(|p| p.placement == PlacementState::Stray)
                    .map(|p| format!("{} on {}", p.instance, p.node))
                    .collect();
                if strays.is_empty() {
                    return Ok(described);
                }
            }
            if std::time::Instant::now() > deadline {
                let left = match strays.is_empty() {
                    true => String::new(),
                    false => format!(" ({} still to be removed)", strays.join(", ")),
                };
                let message = format!(
                    "stored, but no steward-sched run applied it within {} s{left}: one that leads will",
                    HAND_OFF_WAIT.as_secs()
                );
                return Err(SchedError::Apply { app: key.to_string(), message });
            }
            let watch_ended = match changes.as_mut() {
                // Strays go from their nodes, which the store does not tell: looked at again soon.
                Some(changed) if strays.is_empty() => {
                    let waited = tokio::time::timeout(std::time::Duration::from_secs(1), changed.changed()).await;
                    matches!(waited, Ok(Err(_)))
                }
                _ => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    false
                }
            };
            if watch_ended {
                changes = None;
            }
        }
    }

    /// Places and applies `doc`: placements on reachable nodes stay; lost, failed and new
    /// instances are placed on nodes not in `avoid`; instances no longer meant for a node are
    /// deleted there. The desired state is stored before anything is applied.
    pub async fn deploy_doc(
        &self,
        doc: Value,
        avoid: &BTreeSet<String>,
        why: DeployCause,
    ) -> Result<Vec<PlacedInstance>, SchedError> {
        self.deploy_doc_with(doc, avoid, why, None).await
    }

    /// [`Scheduler::deploy_doc`]; `wait_for_room`: Some(true) holds what fits nowhere (see
    /// [`App::waiting`]), Some(false) refuses it, None keeps the app's own choice.
    pub async fn deploy_doc_with(
        &self,
        doc: Value,
        avoid: &BTreeSet<String>,
        why: DeployCause,
        wait_for_room: Option<bool>,
    ) -> Result<Vec<PlacedInstance>, SchedError> {
        // Another writer between this deploy's read and its first write: placed again from
        // what it wrote (a mark of Lost, a stop), never over it.
        for _ in 1..super::UPDATE_TRIES {
            match self.deploy_doc_once(doc.clone(), avoid, why.clone(), wait_for_room).await {
                Err(SchedError::Conflict { .. }) => continue,
                done => return done,
            }
        }
        self.deploy_doc_once(doc, avoid, why, wait_for_room).await
    }

    /// Places `spec.instance` instances (a job: one): placements that stay, and new ones for
    /// lost, failed and new instances on nodes not in `avoid`. (total, stopped, kept, placed).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn place_counted(
        &self,
        key: &str,
        spec: &crate::spec::ProcessSpec,
        previous: Option<&App>,
        avoid: &BTreeSet<String>,
        views: &[crate::sched::placement::NodeView],
        down: &BTreeMap<String, String>,
        settings: &crate::sched::store::Settings,
        hold: &BTreeSet<u32>,
        why: &DeployCause,
    ) -> Result<Placed, SchedError> {
        // A job or cron job is placed whole on one node, whose daemon makes its runs (ids of
        // their own): so a cron tick runs on exactly one host.
        let total = if spec.runs_to_completion() { 1 } else { spec.spec.instance };
        let stopped: BTreeSet<u32> =
            previous.map(|a| a.stopped.iter().copied().filter(|i| *i < total).collect()).unwrap_or_default();
        // Stay: applied (or being applied) placements whose node is reachable, or unreachable
        // but not (yet) declared lost: never run an instance twice. An instance the operator
        // stopped stays where it is, lost or not: it is never started elsewhere.
        let keep: BTreeMap<u32, String> = previous
            .into_iter()
            .flat_map(|a| &a.placements)
            .filter(|(i, _)| **i < total)
            .filter(|(i, p)| {
                matches!(p.state, PlacementState::Placed | PlacementState::Pending { .. })
                    || stopped.contains(i)
                    || (p.state == PlacementState::Failed && !why.by_operator() && policy_keeps(spec, p))
            })
            .map(|(i, p)| (*i, p.node.clone()))
            .collect();
        let place: Vec<u32> = (0..total).filter(|i| !keep.contains_key(i) && !hold.contains(i)).collect();
        let req = Request { total, keep: keep.clone(), place, avoid: avoid.clone(), ..Request::new(key, spec) };
        let placed = super::controls::place_around_cordons(&req, views, settings).map_err(|e| {
            let mut e = e;
            for (node, why) in down {
                e.refusals.push(placement::Refusal {
                    node: node.clone(),
                    item: None,
                    reason: format!("unreachable: {why}"),
                });
            }
            SchedError::Placement(e)
        })?;
        Ok((total, stopped, keep, placed))
    }

    async fn deploy_doc_once(
        &self,
        doc: Value,
        avoid: &BTreeSet<String>,
        why: DeployCause,
        wait_for_room: Option<bool>,
    ) -> Result<Vec<PlacedInstance>, SchedError> {
        let spec = check_spec(&doc).map_err(|errors| SchedError::Spec { path: "(stored spec)".into(), errors })?;
        let key = app_key(&spec);
        let key_text = key.to_string();
        // What this stores Pending is this deploy's to apply (not the pending controller's).
        let _applying = self.applying(&key);
        let stored = self.store.app(&key).await?;
        // An app being deleted is deployed anew: none of its placements stays, and those on
        // nodes that answer now are removed below like any stale one.
        let previous = stored.clone().filter(|a| a.deleting.is_none());
        // Where a deploy's time goes, for `STEWARD_LOG=steward::sched=debug`.
        let began = std::time::Instant::now();
        let phase = |what: &str| tracing::debug!("deploy {key}: {what} after {} ms", began.elapsed().as_millis());
        let settings = self.store.settings().await?;
        let placing = self.placing_in_pass().await;
        let (views, down) = self.nodes_to_place_on().await;
        phase(&format!("{} nodes read", views.len()));
        let reachable: BTreeSet<String> = views.iter().map(|v| v.name.clone()).collect();
        let old = stored.as_ref().map(|a| a.placements.clone()).unwrap_or_default();
        let wait_for_room = wait_for_room.unwrap_or_else(|| previous.as_ref().is_some_and(|a| a.wait_for_room));
        let mut waiting: Option<RoomWait> = None;
        let (total, stopped, keep, placed) = if spec.daemon_set.is_some() {
            // One instance on every matching node: its ids are the nodes' (sets.rs).
            let nodes: BTreeSet<String> = self.nodes().iter().map(|(n, _)| n.clone()).collect();
            let live = previous.as_ref().map(|a| a.placements.clone()).unwrap_or_default();
            let (keep, placed) = super::sets::daemon_set_placements(&key_text, &spec, &live, &nodes, &views, &settings);
            let total = keep.keys().chain(placed.keys()).max().map_or(0, |m| m + 1);
            let stopped: BTreeSet<u32> = previous
                .as_ref()
                .map(|a| a.stopped.iter().copied().filter(|i| keep.contains_key(i)).collect())
                .unwrap_or_default();
            (total, stopped, keep, placed)
        } else {
            // Waiting for room: what fits is placed, the instances from the first that fits
            // nowhere on are held (placed in id order, so those before it fit).
            let mut hold = BTreeSet::new();
            let mut reason = String::new();
            let placed = loop {
                let prev = previous.as_ref();
                match self.place_counted(&key_text, &spec, prev, avoid, &views, &down, &settings, &hold, &why) {
                    Ok(placed) => break placed,
                    Err(SchedError::Placement(e)) if wait_for_room && !hold.contains(&e.index) => {
                        hold.extend(e.index..spec.spec.instance);
                        reason = e.to_string();
                    }
                    Err(e) => return Err(e),
                }
            };
            let held: BTreeSet<u32> = hold.into_iter().filter(|i| !placed.2.contains_key(i)).collect();
            if !held.is_empty() {
                let since_ms = previous
                    .as_ref()
                    .and_then(|a| a.waiting.as_ref())
                    .map_or_else(crate::clock::now_ms, |w| w.since_ms);
                waiting = Some(RoomWait { since_ms, instances: held, reason });
            }
            placed
        };
        if let Some(before) = previous.as_ref().and_then(|a| check_spec(&a.spec).ok()) {
            grows_within_room(&key_text, &before, &spec, &keep, &placed, &views)?;
        }
        self.placed_in_pass(&key, &spec, &placed);
        drop(placing);
        let mut placements: BTreeMap<u32, Placement> = BTreeMap::new();
        for i in keep.keys() {
            placements.insert(*i, old[i].clone());
        }
        for (i, node) in &placed {
            let reschedules = old.get(i).map_or(0, |p| p.reschedules + u32::from(p.node != *node));
            let state = PlacementState::Pending { reason: "applying".into() };
            placements.insert(*i, Placement { node: node.clone(), state, reschedules });
        }
        let mut doc = doc;
        doc["spec"]["instance"] = json!(total);
        // A change of what runs rolls out node by node (rollout.rs): the nodes it has not
        // reached keep what they run.
        let (previous_doc, rollout) =
            super::rollout::rollout_for(previous.as_ref(), &doc, why == DeployCause::Deployed);
        let starts = rollout.as_ref().is_some_and(|r| r.applied.is_empty() && r.done.is_empty())
            && previous.as_ref().and_then(|p| p.rollout.as_ref()) != rollout.as_ref();
        let mut app = App {
            key: key.clone(),
            spec: doc.clone(),
            placements,
            previous: previous_doc,
            rollout,
            stopped,
            deleting: None,
            wait_for_room,
            waiting,
            version: stored.as_ref().and_then(|a| a.version),
        };
        let placements = app.placements.iter().map(|(i, p)| (i.to_string(), p.node.clone())).collect();
        self.store.put_app(&mut app, &why.change(&key_text, placements)).await?;
        phase("placed and stored");
        if starts {
            self.store.put_app(&mut app, &DesiredChange::RolloutStarted { app: key.to_string() }).await?;
        }
        if self.hands_off() {
            // Shared store: the leading `run` applies what was stored (see `wait_applied`).
            return Ok(self.describe(&app, &views).await);
        }

        let applying =
            ToApply { spec: &spec, old: &old, placed: &placed, reachable: &reachable, why: &why, only_changed: false };
        let app = self.apply_placements(app, applying).await?;
        let described = self.describe(&app, &views).await;
        phase("described");
        Ok(described)
    }

    /// Applies what `key` has stored Pending on its nodes where it was stored, placing nothing
    /// again: the leader carrying out a deploy a server that does not lead placed and stored
    /// (written once, by that server), an apply that failed, a stateful set's next instance.
    /// `app` as read just now. Whether there was anything to apply.
    /// The caller holds [`Scheduler::applying`] for the app.
    pub(super) async fn apply_pending(&self, app: App) -> Result<bool, SchedError> {
        let pending = app.placements.values().any(|p| matches!(p.state, PlacementState::Pending { .. }));
        if app.deleting.is_some() || !pending {
            return Ok(false);
        }
        let spec = check_spec(&app.spec).map_err(|errors| SchedError::Spec { path: "(stored spec)".into(), errors })?;
        let (views, _) = self.nodes_to_place_on().await;
        let reachable: BTreeSet<String> = views.iter().map(|v| v.name.clone()).collect();
        let old = app.placements.clone();
        let why = DeployCause::PendingApplied;
        let applying = ToApply {
            spec: &spec,
            old: &old,
            placed: &BTreeMap::new(),
            reachable: &reachable,
            why: &why,
            only_changed: true,
        };
        self.apply_placements(app, applying).await?;
        Ok(true)
    }

    /// Applies `app` as stored node by node (each node its selection; dependencies first),
    /// deletes what nodes should no longer run, and marks what was applied: the app as marked,
    /// or the nodes that refused.
    /// The caller holds [`Scheduler::applying`] for the app.
    async fn apply_placements(&self, mut app: App, a: ToApply<'_>) -> Result<App, SchedError> {
        let ToApply { spec, old, placed, reachable, why, only_changed } = a;
        let key = app.key.clone();
        let began = std::time::Instant::now();
        let phase = |what: &str| tracing::debug!("applying {key}: {what} after {} ms", began.elapsed().as_millis());
        // A stateful set starts in order: what waits for an earlier instance is not applied yet.
        let held = if spec.stateful_set.is_some() {
            super::sets::held_back(&app.placements, &self.ready_indexes(&app).await)
        } else {
            BTreeMap::new()
        };
        // Apply per node: its selection, or delete what it should no longer run.
        let mut by_node: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (i, p) in app.placements.iter().filter(|(i, _)| !held.contains_key(i)) {
            by_node.entry(p.node.clone()).or_default().push(*i);
        }
        let mut stale: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (i, p) in old {
            if app.placements.get(i).is_none_or(|n| n.node != p.node) {
                stale.entry(p.node.clone()).or_default().push(*i);
            }
        }
        let mut results: BTreeMap<String, Result<(), String>> = BTreeMap::new();
        let mut work = Vec::new();
        for (node, ids) in &by_node {
            if !reachable.contains(node.as_str()) {
                continue;
            }
            let before: Vec<u32> = old.iter().filter(|(_, p)| p.node == *node).map(|(i, _)| *i).collect();
            // A placement still Pending there (an apply that failed, one stored for the leader)
            // changes what the node is to run as much as a new one.
            let pending = ids.iter().any(|i| matches!(app.placements[i].state, PlacementState::Pending { .. }));
            let changed = before != *ids || pending;
            if !app.deploy_reaches(node, changed) || (only_changed && !changed) {
                results.insert(node.clone(), Ok(()));
                continue;
            }
            let client = self.client(node).expect("placements name cluster nodes");
            let text = app.doc_for(node).to_string();
            let spec = &spec;
            work.push(async move {
                // Its dependencies run there before it does (seed 002).
                if let Err(e) = self.start_dependencies(spec, node).await {
                    return (node.clone(), Err(e));
                }
                let r =
                    client.apply_selected(&text, Format::Json, Some(ids)).await.map(|_| ()).map_err(|e| e.to_string());
                // Tests: a scheduler killed with one node applied and the placements not yet marked.
                crate::failpoint::hit("sched-node-applied");
                (node.clone(), r)
            });
        }
        for (node, r) in futures_util::future::join_all(work).await {
            results.insert(node, r);
        }
        phase(&format!("applied on {} nodes", results.len()));
        for (node, ids) in &stale {
            if by_node.contains_key(node) || !reachable.contains(node.as_str()) {
                continue; // The apply's selection removed them, or the node is away: reconciled on return.
            }
            if let Some(client) = self.client(node) {
                if spec.runs_to_completion() {
                    // Its runs there (any ids) go with it.
                    if let Err(e) = client.delete_app(&spec.metadata.namespace, &spec.metadata.name, Some(30.0)).await {
                        tracing::warn!("deleting {key} on {node}: {e}");
                    }
                    continue;
                }
                for i in ids {
                    match client.delete(&instance_id(&key, *i), Some(30.0)).await {
                        Ok(()) | Err(ClientError::Api { status: 404, .. }) => {}
                        Err(e) => tracing::warn!("deleting {key}/{i} on {node}: {e}"),
                    }
                }
            }
        }
        let mut applied_now: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (i, p) in app.placements.iter_mut() {
            if let Some(earlier) = held.get(i) {
                p.state = PlacementState::Pending { reason: super::sets::waits_for(*earlier) };
                continue;
            }
            if !placed.contains_key(i) && !matches!(p.state, PlacementState::Pending { .. }) {
                continue;
            }
            p.state = match results.get(&p.node) {
                Some(Ok(())) => {
                    applied_now.entry(p.node.clone()).or_default().push(*i);
                    PlacementState::Placed
                }
                Some(Err(e)) => PlacementState::Pending { reason: e.clone() },
                None => PlacementState::Pending { reason: format!("node {} unreachable", p.node) },
            };
        }
        phase("stale ones deleted");
        let applied = DesiredChange::Applied { app: key.to_string() };
        if let Err(SchedError::Conflict { .. }) = self.store.put_app(&mut app, &applied).await {
            // Changed meanwhile (a node lost, an instance stopped): only what the applies did
            // is marked, on the app as it is now.
            let marks: BTreeMap<u32, Placement> = app
                .placements
                .iter()
                .filter(|(i, _)| placed.contains_key(i) || applied_now.values().any(|ids| ids.contains(i)))
                .map(|(i, p)| (*i, p.clone()))
                .collect();
            let merged = self.update_app(&key, &applied, |now| {
                for (i, mark) in &marks {
                    if let Some(p) = now.placements.get_mut(i).filter(|p| p.node == mark.node) {
                        if matches!(p.state, PlacementState::Pending { .. }) {
                            p.state = mark.state.clone();
                        }
                    }
                }
                true
            });
            if let Some(now) = merged.await? {
                app = now;
            }
        }
        // Only the operator's own deploy, scale or restart (or the leader carrying one out)
        // revives what its node gave up on; a reschedule never does: an instance that fails at
        // once on its new node is the restart policy's to judge (seed 000's maxtimes, DESIGN § 7).
        if why.by_operator()
            && spec.restart_policy.policy != crate::spec::model::RestartPolicyKind::Never
            && !spec.runs_to_completion()
        {
            phase("marked applied");
            self.start_failed(&key, &applied_now).await;
        }
        let failed: Vec<String> =
            results.iter().filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}"))).collect();
        if !failed.is_empty() {
            return Err(SchedError::Apply { app: key.to_string(), message: failed.join("; ") });
        }
        Ok(app)
    }
}

/// What [`Scheduler::apply_placements`] applies beside the stored app.
struct ToApply<'a> {
    spec: &'a crate::spec::ProcessSpec,
    /// The placements before this change (as stored, when nothing was placed anew).
    old: &'a BTreeMap<u32, Placement>,
    /// What this change placed anew: index → node.
    placed: &'a BTreeMap<u32, String>,
    reachable: &'a BTreeSet<String>,
    why: &'a DeployCause,
    /// Only the nodes whose selection changed or that have a Pending placement (the spec
    /// itself is as applied before); else every node the change reaches.
    only_changed: bool,
}

/// Whether the restart policy keeps a Failed instance where it is: under Never, or once it has
/// been rescheduled `maxtimes` times (seed 000; DESIGN § 7).
fn policy_keeps(spec: &crate::spec::ProcessSpec, p: &Placement) -> bool {
    let policy = &spec.restart_policy;
    policy.policy == crate::spec::model::RestartPolicyKind::Never
        || (policy.maxtimes > 0 && p.reschedules >= policy.maxtimes)
}

/// A new spec that requests more than the old must fit where its instances stay: each node's
/// kept instances grow by the difference, which must fit in what the node has free beside this
/// deploy's new placements there. Refused up front, naming each node short of room, rather than
/// by the node's admission halfway through the rollout.
fn grows_within_room(
    key: &str,
    before: &crate::spec::ProcessSpec,
    after: &crate::spec::ProcessSpec,
    keep: &BTreeMap<u32, String>,
    placed: &BTreeMap<u32, String>,
    views: &[placement::NodeView],
) -> Result<(), SchedError> {
    let (old, new) = (before.instance_requests(), after.instance_requests());
    let growth = new.minus(old);
    if growth.is_zero() {
        return Ok(());
    }
    let mut short = Vec::new();
    for view in views {
        let Some(free) = view.free else { continue };
        let kept = keep.values().filter(|n| **n == view.name).count() as u64;
        let added = placed.values().filter(|n| **n == view.name).count() as u64;
        if kept == 0 {
            continue;
        }
        let room = free.minus(new.times(added));
        if let Some(shortfall) = growth.times(kept).exceeds(&room) {
            short.push(format!("{}: {shortfall} (its {kept} instance(s) there each ask for more)", view.name));
        }
    }
    match short.is_empty() {
        true => Ok(()),
        false => Err(SchedError::Apply {
            app: key.to_string(),
            message: format!("the new spec requests more than its nodes have free:\n  {}", short.join("\n  ")),
        }),
    }
}

/// The documents of the file at `path` (`-`: stdin), each with what `check` made of it, as
/// [`crate::spec::source::read_checked`]: every failing one named, none used.
pub fn checked_documents<T>(
    path: &Path,
    check: impl Fn(&Value) -> Result<T, SpecErrors>,
) -> Result<Vec<(Document, T)>, SchedError> {
    use crate::spec::source::{read_checked, Refused};
    read_checked(path, check).map_err(|refused| match refused {
        Refused::Unreadable(why) => SchedError::Spec {
            path: path.to_path_buf(),
            errors: SpecErrors(vec![crate::spec::SpecError::new("", why)]),
        },
        Refused::Invalid(mut failed) if failed.len() == 1 => {
            let (label, errors) = failed.remove(0);
            SchedError::Spec { path: label.into(), errors }
        }
        Refused::Invalid(failed) => SchedError::Several(
            failed.into_iter().map(|(label, errors)| SchedError::Spec { path: label.into(), errors }).collect(),
        ),
    })
}

impl SchedError {
    /// A spec mistake found later (by the store, the nodes) named with `document` and located
    /// in it, as the mistakes found reading it are.
    pub fn in_document(self, document: &Document) -> SchedError {
        match self {
            SchedError::Spec { errors, .. } => {
                SchedError::Spec { path: document.label.clone().into(), errors: document.locate(errors) }
            }
            e => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{self, Format, Roots};

    /// Placement counts the random ports of a pod's containers as it does a process's: a pod
    /// with two once needed none, and landed on nodes without a free port.
    #[test]
    fn a_pods_random_ports_count_for_placement() {
        let roots = Roots { work_base_dir: "/w".into(), run_base_dir: "/r".into(), volume_root: "/v".into() };
        let pod = serde_json::json!({
            "apiVersion": "v4", "kind": "pod", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": [
                {"name": "main", "image": "busybox", "ports": [
                    {"name": "http", "containerPort": 80, "hostPort": 0},
                    {"name": "admin", "containerPort": 81, "hostPort": 0},
                    {"name": "fixed", "containerPort": 82, "hostPort": 30080}]}]}}}
        });
        let pod = spec::parse(&pod.to_string(), Format::Json, &roots).unwrap();
        assert_eq!(pod.random_ports(), 2);
        // As placement takes it: a node with one free port cannot take an instance.
        let node = |name: &str, free_ports| crate::sched::placement::NodeView {
            name: name.into(),
            hostname: name.into(),
            free_ports,
            ..Default::default()
        };
        let req = crate::sched::placement::Request {
            ports_per_instance: pod.random_ports(),
            ..crate::sched::placement::Request::bare("ns/web", 1)
        };
        let e = crate::sched::placement::place(&req, &[node("small", 1)]).unwrap_err().to_string();
        assert!(e.contains("small: 1 free port(s), an instance needs 2"), "{e}");
        let placed = crate::sched::placement::place(&req, &[node("small", 1), node("big", 2)]).unwrap();
        assert_eq!(placed.get(&0).map(String::as_str), Some("big"));
        let process = serde_json::json!({
            "apiVersion": "v4", "kind": "process", "metadata": {"name": "svc", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"processes": [{
                "procName": "sh", "workPath": "${work_base_dir}/x", "startCmd": "sleep 1",
                "ports": [{"name": "p", "hostPort": 0}]}]}}}
        });
        assert_eq!(spec::parse(&process.to_string(), Format::Json, &roots).unwrap().random_ports(), 1);
    }
}
