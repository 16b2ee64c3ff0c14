//! Services in the kernel (issue 27): one nftables table of Steward's own (`ip steward`),
//! written whole by `nft -f -` at every change, so the kernel swaps it atomically and nothing
//! stale is left behind. A packet to a node port on one of the host's addresses, or to a
//! service's cluster IP and port (an address of the host's loopback, vips.rs), is
//! DNATed to a Ready endpoint picked in turn (`numgen inc`), marked, and masqueraded on its way
//! out so the answer comes back through this host. A port without a Ready endpoint refuses (TCP
//! reset, ICMP for UDP). The rules outlive the daemon (a kill -9 leaves forwarding working); the next
//! daemon writes the table again from its stored endpoints.

use crate::runtime::reaper::Reaper;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

/// The table's name (family `ip`).
pub const TABLE: &str = "steward";
/// The mark of DNATed node-port packets (masqueraded in postrouting): "ST".
const MARK: u32 = 0x5354;

/// One forwarded port and where it forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub udp: bool,
    /// A cluster IP; None: a node port, on every address of the host.
    pub address: Option<Ipv4Addr>,
    pub port: u16,
    pub endpoints: Vec<SocketAddrV4>,
}

impl Rule {
    /// `10.254.0.1:80/tcp`, or `node port 30000/tcp`.
    pub fn describe(&self) -> String {
        let proto = if self.udp { "udp" } else { "tcp" };
        match self.address {
            Some(ip) => format!("cluster IP {ip}:{}/{proto}", self.port),
            None => format!("node port {}/{proto}", self.port),
        }
    }
}

/// How long one `nft` run may take.
const NFT_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `nft ARGS` with `input` on stdin (through the daemon's reaper): Err is why it failed.
async fn nft(reaper: Option<&Reaper>, args: &[&str], input: &str) -> Result<(), String> {
    crate::runtime::program::tool(reaper, "nft", args, input, NFT_TIMEOUT).await.map(drop)
}

/// Whether `nft` can be run and can list rulesets here (root, a kernel with nf_tables).
pub async fn available(reaper: Option<&Reaper>) -> bool {
    nft(reaper, &["list", "tables"], "").await.is_ok()
}

/// Whether Steward's table is in the kernel now.
pub async fn table_exists(reaper: Option<&Reaper>) -> bool {
    nft(reaper, &["list", "table", "ip", TABLE], "").await.is_ok()
}

/// The ruleset text: the table made (so that deleting it cannot fail), deleted, and made again
/// with `rules`; with no rules, only removed.
pub fn ruleset(rules: &[Rule]) -> String {
    let mut text = format!("table ip {TABLE} {{}}\ndelete table ip {TABLE}\n");
    if rules.is_empty() {
        return text;
    }
    let mut matches = String::new();
    // Cluster IPs first: their port may also be some node port's number.
    let (vips, node_ports): (Vec<&Rule>, Vec<&Rule>) = rules.iter().partition(|r| r.address.is_some());
    for r in vips.into_iter().chain(node_ports) {
        let proto = if r.udp { "udp" } else { "tcp" };
        let daddr = r.address.map(|ip| format!("ip daddr {ip} ")).unwrap_or_default();
        if r.endpoints.is_empty() {
            let reject = if r.udp { "reject" } else { "reject with tcp reset" };
            matches.push_str(&format!("    {daddr}{proto} dport {} {reject}\n", r.port));
            continue;
        }
        let map: Vec<String> =
            r.endpoints.iter().enumerate().map(|(i, e)| format!("{i} : {} . {}", e.ip(), e.port())).collect();
        matches.push_str(&format!(
            "    {daddr}{proto} dport {} meta mark set {MARK:#x} dnat ip addr . port to numgen inc mod {} map {{ {} }}\n",
            r.port,
            r.endpoints.len(),
            map.join(", ")
        ));
    }
    text.push_str(&format!(
        "table ip {TABLE} {{\n\
         \x20 chain services {{\n{matches}  }}\n\
         \x20 chain prerouting {{\n    type nat hook prerouting priority dstnat; policy accept;\n    fib daddr type local jump services\n  }}\n\
         \x20 chain output {{\n    type nat hook output priority -100; policy accept;\n    ip daddr != 127.0.0.0/8 fib daddr type local jump services\n  }}\n\
         \x20 chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n    meta mark {MARK:#x} masquerade\n  }}\n\
         }}\n"
    ));
    text
}

/// Writes the table (`nft -f -`): Err carries nft's own message.
pub async fn apply(reaper: Option<&Reaper>, rules: &[Rule]) -> Result<(), String> {
    nft(reaper, &["-f", "-"], &ruleset(rules)).await
}

/// Forwarded packets need IPv4 forwarding on: set when it is off (as kube-proxy does).
pub fn ensure_forwarding() {
    const PATH: &str = "/proc/sys/net/ipv4/ip_forward";
    if std::fs::read_to_string(PATH).is_ok_and(|v| v.trim() == "0") {
        match std::fs::write(PATH, "1") {
            Ok(()) => tracing::info!("node ports: turned on IPv4 forwarding ({PATH})"),
            Err(e) => tracing::warn!("node ports: cannot turn on IPv4 forwarding ({PATH}): {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ruleset_replaces_the_table_whole() {
        let empty = ruleset(&[]);
        assert_eq!(empty, "table ip steward {}\ndelete table ip steward\n");
        let rules = [
            Rule {
                udp: false,
                address: None,
                port: 30080,
                endpoints: vec!["10.0.0.1:31000".parse().unwrap(), "10.0.0.2:31005".parse().unwrap()],
            },
            Rule { udp: true, address: None, port: 30053, endpoints: vec![] },
            Rule {
                udp: false,
                address: Some("10.254.0.1".parse().unwrap()),
                port: 80,
                endpoints: vec!["10.0.0.2:31005".parse().unwrap()],
            },
        ];
        let text = ruleset(&rules);
        assert!(text.starts_with("table ip steward {}\ndelete table ip steward\ntable ip steward {\n"), "{text}");
        assert!(
            text.contains("tcp dport 30080 meta mark set 0x5354 dnat ip addr . port to numgen inc mod 2 map { 0 : 10.0.0.1 . 31000, 1 : 10.0.0.2 . 31005 }"),
            "{text}"
        );
        assert!(text.contains("udp dport 30053 reject\n"), "{text}");
        let vip = text.find("ip daddr 10.254.0.1 tcp dport 80 meta mark set 0x5354 dnat ip addr . port to numgen inc mod 1 map { 0 : 10.0.0.2 . 31005 }");
        assert!(vip.is_some_and(|at| at < text.find("dport 30080").unwrap()), "cluster IPs come first: {text}");
        assert!(text.contains("meta mark 0x5354 masquerade"), "{text}");
    }
}
