//! host-local's allocations, read back: each address it gave is a file named by the address in
//! `{dataDir}/{network}/`, holding the container id and the interface name. What a runtime lost
//! track of (a network container killed by hand, a daemon killed between ADD and its record)
//! is found there and given back with DEL — the leak seed 001 names as its CNI mode's risk.

use super::{Attachment, Cni, CniError, NetworkList};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// host-local's default `dataDir`.
pub const HOST_LOCAL_DIR: &str = "/var/lib/cni/networks";

/// One address host-local gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub address: IpAddr,
    pub container_id: String,
    pub ifname: String,
    pub path: PathBuf,
}

/// Where the network's host-local keeps its leases, if one of its plugins uses host-local.
pub fn host_local_dir(net: &NetworkList) -> Option<PathBuf> {
    net.plugins.iter().find_map(|p| {
        let ipam = p.get("ipam")?;
        (ipam.get("type")?.as_str()? == "host-local").then(|| {
            let dir = ipam.get("dataDir").and_then(|d| d.as_str()).unwrap_or(HOST_LOCAL_DIR);
            Path::new(dir).join(&net.name)
        })
    })
}

/// The leases in `dir` (a network's host-local directory); none when it does not exist.
pub fn leases_in(dir: &Path) -> Vec<Lease> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<Lease> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let address: IpAddr = e.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(e.path()).ok()?;
            let mut lines = text.lines().map(str::trim);
            let container_id = lines.next().unwrap_or_default().to_string();
            let ifname = lines.next().filter(|l| !l.is_empty()).unwrap_or("eth0").to_string();
            Some(Lease { address, container_id, ifname, path: e.path() })
        })
        .collect();
    out.sort_by_key(|l| l.address);
    out
}

impl Cni {
    /// Gives back (DEL, without a namespace: it may be gone) every lease of `net` that is
    /// `ours` (by its container id: another runtime's are left alone) and whose container is
    /// not in `known`. Returns each lease released or why it could not be.
    pub async fn release_unknown(
        &self,
        net: &NetworkList,
        known: &BTreeSet<String>,
        ours: &(dyn Fn(&str) -> bool + Sync),
    ) -> Vec<(Lease, Result<(), CniError>)> {
        let Some(dir) = host_local_dir(net) else { return Vec::new() };
        let mut out = Vec::new();
        let unknown = |l: &Lease| ours(&l.container_id) && !known.contains(&l.container_id);
        for lease in leases_in(&dir).into_iter().filter(unknown) {
            let at = Attachment {
                container_id: lease.container_id.clone(),
                netns: String::new(),
                ifname: lease.ifname.clone(),
                args: Vec::new(),
            };
            let r = self.del(net, &at, None).await;
            out.push((lease, r));
        }
        out
    }
}
