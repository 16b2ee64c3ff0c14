//! A client of `steward-sched serve` (`--server`, or the cluster file's `server`): every
//! [`SchedOps`] asked of the server's API, its errors back as [`SchedError::Server`] with the
//! server's message, the nodes it says did not answer noted for the command to report.

use super::ops::{Away, SchedOps};
use super::scheduler::Intent;
use super::SchedError;
use crate::client::{encode, Client, ClientError};
use crate::hooks::{CreateHookRun, HookRun, HookTemplateSummary};
use crate::protocol::sched_answers::{
    ConfigEntry, Deleted, DependencyStatus, Drifted, EngineStatus, NodeListing, PlacedInstance, RunOnNode,
    SchedRolloutStatus, TemplateStored,
};
use crate::protocol::{
    AppEndpoints, ConfigValue, Constraint, CopiedOnNode, CordonRequest, Cursors, DependencyRequest, DeployRequest,
    Deployed, DrainRequest, DriftRequest, FileCopied, HookRunRequest, InstanceRequest, MaintenanceRequest, Removed,
    RunFound, RunsListing, ScaleRequest, UrlRequest, WatchLine, NOTES_HEADER, UNREACHABLE_HEADER,
};
use crate::spec::source::Document;
use crate::spec::{AppId, ProcessSpec};
use hyper::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::Mutex;
use std::time::Duration;

pub struct SchedClient {
    client: Client,
    /// What the server said did not answer, over every request of this command.
    away: Mutex<Away>,
}

impl SchedClient {
    pub fn new(client: Client) -> SchedClient {
        SchedClient { client, away: Mutex::new(Away::new()) }
    }

    async fn ask<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, SchedError> {
        let body = body.map(|b| ("application/json", serde_json::to_vec(b).expect("a body serializes")));
        self.send(method, path, body).await
    }

    /// Sends a request; what the server told besides its answer (notes, printed on stderr as
    /// the command acting itself would; nodes that did not answer, kept for the end), then the
    /// answer or its error.
    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<T, SchedError> {
        let (status, headers, bytes) = self.client.request_raw(method, path, body).await.map_err(server_err)?;
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(notes) = header(NOTES_HEADER).and_then(|n| serde_json::from_str::<Vec<String>>(n).ok()) {
            notes.iter().for_each(|n| eprintln!("{n}"));
        }
        if let Some(away) = header(UNREACHABLE_HEADER).and_then(|a| serde_json::from_str::<Away>(a).ok()) {
            self.away.lock().expect("away lock").extend(away);
        }
        if !status.is_success() {
            return Err(server_err(crate::client::api_error(status, &bytes)));
        }
        serde_json::from_slice(&bytes).map_err(|e| SchedError::Store(format!("steward-sched serve: {path}: {e}")))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, SchedError> {
        self.ask(Method::GET, path, None::<&()>).await
    }

    async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T, SchedError> {
        self.ask(Method::POST, path, Some(body)).await
    }
}

/// The server's answer, as the command reports it (a store or TLS failure there exits 3).
fn server_err(e: ClientError) -> SchedError {
    match e {
        ClientError::Api { status, code, message, .. } => SchedError::Server { status, code, message },
        ClientError::Unreachable { socket, source } => {
            SchedError::Store(format!("cannot reach steward-sched serve at {}: {source}", socket.display()))
        }
        ClientError::Protocol(p) => SchedError::Store(format!("steward-sched serve: {p}")),
    }
}

fn app_path(app: &AppId) -> String {
    format!("/v1/apps/{}/{}", encode(&app.namespace), encode(&app.name))
}

impl SchedOps for SchedClient {
    async fn deploy(
        &self,
        doc: &Document,
        _spec: ProcessSpec,
        wait_for_room: bool,
        create_only: bool,
    ) -> Result<Deployed, SchedError> {
        let req = DeployRequest { spec: doc.value.clone(), wait_for_room };
        let method = if create_only { Method::POST } else { Method::PUT };
        self.ask(method, "/v1/apps", Some(&req)).await
    }

    async fn status(&self) -> Result<Vec<PlacedInstance>, SchedError> {
        self.get("/v1/apps").await
    }

    async fn scale(&self, app: &AppId, instances: u32, wait: Option<bool>) -> Result<Vec<PlacedInstance>, SchedError> {
        self.post(&format!("{}/scale", app_path(app)), &ScaleRequest { instances, wait_for_room: wait }).await
    }

    async fn delete(&self, app: &AppId) -> Result<Deleted, SchedError> {
        self.ask(Method::DELETE, &app_path(app), None::<&()>).await
    }

