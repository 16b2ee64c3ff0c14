//! What steward-sched's commands ask of a scheduler, once: [`SchedOps`], done in this process
//! over the store and the nodes ([`Scheduler`]), or asked of `steward-sched serve` over its API
//! ([`super::client::SchedClient`]). The CLI is written against this trait only.

use super::scheduler::{tell, Intent};
use super::{SchedError, Scheduler};
use crate::hooks::{CreateHookRun, HookRun, HookTemplateSummary};
use crate::protocol::sched_answers::{
    ConfigEntry, Deleted, DependencyStatus, Drifted, EngineStatus, NodeListing, PlacedInstance, RunOnNode,
    SchedRolloutStatus, TemplateStored,
};
use crate::protocol::{AppEndpoints, Constraint, Cursors, Deployed, DriftRequest, FileCopied, WatchLine};
use crate::spec::source::Document;
use crate::spec::{AppId, ProcessSpec};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Nodes that did not answer, and why.
pub type Away = BTreeMap<String, String>;

/// Every operation a steward-sched command performs. Those that change what runs are refused
/// while maintenance mode is on (seed 002), by the implementation that acts.
#[allow(async_fn_in_trait)]
pub trait SchedOps {
    /// Deploys one checked document; `create_only`: refused when the app exists (seed 002).
    async fn deploy(
        &self,
        doc: &Document,
        spec: ProcessSpec,
        wait_for_room: bool,
        create_only: bool,
    ) -> Result<Deployed, SchedError>;
    async fn status(&self) -> Result<Vec<PlacedInstance>, SchedError>;
    async fn scale(&self, app: &AppId, instances: u32, wait: Option<bool>) -> Result<Vec<PlacedInstance>, SchedError>;
    async fn delete(&self, app: &AppId) -> Result<Deleted, SchedError>;
    async fn set_stopped(
        &self,
        app: &AppId,
        index: Option<u32>,
        intent: Intent,
    ) -> Result<Vec<PlacedInstance>, SchedError>;
    async fn restart(&self, app: &AppId, index: Option<u32>) -> Result<Vec<PlacedInstance>, SchedError>;
    async fn node_listing(&self) -> Result<Vec<NodeListing>, SchedError>;
    async fn stored_endpoints(&self, app: &AppId) -> Result<Option<AppEndpoints>, SchedError>;
    async fn watch_endpoints(
        &self,
        app: &AppId,
        each: impl FnMut(Option<&AppEndpoints>) -> bool,
    ) -> Result<(), SchedError>;
    async fn copy_in(
        &self,
        app: &AppId,
        index: u32,
        path: &str,
        data: Vec<u8>,
        how: (bool, Option<&str>, Option<&str>),
    ) -> Result<(String, FileCopied), SchedError>;
    async fn config(&self, key: Option<&str>) -> Result<Vec<ConfigEntry>, SchedError>;
    async fn set_config(&self, key: &str, value: &str) -> Result<Vec<ConfigEntry>, SchedError>;
    async fn engine_status(&self) -> Result<EngineStatus, SchedError>;
    async fn set_maintenance(&self, on: bool, reason: &str) -> Result<EngineStatus, SchedError>;
    async fn cordon(&self, node: &str, cordon: Option<(bool, &str)>) -> Result<EngineStatus, SchedError>;
    /// Cordons `node` (required) and moves everything off it.
    async fn drain(&self, node: &str, force: bool) -> Result<Vec<Drifted>, SchedError>;
    async fn drift(&self, req: &DriftRequest) -> Result<Vec<Drifted>, SchedError>;
    async fn constraints(&self) -> Result<Vec<Constraint>, SchedError>;
    async fn set_constraint(&self, c: Constraint) -> Result<Vec<Constraint>, SchedError>;
    async fn remove_constraint(&self, kind: &str, value: Option<&str>) -> Result<Vec<Constraint>, SchedError>;
    async fn set_webhook(&self, url: &str, add: bool) -> Result<Vec<String>, SchedError>;
    async fn webhooks(&self) -> Result<Vec<String>, SchedError>;
    async fn put_dependency(&self, doc: &Document, grace_secs: Option<u64>) -> Result<DependencyStatus, SchedError>;
    async fn dependency_statuses(&self) -> Result<Vec<DependencyStatus>, SchedError>;
    /// The nodes that did not answer and keep its copies.
    async fn delete_dependency(&self, key: &str, force: bool) -> Result<Vec<String>, SchedError>;
    async fn rollout_status(&self, app: &AppId) -> Result<SchedRolloutStatus, SchedError>;
    /// `pause`, or `resume` / `undo` driven to the end: the rollout after.
    async fn rollout_action(&self, app: &AppId, action: &str) -> Result<SchedRolloutStatus, SchedError>;
    async fn put_hook_template(&self, doc: &Document) -> Result<TemplateStored, SchedError>;
    async fn hook_templates(&self) -> Result<Vec<HookTemplateSummary>, SchedError>;
    async fn delete_hook_template(&self, namespace: &str, name: &str) -> Result<Vec<String>, SchedError>;
    async fn create_hook_run(&self, req: &CreateHookRun, node: Option<&str>) -> Result<(String, HookRun), SchedError>;
    async fn hook_runs(&self, namespace: Option<&str>) -> Result<(Vec<RunOnNode>, Away), SchedError>;
    async fn hook_run(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
    ) -> Result<(String, HookRun), SchedError>;
    async fn terminate_hook_run(&self, namespace: &str, name: &str) -> Result<(String, HookRun), SchedError>;
    /// Every node's events, merged (and a server's own lines), until `each` returns false.
    async fn watch(&self, since: Option<Cursors>, each: impl FnMut(WatchLine) -> bool) -> Result<(), SchedError>;
    /// The nodes that did not answer so far.
    fn unreachable(&self) -> Away;
}

