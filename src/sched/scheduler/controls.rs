//! The cluster's controls (seed 002): maintenance mode, node cordons, drift and drain.
//!
//! - Maintenance: the leading `run` keeps following and reporting and changes nothing; the
//!   commands that change what runs refuse, naming who turned it on and why.
//! - A cordon closes a node to new instances: required, never; preferred, only when no other
//!   node fits (seed 002's constraint `soft` means enforced: soft true is required, DESIGN § 7). What runs
//!   there stays.
//! - Drift moves instances off a node, one at a time as seed 002 does it: the instance is
//!   removed, then deployed on the target (named or not, placed by the app's constraints), and the
//!   next waits until it runs. Stateful apps (a stateful set, a kept volume, or labelled
//!   `steward/stateful: "true"`) move only with --force.
//!   Drain is drift of everything on a node.

use super::{check_spec, instance_id, Scheduler, NODE_TIMEOUT};
use crate::client::ClientError;
pub use crate::protocol::sched_answers::{Drifted, EngineStatus};
use crate::protocol::Constraint;
use crate::protocol::{DesiredChange, Kind};
use crate::sched::placement::{self, NodeView, PlacementError, Request};
use crate::sched::store::{Cordon, Maintenance, Placement, PlacementState, Settings};
use crate::sched::SchedError;
use crate::spec::AppId;
use crate::spec::Format;
use std::collections::BTreeMap;
use std::time::Duration;

/// The label that marks an app whose instances keep their node unless a drift is forced.
pub const STATEFUL_LABEL: &str = "steward/stateful";
/// How long a drift waits for a moved instance to run on its new node.
const MOVED_RUNNING_WAIT: Duration = Duration::from_secs(120);

/// Places `req` keeping off cordoned nodes: required cordons always, preferred ones for every
/// instance another node can take (per instance: they take the overflow, no more); a cordon the
/// app tolerates (seed 003 `schedule.tolerations`: a required cordon is a NoScheduler taint, a
/// preferred one PreferNoScheduler) does not keep it off.
pub(super) fn place_around_cordons(
    req: &Request,
    views: &[NodeView],
    settings: &Settings,
) -> Result<BTreeMap<u32, String>, PlacementError> {
    let tolerated = |c: &crate::sched::store::Cordon| req.schedule.is_some_and(|s| s.tolerates_cordon(!c.preferred));
    let cordons = settings.cordons_over(views.iter().map(|v| v.name.as_str()));
    let untolerated = || cordons.iter().filter(|(_, c)| !tolerated(c));
    let mut closed = req.closed.clone();
    closed.extend(untolerated().filter(|(_, c)| !c.preferred).map(|(n, c)| {
        let why = if c.reason.is_empty() { String::new() } else { format!(": {}", c.reason) };
        (n.clone(), format!("cordoned (required){why}"))
    }));
    let shunned = untolerated().filter(|(_, c)| c.preferred).map(|(n, _)| n.clone()).collect();
    placement::place(&Request { closed, shunned, ..req.clone() }, views)
}

/// Where a drift moves instance `i` (`req`: the app, its instances as placed), by the same
/// rules as any placement (the app's constraints, room, cordons): onto `to` if it can take it,
/// else onto the node the rules choose, `from` closed as the node drifted from.
pub(super) fn drift_target(
    req: &Request,
    i: u32,
    from: &str,
    to: Option<&str>,
    views: &[NodeView],
    settings: &Settings,
) -> Result<String, PlacementError> {
    let mut keep = req.keep.clone();
    keep.remove(&i);
    let mut closed = req.closed.clone();
    closed.insert(from.to_string(), "the node drifted from".to_string());
    // Only a forced drift moves an instance with a kept volume, and it moves without its data.
    let req = Request { keep, place: vec![i], closed, only: to.map(String::from), unpinned: true, ..req.clone() };
    let placed = place_around_cordons(&req, views, settings)?;
    Ok(placed[&i].clone())
}

impl Scheduler {
    /// Fails when maintenance mode is on: nothing may change what runs.
    pub async fn refuse_in_maintenance(&self) -> Result<(), SchedError> {
        match self.store.settings().await?.maintenance {
            Some(m) => Err(SchedError::Maintenance { since_ms: m.since_ms, reason: m.reason }),
            None => Ok(()),
        }
    }

