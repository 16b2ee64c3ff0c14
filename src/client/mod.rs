//! A typed client of stewardd's API, over its unix socket (the CLI, the tests) or over TCP
//! with TLS and a bearer token (the scheduler plugin).

use crate::protocol::{
    Deleted, ErrorResponse, Event, HealthBody, InstanceList, InstanceStatus, NodeDocument, ValuesBody, ValuesList,
    ValuesSummary,
};
use crate::spec::{Format, InstanceId, SpecError};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod token;
pub use token::{read_token_file, TokenFileError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach stewardd at {}: {source}", socket.display())]
    Unreachable { socket: PathBuf, source: std::io::Error },
    #[error("{message}")]
    Api { status: u16, code: String, message: String, field: Option<String>, errors: Vec<SpecError> },
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// How POST /v1/apply takes a spec, beyond the spec itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyOptions {
    /// The spec's `strategy.autoRollback` set (`steward apply --auto-rollback`).
    pub auto_rollback: bool,
    /// The spec its failed rollout left, applied again, retries that rollout (an operator's
    /// apply, a scheduler's rollout step); without it such an apply changes nothing.
    pub retry: bool,
}

#[derive(Debug, Clone)]
pub struct Client {
    /// The unix socket, or for a remote daemon its `host:port` (for messages).
    socket: PathBuf,
    remote: Option<Arc<Remote>>,
    /// Told after every request that may have changed the daemon (see [`Client::noting_writes`]).
    on_write: Option<WriteHook>,
}

/// What [`Client::noting_writes`] calls.
#[derive(Clone)]
struct WriteHook(Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for WriteHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteHook")
    }
}

/// How to reach a daemon's remote listener.
struct Remote {
    addr: String,
    server_name: rustls::pki_types::ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    token: String,
    /// Connections whose last answer was read whole, kept for the next request: a scheduler
    /// asks each of a thousand hosts many times a second, and a TCP and TLS handshake per
    /// request cost more than the request.
    idle: std::sync::Mutex<Vec<Kept>>,
}

/// An idle kept connection, and until when the daemon keeps it open (its `keep-alive`).
struct Kept {
    sender: Sender,
    until: std::time::Instant,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// At most this many idle connections are kept per daemon: each holds one of the daemon's
/// connection slots for this peer (`connections.max_per_peer`).
const MAX_IDLE: usize = 4;

/// How long an idle connection is kept when the daemon does not say (`keep-alive: timeout=N`).
const DEFAULT_KEEP: std::time::Duration = std::time::Duration::from_secs(1);

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Remote").field("addr", &self.addr).field("server_name", &self.server_name).finish()
    }
}

