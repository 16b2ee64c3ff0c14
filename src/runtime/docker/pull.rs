//! Image pulls (seed 003 `imagePullPolicy`) through the engine's `POST /images/create`, with
//! registry credentials from a docker config JSON (a Steward secret's `.dockerconfigjson`).
//!
//! One pull per image at a time: pods asking for an image already being pulled wait for that
//! pull (a shared future keyed by the reference and the credentials), so ten pods started
//! together cause one pull. Re-adoption never gets here: only a start pulls.

use super::{Docker, DockerError};
use crate::spec::model::ImagePullPolicy;
use bollard::query_parameters as q;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Credentials for one registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RegistryAuth {
    /// As the config names it: `127.0.0.1:5000`, `https://index.docker.io/v1/`.
    pub server: String,
    pub username: String,
    pub password: String,
}

/// A pull under way: its end (seconds taken, or the registry's message), shared by every start
/// waiting for it, and the engine's latest progress line.
#[derive(Clone)]
pub(super) struct Pull {
    end: Shared<BoxFuture<'static, Result<f64, String>>>,
    progress: tokio::sync::watch::Receiver<String>,
}

/// The pulls under way, by reference and credentials.
pub(super) type Pulls = Arc<Mutex<HashMap<String, Pull>>>;

/// What [`Docker::ensure_image`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum PullOutcome {
    /// On the host already, and the policy did not ask for a pull.
    Present,
    /// Pulled, taking this many seconds (this start's pull, or one it waited for).
    Pulled { secs: f64, joined: bool },
    /// The pull failed under the default policy and the image on the host was used (seed-001
    /// pods with images loaded by hand keep working); the registry's message is kept.
    PresentAfterFailedPull { message: String },
}

/// The registry an image reference names: its first component when that has a `.` or a `:`
/// or is `localhost` (Docker's rule), else Docker Hub.
pub fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// `name[:tag|@digest]` as (name, tag-or-digest), `latest` when neither is given (an empty tag
/// would make the engine pull every tag).
pub fn split_reference(image: &str) -> (&str, &str) {
    if let Some((name, digest)) = image.split_once('@') {
        return (name, digest);
    }
    let last = image.rfind('/').map_or(0, |i| i + 1);
    match image[last..].rfind(':') {
        Some(i) => (&image[..last + i], &image[last + i + 1..]),
        None => (image, "latest"),
    }
}

/// The registries of a docker config JSON (`{"auths": {SERVER: {"auth": base64("user:pass")}
/// or {"username", "password"}}}`); Err says what is wrong with it.
pub fn parse_docker_config(text: &str) -> Result<Vec<RegistryAuth>, String> {
    use base64::Engine;
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let auths = doc.get("auths").and_then(|a| a.as_object()).ok_or("no \"auths\" object")?;
    let mut out = Vec::new();
    for (server, entry) in auths {
        let field = |k: &str| entry.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let (username, password) = match field("auth") {
            auth if !auth.is_empty() => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .map_err(|e| format!("auths.{server}.auth: not base64: {e}"))?;
                let text = String::from_utf8(decoded).map_err(|_| format!("auths.{server}.auth: not UTF-8"))?;
                let (u, p) = text.split_once(':').ok_or(format!("auths.{server}.auth: not \"user:password\""))?;
                (u.to_string(), p.to_string())
            }
            _ => (field("username"), field("password")),
        };
        if username.is_empty() {
            return Err(format!("auths.{server}: no auth or username"));
        }
        out.push(RegistryAuth { server: server.clone(), username, password });
    }
    Ok(out)
}

/// The credentials among `auths` for `image`'s registry (Docker Hub's under any of its names).
fn auth_for<'a>(image: &str, auths: &'a [RegistryAuth]) -> Option<&'a RegistryAuth> {
    let registry = registry_of(image);
    let host = |server: &str| {
        let s = server.trim_start_matches("https://").trim_start_matches("http://");
        s.split('/').next().unwrap_or_default().to_string()
    };
    let hub = ["docker.io", "index.docker.io", "registry-1.docker.io"];
    auths.iter().find(|a| {
        let h = host(&a.server);
        h == registry || (registry == "docker.io" && hub.contains(&h.as_str()))
    })
}

