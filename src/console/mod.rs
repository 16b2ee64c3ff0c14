//! The web console (issue 49): a small single-page app of hand-written HTML, CSS and JavaScript,
//! embedded in the binary and served under `/ui/` beside the API it is a client of — by
//! `steward-sched serve` (a cluster) and by stewardd's remote listener (one host). Its files
//! hold no data, so they are served without a token (rate-limited like every request); each
//! page's data is the API itself, asked with the token the user gave the console.
//!
//! Why vanilla and embedded: no npm, no bundler and no CDN keep `cargo build` offline and
//! reproducible and the binary lean (the files are ~70 KB); see docs/console.md.

use crate::api::remote::{Guard, RemotePeer};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};

/// The console's files: name (under `/ui/static/`, but the page), content type, bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    // The page every console route answers: the app draws the view from the path (History
    // API), so a deep link or a reload lands on the same view.
    (INDEX, "text/html; charset=utf-8", include_bytes!("static/index.html")),
    ("console.js", "text/javascript; charset=utf-8", include_bytes!("static/console.js")),
    ("console.css", "text/css; charset=utf-8", include_bytes!("static/console.css")),
    ("favicon.svg", "image/svg+xml", include_bytes!("static/favicon.svg")),
];

const INDEX: &str = "index.html";

/// Scripts and styles from this origin only (none inline), data from the API on this origin
/// only, never framed.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `api` (already behind its token guard) with the console's routes beside it: `/` redirects to
/// `/ui/`; `/ui/static/FILE` are the files; any other `/ui/...` path is the page.
pub fn with_console(api: Router, guard: Arc<Guard>) -> Router {
    let console = Router::new()
        .route("/", get(|| async { redirect() }))
        .route("/ui", get(|| async { redirect() }))
        .route("/ui/", get(page))
        .route("/ui/static/{file}", get(file))
        .route("/ui/{*route}", get(page))
        .layer(axum::middleware::from_fn_with_state(guard, rate_limit));
    console.merge(api)
}

fn redirect() -> Response {
    (StatusCode::FOUND, [(header::LOCATION, "/ui/")]).into_response()
}

/// The rate limit of the API's guard, without its token check: the files are public.
async fn rate_limit(
    State(guard): State<Arc<Guard>>,
    ConnectInfo(peer): ConnectInfo<RemotePeer>,
    req: Request,
    next: Next,
) -> Response {
    if let Err(wait) = guard.limiter.take(peer.0.ip()) {
        let retry = wait.as_secs().max(1).to_string();
        let e = crate::api::error::ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many requests from this address",
        );
        return ([(header::RETRY_AFTER, retry)], e).into_response();
    }
    next.run(req).await
}

async fn page(headers: HeaderMap) -> Response {
    serve_file(&headers, 0)
}

async fn file(axum::extract::Path(name): axum::extract::Path<String>, headers: HeaderMap) -> Response {
    match FILES.iter().position(|(n, _, _)| *n == name && name != INDEX) {
        Some(i) => serve_file(&headers, i),
        None => crate::api::error::ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no console file {name}"))
            .into_response(),
    }
}

/// A file with its ETag: revalidated on each use (`no-cache`), answered 304 while unchanged, so
/// a new binary's console is never mixed with an old one's cached script.
fn serve_file(headers: &HeaderMap, i: usize) -> Response {
    let (name, kind, bytes) = FILES[i];
    if let Some(dir) = std::env::var_os("STEWARD_CONSOLE_DIR") {
        return from_dir(std::path::Path::new(&dir), name, kind);
    }
    let tag = etag(i);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut response = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { bytes.into_response() };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(tag) {
        h.insert(header::ETAG, v);
    }
    secure(h);
    response
}

/// STEWARD_CONSOLE_DIR: the files as they are in that directory now (working on the console
/// without a rebuild), never cached.
fn from_dir(dir: &std::path::Path, name: &str, kind: &'static str) -> Response {
    let path = dir.join(name);
    let mut response = match std::fs::read(&path) {
        Ok(bytes) => bytes.into_response(),
        Err(e) => {
            let message = format!("{}: {e}", path.display());
            return crate::api::error::ApiError::new(StatusCode::NOT_FOUND, "not_found", message).into_response();
        }
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    secure(h);
    response
}

/// The headers every console file carries.
fn secure(h: &mut HeaderMap) {
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// File `i`'s ETag, worked out once (the files never change while the binary runs).
fn etag(i: usize) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        FILES
            .iter()
            .map(|(_, _, b)| {
                let hex: String = Sha256::digest(b)[..8].iter().map(|x| format!("{x:02x}")).collect();
                format!("\"{hex}\"")
            })
            .collect()
    });
    &tags[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CSP forbids inline script and style: the files must not need them, and the script
    /// must never put text in as HTML (workloads' messages are shown).
    #[test]
    fn the_files_keep_to_the_policy() {
        let text = |name: &str| {
            let (_, _, bytes) = FILES.iter().find(|(n, _, _)| *n == name).unwrap();
            std::str::from_utf8(bytes).unwrap()
        };
        let page = text(INDEX);
        let handler = regex::Regex::new(r"\son[a-z]+\s*=").unwrap();
        assert!(!page.contains("<script>") && !page.contains("style=") && !handler.is_match(page), "{page}");
        assert!(page.contains(r#"<script src="/ui/static/console.js" defer></script>"#));
        let script = text("console.js");
        for unsafe_sink in ["innerHTML", "outerHTML =", "insertAdjacentHTML", "eval(", "new Function", "document.write"]
        {
            assert!(!script.contains(unsafe_sink), "console.js uses {unsafe_sink}");
        }
        assert!(!script.contains("setAttribute('style'"), "inline styles are refused by the CSP");
    }

    #[test]
    fn each_file_has_its_type_and_a_distinct_tag() {
        for (i, (name, kind, _)) in FILES.iter().enumerate() {
            let want = match name.rsplit('.').next() {
                Some("html") => "text/html; charset=utf-8",
                Some("js") => "text/javascript; charset=utf-8",
                Some("css") => "text/css; charset=utf-8",
                Some("svg") => "image/svg+xml",
                other => panic!("{name}: no type for {other:?}"),
            };
            assert_eq!(*kind, want, "{name}");
            assert!(etag(i).starts_with('"') && etag(i).len() == 18, "{}", etag(i));
        }
        let tags: std::collections::BTreeSet<_> = (0..FILES.len()).map(etag).collect();
        assert_eq!(tags.len(), FILES.len());
    }
}