impl SchedOps for Arc<Scheduler> {
    async fn deploy(
        &self,
        doc: &Document,
        spec: ProcessSpec,
        wait_for_room: bool,
        create_only: bool,
    ) -> Result<Deployed, SchedError> {
        self.refuse_in_maintenance().await?;
        let key = AppId::of(&spec);
        if create_only && self.app_exists(&key).await? {
            return Err(SchedError::Exists { what: format!("app {key}") });
        }
        let warnings = std::sync::Mutex::new(Vec::new());
        let warn = |w: &crate::spec::SpecError| warnings.lock().expect("warnings").push(w.clone());
        let instances = self.deploy_document(doc, spec, wait_for_room, &warn).await?;
        Ok(Deployed { instances, warnings: warnings.into_inner().expect("warnings") })
    }

    async fn status(&self) -> Result<Vec<PlacedInstance>, SchedError> {
        Scheduler::status(self).await
    }

    async fn scale(&self, app: &AppId, instances: u32, wait: Option<bool>) -> Result<Vec<PlacedInstance>, SchedError> {
        self.refuse_in_maintenance().await?;
        Scheduler::scale(self, app, instances, wait).await
    }

    async fn delete(&self, app: &AppId) -> Result<Deleted, SchedError> {
        self.refuse_in_maintenance().await?;
        Scheduler::delete(self, app).await
    }

    async fn set_stopped(
        &self,
        app: &AppId,
        index: Option<u32>,
        intent: Intent,
    ) -> Result<Vec<PlacedInstance>, SchedError> {
        self.refuse_in_maintenance().await?;
        Scheduler::set_stopped(self, app, index, intent).await
    }

    async fn restart(&self, app: &AppId, index: Option<u32>) -> Result<Vec<PlacedInstance>, SchedError> {
        self.refuse_in_maintenance().await?;
        Scheduler::restart(self, app, index).await
    }

    async fn node_listing(&self) -> Result<Vec<NodeListing>, SchedError> {
        Scheduler::node_listing(self).await
    }

    async fn stored_endpoints(&self, app: &AppId) -> Result<Option<AppEndpoints>, SchedError> {
        Scheduler::stored_endpoints(self, app).await
    }

    async fn watch_endpoints(
        &self,
        app: &AppId,
        each: impl FnMut(Option<&AppEndpoints>) -> bool,
    ) -> Result<(), SchedError> {
        Scheduler::watch_endpoints(self, app, each).await
    }

    async fn copy_in(
        &self,
        app: &AppId,
        index: u32,
        path: &str,
        data: Vec<u8>,
        how: (bool, Option<&str>, Option<&str>),
    ) -> Result<(String, FileCopied), SchedError> {
        Scheduler::copy_in(self, app, index, path, data, how).await
    }

    async fn config(&self, key: Option<&str>) -> Result<Vec<ConfigEntry>, SchedError> {
        Scheduler::config(self, key).await
    }

    async fn set_config(&self, key: &str, value: &str) -> Result<Vec<ConfigEntry>, SchedError> {
        Scheduler::set_config(self, key, value).await
    }

    async fn engine_status(&self) -> Result<EngineStatus, SchedError> {
        Scheduler::engine_status(self).await
    }

    async fn set_maintenance(&self, on: bool, reason: &str) -> Result<EngineStatus, SchedError> {
        Scheduler::set_maintenance(self, on, reason).await
    }

    async fn cordon(&self, node: &str, cordon: Option<(bool, &str)>) -> Result<EngineStatus, SchedError> {
        Scheduler::cordon(self, node, cordon).await
    }

    async fn drain(&self, node: &str, force: bool) -> Result<Vec<Drifted>, SchedError> {
        self.refuse_in_maintenance().await?;
        Scheduler::cordon(self, node, Some((false, "drained"))).await?;
        let note = |what: &str| tell(&format!("drain {node}: {what}"));
        Scheduler::drift(self, node, None, None, None, force, &note).await
    }

