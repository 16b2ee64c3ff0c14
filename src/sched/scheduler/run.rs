//! `run`: the scheduler acting on what the followers see: lost nodes (instances marked Lost,
//! rescheduled under Always), failed instances rescheduled, strays on a returning node deleted.

use super::follow::HeardAt;
use super::hosts::Owed;
use super::leading::Controllers;
use super::liveness::Liveness;
use super::{check_spec, instance_id, Emit, Scheduler};
use crate::protocol::{
    DeployCause, DesiredChange, Event, EventBody, InstanceChange, InstanceEvent, Kind, NodeItem, NodeState, SchedEvent,
    SchedLine, WatchLine,
};
use crate::sched::store::{App, PlacementState};
use crate::sched::SchedError;
use crate::spec::AppId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the leader's pass over every app runs (checks, deletes owed, dependencies, and
/// every app offered to the controllers again).
const SYNC_EVERY: Duration = Duration::from_secs(2);

/// How soon after a change of the desired state that pass runs, at the latest.
const SYNC_SOON: Duration = Duration::from_millis(500);

impl Scheduler {
    /// `run`: follows every node and acts: a node silent past the heartbeat timeout is lost
    /// (its instances Lost; rescheduled when their policy is Always), a Failed instance is
    /// rescheduled elsewhere under OnFailure and Always, instances found on a returning node
    /// that were placed elsewhere meanwhile are deleted, and REMOTE_HTTP / REMOTE_TCP checks
    /// run. Every item is passed to `emit`.
    ///
    /// With `cluster_file`, the file is read again on SIGHUP and when it changes: nodes added
    /// are followed, nodes removed are no longer (their instances count as on a lost node),
    /// nodes whose address, name or token changed are followed anew.
    pub async fn run(
        self: Arc<Self>,
        cluster_file: Option<std::path::PathBuf>,
        emit: impl Fn(&WatchLine) + Send + Sync + 'static,
    ) -> Result<(), SchedError> {
        let who = format!("{}-{}", crate::host::hostname(), std::process::id());
        // Notifications (seed 002's callbacks) of what the leader sees and does.
        let notifier = Arc::new(crate::sched::notify::Notifier::new(&who));
        let emit: Emit = {
            let notifier = notifier.clone();
            Arc::new(move |line: &WatchLine| {
                notify_of(&notifier, line);
                emit(line)
            })
        };
        let notes = self.clone().notify_events(notifier.clone());
        let heard_at = HeardAt::default();
        let timeout = Duration::from_secs(self.cluster.heartbeat_timeout_secs);
        *self.live_mut() = Liveness::new(heard_at.clone(), timeout, Instant::now());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut followers: BTreeMap<String, tokio::task::JoinHandle<()>> = BTreeMap::new();
        for (name, client) in self.nodes().iter() {
            followers.insert(name.clone(), self.spawn_follower(name, client, None, &tx, &heard_at));
        }
        // What the nodes run is heard from now on: their readings are kept until they change.
        self.board.fed();
        let mut reload = cluster_file.map(ClusterWatch::new);
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| SchedError::Store(format!("SIGHUP handler: {e}")))?;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut last_sync = Instant::now() - Duration::from_secs(60);
        // Several `run`s may share one store: one leads and acts; the others print what they
        // see and wait to take over (etcd: an election under a lease; embedded: a lock file).
        let mut campaign = Some(self.campaign(&who, Duration::ZERO));
        let mut leadership: Option<crate::sched::store::Leadership> = None;
        let mut changes = self.store.changes();
        // The reconcile period: each node's pass (hosts.rs), daemon sets and held instances
        // are looked at that often at least.
        let mut reconcile_every = super::reconcile::RECONCILE_EVERY;
        // Maintenance mode (seed 002): follow and report, change nothing.
        let mut maintenance = false;
        let mut last_settings = Instant::now() - Duration::from_secs(60);
        // The controllers, running while this process leads (leading.rs).
        let mut controllers = Controllers::new(reconcile_every);
        loop {
            tokio::select! {
                led = async { campaign.as_mut().expect("campaigning").await }, if campaign.is_some() => {
                    campaign = None;
                    match led.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
                        Ok(won) => {
                            leadership = Some(won);
                            self.hand_off.store(false, std::sync::atomic::Ordering::SeqCst);
                            emit(&sched_line(SchedEvent::Leading { who: who.clone() }));
                            // Where to notify, before anything is done that may notify (a crash
                            // loop can reach maxtimes before the next look at the settings).
                            match self.store.settings().await {
                                Ok(settings) => {
                                    configure(&notifier, &settings);
                                    // The period the first passes are due again after.
                                    reconcile_every = settings.config.reconcile_every();
                                    controllers.set_every(reconcile_every);
                                }
                                Err(e) => tracing::warn!("reading the cluster's settings: {e}"),
                            }
                            // Everything is looked at afresh: every node is new to this leader.
                            self.live_mut().lead();
                            controllers.lead(&self, &emit).await;
                            last_sync = Instant::now() - Duration::from_secs(60);
                        }
                        Err(reason) => {
                            // Nothing was held, so nothing was lost: a campaign's request ends
                            // (etcd's 10 s timeout) while another leads, and is made again.
                            tracing::debug!("campaign to lead: {reason}; again in 1 s");
                            campaign = Some(self.campaign(&who, Duration::from_secs(1)));
                        }
                    }
                }
                why = async { (&mut leadership.as_mut().expect("leading").lost).await }, if leadership.is_some() => {
                    // Acting on without the lease could act twice with the next leader.
                    leadership = None;
                    controllers.stop();
                    self.live_mut().follow();
                    self.hand_off.store(true, std::sync::atomic::Ordering::SeqCst);
                    let reason = why.unwrap_or_else(|_| "the leadership ended".into());
                    emit(&sched_line(SchedEvent::LeadershipLost { who: who.clone(), reason }));
                    campaign = Some(self.campaign(&who, Duration::from_secs(1)));
                }
                _ = async { changes.as_mut().expect("watching").changed().await }, if changes.is_some() => {
                    // The desired state changed (a deploy, another scheduler): look at it soon
                    // (at most twice a second: each pass lists every app).
                    last_sync = last_sync.min(Instant::now() - SYNC_EVERY + SYNC_SOON);
                    // The controllers see what changed at once, not on the loop's next pass;
                    // the nodes it concerns are passed over soon (a scale down's strays).
                    if controllers.leading() {
                        if let Ok(apps) = self.apps_changed().await {
                            controllers.changed(&self, &apps);
                        }
                    }
                }
                item = rx.recv() => {
                    let Some(item) = item else { return Ok(()) };
                    // A follower aborted at a reload may have left items queued: a node gone from
                    // the cluster file is not heard again (it would be recorded up once more).
                    if !self.nodes().iter().any(|(n, _)| *n == item.node) {
                        continue;
                    }
                    if leadership.is_none() || maintenance {
                        // Following: say what the nodes do, act on nothing.
                        if !matches!(item.item, NodeItem::Heartbeat { .. }) {
                            emit(&WatchLine::Node(item));
                        }
                        continue;
                    }
                    let node = item.node.clone();
                    // Only what the daemon sends proves it alive; a failed reconnect does not,
                    // nor a line that arrived before its loss and waited here while it was
                    // declared (a cut host is not back: liveness.rs).
                    let proof = matches!(&item.item, NodeItem::Event(_) | NodeItem::Heartbeat { .. });
                    let became = if proof { self.live_mut().proof(&node, Instant::now()) } else { Default::default() };
                    if became.up {
                        emit(&sched_line(SchedEvent::NodeUp { node: node.clone() }));
                        controllers.record(&node, NodeState::Up);
                    }
                    if became.back {
                        emit(&sched_line(SchedEvent::NodeBack { node: node.clone() }));
                        controllers.record(&node, NodeState::Up);
                    }
                    if became.up || became.back {
                        controllers.node_heard(&node, Owed { up: became.up, back: became.back, resync: false });
                    }
                    match &item.item {
                        NodeItem::Event(event) => {
                            emit(&WatchLine::Node(item.clone()));
                            if let EventBody::Instance(InstanceEvent { change: InstanceChange::Deleted, .. }) = &event.body {
                                controllers.deleted_on(&node);
                            }
                            self.note_stop_event(&node, event, &emit).await;
                            // Looked into off the loop, in order: it reads the store (at a
                            // thousand nodes, every instance start held every node's news back).
                            if notifier.has_urls() {
                                let _ = notes.send((node.clone(), event.clone()));
                            }
                            controllers.node_event(&node, event);
                        }
                        NodeItem::Resync { .. } => {
                            emit(&WatchLine::Node(item.clone()));
                            controllers.node_heard(&node, Owed { resync: true, ..Default::default() });
                        }
                        NodeItem::Gap { .. } | NodeItem::Disconnected { .. } => emit(&WatchLine::Node(item)),
                        NodeItem::Heartbeat { .. } => {}
                    }
                }
                _ = hangup.recv() => {
                    if let Some(watch) = reload.as_mut() {
                        watch.forced = true;
                    }
                }
                _ = tick.tick() => {
                    if let Some(changed) = reload.as_mut().and_then(ClusterWatch::changed) {
                        match changed.and_then(|(c, new_roots)| self.set_nodes(&c, new_roots)) {
                            Ok(nodes) if nodes.is_empty() => {}
                            Ok(nodes) => {
                                for node in nodes.removed.iter().chain(&nodes.changed) {
                                    if let Some(task) = followers.remove(node) {
                                        task.abort();
                                    }
                                }
                                for node in nodes.added.iter().chain(&nodes.changed) {
                                    if let Some(client) = self.client(node) {
                                        let task = self.spawn_follower(node, &client, None, &tx, &heard_at);
                                        followers.insert(node.clone(), task);
                                    }
                                    // Heard from now on, or lost a heartbeat timeout from now.
                                    self.live_mut().followed_anew(node, Instant::now());
                                }
                                emit(&sched_line(SchedEvent::ClusterReloaded {
                                    added: nodes.added.clone(),
                                    removed: nodes.removed.clone(),
                                    changed: nodes.changed.clone(),
                                }));
                                if leadership.is_some() {
                                    for node in &nodes.removed {
                                        controllers.record(node, NodeState::Removed);
                                    }
                                }
                                // What ran on a node gone from the file is as good as lost.
                                let newly = nodes.removed.iter().filter(|n| self.live_mut().removed(n)).count();
                                if newly > 0 {
                                    controllers.offer_all(&self).await;
                                }
                                for node in &nodes.removed {
                                    if leadership.is_some() {
                                        controllers.endpoints.node_lost(&self, node, &emit).await;
                                    }
                                }
                            }
                            Err(e) => emit(&sched_line(SchedEvent::ClusterReloadFailed { error: e.to_string() })),
                        }
                    }
                    if leadership.is_none() {
                        continue;
                    }
                    if last_settings.elapsed() >= Duration::from_secs(1) {
                        last_settings = Instant::now();
                        if let Ok(settings) = self.store.settings().await {
                            configure(&notifier, &settings);
                            reconcile_every = settings.config.reconcile_every();
                            controllers.set_every(reconcile_every);
                            let on = settings.maintenance.is_some();
                            if on != maintenance {
                                maintenance = on;
                                let reason = settings.maintenance.map(|m| m.reason).unwrap_or_default();
                                emit(&sched_line(SchedEvent::MaintenanceChanged { on, reason }));
                                if on {
                                    controllers.stop();
                                } else {
                                    // Everything is looked at afresh, as by a new leader.
                                    self.live_mut().lead();
                                    controllers.lead(&self, &emit).await;
                                    last_sync = Instant::now() - Duration::from_secs(60);
                                }
                            }
                        }
                    }
                    if maintenance {
                        continue;
                    }
                    // Silence is measured from what the followers received, not from what this
                    // loop got round to: a long reschedule must not make the others look lost.
                    // All are declared at once before any is acted on: no app of one goes to
                    // another.
                    let nodes = self.nodes();
                    let newly_silent = self.live_mut().declare_silent(nodes.iter().map(|(n, _)| n), Instant::now());
                    let newly: Vec<String> = newly_silent.iter().map(|(n, _)| n.clone()).collect();
                    for (node, silent) in &newly_silent {
                        let silent_secs = silent.as_secs_f64();
                        emit(&sched_line(SchedEvent::NodeLost { node: node.clone(), silent_secs }));
                        controllers.record(node, NodeState::Lost);
                    }
                    // Every app with instances there, once, however many of its nodes went
                    // at once (lost.rs).
                    if !newly.is_empty() {
                        controllers.offer_all(&self).await;
                    }
                    for node in &newly {
                        controllers.endpoints.node_lost(&self, node, &emit).await;
                    }
                    if last_sync.elapsed() > SYNC_EVERY {
                        last_sync = Instant::now();
                        if let Ok(apps) = self.store.apps().await {
                            controllers.checks.keep_only(&apps);
                            controllers.offer_every(&self, &apps);
                        }
                        // Each dependency looked at by its controller (a node that became
                        // ready may be owed a copy).
                        if let Ok(deps) = self.store.dependencies().await {
                            controllers.dependencies(deps.iter().map(|d| &d.key));
                        }
                    }
                }
            }
        }
    }

    /// Starts what looks into the nodes' events for notifications, one after another, as they
    /// are sent to it.
    fn notify_events(
        self: Arc<Self>,
        notifier: Arc<crate::sched::notify::Notifier>,
    ) -> tokio::sync::mpsc::UnboundedSender<(String, Event)> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Event)>();
        tokio::spawn(async move {
            while let Some((node, event)) = rx.recv().await {
                self.notify_event(&node, &event, &notifier).await;
            }
        });
        tx
    }

    /// Notifications for what a node's event says of an instance of a known app: it exited, it
    /// is restarting (counted), it runs without a port it declares.
    async fn notify_event(&self, node: &str, ev: &Event, notifier: &crate::sched::notify::Notifier) {
        use crate::sched::notify::Kind as Note;
        let EventBody::Instance(InstanceEvent { instance, change: InstanceChange::Transition(t) }) = &ev.body else {
            return;
        };
        // Most transitions say nothing to notify: the store is read only for those that may.
        if !matches!(t.to, Kind::Exited | Kind::Failed | Kind::Backoff | Kind::Running) {
            return;
        }
        let Ok(id) = crate::client::parse_instance_id(instance) else { return };
        let Ok(Some(app)) = self.store.app(&id.app()).await else { return };
        if app.placements.get(&id.index).is_none_or(|p| p.node != node) {
            return;
        }
        let why = t.reason.clone().or(t.message.clone()).unwrap_or_default();
        match t.to {
            Kind::Exited | Kind::Failed => notifier.notify(Note::Exited, instance, node, &format!("{}: {why}", t.to)),
            Kind::Backoff => notifier.restarted(instance, node),
            Kind::Running => {
                let Ok(spec) = check_spec(&app.spec) else { return };
                // Ports the daemon allocates (hostPort 0) are in its status once it runs; fixed
                // ones are the spec's own.
                let declared = allocated_ports(&spec);
                if declared.is_empty() {
                    return;
                }
                let Some(client) = self.client(node) else { return };
                if let Ok(status) = client.status(&id).await {
                    let lacking: Vec<&String> = declared.iter().filter(|n| !status.ports.contains_key(*n)).collect();
                    if !lacking.is_empty() {
                        let names: Vec<&str> = lacking.iter().map(|s| s.as_str()).collect();
                        let detail = format!("running without port(s) {}", names.join(", "));
                        notifier.notify(Note::NoAddress, instance, node, &detail);
                    }
                }
            }
            _ => {}
        }
    }

    /// Campaigns (after `delay`) to lead the `run`s sharing the store.
    fn campaign(
        self: &Arc<Self>,
        who: &str,
        delay: Duration,
    ) -> tokio::task::JoinHandle<Result<crate::sched::store::Leadership, SchedError>> {
        let (sched, who) = (self.clone(), who.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            sched.store.lead(&who).await
        })
    }

    /// Places the app's instances `moves` (index, the node it leaves) elsewhere, avoiding the
    /// nodes they leave and `avoid`.
    pub(super) async fn reschedule(
        &self,
        app: &App,
        moves: &[(u32, String)],
        avoid: &BTreeSet<String>,
        why: &str,
        emit: &Emit,
    ) {
        let mut avoid = avoid.clone();
        avoid.extend(moves.iter().map(|(_, from)| from.clone()));
        let cause = DeployCause::Rescheduled { reason: why.to_string() };
        match self.deploy_doc(app.spec.clone(), &avoid, cause).await {
            Ok(placed) => {
                for (i, from) in moves {
                    let instance = format!("{}/{i}", app.key);
                    let to = placed.iter().find(|p| p.instance == instance).map(|p| p.node.clone());
                    let (from, reason) = (from.clone(), why.to_string());
                    emit(&sched_line(SchedEvent::Rescheduled { instance, from, to, reason }));
                }
            }
            Err(e) => {
                let from: BTreeSet<&String> = moves.iter().map(|(_, from)| from).collect();
                for from in from {
                    emit(&sched_line(SchedEvent::RescheduleFailed {
                        app: app.key.to_string(),
                        from: from.clone(),
                        error: e.to_string(),
                    }))
                }
            }
        }
    }

    /// A node answers again: instances placed elsewhere meanwhile are deleted there, its own
    /// Lost placements are Placed again.
    pub(super) async fn node_back(&self, node: &str, emit: &Emit) {
        let Some(client) = self.client(node) else { return };
        self.sync_hook_templates(node).await;
        self.finish_deletes(node, emit).await;
        let Ok(apps) = self.store.apps().await else { return };
        for mut app in apps.into_iter().filter(|a| a.deleting.is_none()) {
            self.enforce_stops(node, &app).await;
            let id = instance_id(&app.key, 0);
            let filters = [("namespace", id.namespace.as_str()), ("name", id.name.as_str())];
            let Some(limit) = self.node_timeout(node) else { return };
            let Ok(Ok(list)) = tokio::time::timeout(limit, client.list(&filters)).await else { continue };
            let mut back_here: Vec<u32> = Vec::new();
            if check_spec(&app.spec).is_ok_and(|s| s.runs_to_completion()) {
                // A job's runs: its own on its node; on any other node, a copy that must stop.
                match app.placements.get_mut(&0) {
                    Some(p) if p.node == node && p.state == PlacementState::Lost => {
                        let back = DesiredChange::NodeBack { app: app.key.to_string(), node: node.to_string() };
                        let _ = self.placed_again(&app.key, node, &[0], &back).await;
                    }
                    Some(p) if p.node == node => {}
                    _ if !list.is_empty() => {
                        let r = client.delete_app(&id.namespace, &id.name, Some(60.0)).await;
                        for s in &list {
                            let (instance, node, ok) = (s.id.to_string(), node.to_string(), r.is_ok());
                            emit(&sched_line(SchedEvent::StrayDeleted { instance, node, ok }));
                        }
                    }
                    _ => {}
                }
                continue;
            }
            // One a failed rollout kept for its output goes with the app's next apply there.
            for s in list.into_iter().filter(|s| !s.kept) {
                match app.placements.get_mut(&s.id.index) {
                    Some(p) if p.node == node => {
                        if p.state == PlacementState::Lost {
                            back_here.push(s.id.index);
                        }
                    }
                    Some(p) if keeps_original(&app.spec) && s.state.kind() == Kind::Running => {
                        // disconnect.reconcile keepOriginal: this copy stays, the replacement goes.
                        let (moved_to, i) = (p.node.clone(), s.id.index);
                        if self.take_back(&app.key, i, &moved_to, node).await {
                            back_here.push(i);
                            if let Some(there) = self.client(&moved_to) {
                                let r = there.delete(&s.id, Some(60.0)).await;
                                let (instance, ok) = (s.id.to_string(), r.is_ok());
                                emit(&sched_line(SchedEvent::StrayDeleted { instance, node: moved_to, ok }));
                            }
                        }
                    }
                    _ => {
                        let r = client.delete(&s.id, Some(60.0)).await;
                        let (instance, node, ok) = (s.id.to_string(), node.to_string(), r.is_ok());
                        emit(&sched_line(SchedEvent::StrayDeleted { instance, node, ok }));
                    }
                }
            }
            if !back_here.is_empty() {
                let back = DesiredChange::NodeBack { app: app.key.to_string(), node: node.to_string() };
                let _ = self.placed_again(&app.key, node, &back_here, &back).await;
            }
        }
        emit(&sched_line(SchedEvent::NodeReconciled { node: node.to_string() }));
    }

    /// Moves instance `i`'s placement back from `from` to `to` (a returning node whose copy
    /// stays: disconnect.reconcile keepOriginal), as Lost there until marked back. Whether it did.
    async fn take_back(&self, key: &AppId, i: u32, from: &str, to: &str) -> bool {
        let back = DesiredChange::NodeBack { app: key.to_string(), node: to.to_string() };
        let moved = self.update_app(key, &back, |a| match a.placements.get_mut(&i) {
            Some(p) if p.node == from && a.deleting.is_none() => {
                p.node = to.to_string();
                p.state = PlacementState::Lost;
                true
            }
            _ => false,
        });
        matches!(moved.await, Ok(Some(_)))
    }

    /// Marks the Lost placements `ids` on `node` Placed again (a returning node still runs them).
    async fn placed_again(&self, key: &AppId, node: &str, ids: &[u32], why: &DesiredChange) -> Result<(), SchedError> {
        self.update_app(key, why, |a| {
            let mut any = false;
            for i in ids {
                if let Some(p) = a.placements.get_mut(i).filter(|p| p.node == node && p.state == PlacementState::Lost) {
                    p.state = PlacementState::Placed;
                    any = true;
                }
            }
            any
        })
        .await
        .map(|_| ())
    }

    /// A daemon whose journal started over (a new state directory) lost what it ran: every app
    /// placed on it is applied again (an unchanged apply creates the instances a daemon lacks),
    /// journaled as a resync.
    pub(super) async fn resync(&self, node: &str, emit: &Emit) {
        self.finish_deletes(node, emit).await;
        let Ok(apps) = self.store.apps().await else { return };
        let placed_here = |a: &App| a.deleting.is_none() && a.placements.values().any(|p| p.node == node);
        for app in apps.into_iter().filter(placed_here) {
            let why = DeployCause::Rescheduled { reason: format!("resync of {node}: its journal started over") };
            if let Err(e) = self.deploy_doc(app.spec.clone(), &BTreeSet::new(), why).await {
                emit(&sched_line(SchedEvent::RescheduleFailed {
                    app: app.key.to_string(),
                    from: node.to_string(),
                    error: format!("resync: {e}"),
                }));
            }
            // The new daemon made every instance placed on it; those the operator stopped stay so.
            self.enforce_stops(node, &app).await;
        }
        emit(&sched_line(SchedEvent::NodeReconciled { node: node.to_string() }));
    }
}

