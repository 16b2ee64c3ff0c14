//! Names outside the zone, asked at `[services] pod_dns` (seed 003 `dns: ClusterFirst`): sent on
//! to the host's resolvers, and their answer handed back as it came.
//!
//! Why forward rather than answer REFUSED and list the host's nameservers after the responder in
//! the pod's resolv.conf (glibc would move on to them): Docker leaves the host's loopback
//! nameservers (systemd-resolved's 127.0.0.53, a local cache) out of a pod's resolv.conf and puts
//! public servers in their place, so the pod would not ask the host's resolver at all; and musl
//! asks every nameserver at once and takes the first answer, so the host's NXDOMAIN for a name of
//! the zone could win. The daemon runs in the host's network namespace: it reaches them all.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one upstream has to answer before the next is asked.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Most queries forwarded at once: each holds a socket until its answer or timeout, so a pod's
/// flood of outside names could otherwise take the daemon's descriptors. One over is answered
/// SERVFAIL at once (the resolver retries).
const MAX_IN_FLIGHT: usize = 256;

/// The host's resolver configuration.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// `IP` (port 53) or `IP:PORT`; None: neither.
pub fn upstream(s: &str) -> Option<SocketAddr> {
    s.parse::<SocketAddr>().ok().or_else(|| s.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53)))
}

/// Where names outside the zone go: the configured servers, or else the host's.
pub struct Upstreams {
    configured: Vec<SocketAddr>,
    /// The responder's own address: never asked (a host whose resolv.conf names it would loop).
    own: SocketAddr,
    /// The host's nameservers, and the resolv.conf modification time they were read at.
    host: Mutex<(Option<SystemTime>, Vec<SocketAddr>)>,
    in_flight: tokio::sync::Semaphore,
}

impl Upstreams {
    /// `configured`: `[services] dns_upstream` (checked when the config was read).
    pub fn new(configured: &[String], own: SocketAddr) -> Upstreams {
        let configured = configured.iter().filter_map(|s| upstream(s)).collect();
        Upstreams {
            configured,
            own,
            host: Mutex::new((None, Vec::new())),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    /// The servers to ask, in order.
    fn servers(&self) -> Vec<SocketAddr> {
        let list = if self.configured.is_empty() { self.host_servers() } else { self.configured.clone() };
        list.into_iter().filter(|s| *s != self.own).collect()
    }

    /// The `nameserver`s of the host's resolv.conf, read again when it changes.
    fn host_servers(&self) -> Vec<SocketAddr> {
        let modified = std::fs::metadata(RESOLV_CONF).and_then(|m| m.modified()).ok();
        let mut host = self.host.lock().expect("upstreams lock");
        if host.0 != modified || modified.is_none() {
            let text = match std::fs::read_to_string(RESOLV_CONF) {
                Ok(text) => text,
                Err(e) => {
                    tracing::warn!("dns: {RESOLV_CONF}: {e}; names outside the zone are not forwarded");
                    String::new()
                }
            };
            *host = (modified, nameservers(&text));
        }
        host.1.clone()
    }

    /// The first answer of an upstream to the query `query` (wire format), or None when none
    /// answered in time, or [`MAX_IN_FLIGHT`] are being asked already.
    pub async fn ask(&self, query: &[u8]) -> Option<Vec<u8>> {
        let Ok(_slot) = self.in_flight.try_acquire() else {
            tracing::debug!("dns: {MAX_IN_FLIGHT} queries forwarded already; SERVFAIL");
            return None;
        };
        for server in self.servers() {
            match ask_one(server, query).await {
                Ok(answer) => return Some(answer),
                Err(e) => tracing::debug!("dns: upstream {server}: {e}"),
            }
        }
        None
    }
}

/// The `nameserver` lines of a resolv.conf.
fn nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.split_whitespace().next())
        // A scoped IPv6 address (fe80::1%eth0) is no plain address: left out.
        .filter_map(|ip| ip.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// One upstream's answer over UDP, over TCP when it came truncated.
async fn ask_one(server: SocketAddr, query: &[u8]) -> Result<Vec<u8>, String> {
    let any: SocketAddr = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("an address");
    let socket = tokio::net::UdpSocket::bind(any).await.map_err(|e| e.to_string())?;
    socket.connect(server).await.map_err(|e| e.to_string())?;
    socket.send(query).await.map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
            Ok(r) => r.map_err(|e| e.to_string())?,
            Err(_) => return Err(format!("no answer within {} s", TIMEOUT.as_secs())),
        };
        // Another query's late answer (same id or none) is not this one's.
        if n < 12 || buf[..2] != query[..2] {
            continue;
        }
        let truncated = buf[2] & 0x02 != 0;
        return match truncated {
            true => ask_tcp(server, query).await,
            false => Ok(buf[..n].to_vec()),
        };
    }
}

/// One upstream's answer over TCP (each message after its 2-byte length).
async fn ask_tcp(server: SocketAddr, query: &[u8]) -> Result<Vec<u8>, String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(server).await?;
        let len = u16::try_from(query.len()).map_err(std::io::Error::other)?;
        stream.write_all(&len.to_be_bytes()).await?;
        stream.write_all(query).await?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).await?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(TIMEOUT, exchange).await {
        Ok(r) => r.map_err(|e| format!("tcp: {e}")),
        Err(_) => Err(format!("tcp: no answer within {} s", TIMEOUT.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_are_addresses_with_port_53_by_default() {
        assert_eq!(upstream("10.0.0.2"), Some("10.0.0.2:53".parse().unwrap()));
        assert_eq!(upstream("127.0.0.1:5300"), Some("127.0.0.1:5300".parse().unwrap()));
        assert_eq!(upstream("[::1]:53"), Some("[::1]:53".parse().unwrap()));
        assert_eq!(upstream("dns.example"), None);
    }

    #[test]
    fn the_host_nameservers_are_read_from_resolv_conf() {
        let text = "# generated\nsearch example.org\nnameserver 127.0.0.53\nnameserver  10.0.0.2 # office\n\
                    nameserver fe80::1%eth0\noptions edns0\n";
        let want: Vec<SocketAddr> = vec!["127.0.0.53:53".parse().unwrap(), "10.0.0.2:53".parse().unwrap()];
        assert_eq!(nameservers(text), want);
    }

    /// A real exchange on loopback: the upstream's answer comes back as sent, a late answer of
    /// another query skipped; the responder's own address is never asked.
    #[tokio::test]
    async fn a_query_is_answered_by_the_first_upstream_that_answers() {
        let upstream = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let at = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (n, from) = upstream.recv_from(&mut buf).await.unwrap();
            let mut other = buf[..n].to_vec();
            other[0] ^= 0xff;
            upstream.send_to(&other, from).await.unwrap();
            let mut answer = buf[..n].to_vec();
            answer[2] |= 0x80;
            upstream.send_to(&answer, from).await.unwrap();
        });
        let own: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let ups = Upstreams::new(&[own.to_string(), at.to_string()], own);
        assert_eq!(ups.servers(), [at]);
        let query = [0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        let answer = ups.ask(&query).await.expect("an answer");
        assert_eq!(answer[..3], [0x12, 0x34, 0x81]);
        // Every slot taken: no upstream is asked (it would not answer again), none waited for.
        let _all = ups.in_flight.acquire_many(MAX_IN_FLIGHT as u32).await.unwrap();
        let start = std::time::Instant::now();
        assert_eq!(ups.ask(&query).await, None);
        assert!(start.elapsed() < TIMEOUT, "answered at once");
    }
}
