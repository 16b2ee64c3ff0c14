//! Cluster IPs on the host (issue 27 part 4): each service's virtual address is an address of
//! the host's loopback link, labelled `lo:steward-svc` (what tells Steward's from others'), so
//! it is local on every host whatever its routes: the kernel's rules (nft.rs) DNAT what is sent
//! to it, and the userspace proxy can listen on it. (Loopback rather than a dummy link: kernels
//! without the dummy module are common in VMs and containers, this one included.) Like the
//! nftables table, the addresses outlive the daemon (a kill -9 leaves them answering) and are
//! made to match the wanted ones at every change.

use crate::runtime::reaper::Reaper;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

/// The label of Steward's addresses on `lo`.
pub const LABEL: &str = "lo:steward-svc";

const IP_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `ip ARGS` (through the daemon's reaper) with `input` on stdin: its stdout, or why not.
async fn ip(reaper: Option<&Reaper>, args: &[&str], input: &str) -> Result<String, String> {
    crate::runtime::program::tool(reaper, "ip", args, input, IP_TIMEOUT).await
}

/// The addresses labelled [`LABEL`] now.
async fn held(reaper: Option<&Reaper>) -> Result<BTreeSet<Ipv4Addr>, String> {
    let json = ip(reaper, &["-j", "-4", "addr", "show", "dev", "lo", "label", LABEL], "").await?;
    let links: serde_json::Value =
        serde_json::from_str(&json).map_err(|e| format!("ip -j addr show dev lo: not JSON ({e})"))?;
    let links = links.as_array().map(Vec::as_slice).unwrap_or_default();
    let infos = links.iter().flat_map(|l| l["addr_info"].as_array().into_iter().flatten());
    Ok(infos.filter_map(|a| a["local"].as_str()?.parse().ok()).collect())
}

/// The label of the address ClusterFirst pods ask (`[services] pod_dns`), when `lo` holds it.
pub const DNS_LABEL: &str = "lo:steward-dns";

/// Makes `lo` hold `ip` under `label` (kept as it is when it has it already).
pub async fn hold_one(reaper: Option<&Reaper>, address: Ipv4Addr, label: &str) -> Result<(), String> {
    ip(reaper, &["addr", "replace", &format!("{address}/32"), "dev", "lo", "label", label], "").await.map(drop)
}

/// Makes `lo` hold exactly `wanted` under [`LABEL`].
pub async fn hold(reaper: Option<&Reaper>, wanted: &BTreeSet<Ipv4Addr>) -> Result<(), String> {
    let now = held(reaper).await?;
    let mut batch = String::new();
    for gone in now.difference(wanted) {
        batch.push_str(&format!("addr del {gone}/32 dev lo\n"));
    }
    for new in wanted.difference(&now) {
        batch.push_str(&format!("addr add {new}/32 dev lo label {LABEL}\n"));
    }
    if batch.is_empty() {
        return Ok(());
    }
    ip(reaper, &["-batch", "-"], &batch).await.map(drop)
}