impl Docker {
    /// Makes `image` present by `policy` (seed 003: Always pulls every start, IfNotPresent only
    /// when missing, Never never). None, the default (Always, not written), leaves alone an image made on this host (no registry has it: seed-001 pods
    /// run images loaded by hand), and falls back to the image on the host when a pull fails.
    /// `progress` hears what the engine reports while the pull runs.
    pub async fn ensure_image(
        &self,
        image: &str,
        written: Option<ImagePullPolicy>,
        auths: &[RegistryAuth],
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<PullOutcome, DockerError> {
        // An image made on this host (imported, loaded, built) has no registry digest: no
        // registry has it to pull.
        let (policy, explicit) = (written.unwrap_or_default(), written.is_some());
        let (present, made_here) = match self.client()?.inspect_image(image).await {
            Ok(info) => (true, info.repo_digests.unwrap_or_default().is_empty()),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => (false, false),
            Err(e) => return Err(self.image_error(image, e)),
        };
        match policy {
            ImagePullPolicy::Never if present => return Ok(PullOutcome::Present),
            ImagePullPolicy::Never => return Err(DockerError::NoImage { image: image.to_string() }),
            ImagePullPolicy::IfNotPresent if present => return Ok(PullOutcome::Present),
            ImagePullPolicy::Always if present && made_here && !explicit => return Ok(PullOutcome::Present),
            _ => {}
        }
        let auth = auth_for(image, auths).cloned();
        let key =
            format!("{image}\u{0}{}", auth.as_ref().map_or(String::new(), |a| format!("{}@{}", a.username, a.server)));
        let (pull, joined) = {
            let mut pulls = self.pulls.lock().expect("pulls lock");
            match pulls.get(&key) {
                Some(p) => (p.clone(), true),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(String::new());
                    let end = pull_once(self.client()?, image.to_string(), auth, tx).boxed().shared();
                    let pull = Pull { end, progress: rx };
                    pulls.insert(key.clone(), pull.clone());
                    (pull, false)
                }
            }
        };
        progress(&match joined {
            true => format!("pulling {image} (a pull another start began)"),
            false => format!("pulling {image}"),
        });
        let Pull { mut end, progress: mut heard } = pull;
        let mine = end.clone();
        let result = loop {
            tokio::select! {
                result = &mut end => break result,
                changed = heard.changed() => match changed {
                    Ok(()) => {
                        let line = heard.borrow_and_update().clone();
                        progress(&format!("pulling {image}: {line}"));
                    }
                    // The pull's end is near: only its result is left to wait for.
                    Err(_) => break (&mut end).await,
                },
            }
        };
        // Whoever sees it end takes it off the list (the start that began it may have been
        // cancelled meanwhile); a later start pulls afresh.
        {
            let mut pulls = self.pulls.lock().expect("pulls lock");
            if pulls.get(&key).is_some_and(|p| p.end.ptr_eq(&mine)) {
                pulls.remove(&key);
            }
        }
        match result {
            Ok(secs) => Ok(PullOutcome::Pulled { secs, joined }),
            Err(message) if present && !explicit => Ok(PullOutcome::PresentAfterFailedPull { message }),
            Err(message) => Err(DockerError::Pull { image: image.to_string(), message }),
        }
    }
}

/// One pull to its end: Ok(seconds taken), or the engine's (the registry's) message.
async fn pull_once(
    client: bollard::Docker,
    image: String,
    auth: Option<RegistryAuth>,
    progress: tokio::sync::watch::Sender<String>,
) -> Result<f64, String> {
    let started = Instant::now();
    let (name, tag) = split_reference(&image);
    let options =
        q::CreateImageOptions { from_image: Some(name.to_string()), tag: Some(tag.to_string()), ..Default::default() };
    let credentials = auth.map(|a| bollard::auth::DockerCredentials {
        username: Some(a.username),
        password: Some(a.password),
        serveraddress: Some(a.server),
        ..Default::default()
    });
    let mut stream = client.create_image(Some(options), None, credentials);
    while let Some(step) = stream.next().await {
        match step {
            Ok(info) => {
                if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                    return Err(detail);
                }
                // `Downloading 3a2f…: [==>   ] 1.2MB/4MB`, as `docker pull` shows it.
                let what = [info.status, info.id, info.progress].into_iter().flatten().collect::<Vec<_>>();
                if !what.is_empty() {
                    let _ = progress.send(what.join(" "));
                }
            }
            Err(bollard::errors::Error::DockerStreamError { error }) => return Err(error),
            Err(bollard::errors::Error::DockerResponseServerError { message, .. }) => return Err(message),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_registries_read_as_docker_reads_them() {
        assert_eq!(split_reference("busybox"), ("busybox", "latest"));
        assert_eq!(split_reference("127.0.0.1:5000/tiny:v1"), ("127.0.0.1:5000/tiny", "v1"));
        assert_eq!(split_reference("127.0.0.1:5000/tiny"), ("127.0.0.1:5000/tiny", "latest"));
        assert_eq!(split_reference("a/b@sha256:00ff"), ("a/b", "sha256:00ff"));
        assert_eq!(registry_of("127.0.0.1:5000/tiny:v1"), "127.0.0.1:5000");
        assert_eq!(registry_of("localhost/tiny"), "localhost");
        assert_eq!(registry_of("library/busybox"), "docker.io");
        assert_eq!(registry_of("busybox:1"), "docker.io");
    }

    #[test]
    fn docker_config_json_gives_each_registrys_credentials() {
        let config = r#"{"auths": {"127.0.0.1:5000": {"auth": "dXNlcjpwYSpzcw=="},
                        "https://index.docker.io/v1/": {"username": "hub", "password": "x"}}}"#;
        let auths = parse_docker_config(config).unwrap();
        let local = auth_for("127.0.0.1:5000/tiny:v1", &auths).unwrap();
        assert_eq!((local.username.as_str(), local.password.as_str()), ("user", "pa*ss"));
        assert_eq!(auth_for("busybox", &auths).unwrap().username, "hub");
        assert!(auth_for("other.example:443/x", &auths).is_none());
        assert_eq!(parse_docker_config("{}").unwrap_err(), "no \"auths\" object");
        assert!(parse_docker_config(r#"{"auths": {"r": {"auth": "!!"}}}"#)
            .unwrap_err()
            .contains("auths.r.auth: not base64"));
    }
}