    async fn drift(&self, req: &DriftRequest) -> Result<Vec<Drifted>, SchedError> {
        let note = |what: &str| tell(&format!("drift: {what}"));
        let app = req.app.as_deref().map(AppId::from_key);
        if req.instance.is_some() && app.is_none() {
            return Err(SchedError::Invalid("instance: names an instance of `app`, which is missing".into()));
        }
        Scheduler::drift(self, &req.from, req.to.as_deref(), app.as_ref(), req.instance, req.force, &note).await
    }

    async fn constraints(&self) -> Result<Vec<Constraint>, SchedError> {
        Scheduler::constraints(self).await
    }

    async fn set_constraint(&self, c: Constraint) -> Result<Vec<Constraint>, SchedError> {
        Scheduler::set_constraint(self, c).await
    }

    async fn remove_constraint(&self, kind: &str, value: Option<&str>) -> Result<Vec<Constraint>, SchedError> {
        Scheduler::remove_constraint(self, kind, value).await
    }

    async fn set_webhook(&self, url: &str, add: bool) -> Result<Vec<String>, SchedError> {
        Scheduler::set_webhook(self, url, add).await
    }

    async fn webhooks(&self) -> Result<Vec<String>, SchedError> {
        Scheduler::webhooks(self).await
    }

    async fn put_dependency(&self, doc: &Document, grace_secs: Option<u64>) -> Result<DependencyStatus, SchedError> {
        self.refuse_in_maintenance().await?;
        Scheduler::put_dependency(self, doc.value.clone(), grace_secs).await
    }

    async fn dependency_statuses(&self) -> Result<Vec<DependencyStatus>, SchedError> {
        Scheduler::dependency_statuses(self).await
    }

    async fn delete_dependency(&self, key: &str, force: bool) -> Result<Vec<String>, SchedError> {
        self.refuse_in_maintenance().await?;
        Scheduler::delete_dependency(self, key, force).await
    }

    async fn rollout_status(&self, app: &AppId) -> Result<SchedRolloutStatus, SchedError> {
        Scheduler::rollout_status(self, app).await
    }

    async fn rollout_action(&self, app: &AppId, action: &str) -> Result<SchedRolloutStatus, SchedError> {
        match action {
            "pause" => self.pause_rollout(app).await?,
            "resume" | "undo" => {
                self.refuse_in_maintenance().await?;
                match action {
                    "resume" => self.resume_rollout(app).await?,
                    _ => self.undo_rollout(app).await?,
                }
                let note = |what: &str| tell(what);
                if let crate::protocol::RolloutPhase::Failed { reason } = self.finish_rollout(app, &note).await? {
                    let message = format!("the rollout failed: {reason}");
                    return Err(SchedError::Apply { app: app.to_string(), message });
                }
            }
            other => return Err(SchedError::NotFound(format!("no rollout action {other:?} (pause, resume, undo)"))),
        }
        Scheduler::rollout_status(self, app).await
    }

    async fn put_hook_template(&self, doc: &Document) -> Result<TemplateStored, SchedError> {
        let (text, format) = doc.body();
        Scheduler::put_hook_template(self, text, format).await
    }

    async fn hook_templates(&self) -> Result<Vec<HookTemplateSummary>, SchedError> {
        Scheduler::hook_templates(self).await
    }

    async fn delete_hook_template(&self, namespace: &str, name: &str) -> Result<Vec<String>, SchedError> {
        Scheduler::delete_hook_template(self, namespace, name).await
    }

    async fn create_hook_run(&self, req: &CreateHookRun, node: Option<&str>) -> Result<(String, HookRun), SchedError> {
        Scheduler::create_hook_run(self, req, node).await
    }

    async fn hook_runs(&self, namespace: Option<&str>) -> Result<(Vec<RunOnNode>, Away), SchedError> {
        Ok(Scheduler::hook_runs(self, namespace).await)
    }

    async fn hook_run(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
    ) -> Result<(String, HookRun), SchedError> {
        Scheduler::hook_run(self, namespace, name, wait).await
    }

    async fn terminate_hook_run(&self, namespace: &str, name: &str) -> Result<(String, HookRun), SchedError> {
        Scheduler::terminate_hook_run(self, namespace, name).await
    }

    async fn watch(&self, since: Option<Cursors>, mut each: impl FnMut(WatchLine) -> bool) -> Result<(), SchedError> {
        let mut rx = match since {
            None => self.follow(None),
            Some(Cursors::All(n)) => self.follow(Some(n)),
            Some(Cursors::PerNode(map)) => self.follow_from(&map),
        };
        while let Some(item) = rx.recv().await {
            if !each(WatchLine::Node(item)) {
                break;
            }
        }
        Ok(())
    }

    fn unreachable(&self) -> Away {
        Scheduler::unreachable(self)
    }
}