/// Whether the app keeps a returning node's copy over its replacement (disconnect.reconcile).
fn keeps_original(doc: &serde_json::Value) -> bool {
    check_spec(doc).is_ok_and(|s| {
        s.disconnect.is_some_and(|d| d.reconcile == crate::spec::model::DisconnectReconcile::KeepOriginal)
    })
}

/// Why a daemon set's instance is never placed elsewhere.
pub(super) const DAEMON_SET_STAYS: &str = "a daemon set's instance belongs to its host: every other host has its own";

/// Why an instance with a kept volume is not placed elsewhere (issue 47).
pub(super) fn kept_volume_stays(names: &[&str]) -> String {
    format!(
        "its kept volume{} ({}) hold{} its data on this node: it stays there (`drift --force` moves it, without its data)",
        if names.len() == 1 { "" } else { "s" },
        names.join(", "),
        if names.len() == 1 { "s" } else { "" }
    )
}

pub(super) fn sched_line(body: SchedEvent) -> WatchLine {
    WatchLine::Sched(SchedLine::now(body))
}

/// The cluster file as `run` last read it, to notice a change (or a SIGHUP asking for a read).
struct ClusterWatch {
    path: std::path::PathBuf,
    /// The file's and its CA's contents when last read.
    seen: Option<(Vec<u8>, Vec<u8>)>,
    forced: bool,
}

