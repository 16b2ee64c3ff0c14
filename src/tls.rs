//! TLS for the remote API: the daemon's server configuration, the scheduler's client
//! configuration (trusting one CA), and a self-signed CA with a server certificate for tests
//! and small fleets (`steward cert`).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("TLS: {0}")]
    Config(String),
    #[error("generating certificates: {0}")]
    Generate(String),
}

fn file_err(path: &Path, message: impl std::fmt::Display) -> TlsError {
    TlsError::File { path: path.to_path_buf(), message: message.to_string() }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(path, e))?;
    if certs.is_empty() {
        return Err(file_err(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The listener's configuration: `cert` (PEM chain) and `key` (PEM private key), HTTP/1.1.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certs(cert)?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| file_err(cert, format!("does not go with {}: {e}", key.display())))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration that trusts exactly the CA certificates in `ca` (PEM).
pub fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c).map_err(|e| file_err(ca, e))?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Files written by [`generate`].
#[derive(Debug, Clone)]
pub struct Generated {
    pub ca: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Writes a new CA (`ca.pem`, `ca-key.pem`) and a server certificate it signs (`NAME.pem`,
/// `NAME-key.pem`) for `names` and `ips` into `dir`. Private keys are mode 0600. An existing CA
/// in `dir` is reused, so several hosts' certificates share one CA.
pub fn generate(dir: &Path, name: &str, names: &[String], ips: &[IpAddr]) -> Result<Generated, TlsError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};
    let gen = |e: rcgen::Error| TlsError::Generate(e.to_string());
    let ca_params = || -> Result<CertificateParams, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(gen)?;
        params.distinguished_name.push(DnType::CommonName, "Steward CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ok(params)
    };
    std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
    let out = Generated {
        ca: dir.join("ca.pem"),
        ca_key: dir.join("ca-key.pem"),
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}-key.pem")),
    };
    let (ca_cert, ca_key) = if out.ca.exists() && out.ca_key.exists() {
        let key_pem = std::fs::read_to_string(&out.ca_key).map_err(|e| file_err(&out.ca_key, e))?;
        let ca_key = KeyPair::from_pem(&key_pem).map_err(|e| file_err(&out.ca_key, e))?;
        // Same subject, same key: what it signs verifies against the CA file already written.
        let ca_cert = ca_params()?.self_signed(&ca_key).map_err(gen)?;
        (ca_cert, ca_key)
    } else {
        let ca_key = KeyPair::generate().map_err(gen)?;
        let ca_cert = ca_params()?.self_signed(&ca_key).map_err(gen)?;
        write(&out.ca, ca_cert.pem().as_bytes(), 0o644)?;
        write(&out.ca_key, ca_key.serialize_pem().as_bytes(), 0o600)?;
        (ca_cert, ca_key)
    };
    let key = KeyPair::generate().map_err(gen)?;
    let mut params = CertificateParams::new(names.to_vec()).map_err(gen)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names.extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    let cert = params.signed_by(&key, &ca_cert, &ca_key).map_err(gen)?;
    write(&out.cert, cert.pem().as_bytes(), 0o644)?;
    write(&out.key, key.serialize_pem().as_bytes(), 0o600)?;
    Ok(out)
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| file_err(path, e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| file_err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_pair_loads_and_a_second_host_shares_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let a = generate(dir.path(), "h1", &["h1".into()], &["10.0.0.1".parse().unwrap()]).unwrap();
        let ca_before = std::fs::read(&a.ca).unwrap();
        let b = generate(dir.path(), "h2", &["h2".into()], &[]).unwrap();
        assert_eq!(std::fs::read(&b.ca).unwrap(), ca_before, "the CA is reused");
        server_config(&a.cert, &a.key).unwrap();
        server_config(&b.cert, &b.key).unwrap();
        client_config(&a.ca).unwrap();
        let err = server_config(&a.cert, &b.key).unwrap_err().to_string();
        assert!(err.contains("h1.pem"), "{err}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&a.key).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
