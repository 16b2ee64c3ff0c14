//! Instances held for room (`deploy|scale --wait-for-room`): the leading `run` places them as
//! soon as some fit — at each reconcile pass, and soon after an instance is deleted anywhere
//! (room freed). Until then `status` shows them Pending with each node's reason.

use super::run::sched_line;
use super::{check_spec, Emit, Scheduler};
use crate::protocol::{DeployCause, SchedEvent};
use crate::sched::placement::NodeView;
use crate::sched::store::{App, Settings};
use crate::sched::SchedError;
use std::collections::{BTreeMap, BTreeSet};

impl Scheduler {
    /// Places what fits now of every app's held instances.
    pub(super) async fn place_waiting(&self, emit: &Emit) {
        let Ok(apps) = self.store.apps().await else { return };
        let waiting: Vec<App> = apps.into_iter().filter(|a| a.waiting.is_some() && a.deleting.is_none()).collect();
        if waiting.is_empty() {
            return;
        }
        // The nodes once for the pass: an app that gets room is placed by a deploy, which
        // reads them afresh.
        let Ok(settings) = self.store.settings().await else { return };
        let (views, down) = self.read_nodes().await;
        for app in waiting {
            if !self.more_fits(&app, &views, &down, &settings) {
                continue;
            }
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