impl ClusterWatch {
    fn new(path: std::path::PathBuf) -> ClusterWatch {
        let mut watch = ClusterWatch { path, seen: None, forced: false };
        watch.seen = watch.read();
        watch
    }

    fn read(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let file = std::fs::read(&self.path).ok()?;
        let ca = crate::sched::Cluster::load(&self.path).ok().and_then(|c| std::fs::read(c.ca).ok());
        Some((file, ca.unwrap_or_default()))
    }

    /// The cluster file again, when it (or its CA) changed or a SIGHUP asked for it.
    /// With whether the CA changed (then every node is followed anew, with the new roots).
    fn changed(&mut self) -> Option<Result<(crate::sched::Cluster, bool), SchedError>> {
        let now = self.read();
        if now == self.seen && !std::mem::take(&mut self.forced) {
            return None;
        }
        let ca_changed = now.as_ref().map(|n| &n.1) != self.seen.as_ref().map(|s| &s.1);
        self.seen = now;
        Some(crate::sched::Cluster::load(&self.path).map(|c| (c, ca_changed)))
    }
}

/// The cluster file as a process serving without the `run` loop follows it (`run` does this
/// itself): its nodes taken whenever it (or its CA) changed, looked at before each request.
pub struct NodesWatch(std::sync::Mutex<ClusterWatch>);

