//! Facts about the host this daemon runs on.

use std::net::{IpAddr, Ipv4Addr};

/// The host's primary address for `${hostip}`: the first IPv4 address of an interface that is up
/// and not loopback, else 127.0.0.1. Reads interfaces only; sends nothing.
pub fn detect_ip() -> IpAddr {
    use nix::net::if_::InterfaceFlags;
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return IpAddr::V4(Ipv4Addr::LOCALHOST);
    };
    for ifa in addrs {
        if !ifa.flags.contains(InterfaceFlags::IFF_UP) || ifa.flags.contains(InterfaceFlags::IFF_LOOPBACK) {
            continue;
        }
        if let Some(sin) = ifa.address.as_ref().and_then(|a| a.as_sockaddr_in()) {
            return IpAddr::V4(sin.ip());
        }
    }
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

#[cfg(test)]
mod tests {
    #[test]
    fn os_and_arch_are_named_as_kubernetes_names_them() {
        assert_eq!(super::os(), "linux");
        let expected = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        assert_eq!(super::arch(), expected);
    }

    #[test]
    fn detects_some_ipv4_address() {
        assert!(super::detect_ip().is_ipv4());
    }
}

/// The operating system, named as Go's GOOS and so Kubernetes' `kubernetes.io/os` (`linux`).
pub fn os() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        os => os,
    }
}

/// The CPU architecture, named as Go's GOARCH and so Kubernetes' `kubernetes.io/arch`: Rust's
/// `x86_64` is `amd64`, `aarch64` `arm64`. Compiled in: a 32-bit build on a 64-bit host says `386`,
/// as a 32-bit kubelet would.
pub fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "mips64" if cfg!(target_endian = "little") => "mips64le",
        "loongarch64" => "loong64",
        arch => arch,
    }
}

/// The host's name.
pub fn hostname() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into())
}

/// CPU and memory capacity and use, sampled with sysinfo. CPU use is measured between two
/// samples, so the first one reports the use since boot-ish (0 until a second sample).
pub struct UsageSampler {
    system: std::sync::Mutex<sysinfo::System>,
}

/// One [`UsageSampler::sample`].
#[derive(Debug, Clone, Copy, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageSample {
    pub cpus: usize,
    /// Busy share of all CPUs since the previous sample, 0-100.
    pub cpu_usage_percent: f32,
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    pub memory_used_bytes: u64,
}

impl Default for UsageSampler {
    fn default() -> Self {
        let mut system = sysinfo::System::new();
        system.refresh_cpu_usage();
        UsageSampler { system: std::sync::Mutex::new(system) }
    }
}

impl UsageSampler {
    pub fn sample(&self) -> UsageSample {
        let mut s = self.system.lock().expect("sysinfo lock");
        s.refresh_cpu_usage();
        s.refresh_memory();
        UsageSample {
            cpus: s.cpus().len().max(1),
            cpu_usage_percent: s.global_cpu_usage(),
            memory_total_bytes: s.total_memory(),
            memory_available_bytes: s.available_memory(),
            memory_used_bytes: s.used_memory(),
        }
    }
}

/// Memory totals from /proc/meminfo, in bytes: (total, available).
pub fn memory() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// The 1-minute load average.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|l| l.parse().ok()))
        .unwrap_or(0.0)
}

pub fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// TCP ports something listens on and UDP ports held bound: what `steward node` counts as not
/// free (a steady figure: connections come and go).
pub fn ports_in_use() -> std::collections::BTreeSet<u16> {
    sock_diag::local_ports(1 << TCP_LISTEN).unwrap_or_else(|_| local_ports(|state| state == "0A"))
}

/// Every port some socket holds, a connection's too (TIME_WAIT aside, which a server's bind
/// with SO_REUSEADDR passes): what a new instance is never given. An outgoing connection's local
/// port (an ephemeral one, or one bound on purpose) fails a server's bind to it, SO_REUSEADDR
/// or not (issue 43: a surge instance given such a port exited 1 at once).
pub fn ports_held() -> std::collections::BTreeSet<u16> {
    sock_diag::local_ports(!(1 << TCP_TIME_WAIT)).unwrap_or_else(|_| local_ports(|state| state != "06"))
}

/// The kernel's TCP states, as sock_diag's state bits number them.
const TCP_TIME_WAIT: u32 = 6;
const TCP_LISTEN: u32 = 10;

/// Local ports of the TCP sockets whose state (`/proc/net/tcp`'s hex code) `tcp` takes, and of
/// every UDP socket: where sock_diag cannot be asked (a kernel without inet_diag).
fn local_ports(tcp: impl Fn(&str) -> bool) -> std::collections::BTreeSet<u16> {
    let mut ports = std::collections::BTreeSet::new();
    for (file, is_tcp) in [("tcp", true), ("tcp6", true), ("udp", false), ("udp6", false)] {
        let text = std::fs::read_to_string(format!("/proc/net/{file}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else { continue };
            if is_tcp && !tcp(state) {
                continue;
            }
            if let Some(port) = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) {
                ports.insert(port);
            }
        }
    }
    ports
}

