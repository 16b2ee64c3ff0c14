//! Pods on CNI (seed 001's CNI mode), the daemon's side: which network a pod joins, ADD into
//! its network container's namespace, and DEL owed until it succeeds. Seed 001 names its own
//! risk — a network container killed by hand never gives its address back — and this is where
//! Steward does not leak: an attachment is in its instance's record before its ADD runs, moves
//! to the `cnireleases` table before its DEL runs, and leaves that table only once a DEL
//! succeeded; a background task retries what is owed, and at start-up every lease of this
//! daemon's that no record names is given back.

use super::{Attachment, Cni, CniResult, NetworkList};
use crate::store::{Batch, Store, Table};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The interface a pod's network container is given (seed 001's `BCS_CNI_NAME`).
pub const POD_IFNAME: &str = "eth0";

/// How often owed DELs are tried again while any is owed.
const RETRY_EVERY: Duration = Duration::from_secs(5);

/// One pod's attachment to a CNI network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAttachment {
    pub network: String,
    /// `CNI_CONTAINERID`: this daemon's mark and the network container's id, so that every
    /// attachment is told apart (a pod's next run gets another) and this daemon's leases are
    /// told from other runtimes'.
    pub container_id: String,
    /// The network container (Docker's id).
    pub holder: String,
    pub ifname: String,
    /// `namespace/name/index`, passed in `CNI_ARGS`.
    pub pod: String,
    /// The ADD's result; none until it succeeded (a DEL is owed all the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CniResult>,
}

impl PodAttachment {
    /// The pod's address (the first on an interface in its namespace).
    pub fn address(&self) -> Option<IpAddr> {
        self.result.as_ref().and_then(CniResult::address)
    }

    fn cni(&self, netns: &str) -> Attachment {
        let (namespace, name) = self.pod.split_once('/').unwrap_or(("", &self.pod));
        Attachment {
            container_id: self.container_id.clone(),
            netns: netns.to_string(),
            ifname: self.ifname.clone(),
            args: vec![
                ("K8S_POD_NAMESPACE".into(), namespace.to_string()),
                ("K8S_POD_NAME".into(), name.replace('/', ".")),
                ("K8S_POD_INFRA_CONTAINER_ID".into(), self.holder.clone()),
            ],
        }
    }
}

/// Where an attachment's network container is, as its release finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderState {
    /// Running, in this namespace (`/proc/PID/ns/net`); the caller removes it right after.
    Running(String),
    /// Gone or stopped: nothing is in its namespace any more.
    Gone,
    /// dockerd did not say (it is down): the DEL waits until the holder is known gone, since
    /// its address may still be in use (live-restore keeps containers running).
    Unknown,
}

/// The daemon's CNI side: the plugins, the configurations, the owed DELs.
pub struct PodNetworks {
    cni: Cni,
    /// Asked whether an owed attachment's network container is gone, and removes it if not.
    docker: crate::runtime::docker::Docker,
    conf_dir: PathBuf,
    default_network: Option<String>,
    store: Store,
    /// Every `CNI_CONTAINERID` of this daemon starts with it.
    mark: String,
    wake: tokio::sync::Notify,
}

impl PodNetworks {
    /// `owner` tells this daemon's attachments from another's on the same host (its state
    /// directory).
    pub fn new(
        cni: Cni,
        docker: crate::runtime::docker::Docker,
        conf_dir: PathBuf,
        default_network: Option<String>,
        store: Store,
        owner: &str,
    ) -> PodNetworks {
        let mark = format!("steward-{:08x}-", fnv1a(owner.as_bytes()));
        PodNetworks { cni, docker, conf_dir, default_network, store, mark, wake: tokio::sync::Notify::new() }
    }

    /// Where `at`'s network container is now.
    pub async fn holder(&self, at: &PodAttachment) -> HolderState {
        use crate::runtime::docker::DockerError;
        match self.docker.inspect(&at.holder).await {
            Ok(info) if info.is_running() && info.pid > 0 => HolderState::Running(format!("/proc/{}/ns/net", info.pid)),
            Ok(_) | Err(DockerError::NoContainer(_)) => HolderState::Gone,
            Err(_) => HolderState::Unknown,
        }
    }

    /// The configuration of the network a pod joins: `named` (a USER pod's `net`), else the
    /// configured default, else the first in the directory.
    pub fn network(&self, named: Option<&str>) -> Result<NetworkList, String> {
        let name = named.filter(|n| !n.is_empty()).or(self.default_network.as_deref());
        NetworkList::find_or_first(&self.conf_dir, name).map_err(|e| e.to_string())
    }

    /// A new attachment of `pod` (`namespace/name/index`) through network container `holder`.
    pub fn attachment(&self, network: &NetworkList, holder: &str, pod: &str) -> PodAttachment {
        PodAttachment {
            network: network.name.clone(),
            container_id: format!("{}{holder}", self.mark),
            holder: holder.to_string(),
            ifname: POD_IFNAME.to_string(),
            pod: pod.to_string(),
            result: None,
        }
    }

    /// ADD into `netns` (the network container's `/proc/PID/ns/net`). A failed ADD has undone
    /// itself; the caller still releases the attachment (a kill -9 may have cut it short).
    pub async fn add(&self, at: &PodAttachment, netns: &str) -> Result<CniResult, String> {
        let net = self.network(Some(&at.network))?;
        self.cni.add(&net, &at.cni(netns)).await.map_err(|e| e.to_string())
    }