impl NodesWatch {
    pub fn new(path: std::path::PathBuf) -> NodesWatch {
        NodesWatch(std::sync::Mutex::new(ClusterWatch::new(path)))
    }

    /// Gives `sched` the file's nodes if it changed since last looked at; a file that cannot be
    /// used keeps the nodes as they were (logged).
    pub fn refresh(&self, sched: &Scheduler) {
        let changed = self.0.lock().expect("cluster watch lock").changed();
        match changed {
            Some(Ok((cluster, new_roots))) => {
                if let Err(e) = sched.set_nodes(&cluster, new_roots) {
                    tracing::error!("keeping the nodes as they were: {e}");
                }
            }
            Some(Err(e)) => tracing::error!("keeping the nodes as they were: {e}"),
            None => {}
        }
    }
}

/// How a reschedule refused at seed 000's maxtimes begins (its notification keys on it).
pub(super) const MAXTIMES_REACHED: &str = "maxtimes reached";

/// The notifier as the cluster's settings say: where to send, and when restarts are many.
fn configure(notifier: &crate::sched::notify::Notifier, settings: &crate::sched::store::Settings) {
    notifier.set_urls(&settings.webhooks);
    let limit = settings.config.get("notifyRestartLimit").unwrap_or(3) as usize;
    let window = settings.config.get("notifyRestartWindowSecs").unwrap_or(300);
    notifier.set_restart_rule(limit, Duration::from_secs(window));
}

