//! Running the plugins: each a program found in the binary directories, given `CNI_COMMAND`,
//! `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS` and `CNI_PATH`, its configuration on
//! stdin; its result (or the specification's error document) on stdout.

use super::{CniError, CniResult, NetworkList};
use crate::runtime::exit::ExitStatus;
use crate::runtime::reaper::Reaper;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// How long one plugin may take before it counts as failed.
const PLUGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The plugins' directories, and the daemon's reaper (the one waitpid caller) when it runs in
/// the daemon.
#[derive(Clone)]
pub struct Cni {
    pub bin_dirs: Vec<PathBuf>,
    pub reaper: Option<Reaper>,
}

/// One container's attachment to a network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub container_id: String,
    /// Its network namespace (`/proc/PID/ns/net`); empty at a DEL whose namespace is gone.
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS`: `K=V` pairs (seed 001's executor passes the pod's identity this way).
    pub args: Vec<(String, String)>,
}

impl Cni {
    /// ADD: every plugin of the list in order, each given the result before it; the last
    /// result. A plugin that fails undoes what the earlier ones did (DEL), as libcni does not but
    /// a runtime must, or their allocations leak.
    pub async fn add(&self, net: &NetworkList, at: &Attachment) -> Result<CniResult, CniError> {
        let mut prev: Option<Value> = None;
        for i in 0..net.plugins.len() {
            match self.run(net, i, "ADD", at, prev.as_ref()).await {
                Ok(out) => prev = Some(out),
                Err(e) => {
                    let _ = self.del(net, at, prev.as_ref()).await;
                    return Err(e);
                }
            }
        }
        let result = prev.unwrap_or(Value::Null);
        serde_json::from_value(result.clone()).map_err(|e| CniError::Io {
            plugin: net.plugin_type(net.plugins.len() - 1).to_string(),
            message: format!("its result does not read as a CNI result ({e}): {result}"),
        })
    }

    /// DEL: every plugin in reverse order, given the ADD's result when known. Deleting what is
    /// gone succeeds (the specification asks plugins to), so DEL may be repeated until it works.
    pub async fn del(&self, net: &NetworkList, at: &Attachment, prev: Option<&Value>) -> Result<(), CniError> {
        let mut first_error = None;
        for i in (0..net.plugins.len()).rev() {
            if let Err(e) = self.run(net, i, "DEL", at, prev).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// CHECK: every plugin in order, given the ADD's result (CNI 0.4.0 and later).
    pub async fn check(&self, net: &NetworkList, at: &Attachment, prev: &CniResult) -> Result<(), CniError> {
        let prev = serde_json::to_value(prev).unwrap_or(Value::Null);
        for i in 0..net.plugins.len() {
            self.run(net, i, "CHECK", at, Some(&prev)).await?;
        }
        Ok(())
    }

    fn find(&self, plugin: &str) -> Result<PathBuf, CniError> {
        if plugin.contains('/') {
            return Err(CniError::PluginNotFound {
                plugin: plugin.into(),
                dirs: "(a type is a name, not a path)".into(),
            });
        }
        self.bin_dirs
            .iter()
            .map(|d| d.join(plugin))
            .find(|p| is_executable(p))
            .ok_or_else(|| CniError::PluginNotFound { plugin: plugin.into(), dirs: self.path_var().replace(':', ", ") })
    }

    fn path_var(&self) -> String {
        self.bin_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":")
    }

    /// Runs plugin `i` for `command`; its stdout as JSON (ADD: the result; others: nothing).
    async fn run(
        &self,
        net: &NetworkList,
        i: usize,
        command: &str,
        at: &Attachment,
        prev: Option<&Value>,
    ) -> Result<Value, CniError> {
        let plugin = net.plugin_type(i).to_string();
        let program = self.find(&plugin)?;
        let stdin = net.plugin_conf(i, prev).to_string();
        let io = |message: String| CniError::Io { plugin: plugin.clone(), message };
        // Plugins refuse arguments they do not know unless told to ignore them (as every
        // runtime does: Kubernetes passes its pod's identity the same way).
        let mut args: Vec<String> = at.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !args.is_empty() {
            args.insert(0, "IgnoreUnknown=1".into());
        }
        let mut cmd = std::process::Command::new(&program);
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &at.container_id)
            .env("CNI_NETNS", &at.netns)
            .env("CNI_IFNAME", &at.ifname)
            .env("CNI_ARGS", args.join(";"))
            .env("CNI_PATH", self.path_var())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = crate::runtime::program::run(self.reaper.as_ref(), cmd, stdin.into_bytes(), PLUGIN_TIMEOUT)
            .await
            .map_err(|e| io(format!("{} {command}: {e}", program.display())))?;
        let doc: Option<Value> = serde_json::from_slice(&out.stdout).ok();
        if out.status == ExitStatus::Code(0) {
            return Ok(doc.unwrap_or(Value::Null));
        }
        let field =
            |k: &str| doc.as_ref().and_then(|d| d.get(k)).and_then(Value::as_str).unwrap_or_default().to_string();
        let msg = match field("msg") {
            m if m.is_empty() => {
                let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
                let how = format!("exited with {:?}", out.status);
                if stderr.is_empty() {
                    how
                } else {
                    format!("{how}: {stderr}")
                }
            }
            m => m,
        };
        let code = doc.as_ref().and_then(|d| d.get("code")).and_then(Value::as_u64).unwrap_or(0) as u32;
        Err(CniError::Plugin { plugin, command: command.into(), code, msg, details: field("details") })
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