    /// Changes the settings from a fresh read (again on a conflict).
    pub(super) async fn update_settings(
        &self,
        why: &DesiredChange,
        change: impl Fn(&mut Settings),
    ) -> Result<Settings, SchedError> {
        for _ in 0..super::UPDATE_TRIES {
            let mut settings = self.store.settings().await?;
            change(&mut settings);
            match self.store.put_settings(&mut settings, why).await {
                Ok(()) => return Ok(settings),
                Err(SchedError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(SchedError::Conflict { app: "the cluster's settings".into() })
    }

    /// `maintenance on [--reason R]` / `maintenance off`.
    pub async fn set_maintenance(&self, on: bool, reason: &str) -> Result<EngineStatus, SchedError> {
        let why = if on {
            DesiredChange::MaintenanceOn { reason: reason.to_string() }
        } else {
            DesiredChange::MaintenanceOff {}
        };
        let now = crate::clock::now_ms();
        self.update_settings(&why, |s| {
            s.maintenance = on.then(|| Maintenance { since_ms: now, reason: reason.to_string() });
        })
        .await?;
        self.engine_status().await
    }

    /// `node cordon NODE [--preferred]` / `node uncordon NODE`.
    pub async fn cordon(&self, node: &str, cordon: Option<(bool, &str)>) -> Result<EngineStatus, SchedError> {
        if self.client(node).is_none() {
            return Err(SchedError::NoNode { node: node.into() });
        }
        let why = match cordon {
            Some((preferred, reason)) => {
                DesiredChange::Cordoned { node: node.into(), preferred, reason: reason.into() }
            }
            None => DesiredChange::Uncordoned { node: node.into() },
        };
        let now = crate::clock::now_ms();
        self.update_settings(&why, |s| match cordon {
            Some((preferred, reason)) => {
                s.cordons.insert(node.to_string(), Cordon { preferred, since_ms: now, reason: reason.to_string() });
            }
            None => {
                s.cordons.remove(node);
            }
        })
        .await?;
        self.engine_status().await
    }

    /// Seed 002's `PATCH /api/constraints`: stores `c` in place of the constraint of its type
    /// on its value.
    pub async fn set_constraint(&self, mut c: crate::protocol::Constraint) -> Result<Vec<Constraint>, SchedError> {
        if c.kind != "node" {
            let message = format!("constraint type {:?}: the one type is node (a node's name)", c.kind);
            return Err(SchedError::Invalid(message));
        }
        if c.value.is_empty() {
            return Err(SchedError::Invalid("constraint value: a node's name is required".into()));
        }
        c.since_ms = crate::clock::now_ms();
        let why = DesiredChange::ConstraintSet { constraint: c.clone() };
        let settings = self
            .update_settings(&why, |s| {
                s.constraints.retain(|o| !(o.kind == c.kind && o.value == c.value));
                s.constraints.push(c.clone());
            })
            .await?;
        Ok(settings.constraints)
    }

    /// Seed 002's `DELETE /api/constraints?type=`: every constraint of `kind`, or only the one
    /// on `value`; none such is an error.
    pub async fn remove_constraint(&self, kind: &str, value: Option<&str>) -> Result<Vec<Constraint>, SchedError> {
        let matching = |c: &Constraint| c.kind == kind && value.is_none_or(|v| c.value == v);
        if !self.store.settings().await?.constraints.iter().any(matching) {
            let on = value.map(|v| format!(" on {v}")).unwrap_or_default();
            return Err(SchedError::NotFound(format!("no constraint of type {kind}{on}")));
        }
        let why = DesiredChange::ConstraintRemoved { kind: kind.into(), value: value.map(String::from) };
        let settings = self.update_settings(&why, |s| s.constraints.retain(|c| !matching(c))).await?;
        Ok(settings.constraints)
    }

    pub async fn constraints(&self) -> Result<Vec<Constraint>, SchedError> {
        Ok(self.store.settings().await?.constraints)
    }

    /// `notify add URL` / `notify rm URL`: the URLs the leader POSTs notifications to.
    pub async fn set_webhook(&self, url: &str, add: bool) -> Result<Vec<String>, SchedError> {
        let parsed =
            reqwest::Url::parse(url).ok().filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        if add && parsed.is_none() {
            return Err(SchedError::Apply { app: url.into(), message: "not an http:// or https:// URL".into() });
        }
        let why = match add {
            true => DesiredChange::NotifyAdded { url: url.into() },
            false => DesiredChange::NotifyRemoved { url: url.into() },
        };
        let current = self.store.settings().await?.webhooks;
        if !add && !current.iter().any(|u| u == url) {
            return Err(SchedError::Apply { app: url.into(), message: "not registered (notify ls)".into() });
        }
        let settings = self
            .update_settings(&why, |s| {
                s.webhooks.retain(|u| u != url);
                if add {
                    s.webhooks.push(url.to_string());
                }
            })
            .await?;
        Ok(settings.webhooks)
    }

    pub async fn webhooks(&self) -> Result<Vec<String>, SchedError> {
        Ok(self.store.settings().await?.webhooks)
    }

    /// The engine: who leads, the store, maintenance, cordons, nodes that do not answer.
    pub async fn engine_status(&self) -> Result<EngineStatus, SchedError> {
        let settings = self.store.settings().await?;
        let (_, unreachable) = self.read_nodes().await;
        Ok(EngineStatus {
            leader: self.store.leader().await,
            store: self.store_name.clone(),
            maintenance: settings.maintenance,
            cordons: settings.cordons,
            constraints: settings.constraints,
            unreachable,
        })
    }

    /// `drift --from H [--to H2] [--app A [--instance i]] [--force]` (and `node drain H`).
    pub async fn drift(
        &self,
        from: &str,
        to: Option<&str>,
        app: Option<&AppId>,
        instance: Option<u32>,
        force: bool,
        note: &(dyn Fn(&str) + Sync),
    ) -> Result<Vec<Drifted>, SchedError> {
        self.refuse_in_maintenance().await?;
        if to == Some(from) {
            return Err(SchedError::Invalid(format!("node {from}: --to names the node drifted from")));
        }
        for n in [Some(from), to].into_iter().flatten() {
            if self.client(n).is_none() {
                return Err(SchedError::NoNode { node: n.into() });
            }
        }
        let apps = match app {
            Some(key) => vec![self.stored(key).await?],
            None => self.store.apps().await?.into_iter().filter(|a| a.deleting.is_none()).collect(),
        };
        let mut out = Vec::new();
        for app in apps {
            let Ok(spec) = check_spec(&app.spec) else { continue };
            // A stateful set is stateful by its kind, as the label marks any other app.
            let stateful = spec.stateful_set.is_some()
                || spec.metadata.labels.get(STATEFUL_LABEL).is_some_and(|v| v == "true")
                || !spec.kept_volumes().is_empty();
            let ids: Vec<u32> = app
                .placements
                .iter()
                .filter(|(i, p)| p.node == from && instance.is_none_or(|n| n == **i))
                .map(|(i, _)| *i)
                .collect();
            if instance.is_some() && ids.is_empty() {
                return Err(SchedError::Apply {
                    app: app.key.to_string(),
                    message: format!("instance {} is not placed on {from}", instance.unwrap_or_default()),
                });
            }
            for i in ids {
                let name = format!("{}/{i}", app.key);
                let skip = |reason: &str| Drifted {
                    instance: name.clone(),
                    from: from.into(),
                    to: None,
                    reason: reason.into(),
                };
                if stateful && !force {
                    out.push(skip(
                        "stateful (statefulSet, label steward/stateful, or a kept volume on its node): moved only with --force",
                    ));
                    continue;
                }
                if spec.runs_to_completion() {
                    out.push(skip("a job or cron job moves with a deploy, not a drift"));
                    continue;
                }
                if spec.daemon_set.is_some() {
                    out.push(skip("a daemon set's instance belongs to its host (cordon it and change the constraint)"));
                    continue;
                }
                match self.move_instance(&app.key, i, from, to).await {
                    Ok(target) => {
                        note(&format!("{name}: {from} -> {target}"));
                        out.push(Drifted {
                            instance: name,
                            from: from.into(),
                            to: Some(target),
                            reason: String::new(),
                        });
                    }
                    Err(e) => {
                        note(&format!("{name}: not moved: {e}"));
                        out.push(skip(&e.to_string()));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Moves instance `i` of `key` off `from` (seed 002: removed, then deployed on the target),
    /// and waits until it runs there. The new placement is stored first: if this process dies
    /// midway, the leader applies it and the reconcile removes what is left on `from`.
    async fn move_instance(&self, key: &AppId, i: u32, from: &str, to: Option<&str>) -> Result<String, SchedError> {
        let app = self.stored(key).await?;
        let spec = check_spec(&app.spec).map_err(|errors| SchedError::Spec { path: "(stored spec)".into(), errors })?;
        let (views, _) = self.read_nodes().await;
        if let Some(t) = to.filter(|t| !views.iter().any(|v| v.name == *t)) {
            return Err(SchedError::Node { node: t.into(), message: "does not answer".into() });
        }
        let app_key = key.to_string();
        let req = Request {
            keep: app.placements.iter().map(|(n, p)| (*n, p.node.clone())).collect(),
            ..Request::new(&app_key, &spec)
        };
        let target = drift_target(&req, i, from, to, &views, &self.store.settings().await?)?;
        let why = DesiredChange::Drifted { app: key.into(), instance: i, from: from.into(), to: target.clone() };
        let moved = self.update_app(key, &why, |a| match a.placements.get_mut(&i) {
            Some(p) if p.node == from => {
                let reason = format!("drifting from {from}");
                *p = Placement {
                    node: target.clone(),
                    state: PlacementState::Pending { reason },
                    reschedules: p.reschedules,
                };
                true
            }
            _ => false,
        });
        let Some(app) = moved.await? else {
            return Err(SchedError::Apply { app: key.into(), message: format!("instance {i} left {from} meanwhile") });
        };
        // Removed first (seed 002's drift), then deployed on the target.
        let id = instance_id(key, i);
        if let Some(client) = self.client(from) {
            match client.delete(&id, Some(60.0)).await {
                Ok(()) | Err(ClientError::Api { status: 404, .. }) => {}
                Err(e) => self.note_unreachable(from, &e.to_string()),
            }
        }
        let client = self.client(&target).expect("a node that answered");
        let text = app.doc_for(&target).to_string();
        client
            .apply_selected(&text, Format::Json, Some(&app.ids_on(&target)))
            .await
            .map_err(|e| SchedError::Node { node: target.clone(), message: e.to_string() })?;
        self.update_app(key, &DesiredChange::Applied { app: key.into() }, |a| match a.placements.get_mut(&i) {
            Some(p) if p.node == target => {
                p.state = PlacementState::Placed;
                true
            }
            _ => false,
        })
        .await?;
        let deadline = std::time::Instant::now() + MOVED_RUNNING_WAIT;
        loop {
            if let Ok(Ok(s)) = tokio::time::timeout(NODE_TIMEOUT, client.status(&id)).await {
                if s.state.kind() == Kind::Running {
                    return Ok(target);
                }
            }
            if std::time::Instant::now() > deadline {
                return Err(SchedError::Apply {
                    app: key.into(),
                    message: format!("{id} was moved to {target} but does not run there"),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::store::Cordon;
    use crate::spec::model::Schedule;

    fn view(name: &str) -> NodeView {
        NodeView { name: name.into(), hostname: name.into(), free_ports: 10, ..Default::default() }
    }

    #[test]
    fn tolerations_let_an_app_onto_cordoned_hosts() {
        let cordon = |preferred| Cordon { preferred, since_ms: 1, reason: String::new() };
        let settings = Settings {
            cordons: BTreeMap::from([("h1".to_string(), cordon(false)), ("h2".to_string(), cordon(true))]),
            ..Default::default()
        };
        let views = [view("h1"), view("h2"), view("h3")];
        let schedule = |v: serde_json::Value| -> Schedule { serde_json::from_value(v).unwrap() };
        let none = Schedule::default();
        let required = schedule(serde_json::json!({"tolerations": [
            {"key": "steward/cordon", "operator": "Exists", "effect": "NoScheduler"}]}));
        let any = schedule(serde_json::json!({"tolerations": [{"operator": "Exists"}]}));
        let req = |s: &Schedule, views: &[NodeView]| -> Result<Vec<String>, PlacementError> {
            let r = Request { schedule: Some(s), ..Request::bare("ns/a", 1) };
            place_around_cordons(&r, views, &settings).map(|p| p.into_values().collect())
        };
        // Without a toleration: h3; with only the cordoned hosts, the preferred one (h2).
        assert_eq!(req(&none, &views).unwrap(), ["h3"]);
        assert_eq!(req(&none, &views[..2]).unwrap(), ["h2"]);
        let e = req(&none, &views[..1]).unwrap_err().to_string();
        assert!(e.contains("h1: cordoned (required)"), "{e}");
        // Tolerating the required cordon: h1 is open (and emptier than nothing else).
        assert_eq!(req(&required, &views[..1]).unwrap(), ["h1"]);
        // Tolerating every taint: the preferred cordon no longer pushes it off h2 either.
        assert_eq!(req(&any, &[view("h2")]).unwrap(), ["h2"]);
        assert_eq!(req(&any, &views).unwrap(), ["h1"]);
    }

    fn maxper(n: u32) -> crate::spec::model::Constraint {
        serde_json::from_value(serde_json::json!({"intersectionItem": [{"unionData": [
            {"name": "hostname", "operate": "MAXPER", "type": 3, "text": {"value": n.to_string()}}]}]}))
        .unwrap()
    }

    /// Issue 43, item 5: `drift --to` places by the app's own rules. 12 instances with
    /// `hostname MAXPER 6`, 6 on h1 and 6 on h2: moving one of h1's to h2 would make 7 there,
    /// refused naming the constraint (it was moved); to a required-cordoned h3, refused naming
    /// the cordon. Without --to, a drift with nowhere to go names the constraint, and the node
    /// drifted from as such, not as "the app's instance was lost or failed there".
    #[test]
    fn a_drift_keeps_the_apps_constraints_and_names_them() {
        let constraint = maxper(6);
        let keep: BTreeMap<u32, String> = (0..12).map(|i| (i, if i < 6 { "h1" } else { "h2" }.to_string())).collect();
        let req = Request { constraint: Some(&constraint), keep, place: Vec::new(), ..Request::bare("ns/a", 12) };
        let views = [view("h1"), view("h2"), view("h3")];
        let mut settings = Settings::default();
        let e = drift_target(&req, 0, "h1", Some("h2"), &views, &settings).unwrap_err().to_string();
        assert!(e.contains("hostname MAXPER 6") && e.contains("h2"), "{e}");
        assert!(!e.contains("h3"), "only the target is asked: {e}");
        assert_eq!(drift_target(&req, 0, "h1", Some("h3"), &views, &settings).unwrap(), "h3");
        assert_eq!(drift_target(&req, 0, "h1", None, &views, &settings).unwrap(), "h3");
        settings.cordons.insert("h3".into(), Cordon { preferred: false, since_ms: 1, reason: "disk".into() });
        let e = drift_target(&req, 0, "h1", Some("h3"), &views, &settings).unwrap_err().to_string();
        assert!(e.contains("h3: cordoned (required): disk"), "{e}");
        let e = drift_target(&req, 0, "h1", None, &views, &settings).unwrap_err().to_string();
        assert!(e.contains("h2: constraint.intersectionItem[0]: hostname MAXPER"), "{e}");
        assert!(e.contains("h1: the node drifted from"), "{e}");
        assert!(!e.contains("lost or failed"), "{e}");
    }

    /// Issue 43, item 4: a preferred cordon takes only the instances no other node can: 4
    /// instances with `hostname MAXPER 3` on an open h1 and a softly cordoned h2 go 3 and 1.
    /// The cordon was dropped for the whole placement once one instance needed h2 (2 and 2).
    #[test]
    fn a_preferred_cordon_takes_only_the_overflow() {
        let settings = Settings {
            cordons: BTreeMap::from([(
                "h2".to_string(),
                Cordon { preferred: true, since_ms: 1, reason: String::new() },
            )]),
            ..Default::default()
        };
        let constraint: crate::spec::model::Constraint = serde_json::from_value(serde_json::json!({
            "intersectionItem": [{"unionData": [{"name": "hostname", "operate": "MAXPER", "type": 3, "text": {"value": "3"}}]}]
        }))
        .unwrap();
        let r = Request { constraint: Some(&constraint), ..Request::bare("ns/a", 4) };
        let placed = place_around_cordons(&r, &[view("h1"), view("h2")], &settings).unwrap();
        let mut counts = BTreeMap::new();
        for node in placed.values() {
            *counts.entry(node.as_str()).or_insert(0) += 1;
        }
        assert_eq!(counts, BTreeMap::from([("h1", 3), ("h2", 1)]), "{placed:?}");
    }
}
