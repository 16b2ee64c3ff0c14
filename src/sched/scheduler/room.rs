//! Instances held for room (`deploy|scale --wait-for-room`): the leader's room controller
//! places them as soon as some fit — looked at once a reconcile period, and soon after an
//! instance is deleted anywhere (room freed). Until then `status` shows them Pending with each
//! node's reason.

use super::controller::Controller;
use super::liveness::Liveness;
use super::run::sched_line;
use super::{check_spec, Emit, Scheduler};
use crate::protocol::{DeployCause, SchedEvent};
use crate::sched::placement::NodeView;
use crate::sched::store::{App, Settings};
use crate::sched::SchedError;
use crate::spec::AppId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// The room controller: an app with instances held for room is looked at when it changes,
/// soon after an instance is deleted anywhere (room freed), and once a reconcile period (a node
/// may have grown or come back).
pub(super) struct Room {
    /// The apps seen holding instances (those to look at when room is freed).
    held: std::sync::Mutex<BTreeSet<AppId>>,
    /// For the reconcile period.
    hosts: std::sync::Arc<super::hosts::Hosts>,
}

impl Room {
    pub fn new(hosts: std::sync::Arc<super::hosts::Hosts>) -> Room {
        Room { held: Default::default(), hosts }
    }

    /// The apps seen holding instances.
    pub fn held(&self) -> Vec<AppId> {
        self.held.lock().expect("room lock").iter().cloned().collect()
    }

    pub fn forget(&self) {
        self.held.lock().expect("room lock").clear();
    }
}

fn holds(app: &App) -> bool {
    app.waiting.is_some() && app.deleting.is_none()
}

#[async_trait::async_trait]
impl Controller for Room {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "room"
    }

    fn wants(&self, app: &App, _live: &Liveness) -> bool {
        let holds = holds(app);
        if holds {
            self.held.lock().expect("room lock").insert(app.key.clone());
        }
        holds
    }

    async fn sync(&self, sched: &Arc<Scheduler>, key: &AppId, emit: &Emit) -> Option<Duration> {
        let app = match sched.store.app(key).await {
            Ok(Some(app)) if holds(&app) => app,
            Ok(_) => {
                self.held.lock().expect("room lock").remove(key);
                return None;
            }
            Err(_) => return Some(Duration::from_secs(2)),
        };
        // A deploy that finds room reads the nodes afresh; this reading only tells whether
        // some may fit (the nodes as last kept, board.rs).
        let Ok(settings) = sched.store.settings().await else { return Some(Duration::from_secs(2)) };
        let (views, down) = sched.read_nodes().await;
        if sched.more_fits(&app, &views, &down, &settings) {
            sched.place_held(&app, emit).await;
        }
        Some(self.hosts.every())
    }
}

impl Scheduler {
    /// Places what fits now of `app`'s held instances (by a deploy of its spec).
    async fn place_held(&self, app: &App, emit: &Emit) {
        let held = app.waiting.as_ref().map(|w| w.instances.clone()).unwrap_or_default();
        let cause = DeployCause::Rescheduled { reason: "room found".into() };
        match self.deploy_doc(app.spec.clone(), &BTreeSet::new(), cause).await {
            Ok(placed) => {
                for p in placed.iter().filter(|p| p.node != "-") {
                    let index = p.instance.rsplit('/').next().and_then(|i| i.parse::<u32>().ok());
                    if index.is_some_and(|i| held.contains(&i)) {
                        emit(&sched_line(SchedEvent::Rescheduled {
                            instance: p.instance.clone(),
                            from: "(waiting for room)".into(),
                            to: Some(p.node.clone()),
                            reason: "room found".into(),
                        }));
                    }
                }
            }
            Err(e) => emit(&sched_line(SchedEvent::RescheduleFailed {
                app: app.key.to_string(),
                from: "(waiting for room)".into(),
                error: e.to_string(),
            })),
        }
    }

    /// Whether at least the first held instance of `app` fits on `views` (a placement only,
    /// nothing stored).
    fn more_fits(&self, app: &App, views: &[NodeView], down: &BTreeMap<String, String>, settings: &Settings) -> bool {
        let Some(first) = app.waiting.as_ref().and_then(|w| w.instances.first().copied()) else { return false };
        let Ok(spec) = check_spec(&app.spec) else { return false };
        let key = app.key.to_string();
        let (avoid, hold) = (BTreeSet::new(), BTreeSet::new());
        let why = DeployCause::Rescheduled { reason: "room found".into() };
        match self.place_counted(&key, &spec, Some(app), &avoid, views, down, settings, &hold, &why) {
            Ok(_) => true,
            Err(SchedError::Placement(e)) => e.index > first,
            Err(_) => false,
        }
    }
}