/// Notifications for what the leader itself saw: an instance missing on its node, or on a node
/// that was lost.
fn notify_of(notifier: &crate::sched::notify::Notifier, line: &WatchLine) {
    use crate::sched::notify::Kind as Note;
    let WatchLine::Sched(l) = line else { return };
    match &l.body {
        SchedEvent::InstanceMissing { instance, node } => {
            notifier.notify(Note::Missing, instance, node, "placed on its node, which lacks it")
        }
        SchedEvent::InstanceLost { instance, node } => {
            notifier.notify(Note::Missing, instance, node, "its node stopped answering")
        }
        SchedEvent::NotRescheduled { instance: Some(instance), node, reason, .. }
            if reason.starts_with(MAXTIMES_REACHED) =>
        {
            notifier.notify(Note::MaxtimesReached, instance, node, reason)
        }
        _ => {}
    }
}

/// The ports the daemon allocates an instance (hostPort 0): a process's and a pod
/// container's alike, both in its status once it runs.
fn allocated_ports(spec: &crate::spec::ProcessSpec) -> Vec<String> {
    spec.port_wants().into_iter().filter(|w| w.port == 0).map(|w| w.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43, item 9: "started without an IP" is checked for a pod's containers' hostPort-0
    /// ports too (they were left out: processes only), fixed ones not.
    #[test]
    fn a_pods_allocated_ports_are_checked() {
        let roots =
            crate::spec::Roots { work_base_dir: "/w".into(), run_base_dir: "/r".into(), volume_root: "/v".into() };
        let pod = serde_json::json!({
            "apiVersion": "v4", "kind": "pod", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 1, "template": {"spec": {"network": "BRIDGE", "containers": [
                {"name": "main", "image": "busybox", "ports": [
                    {"name": "http", "containerPort": 80, "hostPort": 0},
                    {"name": "fixed", "containerPort": 82, "hostPort": 30080}]}]}}}
        });
        let pod = crate::spec::parse(&pod.to_string(), crate::spec::Format::Json, &roots).unwrap();
        assert_eq!(allocated_ports(&pod), ["http"]);
    }
}
