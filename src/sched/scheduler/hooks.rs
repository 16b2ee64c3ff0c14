//! Hooks across the cluster (seed 004, issue 19): steward-sched keeps the HookTemplates in its
//! desired store and gives each to every node, where the daemons' rollout steps and runs use
//! them (a node that comes back or joins gets them when `run` hears it). A HookRun is made on
//! one node — the one named, or the first in name order that answers — whose daemon measures and
//! keeps it durably; `ls`, `status` and `terminate` find runs on whichever node holds them.

use super::Scheduler;
use crate::client::ClientError;
use crate::hooks::{CreateHookRun, HookRun, HookTemplate, HookTemplateSummary};
pub use crate::protocol::sched_answers::{RunOnNode, TemplateStored};
use crate::sched::SchedError;
use crate::spec::Format;
use std::collections::BTreeMap;

fn node_err(node: &str, e: ClientError) -> SchedError {
    SchedError::Node { node: node.to_string(), message: e.to_string() }
}

impl Scheduler {
    /// Checks a HookTemplate document, stores it, and gives it to every node.
    pub async fn put_hook_template(&self, text: &str, format: Format) -> Result<TemplateStored, SchedError> {
        let template = crate::hooks::parse_template(text, format)
            .map_err(|errors| SchedError::Spec { path: "the template".into(), errors })?;
        self.store().put_hook_template(&template).await?;
        let (mut nodes, mut unreachable) = (Vec::new(), BTreeMap::new());
        for (node, client) in self.nodes().iter() {
            match self.give_template(client, &template).await {
                Ok(()) => nodes.push(node.clone()),
                Err(e) => {
                    self.note_unreachable(node, &e.to_string());
                    unreachable.insert(node.clone(), e.to_string());
                }
            }
        }
        Ok(TemplateStored { template: template.summary(), nodes, unreachable })
    }

    async fn give_template(&self, client: &crate::client::Client, t: &HookTemplate) -> Result<(), ClientError> {
        let json = serde_json::to_string(t).expect("a template serializes");
        let (ns, name) = (&t.metadata.namespace, &t.metadata.name);
        tokio::time::timeout(super::NODE_TIMEOUT, client.put_hook_template(ns, name, &json, Format::Json))
            .await
            .map_err(|_| ClientError::Protocol(format!("no answer within {} s", super::NODE_TIMEOUT.as_secs())))?
            .map(|_| ())
    }

    pub async fn hook_templates(&self) -> Result<Vec<HookTemplateSummary>, SchedError> {
        Ok(self.store().hook_templates().await?.iter().map(HookTemplate::summary).collect())
    }

    /// Removes a template from the desired store and from every node that answers.
    pub async fn delete_hook_template(&self, namespace: &str, name: &str) -> Result<Vec<String>, SchedError> {
        let key = crate::hooks::run::key(namespace, name);
        if !self.store().hook_templates().await?.iter().any(|t| t.key() == key) {
            return Err(SchedError::Apply { app: key, message: "no such hook template".into() });
        }
        self.store().delete_hook_template(namespace, name).await?;
        let mut away = Vec::new();
        for (node, client) in self.nodes().iter() {
            match client.delete_hook_template(namespace, name).await {
                Ok(()) | Err(ClientError::Api { status: 404, .. }) => {}
                Err(e) => {
                    self.note_unreachable(node, &e.to_string());
                    away.push(node.clone())
                }
            }
        }
        Ok(away)
    }

    /// Gives `node` every stored template it lacks or holds in another version.
    pub(super) async fn sync_hook_templates(&self, node: &str) {
        let (Some(client), Ok(templates)) = (self.client(node), self.store().hook_templates().await) else { return };
        for t in templates {
            let there = client.hook_template(&t.metadata.namespace, &t.metadata.name).await.ok();
            if there.as_ref() != Some(&t) {
                if let Err(e) = self.give_template(&client, &t).await {
                    tracing::warn!(node, "giving hook template {}: {e}", t.key());
                }
            }
        }
    }

    /// Makes a run on `node` (or the first node in name order that answers).
    pub async fn create_hook_run(
        &self,
        req: &CreateHookRun,
        node: Option<&str>,
    ) -> Result<(String, HookRun), SchedError> {
        let key = crate::hooks::run::key(&req.namespace, &req.template);
        if !self.store().hook_templates().await?.iter().any(|t| t.key() == key) {
            return Err(SchedError::Apply {
                app: key,
                message: "no such hook template (steward-sched hook template apply FILE)".into(),
            });
        }
        let nodes = self.nodes();
        let candidates: Vec<&(String, crate::client::Client)> = match node {
            Some(n) => {
                let found = nodes.iter().find(|(name, _)| name == n);
                vec![found.ok_or_else(|| SchedError::NoNode { node: n.into() })?]
            }
            None => nodes.iter().collect(),
        };
        let mut why = Vec::new();
        for (name, client) in candidates {
            // A node that missed the template (it was away) gets it first.
            self.sync_hook_templates(name).await;
            match client.create_hook_run(req).await {
                Ok(run) => return Ok((name.to_string(), run)),
                Err(e @ (ClientError::Unreachable { .. } | ClientError::Protocol(_))) => {
                    self.note_unreachable(name, &e.to_string());
                    why.push(format!("{name}: {e}"))
                }
                Err(e) => return Err(node_err(name, e)),
            }
        }
        Err(SchedError::Apply { app: key, message: format!("no node could take the run: {}", why.join("; ")) })
    }

    /// Every node's runs, and the nodes that did not answer.
    pub async fn hook_runs(&self, namespace: Option<&str>) -> (Vec<RunOnNode>, BTreeMap<String, String>) {
        let (mut runs, mut away) = (Vec::new(), BTreeMap::new());
        for (node, client) in self.nodes().iter() {
            let why = match tokio::time::timeout(super::NODE_TIMEOUT, client.hook_runs(namespace, None)).await {
                Ok(Ok(list)) => {
                    runs.extend(list.into_iter().map(|run| RunOnNode { node: node.clone(), run }));
                    continue;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "no answer".to_string(),
            };
            self.note_unreachable(node, &why);
            away.insert(node.clone(), why);
        }
        (runs, away)
    }

    /// The node that holds run `namespace/name`, and the run (after `wait`, if given).
    pub async fn hook_run(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<std::time::Duration>,
    ) -> Result<(String, HookRun), SchedError> {
        let mut away = Vec::new();
        for (node, client) in self.nodes().iter() {
            match client.hook_run(namespace, name, None).await {
                Ok(_) => {
                    let run = client.hook_run(namespace, name, wait).await.map_err(|e| node_err(node, e))?;
                    return Ok((node.clone(), run));
                }
                Err(ClientError::Api { status: 404, .. }) => {}
                Err(e) => {
                    self.note_unreachable(node, &e.to_string());
                    away.push(format!("{node}: {e}"))
                }
            }
        }
        let also = if away.is_empty() { String::new() } else { format!(" (not asked: {})", away.join("; ")) };
        Err(SchedError::Apply {
            app: crate::hooks::run::key(namespace, name),
            message: format!("no node holds this hook run{also}"),
        })
    }

    pub async fn terminate_hook_run(&self, namespace: &str, name: &str) -> Result<(String, HookRun), SchedError> {
        let (node, _) = self.hook_run(namespace, name, None).await?;
        let client = self.client(&node).expect("found on a cluster node");
        let run = client.terminate_hook_run(namespace, name).await.map_err(|e| node_err(&node, e))?;
        Ok((node, run))
    }
}
