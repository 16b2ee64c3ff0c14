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

/// TCP ports something listens on and UDP ports held bound, from /proc/net: what `steward
/// node` counts as not free (a steady figure: connections come and go).
pub fn ports_in_use() -> std::collections::BTreeSet<u16> {
    local_ports(|state| state == "0A")
}

/// Every port some socket holds, a connection's too (TIME_WAIT aside, which a server's bind
/// with SO_REUSEADDR passes): what a new instance is never given. An outgoing connection's local
/// port (an ephemeral one, or one bound on purpose) fails a server's bind to it, SO_REUSEADDR
/// or not (issue 43: a surge instance given such a port exited 1 at once).
pub fn ports_held() -> std::collections::BTreeSet<u16> {
    local_ports(|state| state != "06")
}

/// Local ports of the TCP sockets whose state (`/proc/net/tcp`'s hex code) `tcp` takes, and of
/// every UDP socket.
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

#[cfg(test)]
mod host_facts {
    #[test]
    fn sees_a_listening_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(super::ports_in_use().contains(&port));
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