    async fn set_stopped(
        &self,
        app: &AppId,
        index: Option<u32>,
        intent: Intent,
    ) -> Result<Vec<PlacedInstance>, SchedError> {
        let verb = match intent {
            Intent::Stop => "stop",
            Intent::Start => "start",
        };
        self.post(&format!("{}/{verb}", app_path(app)), &InstanceRequest { instance: index }).await
    }

    async fn restart(&self, app: &AppId, index: Option<u32>) -> Result<Vec<PlacedInstance>, SchedError> {
        self.post(&format!("{}/restart", app_path(app)), &InstanceRequest { instance: index }).await
    }

    async fn node_listing(&self) -> Result<Vec<NodeListing>, SchedError> {
        self.get("/v1/nodes").await
    }

    async fn stored_endpoints(&self, app: &AppId) -> Result<Option<AppEndpoints>, SchedError> {
        self.get(&format!("{}/endpoints", app_path(app))).await
    }

    async fn watch_endpoints(
        &self,
        app: &AppId,
        mut each: impl FnMut(Option<&AppEndpoints>) -> bool,
    ) -> Result<(), SchedError> {
        let path = format!("{}/endpoints?watch=true", app_path(app));
        self.client.lines(&path, |e: Option<AppEndpoints>| each(e.as_ref())).await.map_err(server_err)
    }

    async fn copy_in(
        &self,
        app: &AppId,
        index: u32,
        path: &str,
        data: Vec<u8>,
        (writable, user, container): (bool, Option<&str>, Option<&str>),
    ) -> Result<(String, FileCopied), SchedError> {
        let mut query = format!("path={}&writable={writable}", encode(path));
        if let Some(u) = user {
            query.push_str(&format!("&user={}", encode(u)));
        }
        if let Some(c) = container {
            query.push_str(&format!("&container={}", encode(c)));
        }
        let uri = format!("{}/instances/{index}/files?{query}", app_path(app));
        let copied: CopiedOnNode = self.send(Method::PUT, &uri, Some(("application/octet-stream", data))).await?;
        Ok((copied.node, copied.copied))
    }

    async fn config(&self, key: Option<&str>) -> Result<Vec<ConfigEntry>, SchedError> {
        match key {
            Some(k) => self.get(&format!("/v1/config/{}", encode(k))).await,
            None => self.get("/v1/config").await,
        }
    }

    async fn set_config(&self, key: &str, value: &str) -> Result<Vec<ConfigEntry>, SchedError> {
        let body = ConfigValue { value: value.to_string() };
        self.ask(Method::PUT, &format!("/v1/config/{}", encode(key)), Some(&body)).await
    }

    async fn engine_status(&self) -> Result<EngineStatus, SchedError> {
        self.get("/v1/engine").await
    }

    async fn set_maintenance(&self, on: bool, reason: &str) -> Result<EngineStatus, SchedError> {
        self.post("/v1/engine/maintenance", &MaintenanceRequest { on, reason: reason.to_string() }).await
    }

    async fn cordon(&self, node: &str, cordon: Option<(bool, &str)>) -> Result<EngineStatus, SchedError> {
        let path = format!("/v1/nodes/{}/cordon", encode(node));
        match cordon {
            Some((preferred, reason)) => {
                self.post(&path, &CordonRequest { preferred, reason: reason.to_string() }).await
            }
            None => self.ask(Method::DELETE, &path, None::<&()>).await,
        }
    }

    async fn drain(&self, node: &str, force: bool) -> Result<Vec<Drifted>, SchedError> {
        self.post(&format!("/v1/nodes/{}/drain", encode(node)), &DrainRequest { force }).await
    }

    async fn drift(&self, req: &DriftRequest) -> Result<Vec<Drifted>, SchedError> {
        self.post("/v1/drift", req).await
    }

    async fn constraints(&self) -> Result<Vec<Constraint>, SchedError> {
        self.get("/v1/constraints").await
    }

    async fn set_constraint(&self, c: Constraint) -> Result<Vec<Constraint>, SchedError> {
        let query = format!("type={}&value={}&equal={}&soft={}", encode(&c.kind), encode(&c.value), c.equal, c.soft);
        self.ask(Method::PATCH, &format!("/v1/constraints?{query}"), None::<&()>).await
    }

    async fn remove_constraint(&self, kind: &str, value: Option<&str>) -> Result<Vec<Constraint>, SchedError> {
        let mut query = format!("type={}", encode(kind));
        if let Some(v) = value {
            query.push_str(&format!("&value={}", encode(v)));
        }
        self.ask(Method::DELETE, &format!("/v1/constraints?{query}"), None::<&()>).await
    }

