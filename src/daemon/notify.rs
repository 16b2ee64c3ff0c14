//! systemd's notify protocol (sd_notify): READY=1, STATUS=, WATCHDOG=1, STOPPING=1.
//! Without $NOTIFY_SOCKET (not run by systemd) every call does nothing.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Sends `state` to systemd, if it is listening.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(sock) = UnixDatagram::unbound() else { return };
    let path = path.to_string_lossy().to_string();
    let result = if let Some(abstract_name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = result {
        tracing::debug!("sd_notify: {e}");
    }
}

/// Pings systemd's watchdog at half its interval ($WATCHDOG_USEC) while the returned task lives.
pub fn start_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Some(pid) = std::env::var("WATCHDOG_PID").ok().and_then(|p| p.parse::<u32>().ok()) {
        if pid != std::process::id() {
            return None;
        }
    }
    let every = Duration::from_micros(usec / 2).max(Duration::from_millis(100));
    Some(tokio::spawn(async move {
        loop {
            notify("WATCHDOG=1");
            tokio::time::sleep(every).await;
        }
    }))
}
