//! Probes, lifecycle handlers and init steps as seed 003 spells them, for processes and pods'
//! containers alike: `probe.liveness` / `probe.readiness` (a handler with delay, timeout,
//! period and success/failure thresholds), `lifecycle.postStart` / `lifecycle.preStop` (a
//! handler), `initializers` (ordered steps that must exit 0 before the start). Defaults are seed
//! 003's (DESIGN § 7: fields only seed 003 has take its defaults).

use serde::{Deserialize, Serialize};

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// `probe`: liveness restarts what is stuck, readiness only says whether it may take traffic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Probes {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness: Option<ProbeSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<ProbeSpec>,
}

impl Probes {
    pub fn is_empty(&self) -> bool {
        self.liveness.is_none() && self.readiness.is_none()
    }
}

/// One probe (seed 003 `probe: liveness readiness`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProbeSpec {
    pub handler: Handler,
    /// Seconds from the start to the first probe.
    pub delay: u64,
    /// Seconds one probe may take.
    pub timeout: u64,
    /// Seconds between probes.
    pub period: u64,
    pub threshold: Threshold,
}

impl Default for ProbeSpec {
    fn default() -> Self {
        ProbeSpec { handler: Handler::default(), delay: 0, timeout: 1, period: 10, threshold: Threshold::default() }
    }
}

/// Successes (failures) in a row that make a probe pass (fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Threshold {
    pub success: u32,
    pub failure: u32,
}

impl Default for Threshold {
    fn default() -> Self {
        Threshold { success: 1, failure: 3 }
    }
}

/// How a probe or a lifecycle hook acts: `type` HTTP (the seed's default), EXEC or TCP, and the
/// `method` for that type.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Handler {
    #[serde(rename = "type")]
    pub kind: HandlerType,
    pub method: HandlerMethod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum HandlerType {
    #[default]
    #[serde(rename = "HTTP")]
    Http,
    #[serde(rename = "EXEC")]
    Exec,
    #[serde(rename = "TCP")]
    Tcp,
}

/// The union of the three methods' fields (the file names one type; validation refuses the
/// fields of another).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HandlerMethod {
    /// EXEC: the command and its arguments (no shell).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// HTTP: `HTTP` or `HTTPS`.
    #[serde(skip_serializing_if = "is_default")]
    pub scheme: HttpScheme,
    /// HTTP: the request's Host header (empty: the address probed).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// HTTP, TCP: the port probed (a container's port for a pod); 0: `portName` names one.
    #[serde(skip_serializing_if = "is_default")]
    pub port: i64,
    /// HTTP, TCP: a port of the instance by name, when `port` is 0.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub port_name: String,
    /// HTTP: the path, `/` when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// HTTP: request headers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub header: Vec<HeaderSpec>,
}

impl Default for HandlerMethod {
    fn default() -> Self {
        HandlerMethod {
            command: Vec::new(),
            scheme: HttpScheme::Http,
            host: String::new(),
            port: 0,
            port_name: String::new(),
            path: String::new(),
            header: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum HttpScheme {
    #[default]
    #[serde(rename = "HTTP")]
    Http,
    #[serde(rename = "HTTPS")]
    Https,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HeaderSpec {
    pub name: String,
    pub value: String,
}

/// `lifecycle`: postStart runs after the start (a failure restarts by policy); preStop runs
/// before the stop signal on every stop (whatever it returns, the stop goes on).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Lifecycle {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_start: Option<Handler>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<Handler>,
}

impl Lifecycle {
    pub fn is_empty(&self) -> bool {
        self.post_start.is_none() && self.pre_stop.is_none()
    }
}

/// One init step of a process: a command run as the process's user in its workPath, with its
/// env, which must exit 0 within `timeout` seconds before the next step and the start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InitStep {
    pub name: String,
    /// Run by `/bin/sh -c`, as startCmd is.
    pub command: String,
    pub timeout: u64,
}

impl Default for InitStep {
    fn default() -> Self {
        InitStep { name: String::new(), command: String::new(), timeout: 60 }
    }
}