    async fn set_webhook(&self, url: &str, add: bool) -> Result<Vec<String>, SchedError> {
        match add {
            true => self.post("/v1/notifications", &UrlRequest { url: url.to_string() }).await,
            false => self.ask(Method::DELETE, &format!("/v1/notifications?url={}", encode(url)), None::<&()>).await,
        }
    }

    async fn webhooks(&self) -> Result<Vec<String>, SchedError> {
        self.get("/v1/notifications").await
    }

    async fn put_dependency(&self, doc: &Document, grace_secs: Option<u64>) -> Result<DependencyStatus, SchedError> {
        let body = DependencyRequest { spec: doc.value.clone(), grace_secs };
        self.ask(Method::PUT, "/v1/dependencies", Some(&body)).await
    }

    async fn dependency_statuses(&self) -> Result<Vec<DependencyStatus>, SchedError> {
        self.get("/v1/dependencies").await
    }

    async fn delete_dependency(&self, key: &str, force: bool) -> Result<Vec<String>, SchedError> {
        let id = AppId::from_key(key);
        let path = format!("/v1/dependencies/{}/{}?force={force}", encode(&id.namespace), encode(&id.name));
        let removed: Removed = self.ask(Method::DELETE, &path, None::<&()>).await?;
        Ok(removed.away)
    }

    async fn rollout_status(&self, app: &AppId) -> Result<SchedRolloutStatus, SchedError> {
        self.get(&format!("{}/rollout", app_path(app))).await
    }

    async fn rollout_action(&self, app: &AppId, action: &str) -> Result<SchedRolloutStatus, SchedError> {
        self.ask(Method::POST, &format!("{}/rollout/{}", app_path(app), encode(action)), None::<&()>).await
    }

    async fn put_hook_template(&self, doc: &Document) -> Result<TemplateStored, SchedError> {
        self.ask(Method::PUT, "/v1/hooktemplates", Some(&doc.value)).await
    }

    async fn hook_templates(&self) -> Result<Vec<HookTemplateSummary>, SchedError> {
        self.get("/v1/hooktemplates").await
    }

    async fn delete_hook_template(&self, namespace: &str, name: &str) -> Result<Vec<String>, SchedError> {
        let path = format!("/v1/hooktemplates/{}/{}", encode(namespace), encode(name));
        let removed: Removed = self.ask(Method::DELETE, &path, None::<&()>).await?;
        Ok(removed.away)
    }

    async fn create_hook_run(&self, req: &CreateHookRun, node: Option<&str>) -> Result<(String, HookRun), SchedError> {
        let body = HookRunRequest { run: req.clone(), node: node.map(String::from) };
        let found: RunFound = self.post("/v1/hookruns", &body).await?;
        Ok((found.node, found.run))
    }

    async fn hook_runs(&self, namespace: Option<&str>) -> Result<(Vec<RunOnNode>, Away), SchedError> {
        let path = match namespace {
            Some(ns) => format!("/v1/hookruns?namespace={}", encode(ns)),
            None => "/v1/hookruns".to_string(),
        };
        let listing: RunsListing = self.get(&path).await?;
        Ok((listing.runs, listing.unreachable))
    }

    async fn hook_run(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
    ) -> Result<(String, HookRun), SchedError> {
        let mut path = format!("/v1/hookruns/{}/{}", encode(namespace), encode(name));
        if let Some(w) = wait {
            path.push_str(&format!("?wait={}", w.as_secs()));
        }
        let found: RunFound = self.get(&path).await?;
        Ok((found.node, found.run))
    }

    async fn terminate_hook_run(&self, namespace: &str, name: &str) -> Result<(String, HookRun), SchedError> {
        let path = format!("/v1/hookruns/{}/{}/terminate", encode(namespace), encode(name));
        let found: RunFound = self.ask(Method::POST, &path, None::<&()>).await?;
        Ok((found.node, found.run))
    }

    async fn watch(&self, since: Option<Cursors>, each: impl FnMut(WatchLine) -> bool) -> Result<(), SchedError> {
        let path = match since {
            Some(c) => format!("/v1/events?since={}", encode(&c.text())),
            None => "/v1/events".to_string(),
        };
        self.client.lines(&path, each).await.map_err(server_err)
    }

    fn unreachable(&self) -> Away {
        self.away.lock().expect("away lock").clone()
    }
}