/// How long connecting (TCP and the TLS handshake) to a remote daemon may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client { socket: socket.into(), remote: None, on_write: None }
    }

    /// A client of the remote listener at `addr` (`host:port`), verifying its certificate for
    /// `server_name` (default: the host part of `addr`) with `tls`, sending `token`.
    pub fn remote(
        addr: &str,
        server_name: Option<&str>,
        tls: Arc<rustls::ClientConfig>,
        token: &str,
    ) -> Result<Client, ClientError> {
        let host = match server_name {
            Some(n) => n.to_string(),
            None => addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']).to_string(),
        };
        let server_name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|_| ClientError::Protocol(format!("{host:?} is not a server name or IP address")))?;
        let remote = Remote {
            addr: addr.to_string(),
            server_name,
            tls: tokio_rustls::TlsConnector::from(tls),
            token: token.to_string(),
            idle: Default::default(),
        };
        Ok(Client { socket: PathBuf::from(addr), remote: Some(Arc::new(remote)), on_write: None })
    }

    /// This client, calling `hook` with the path of every request but a GET once it is
    /// answered (or failed): whoever keeps what it read from the daemon (steward-sched's
    /// board) learns that it is stale from its own writes at once, not only when the daemon's
    /// event stream says so.
    pub fn noting_writes(mut self, hook: impl Fn(&str) + Send + Sync + 'static) -> Client {
        self.on_write = Some(WriteHook(Arc::new(hook)));
        self
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether `other` reaches the same daemon the same way (socket, or address, name checked
    /// and token); the TLS roots are not compared.
    pub fn same_target(&self, other: &Client) -> bool {
        match (&self.remote, &other.remote) {
            (None, None) => self.socket == other.socket,
            (Some(a), Some(b)) => a.addr == b.addr && a.server_name == b.server_name && a.token == b.token,
            _ => false,
        }
    }

    /// Sends `req` on a new connection (its sender kept by the caller for reuse when the
    /// daemon is remote) or, remote, on a kept idle one.
    async fn send(
        &self,
        mut req: Request<Full<Bytes>>,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, Option<Sender>), ClientError> {
        let unreachable = |source| ClientError::Unreachable { socket: self.socket.clone(), source };
        let Some(remote) = &self.remote else {
            let stream = tokio::net::UnixStream::connect(&self.socket).await.map_err(unreachable)?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            tokio::spawn(conn);
            let resp = sender.send_request(req).await.map_err(|e| ClientError::Protocol(e.to_string()))?;
            return Ok((resp, None));
        };
        let value = format!("Bearer {}", remote.token);
        let value = hyper::header::HeaderValue::from_str(&value)
            .map_err(|_| ClientError::Protocol("the token is not a valid header value".into()))?;
        req.headers_mut().insert(hyper::header::AUTHORIZATION, value);
        // A kept connection first; one the daemon closed meanwhile gives the request back
        // unsent, which then goes on another.
        while let Some(mut sender) = remote.take_idle() {
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok((resp, Some(sender))),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(ClientError::Protocol(e.into_error().to_string())),
                },
            }
        }
        let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out connecting");
        let tls = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let tcp = tokio::net::TcpStream::connect(&remote.addr).await?;
            tcp.set_nodelay(true)?;
            remote.tls.connect(remote.server_name.clone(), tcp).await
        })
        .await
        .map_err(|_| unreachable(timed_out()))?
        .map_err(unreachable)?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        tokio::spawn(conn);
        let resp = sender.send_request(req).await.map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((resp, Some(sender)))
    }

    /// Keeps `sender`'s connection for the next request, its answer having been read whole,
    /// for as long as the daemon said it keeps it open (`headers`' `keep-alive`).
    fn keep(&self, sender: Option<Sender>, headers: &hyper::HeaderMap) {
        let (Some(remote), Some(sender)) = (&self.remote, sender) else { return };
        if sender.is_closed() || headers.get(hyper::header::CONNECTION).is_some_and(|v| v == "close") {
            return;
        }
        let until = std::time::Instant::now() + keep_for(headers);
        let mut idle = remote.idle.lock().expect("idle connections lock");
        if idle.len() < MAX_IDLE {
            idle.push(Kept { sender, until });
        }
    }

    /// One request, its whole body read; non-2xx answers become [`ClientError::Api`].
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        self.call_with_headers(method, path, body).await.map(|(status, _, bytes)| (status, bytes))
    }

    /// GETs `path` and hands each NDJSON line to `on_line` as it arrives (false: stop).
    pub async fn lines<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        on_line: impl FnMut(T) -> bool,
    ) -> Result<(), ClientError> {
        self.ndjson(path, on_line).await
    }

    async fn call_with_headers(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(StatusCode, hyper::HeaderMap, Bytes), ClientError> {
        let (status, headers, bytes) = self.request_raw(method, path, body).await?;
        if status.is_success() {
            Ok((status, headers, bytes))
        } else {
            Err(api_error(status, &bytes))
        }
    }

    /// One request, its status, headers and whole body, whatever the status (see
    /// [`api_error`] for a failure's).
    pub async fn request_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(StatusCode, hyper::HeaderMap, Bytes), ClientError> {
        let mut req =
            Request::builder().method(method).uri(format!("http://localhost{path}")).header("host", "localhost");
        let body = match body {
            Some((content_type, bytes)) => {
                req = req.header("content-type", content_type);
                Full::new(Bytes::from(bytes))
            }
            None => Full::new(Bytes::new()),
        };
        let req = req.body(body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let writes = req.method() != Method::GET;
        let path = path.to_string();
        let answer = async {
            let (resp, sender) = self.send(req).await?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let bytes = resp.into_body().collect().await.map_err(|e| ClientError::Protocol(e.to_string()))?.to_bytes();
            self.keep(sender, &headers);
            Ok((status, headers, bytes))
        }
        .await;
        // Told once the daemon answered (or failed to): a read begun before then is stale.
        if let Some(hook) = self.on_write.as_ref().filter(|_| writes) {
            (hook.0)(&path);
        }
        answer
    }

    async fn json<T: serde::de::DeserializeOwned>(&self, method: Method, path: &str) -> Result<T, ClientError> {
        let (_, bytes) = self.call(method, path, None).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(format!("{path}: {e}")))
    }

    pub async fn node(&self) -> Result<NodeDocument, ClientError> {
        self.json(Method::GET, "/v1/node").await
    }

    /// The Prometheus metrics text.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let (_, bytes) = self.call(Method::GET, "/metrics", None).await?;
        Ok(String::from_utf8_lossy(&bytes).to_string())
    }

    /// Creates or replaces a secret or configmap (`kind` is "secrets" or "configmaps").
    pub async fn put_values(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        data: &std::collections::BTreeMap<String, String>,
    ) -> Result<ValuesSummary, ClientError> {
        let path = format!("/v1/{kind}/{}/{}", encode(namespace), encode(name));
        let body =
            serde_json::to_vec(&ValuesBody { data: data.clone() }).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let (_, bytes) = self.call(Method::PUT, &path, Some(("application/json", body))).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Names and keys of the secrets or configmaps (never their values).
    pub async fn list_values(&self, kind: &str, namespace: Option<&str>) -> Result<Vec<ValuesSummary>, ClientError> {
        let path = match namespace {
            Some(n) => format!("/v1/{kind}?namespace={}", encode(n)),
            None => format!("/v1/{kind}"),
        };
        Ok(self.json::<ValuesList>(Method::GET, &path).await?.items)
    }

    /// The kept volumes here (of `namespace` only, when given).
    pub async fn volumes(&self, namespace: Option<&str>) -> Result<Vec<crate::protocol::KeptVolume>, ClientError> {
        let path = match namespace {
            Some(n) => format!("/v1/volumes?namespace={}", encode(n)),
            None => "/v1/volumes".to_string(),
        };
        Ok(self.json::<crate::protocol::VolumeList>(Method::GET, &path).await?.items)
    }

    /// Removes ordinal `id`'s kept volume `volume` (refused while the instance exists).
    pub async fn delete_volume(&self, id: &InstanceId, volume: &str) -> Result<(), ClientError> {
        let path =
            format!("/v1/volumes/{}/{}/{}/{}", encode(&id.namespace), encode(&id.name), id.index, encode(volume));
        self.call(Method::DELETE, &path, None).await.map(|_| ())
    }

    pub async fn delete_values(&self, kind: &str, namespace: &str, name: &str) -> Result<(), ClientError> {
        let path = format!("/v1/{kind}/{}/{}", encode(namespace), encode(name));
        self.call(Method::DELETE, &path, None).await.map(|_| ())
    }

    /// Every job here (issue 20), optionally of one namespace.
    pub async fn jobs(&self, namespace: Option<&str>) -> Result<Vec<crate::protocol::JobBody>, ClientError> {
        let path = match namespace {
            Some(n) => format!("/v1/jobs?namespace={}", encode(n)),
            None => "/v1/jobs".into(),
        };
        Ok(self.json::<crate::protocol::JobList>(Method::GET, &path).await?.items)
    }

    pub async fn crons(&self, namespace: Option<&str>) -> Result<Vec<crate::protocol::CronBody>, ClientError> {
        let path = match namespace {
            Some(n) => format!("/v1/cronjobs?namespace={}", encode(n)),
            None => "/v1/cronjobs".into(),
        };
        Ok(self.json::<crate::protocol::CronList>(Method::GET, &path).await?.items)
    }

    pub async fn cron(&self, namespace: &str, name: &str) -> Result<crate::protocol::CronBody, ClientError> {
        self.json(Method::GET, &format!("/v1/cronjobs/{}/{}", encode(namespace), encode(name))).await
    }

    /// A tick's runs now, by the cron job's concurrencyPolicy while earlier runs go (Forbid
    /// refuses it, 422); `force`: whatever the policy.
    pub async fn trigger_cron(
        &self,
        namespace: &str,
        name: &str,
        force: bool,
    ) -> Result<crate::protocol::CronBody, ClientError> {
        let query = if force { "?force=true" } else { "" };
        let path = format!("/v1/cronjobs/{}/{}/trigger{query}", encode(namespace), encode(name));
        self.json(Method::POST, &path).await
    }

    /// `trigger` (by the policy, see [`Client::trigger_cron`]), `suspend` or `resume`.
    pub async fn cron_action(
        &self,
        namespace: &str,
        name: &str,
        action: &str,
    ) -> Result<crate::protocol::CronBody, ClientError> {
        self.json(Method::POST, &format!("/v1/cronjobs/{}/{}/{action}", encode(namespace), encode(name))).await
    }

    pub async fn job(&self, namespace: &str, name: &str) -> Result<crate::protocol::JobBody, ClientError> {
        self.json(Method::GET, &format!("/v1/jobs/{}/{}", encode(namespace), encode(name))).await
    }

    /// Creates or replaces a HookTemplate (the document as written, JSON or TOML).
    pub async fn put_hook_template(
        &self,
        namespace: &str,
        name: &str,
        text: &str,
        format: Format,
    ) -> Result<crate::hooks::HookTemplateSummary, ClientError> {
        let path = format!("/v1/hooktemplates/{}/{}", encode(namespace), encode(name));
        let content_type = format.content_type();
        let (_, bytes) = self.call(Method::PUT, &path, Some((content_type, text.as_bytes().to_vec()))).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    pub async fn hook_templates(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<crate::hooks::HookTemplateSummary>, ClientError> {
        let path = match namespace {
            Some(n) => format!("/v1/hooktemplates?namespace={}", encode(n)),
            None => "/v1/hooktemplates".into(),
        };
        Ok(self.json::<crate::hooks::run::HookTemplateList>(Method::GET, &path).await?.items)
    }

    pub async fn hook_template(&self, namespace: &str, name: &str) -> Result<crate::hooks::HookTemplate, ClientError> {
        self.json(Method::GET, &format!("/v1/hooktemplates/{}/{}", encode(namespace), encode(name))).await
    }

    pub async fn delete_hook_template(&self, namespace: &str, name: &str) -> Result<(), ClientError> {
        let path = format!("/v1/hooktemplates/{}/{}", encode(namespace), encode(name));
        self.call(Method::DELETE, &path, None).await.map(|_| ())
    }

    /// Creates a HookRun of a template and starts it.
    pub async fn create_hook_run(
        &self,
        req: &crate::hooks::CreateHookRun,
    ) -> Result<crate::hooks::HookRun, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let (_, bytes) = self.call(Method::POST, "/v1/hookruns", Some(("application/json", body))).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    pub async fn hook_runs(
        &self,
        namespace: Option<&str>,
        label: Option<&str>,
    ) -> Result<Vec<crate::hooks::HookRunSummary>, ClientError> {
        let mut query = Vec::new();
        if let Some(n) = namespace {
            query.push(format!("namespace={}", encode(n)));
        }
        if let Some(l) = label {
            query.push(format!("label={}", encode(l)));
        }
        let path =
            if query.is_empty() { "/v1/hookruns".to_string() } else { format!("/v1/hookruns?{}", query.join("&")) };
        Ok(self.json::<crate::hooks::run::HookRunList>(Method::GET, &path).await?.items)
    }

    /// A run; with `wait`, once it has finished or `wait` has passed.
    pub async fn hook_run(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<std::time::Duration>,
    ) -> Result<crate::hooks::HookRun, ClientError> {
        let mut path = format!("/v1/hookruns/{}/{}", encode(namespace), encode(name));
        if let Some(w) = wait {
            path.push_str(&format!("?wait={}", w.as_secs_f64()));
        }
        self.json(Method::GET, &path).await
    }

    pub async fn terminate_hook_run(&self, namespace: &str, name: &str) -> Result<crate::hooks::HookRun, ClientError> {
        self.json(Method::POST, &format!("/v1/hookruns/{}/{}/terminate", encode(namespace), encode(name))).await
    }

    pub async fn delete_hook_run(&self, namespace: &str, name: &str) -> Result<(), ClientError> {
        let path = format!("/v1/hookruns/{}/{}", encode(namespace), encode(name));
        self.call(Method::DELETE, &path, None).await.map(|_| ())
    }

    pub async fn health(&self) -> Result<HealthBody, ClientError> {
        self.json(Method::GET, "/v1/health").await
    }

    /// Applies a spec; returns its instance ids.
    pub async fn apply(&self, text: &str, format: Format) -> Result<Vec<String>, ClientError> {
        self.apply_selected(text, format, None).await
    }

    /// Applies a spec, running only the instance ids in `selection` on this host (a placement).
    pub async fn apply_selected(
        &self,
        text: &str,
        format: Format,
        selection: Option<&[u32]>,
    ) -> Result<Vec<String>, ClientError> {
        Ok(self.apply_outcome(text, format, selection).await?.instances)
    }

    /// Applies a spec and returns what the daemon did (see [`Applied`]).
    pub async fn apply_outcome(
        &self,
        text: &str,
        format: Format,
        selection: Option<&[u32]>,
    ) -> Result<Applied, ClientError> {
        self.apply_with(text, format, selection, ApplyOptions::default()).await
    }

    /// As [`Client::apply_outcome`], with `options` (see [`ApplyOptions`]).
    pub async fn apply_with(
        &self,
        text: &str,
        format: Format,
        selection: Option<&[u32]>,
        options: ApplyOptions,
    ) -> Result<Applied, ClientError> {
        let ApplyOptions { auto_rollback, retry } = options;
        let ct = format.content_type();
        let mut query = Vec::new();
        if let Some(ids) = selection {
            let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
            query.push(format!("instances={}", ids.join(",")));
        }
        if auto_rollback {
            query.push("autoRollback=true".to_string());
        }
        if retry {
            query.push("retry=true".to_string());
        }
        let path = if query.is_empty() { "/v1/apply".to_string() } else { format!("/v1/apply?{}", query.join("&")) };
        let (_, bytes) = self.call(Method::POST, &path, Some((ct, text.as_bytes().to_vec()))).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Instances, optionally filtered by `namespace`, `name`, `state`.
    pub async fn list(&self, filters: &[(&str, &str)]) -> Result<Vec<InstanceStatus>, ClientError> {
        let query: Vec<String> = filters.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        let path =
            if query.is_empty() { "/v1/instances".to_string() } else { format!("/v1/instances?{}", query.join("&")) };
        Ok(self.json::<InstanceList>(Method::GET, &path).await?.instances)
    }

    pub async fn status(&self, id: &InstanceId) -> Result<InstanceStatus, ClientError> {
        self.json(Method::GET, &instance_path(id)).await
    }

    /// `start`, `stop`, `restart` or `reload`; with a timeout, waits for it to finish.
    pub async fn action(
        &self,
        id: &InstanceId,
        action: &str,
        timeout: Option<f64>,
    ) -> Result<InstanceStatus, ClientError> {
        let mut path = format!("{}/{action}", instance_path(id));
        if let Some(t) = timeout {
            path.push_str(&format!("?timeout={t}"));
        }
        let (_, bytes) = self.call(Method::POST, &path, None).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Writes `data` into the running instance (`steward cp`): `path` (a process's, below its
    /// workPath; a container's, absolute), `writable` (mode rw, else r), its owner, and the
    /// process or container by name (default the first).
    pub async fn copy_in(
        &self,
        id: &InstanceId,
        path: &str,
        data: Vec<u8>,
        writable: bool,
        user: Option<&str>,
        container: Option<&str>,
    ) -> Result<crate::protocol::FileCopied, ClientError> {
        let mut query = format!("path={}&mode={}", encode(path), if writable { "rw" } else { "r" });
        if let Some(u) = user {
            query.push_str(&format!("&user={}", encode(u)));
        }
        if let Some(c) = container {
            query.push_str(&format!("&container={}", encode(c)));
        }
        let url = format!("{}/files?{query}", instance_path(id));
        let (_, bytes) = self.call(Method::PUT, &url, Some(("application/octet-stream", data))).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Keeps an app's endpoints on the daemon (steward-sched's revision of them).
    pub async fn put_endpoints(&self, endpoints: &crate::protocol::AppEndpoints) -> Result<(), ClientError> {
        let path = format!("/v1/endpoints/{}/{}", encode(&endpoints.namespace), encode(&endpoints.name));
        let body = serde_json::to_vec(endpoints).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.call(Method::PUT, &path, Some(("application/json", body))).await.map(|_| ())
    }

    /// Forgets an app's endpoints on the daemon (Ok when it had none).
    pub async fn delete_endpoints(&self, namespace: &str, name: &str) -> Result<(), ClientError> {
        let path = format!("/v1/endpoints/{}/{}", encode(namespace), encode(name));
        match self.call(Method::DELETE, &path, None).await {
            Ok(_) | Err(ClientError::Api { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Hands the daemon a scheduler's whole desired set for it (PUT /v1/desired).
    pub async fn put_desired(
        &self,
        set: &crate::protocol::HostDesired,
    ) -> Result<crate::protocol::DesiredOutcome, ClientError> {
        let body = serde_json::to_vec(set).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let (_, bytes) = self.call(Method::PUT, "/v1/desired", Some(("application/json", body))).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Every app's endpoints the daemon keeps.
    pub async fn endpoints(&self, namespace: Option<&str>) -> Result<Vec<crate::protocol::AppEndpoints>, ClientError> {
        let path = match namespace {
            Some(n) => format!("/v1/endpoints?namespace={}", encode(n)),
            None => "/v1/endpoints".to_string(),
        };
        Ok(self.json::<crate::protocol::EndpointsList>(Method::GET, &path).await?.items)
    }

    /// One app's endpoints (None: none kept); with `after`, once their revision is above it
    /// or `timeout_secs` passed (a long poll).
    pub async fn app_endpoints(
        &self,
        namespace: &str,
        name: &str,
        after: Option<(u64, f64)>,
    ) -> Result<Option<crate::protocol::AppEndpoints>, ClientError> {
        let mut path = format!("/v1/endpoints/{}/{}", encode(namespace), encode(name));
        if let Some((revision, timeout)) = after {
            path.push_str(&format!("?after={revision}&timeout={timeout}"));
        }
        match self.json(Method::GET, &path).await {
            Ok(e) => Ok(Some(e)),
            Err(ClientError::Api { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Fails what the instance runs for `reason` (POST .../fail): its restart policy follows.
    /// Returns at once; the restart (or the giving up) follows on the daemon.
    pub async fn fail(&self, id: &InstanceId, reason: &str) -> Result<(), ClientError> {
        let path = format!("{}/fail?reason={}", instance_path(id), encode(reason));
        self.call(Method::POST, &path, None).await.map(|_| ())
    }

    /// Ends a hollow instance's run as if its process exited with `exit_code`, or was killed
    /// by `signal` (POST .../crash): its restart policy follows. The daemon refuses (409)
    /// unless it is a hollow host. The status is the instance's as the crash is reported.
    pub async fn crash(
        &self,
        id: &InstanceId,
        exit_code: i32,
        signal: Option<i32>,
    ) -> Result<InstanceStatus, ClientError> {
        let how = match signal {
            Some(signal) => format!("signal={signal}"),
            None => format!("exitCode={exit_code}"),
        };
        let path = format!("{}/crash?{how}&timeout=10", instance_path(id));
        let (_, bytes) = self.call(Method::POST, &path, None).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    pub async fn delete(&self, id: &InstanceId, timeout: Option<f64>) -> Result<(), ClientError> {
        self.delete_finished(id, timeout).await.map(|_| ())
    }

    /// As [`Client::delete`]; true when the instance is gone (204), false when the delete was
    /// still under way as the timeout ran out or none was given (202).
    pub async fn delete_finished(&self, id: &InstanceId, timeout: Option<f64>) -> Result<bool, ClientError> {
        let mut path = instance_path(id);
        if let Some(t) = timeout {
            path.push_str(&format!("?timeout={t}"));
        }
        self.call(Method::DELETE, &path, None).await.map(|(code, _)| code == StatusCode::NO_CONTENT)
    }

    /// Deletes every instance of app `namespace/name` here, then its spec. Returns the deleted
    /// instances when done within `timeout`, None when still deleting.
    /// An app's revisions, oldest first.
    pub async fn revisions(&self, namespace: &str, name: &str) -> Result<crate::protocol::RevisionList, ClientError> {
        self.json(Method::GET, &format!("/v1/apps/{}/{}/revisions", encode(namespace), encode(name))).await
    }

    /// One kept revision of the app and the spec it applied.
    pub async fn revision(
        &self,
        namespace: &str,
        name: &str,
        revision: u64,
    ) -> Result<crate::protocol::RevisionSpec, ClientError> {
        self.json(Method::GET, &format!("/v1/apps/{}/{}/revisions/{revision}", encode(namespace), encode(name))).await
    }

    /// The app's rollout here, if it has had one.
    pub async fn rollout(&self, namespace: &str, name: &str) -> Result<Option<crate::protocol::Rollout>, ClientError> {
        Ok(self.rollout_status(namespace, name).await?.rollout)
    }

    /// The app's rollout here and where its instances stand.
    pub async fn rollout_status(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<crate::protocol::RolloutBody, ClientError> {
        self.json(Method::GET, &format!("/v1/apps/{}/{}/rollout", encode(namespace), encode(name))).await
    }

    /// `action`: `pause` or `resume`.
    pub async fn rollout_action(
        &self,
        namespace: &str,
        name: &str,
        action: &str,
    ) -> Result<crate::protocol::RolloutBody, ClientError> {
        let path = format!("/v1/apps/{}/{}/rollout/{action}", encode(namespace), encode(name));
        let (_, bytes) = self.call(Method::POST, &path, None).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(format!("{path}: {e}")))
    }

    /// Re-creates every instance of the app under the same spec, by its strategy.
    pub async fn rollout_restart(&self, namespace: &str, name: &str) -> Result<Applied, ClientError> {
        let path = format!("/v1/apps/{}/{}/rollout/restart", encode(namespace), encode(name));
        let (_, bytes) = self.call(Method::POST, &path, None).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(format!("{path}: {e}")))
    }

    /// Applies an earlier revision of the app again (the one before the current without `to`).
    pub async fn undo(
        &self,
        namespace: &str,
        name: &str,
        to: Option<u64>,
    ) -> Result<crate::protocol::Applied, ClientError> {
        let path = format!("/v1/apps/{}/{}/undo", encode(namespace), encode(name));
        let body = serde_json::to_vec(&crate::protocol::UndoRequest { to_revision: to }).unwrap_or_default();
        let (_, bytes) = self.call(Method::POST, &path, Some(("application/json", body))).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(format!("{path}: {e}")))
    }

    pub async fn delete_app(
        &self,
        namespace: &str,
        name: &str,
        timeout: Option<f64>,
    ) -> Result<Option<Vec<String>>, ClientError> {
        self.delete_app_with(namespace, name, timeout, false).await
    }

    /// As [`Client::delete_app`]; `force`: at once, without the app's scale-in hook's word.
    pub async fn delete_app_with(
        &self,
        namespace: &str,
        name: &str,
        timeout: Option<f64>,
        force: bool,
    ) -> Result<Option<Vec<String>>, ClientError> {
        let mut path = format!("/v1/apps/{}/{}", encode(namespace), encode(name));
        let mut query = Vec::new();
        if let Some(t) = timeout {
            query.push(format!("timeout={t}"));
        }
        if force {
            query.push("force=true".to_string());
        }
        if !query.is_empty() {
            path.push_str(&format!("?{}", query.join("&")));
        }
        let (status, bytes) = self.call(Method::DELETE, &path, None).await?;
        if status != 200 {
            return Ok(None);
        }
        let d: Deleted = serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(Some(d.deleted))
    }

    /// Streams events after `since`; `on_event` returns false to stop. Without `follow`, ends
    /// after the backlog. Heartbeats are skipped.
    pub async fn events(
        &self,
        since: u64,
        follow: bool,
        mut on_event: impl FnMut(Event) -> bool,
    ) -> Result<(), ClientError> {
        self.event_stream(since, follow, |line| match line {
            StreamLine::Event(ev) => on_event(ev),
            StreamLine::Heartbeat { .. } => true,
        })
        .await
    }

    /// As [`Client::events`], with the stream's heartbeats (sent when it is idle).
    pub async fn event_stream(
        &self,
        since: u64,
        follow: bool,
        on_line: impl FnMut(StreamLine) -> bool,
    ) -> Result<(), ClientError> {
        self.ndjson(&format!("/v1/events?since={since}&follow={follow}"), on_line).await
    }

    /// An instance's output (see `GET /v1/instances/{id}/logs`): `query` is its query string
    /// (`tail=`, `follow=`, `stream=`, `process=`); `on_line` returns false to stop.
    pub async fn logs(
        &self,
        id: &InstanceId,
        query: &[(&str, String)],
        on_line: impl FnMut(LogLine) -> bool,
    ) -> Result<(), ClientError> {
        let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        self.ndjson(&format!("{}/logs?{}", instance_path(id), query.join("&")), on_line).await
    }

    /// GETs `path` and hands each NDJSON line to `on_line` as it arrives.
    async fn ndjson<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        mut on_line: impl FnMut(T) -> bool,
    ) -> Result<(), ClientError> {
        let req = Request::builder()
            .uri(format!("http://localhost{path}"))
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        // A stream's connection is its own: it ends with the stream.
        let (resp, _) = self.send(req).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let bytes = body.collect().await.map_err(|e| ClientError::Protocol(e.to_string()))?.to_bytes();
            return Err(api_error(status, &bytes));
        }
        let mut pending = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ClientError::Protocol(e.to_string()))?;
            let Some(data) = frame.data_ref() else { continue };
            pending.extend_from_slice(data);
            while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=nl).collect();
                let line: T = serde_json::from_slice(&line).map_err(|e| ClientError::Protocol(e.to_string()))?;
                if !on_line(line) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

pub use crate::protocol::{Applied, Heartbeat, LogLine, StreamLine};

impl Remote {
    /// The most recently kept idle connection still open and within its keep-alive.
    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().expect("idle connections lock");
        let now = std::time::Instant::now();
        idle.retain(|k| k.until > now && !k.sender.is_closed());
        idle.pop().map(|k| k.sender)
    }
}

/// How long an idle connection may be kept: a second short of the daemon's `keep-alive:
/// timeout=N` (so the daemon never closes one as it is taken), else [`DEFAULT_KEEP`].
fn keep_for(headers: &hyper::HeaderMap) -> std::time::Duration {
    let timeout = headers
        .get("keep-alive")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').find_map(|p| p.trim().strip_prefix("timeout=")?.trim().parse::<u64>().ok()));
    match timeout {
        Some(secs) => std::time::Duration::from_secs(secs.saturating_sub(1)),
        None => DEFAULT_KEEP,
    }
}

fn instance_path(id: &InstanceId) -> String {
    format!("/v1/instances/{}/{}/{}", encode(&id.namespace), encode(&id.name), id.index)
}

/// Percent-encodes what may not stand in a path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A failed answer's error: the API's error shape, or the status and body as they came.
pub fn api_error(status: StatusCode, bytes: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorResponse>(bytes) {
        Ok(w) => ClientError::Api {
            status: status.as_u16(),
            code: w.error.code,
            message: w.error.message,
            field: w.error.field,
            errors: w.error.errors,
        },
        Err(_) => ClientError::Api {
            status: status.as_u16(),
            code: "http".into(),
            message: format!("HTTP {status}: {}", String::from_utf8_lossy(bytes)),
            field: None,
            errors: Vec::new(),
        },
    }
}

/// Parses `namespace/name/index`.
pub fn parse_instance_id(s: &str) -> Result<InstanceId, String> {
    let parts: Vec<&str> = s.split('/').collect();
    match parts.as_slice() {
        [namespace, name, index] => Ok(InstanceId {
            namespace: namespace.to_string(),
            name: name.to_string(),
            index: index.parse().map_err(|_| format!("{index:?} in {s:?} is not an instance index"))?,
        }),
        _ => Err(format!("{s:?} is not an instance id (namespace/name/index)")),
    }
}
