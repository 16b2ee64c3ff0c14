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
    fn detects_some_ipv4_address() {
        assert!(super::detect_ip().is_ipv4());
    }
}
