//! Which daemon `steward` talks to: this host's, over its unix socket, or one remote daemon's
//! listener (`--remote`: TLS checked against `--ca`, a bearer token from `--token-file`); and
//! how a failure to reach it is told, naming what to check for that way of reaching it.

use crate::client::{read_token_file, Client, ClientError};
use crate::config::Config;
use std::path::{Path, PathBuf};

/// `--remote`'s value: the listener's `host:port`, given as `https://HOST:PORT` or `HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUrl {
    addr: String,
}

impl RemoteUrl {
    /// `host:port`, as the client connects to it.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The host, an IPv6 address without its brackets: the name the certificate is checked
    /// for unless --server-name says otherwise.
    pub fn host(&self) -> &str {
        self.addr.rsplit_once(':').map_or(self.addr.as_str(), |(h, _)| h).trim_matches(['[', ']'])
    }
}

impl std::fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "https://{}", self.addr)
    }
}

/// Parses `--remote`: `https://HOST:PORT` (a trailing `/` allowed) or `HOST:PORT`, an IPv6 host
/// in brackets. Any other scheme is refused: the listener speaks TLS only.
pub fn parse_remote_url(s: &str) -> Result<RemoteUrl, String> {
    const FORMS: &str = "https://HOST:PORT or HOST:PORT";
    let rest = match s.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => rest,
        Some((scheme, _)) => {
            return Err(format!("{scheme}:// is not served: stewardd's remote listener speaks TLS only ({FORMS})"))
        }
        None => s,
    };
    let addr = rest.strip_suffix('/').unwrap_or(rest);
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(format!("{s:?} has no port ({FORMS})"));
    };
    let bracketed = host.len() > 2 && host.starts_with('[') && host.ends_with(']');
    let host_ok =
        !host.is_empty() && !host.contains(['/', '@', '?', '#', ' ']) && (bracketed || !host.contains(['[', ']', ':']));
    if !host_ok || !port.parse::<u16>().is_ok_and(|p| p != 0) {
        return Err(format!("{s:?} is not {FORMS}"));
    }
    Ok(RemoteUrl { addr: addr.to_string() })
}

/// The daemon `steward` sends its requests to, with the client that reaches it.
pub struct Endpoint {
    client: Client,
    way: Way,
}

enum Way {
    /// This host's daemon; its configuration gives the roots spec paths are checked against
    /// and the run root that holds log files.
    Local { socket: PathBuf, config: Box<Config> },
    /// A remote daemon, whose configuration this host does not have.
    Remote { url: RemoteUrl, ca: PathBuf, token_file: PathBuf, server_name: String },
}

/// `--remote` and the options that go with it.
pub struct RemoteOptions<'a> {
    pub url: &'a RemoteUrl,
    pub token_file: &'a Path,
    pub ca: &'a Path,
    pub server_name: Option<&'a str>,
}

impl Endpoint {
    pub fn local(socket: PathBuf, config: Config) -> Endpoint {
        Endpoint { client: Client::new(&socket), way: Way::Local { socket, config: Box::new(config) } }
    }

    /// Reads the token and the CA; an error names the option and the file.
    pub fn remote(o: RemoteOptions) -> Result<Endpoint, String> {
        let token = read_token_file(o.token_file).map_err(|e| format!("--token-file {e}"))?;
        let tls = crate::tls::client_config(o.ca).map_err(|e| format!("--ca {e}"))?;
        let server_name = o.server_name.unwrap_or(o.url.host()).to_string();
        let client = Client::remote(o.url.addr(), Some(&server_name), tls, &token).map_err(|e| match e {
            ClientError::Protocol(why) => format!("--server-name: {why}"),
            other => other.to_string(),
        })?;
        let way = Way::Remote {
            url: o.url.clone(),
            ca: o.ca.to_path_buf(),
            token_file: o.token_file.to_path_buf(),
            server_name,
        };
        Ok(Endpoint { client, way })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// This host's configuration when the daemon is this host's; None for a remote daemon.
    pub fn local_config(&self) -> Option<&Config> {
        match &self.way {
            Way::Local { config, .. } => Some(config),
            Way::Remote { .. } => None,
        }
    }

    /// Tells why the daemon could not be reached and what to check.
    pub fn explain_unreachable(&self, source: &std::io::Error) {
        match &self.way {
            Way::Local { socket, .. } => {
                eprintln!("steward: cannot reach stewardd at {}: {source}", socket.display());
                eprintln!("  start it with `systemctl start stewardd`, or in the foreground with `stewardd`");
                eprintln!("  (another socket: --socket PATH or STEWARD_SOCKET)");
            }
            Way::Remote { url, ca, server_name, .. } => match tls_error(source) {
                Some(e @ rustls::Error::InvalidCertificate(why)) if is_name_mismatch(why) => {
                    eprintln!("steward: {url}: the daemon's certificate is not for {server_name:?}: {e}");
                    eprintln!("  give a name the certificate carries with --server-name NAME");
                }
                Some(e @ rustls::Error::InvalidCertificate(_)) => {
                    eprintln!(
                        "steward: {url}: the daemon's certificate does not verify against --ca {}: {e}",
                        ca.display()
                    );
                    eprintln!("  --ca must be the CA that signed the daemon's remote.cert");
                }
                Some(e) => {
                    eprintln!("steward: {url}: the TLS handshake failed: {e}");
                    eprintln!(
                        "  check that {} is stewardd's remote listener (remote.listen) and --ca its CA",
                        url.addr()
                    );
                }
                None => {
                    eprintln!("steward: cannot reach stewardd at {url}: {source}");
                    eprintln!("  check the address (--remote or STEWARD_REMOTE) and that the daemon's remote listener");
                    eprintln!("  is on (remote.listen); --ca and --token-file must be that daemon's");
                }
            },
        }
    }

    /// Tells that the daemon refused the bearer token (401): only a remote daemon asks for one.
    pub fn explain_refused_token(&self, message: &str) {
        match &self.way {
            Way::Remote { url, token_file, .. } => {
                eprintln!("steward: {url} refused the token in {}: {message}", token_file.display());
                eprintln!("  --token-file must hold a token of the daemon's remote.tokens_file");
            }
            Way::Local { .. } => eprintln!("steward: {message}"),
        }
    }
}

/// The TLS failure under an error of connecting, if that is what it was.
fn tls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

fn is_name_mismatch(e: &rustls::CertificateError) -> bool {
    matches!(e, rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_url_takes_https_or_host_port_only() {
        for (given, addr, host) in [
            ("https://127.0.0.1:7443", "127.0.0.1:7443", "127.0.0.1"),
            ("HTTPS://h1.example:7443/", "h1.example:7443", "h1.example"),
            ("127.0.0.1:7443", "127.0.0.1:7443", "127.0.0.1"),
            ("https://[::1]:7443", "[::1]:7443", "::1"),
        ] {
            let url = parse_remote_url(given).unwrap();
            assert_eq!((url.addr(), url.host()), (addr, host), "{given}");
            assert_eq!(url.to_string(), format!("https://{addr}"));
        }
        let e = parse_remote_url("http://127.0.0.1:7443").unwrap_err();
        assert!(e.contains("http://") && e.contains("TLS only"), "{e}");
        for bad in ["127.0.0.1", "https://h1", "h1:0", "h1:70000", ":7443", "https://h1:7443/v1", "::1:7443", "u@h1:1"]
        {
            assert!(parse_remote_url(bad).is_err(), "{bad} was accepted");
        }
    }
}
