//! A stewardd with its remote listener on loopback: a CA and certificate made by the real
//! `steward cert`, and a tokens file with a write and a read token.

use super::Daemon;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use steward::client::Client;

pub const TOKEN: &str = "write-token-0123456789abcdef";
pub const READ_TOKEN: &str = "read-token-0123456789abcdef";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `steward cert` (the real CLI): a CA and a certificate for `name` valid for 127.0.0.1.
pub fn cert(dir: &Path, name: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["cert", "--dir"])
        .arg(dir)
        .args(["--name", name, "--ip", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "steward cert: {}", String::from_utf8_lossy(&out.stderr));
}

pub struct Remote {
    pub daemon: Daemon,
    /// The listener, `127.0.0.1:PORT`.
    pub addr: String,
    /// `ca.pem`, `node.pem`, `node-key.pem` and the daemon's `tokens`.
    pub certs: PathBuf,
}

/// A daemon whose config ends with `[remote]` and then `extra` (more of `[remote]`, or other
/// tables), once its listener accepts.
pub fn start(name: &str, extra: &str) -> Remote {
    let certs = tempfile::Builder::new().prefix("steward-certs-").tempdir().unwrap().keep();
    cert(&certs, "node");
    let tokens = certs.join("tokens");
    std::fs::write(&tokens, format!("# the scheduler\n{TOKEN}\n{READ_TOKEN} read\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "[remote]\nlisten = \"{addr}\"\ncert = \"{0}/node.pem\"\nkey = \"{0}/node-key.pem\"\ntokens_file = \"{1}\"\n{extra}",
        certs.display(),
        tokens.display()
    );
    let daemon = Daemon::start_with(name, &config);
    // The remote listener comes up with the socket; wait until it accepts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "no remote listener on {addr}:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    Remote { daemon, addr, certs }
}

impl Remote {
    pub fn client(&self, token: &str) -> Client {
        let tls = steward::tls::client_config(&self.certs.join("ca.pem")).unwrap();
        Client::remote(&self.addr, None, tls, token).unwrap()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.certs);
    }
}