/// Local ports asked of the kernel's sock_diag netlink interface (sock_diag(7)), which filters
/// by state itself: asking for listeners walks only the listening table, where reading
/// /proc/net/tcp walks every connection's hash bucket — milliseconds per read on a host with
/// many connections, paid on every GET /v1/node (a scheduler asks a thousand hosts often).
/// Written against the kernel's ABI directly: the request and the part of the answer read are
/// two fixed structs.
mod sock_diag {
    use std::collections::BTreeSet;
    use std::io;

    const NETLINK_SOCK_DIAG: libc::c_int = 4;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const HEADER: usize = 16;

    /// Local ports of TCP sockets in `tcp_states` (bit per state) and of every UDP socket,
    /// IPv4 and IPv6.
    pub fn local_ports(tcp_states: u32) -> io::Result<BTreeSet<u16>> {
        let mut ports = BTreeSet::new();
        for family in [libc::AF_INET, libc::AF_INET6] {
            dump(family as u8, libc::IPPROTO_TCP as u8, tcp_states, &mut ports)?;
            dump(family as u8, libc::IPPROTO_UDP as u8, u32::MAX, &mut ports)?;
        }
        Ok(ports)
    }

    /// One dump: every socket of `family`/`protocol` in `states`, its local port into `ports`.
    fn dump(family: u8, protocol: u8, states: u32, ports: &mut BTreeSet<u16>) -> io::Result<()> {
        // SAFETY: a plain socket(2); its descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, NETLINK_SOCK_DIAG) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by nothing else.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        // nlmsghdr, then inet_diag_req_v2: family, protocol, ext, pad, states, and a zeroed
        // inet_diag_sockid (48 bytes: no socket named, every one dumped).
        let mut req = [0u8; HEADER + 56];
        req[0..4].copy_from_slice(&((HEADER + 56) as u32).to_ne_bytes());
        req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        req[6..8].copy_from_slice(&flags.to_ne_bytes());
        req[8..12].copy_from_slice(&1u32.to_ne_bytes());
        req[HEADER] = family;
        req[HEADER + 1] = protocol;
        req[HEADER + 4..HEADER + 8].copy_from_slice(&states.to_ne_bytes());
        // SAFETY: the kernel is the peer (a zeroed sockaddr_nl with its family set).
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: req and kernel outlive the call; the lengths are theirs.
        let sent = unsafe {
            libc::sendto(
                raw,
                req.as_ptr().cast(),
                req.len(),
                0,
                (&kernel as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: buf outlives the call; at most its length is written.
            let n = unsafe { libc::recv(raw, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut at = 0usize;
            let n = n as usize;
            while at + HEADER <= n {
                let len = u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
                let kind = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().expect("2 bytes"));
                if len < HEADER || at + len > n {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "a truncated sock_diag answer"));
                }
                match kind {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => {
                        let code = i32::from_ne_bytes(buf[at + HEADER..at + HEADER + 4].try_into().expect("4 bytes"));
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    // inet_diag_msg: family, state, timer, retrans, then the socket id whose
                    // first field is the local port, big-endian.
                    _ if len >= HEADER + 6 => {
                        let port = &buf[at + HEADER + 4..at + HEADER + 6];
                        ports.insert(u16::from_be_bytes([port[0], port[1]]));
                    }
                    _ => {}
                }
                at += (len + 3) & !3;
            }
        }
    }
}

#[cfg(test)]
mod host_facts {
    #[test]
    fn sees_a_listening_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(super::ports_in_use().contains(&port));
        // Asked of sock_diag, as /proc/net/tcp says: listeners, and a connection's local port
        // among what is held (not among what is in use).
        let diag = super::sock_diag::local_ports(1 << super::TCP_LISTEN).expect("sock_diag answers");
        assert_eq!(diag, super::local_ports(|state| state == "0A"));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let out = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let local = out.local_addr().unwrap().port();
        let in_use = super::ports_in_use();
        assert!(in_use.contains(&udp.local_addr().unwrap().port()) && !in_use.contains(&local));
        let held = super::ports_held();
        assert!(held.contains(&local) && held.contains(&port), "a connection's own port is held");
        let (total, available) = super::memory();
        assert!(total > 0 && available <= total);
        assert!(!super::hostname().is_empty());
    }
}

/// The process's open-files limit after raising its soft limit to the hard one (as a server
/// that holds many sockets should; under the systemd unit both are LimitNOFILE already):
/// what the userspace proxy's descriptor budget is worked out from. Workloads inherit it, as
/// they do the unit's.
pub fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    if soft >= hard {
        return soft;
    }
    limit.rlim_cur = hard;
    // SAFETY: setrlimit reads the struct it is given.
    let raised = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0;
    match raised.then_some(()).ok_or_else(std::io::Error::last_os_error) {
        Ok(()) => {
            tracing::info!("open files: soft limit raised from {soft} to {hard}");
            hard
        }
        Err(e) => {
            tracing::warn!("open files: soft limit {soft} kept, not raised to {hard}: {e}");
            soft
        }
    }
}
