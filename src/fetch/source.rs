//! A `uris[]` entry resolved to what is fetched: the repository prefix applied, credentials
//! taken out of the URL (shown nowhere), the file name and its archive format.

use super::{FetchError, Fetcher, Format};
use crate::spec::render::RenderedUri;
use std::path::PathBuf;
use url::Url;

/// A uri, resolved. Deliberately not `Debug`: it holds the password.
pub(super) struct Source {
    pub(super) url: Url,
    /// For messages: no credentials, no query.
    pub(super) shown: String,
    pub(super) user: Option<String>,
    pub(super) password: Option<String>,
    /// For `file:` URLs.
    pub(super) local: Option<PathBuf>,
    pub(super) format: Format,
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A value that failed to parse, with anything that looks like `user:password@` hidden.
fn redact_text(value: &str) -> String {
    if let Some(scheme_end) = value.find("://") {
        let rest = &value[scheme_end + 3..];
        let authority_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            return format!("{}://***@{}", &value[..scheme_end], &rest[at + 1..]);
        }
    }
    value.to_string()
}

impl Fetcher {
    pub(super) fn resolve(&self, uri: &RenderedUri) -> Result<Source, FetchError> {
        let value = uri.value.trim();
        let full = if value.starts_with('/') {
            let repo = self
                .inner
                .options
                .repository
                .as_deref()
                .ok_or_else(|| FetchError::NoRepository { url: value.to_string() })?;
            format!("{}{value}", repo.trim_end_matches('/'))
        } else {
            value.to_string()
        };
        let invalid = |reason: String| FetchError::InvalidUri { value: redact_text(&full), reason };
        let mut url = Url::parse(&full).map_err(|e| invalid(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https" | "file") {
            return Err(invalid(format!("unsupported scheme {:?}: use http, https or file", url.scheme())));
        }
        let url_user = percent_decode(url.username());
        let url_password = url.password().map(percent_decode);
        let _ = url.set_username("");
        let _ = url.set_password(None);
        url.set_fragment(None);
        let user = uri.user.clone().or((!url_user.is_empty()).then_some(url_user));
        let password = uri.password.as_ref().map(|p| p.0.clone()).or(url_password);
        let shown = format!("{}{}", &url[..url::Position::AfterPath], if url.query().is_some() { "?…" } else { "" });
        let file_name = url.path_segments().and_then(|mut s| s.next_back()).map(percent_decode).unwrap_or_default();
        let format = Format::of(&file_name);
        if let Format::Plain(name) = &format {
            if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
                return Err(invalid("the URL does not end in a file name".into()));
            }
        }
        let local = if url.scheme() == "file" {
            Some(
                url.to_file_path()
                    .map_err(|()| invalid("not a local file path (file://host/ is not supported)".into()))?,
            )
        } else {
            None
        };
        Ok(Source { url, shown, user, password, local, format })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch::FetchOptions;
    use crate::spec::model::PullPolicy;
    use crate::spec::render::Redacted;

    fn uri(value: &str) -> RenderedUri {
        RenderedUri {
            value: value.into(),
            user: None,
            password: None,
            pull_policy: PullPolicy::IfNotPresent,
            output_dir: "/tmp/x".into(),
            sha256: None,
        }
    }

    fn fetcher(repository: Option<&str>) -> (tempfile::TempDir, Fetcher) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = FetchOptions::new(dir.path().join("cache"));
        o.repository = repository.map(str::to_string);
        (dir, Fetcher::new(o).unwrap())
    }

    #[test]
    fn resolves_values() {
        let (_d, f) = fetcher(Some("http://repo:8080/pkgs/"));
        let s = f.resolve(&uri("/prod/app.tar.gz")).unwrap();
        assert_eq!(s.url.as_str(), "http://repo:8080/pkgs/prod/app.tar.gz");
        assert_eq!(s.format, Format::TarGz);

        let mut u = uri("https://alice:s3cret@h/x/start%20me.sh?sig=abc#frag");
        let s = f.resolve(&u).unwrap();
        assert_eq!(s.url.as_str(), "https://h/x/start%20me.sh?sig=abc");
        assert_eq!(s.shown, "https://h/x/start%20me.sh?…");
        assert_eq!(s.user.as_deref(), Some("alice"));
        assert_eq!(s.password.as_deref(), Some("s3cret"));
        assert_eq!(s.format, Format::Plain("start me.sh".into()));
        u.user = Some("bob".into());
        u.password = Some(Redacted("pw".into()));
        let s = f.resolve(&u).unwrap();
        assert_eq!((s.user.as_deref(), s.password.as_deref()), (Some("bob"), Some("pw")));

        let s = f.resolve(&uri("file:///srv/a%20b.zip")).unwrap();
        assert_eq!(s.local, Some(PathBuf::from("/srv/a b.zip")));

        let (_d, none) = fetcher(None);
        assert!(matches!(none.resolve(&uri("/prod/x.tgz")), Err(FetchError::NoRepository { .. })));
        let err = f.resolve(&uri("ftp://h/x.tgz")).err().unwrap().to_string();
        assert!(err.contains("unsupported scheme"), "{err}");
        let err = f.resolve(&uri("http://h/dir/")).err().unwrap().to_string();
        assert!(err.contains("file name"), "{err}");
        let err = f.resolve(&uri("http://u:hunter2@[bad/x")).err().unwrap();
        assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2"), "a b%2");
        assert_eq!(percent_decode("%41%zz"), "A%zz");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("é%é"), "é%é");
    }
}