    /// CHECK of a running pod's attachment.
    pub async fn check(&self, at: &PodAttachment, netns: &str) -> Result<(), String> {
        let net = self.network(Some(&at.network))?;
        let Some(result) = &at.result else { return Err("the attachment has no ADD result".into()) };
        self.cni.check(&net, &at.cni(netns), result).await.map_err(|e| e.to_string())
    }

    /// Gives the attachment back: owed durably first, then DEL (in the network container's
    /// namespace while it runs, else without one; not yet while dockerd cannot say where it
    /// is); owed until a DEL succeeds, retried in the background.
    /// Err: it could not even be recorded as owed (the store failed); the caller keeps it.
    pub async fn release(&self, at: &PodAttachment, holder: HolderState) -> Result<(), String> {
        let value = serde_json::to_value(at).expect("attachment serializes");
        let owed = Batch::new().put(Table::CniReleases, &at.container_id, &value);
        self.store.commit(owed).await.map_err(|e| format!("cannot record the DEL owed: {e}"))?;
        let netns = match holder {
            HolderState::Running(netns) => netns,
            HolderState::Gone => String::new(),
            HolderState::Unknown => {
                tracing::info!(pod = %at.pod, "CNI DEL of {} waits until dockerd answers", at.container_id);
                self.wake.notify_one();
                return Ok(());
            }
        };
        match self.del(at, &netns).await {
            Ok(()) => self.forget(&at.container_id).await,
            Err(e) => {
                tracing::warn!(pod = %at.pod, "CNI DEL of {} failed, retried every {RETRY_EVERY:?}: {e}", at.container_id);
                self.wake.notify_one();
            }
        }
        Ok(())
    }

    async fn del(&self, at: &PodAttachment, netns: &str) -> Result<(), String> {
        let net = self.network(Some(&at.network))?;
        let prev = at.result.as_ref().and_then(|r| serde_json::to_value(r).ok());
        self.cni.del(&net, &at.cni(netns), prev.as_ref()).await.map_err(|e| e.to_string())
    }

    async fn forget(&self, container_id: &str) {
        if let Err(e) = self.store.commit(Batch::new().delete(Table::CniReleases, container_id)).await {
            // Owed still: the next retry's DEL succeeds again and forgets it then.
            tracing::warn!("cannot forget the CNI DEL done for {container_id}: {e}");
        }
    }

    /// The DELs owed, as recorded.
    pub fn owed(&self) -> Vec<PodAttachment> {
        let records = self.store.records(Table::CniReleases).unwrap_or_else(|e| {
            tracing::warn!("cannot read the CNI DELs owed: {e}");
            Vec::new()
        });
        records.into_iter().filter_map(|(_, v)| serde_json::from_value(v).ok()).collect()
    }

    /// Tries every owed DEL once, without a namespace, once the network container is known
    /// gone (one still running belongs to a pod that ended: it is removed first); returns how
    /// many are still owed.
    pub async fn retry_owed(&self) -> usize {
        let mut left = 0;
        for at in self.owed() {
            match self.holder(&at).await {
                HolderState::Gone => {}
                HolderState::Running(_) => {
                    if let Err(e) = self.docker.remove(&at.holder).await {
                        tracing::warn!(pod = %at.pod, "cannot remove the network container {}: {e}", at.holder);
                        left += 1;
                        continue;
                    }
                }
                HolderState::Unknown => {
                    left += 1;
                    continue;
                }
            }
            match self.del(&at, "").await {
                Ok(()) => {
                    tracing::info!(pod = %at.pod, "CNI DEL of {} done (it was owed)", at.container_id);
                    self.forget(&at.container_id).await;
                }
                Err(e) => {
                    tracing::debug!(pod = %at.pod, "CNI DEL of {} still failing: {e}", at.container_id);
                    left += 1;
                }
            }
        }
        left
    }

    /// At start-up: every lease of this daemon's (host-local's, in every network of the
    /// configuration directory) that neither a record (`known`) nor an owed DEL names is given
    /// back — what a kill -9 between a network container's creation and its record left.
    pub async fn release_unknown(&self, known: &BTreeSet<String>) {
        if !self.conf_dir.exists() {
            return;
        }
        let nets = match NetworkList::all(&self.conf_dir) {
            Ok(nets) => nets,
            Err(e) => {
                tracing::warn!("not reconciling CNI leases: {e}");
                return;
            }
        };
        let mut known = known.clone();
        known.extend(self.owed().into_iter().map(|a| a.container_id));
        let ours = |id: &str| id.starts_with(&self.mark);
        for net in nets {
            for (lease, r) in self.cni.release_unknown(&net, &known, &ours).await {
                match r {
                    Ok(()) => tracing::warn!(
                        "gave back CNI lease {} of network {} (container {}): no pod holds it",
                        lease.address,
                        net.name,
                        lease.container_id
                    ),
                    Err(e) => tracing::warn!("cannot give back CNI lease {}: {e}", lease.address),
                }
            }
        }
    }

    /// Retries owed DELs in the background: every few seconds while any is owed, and when a
    /// release fails.
    pub fn spawn_retries(self: &std::sync::Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let left = me.retry_owed().await;
                if left == 0 {
                    me.wake.notified().await;
                }
                tokio::time::sleep(RETRY_EVERY).await;
            }
        });
    }
}

/// FNV-1a, 32 bits: a short stable mark of a path.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}
