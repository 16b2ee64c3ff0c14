//! Taking one measurement (seed 004's providers): a `web` GET whose JSON body, or what its
//! `jsonPath` selects, is the result; or a `prometheus` instant query whose vector's values (or
//! scalar) are. URLs, headers and queries are filled from the run's args first, and what was
//! called is returned with the outcome, so a measurement says exactly what it asked.
//!
//! What an endpoint may make the daemon do is bounded (issue 51): an answer is read chunk by
//! chunk and dropped once it passes `hook_max_response_bytes`; a redirect is refused unless the
//! template sets `followRedirects`, and then followed within the URL's origin only (a probed
//! endpoint must not point the daemon at an internal address and have the answer published).

use super::metric::Outcome;
use super::model::{Metric, Prometheus, Web};
use reqwest::redirect::{Action, Attempt, Policy};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a Prometheus query may take.
const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(30);

/// `hook_max_response_bytes`' default.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1 << 20;

/// Redirects followed in one call (followRedirects), as a browser's limit.
const MAX_REDIRECTS: usize = 10;

/// The clients measurements call through, and the bound on an answer: cheap to clone.
#[derive(Clone)]
pub struct Http {
    /// Follows no redirect.
    direct: reqwest::Client,
    /// Follows redirects within the first URL's origin.
    same_origin: reqwest::Client,
    max_response_bytes: u64,
}

impl Http {
    pub fn new(max_response_bytes: u64) -> Http {
        let client = |policy| {
            reqwest::Client::builder()
                .user_agent(concat!("steward-hooks/", env!("CARGO_PKG_VERSION")))
                .redirect(policy)
                .build()
                // Not `unwrap_or_default`: the default client follows any redirect.
                .expect("the hooks' HTTP client builds")
        };
        Http {
            direct: client(Policy::custom(refuse_redirect)),
            same_origin: client(Policy::custom(same_origin_redirect)),
            max_response_bytes,
        }
    }
}

fn refuse_redirect(attempt: Attempt) -> Action {
    let why = format!("redirected to {}; redirects are not followed (followRedirects)", attempt.url());
    attempt.error(why)
}

fn same_origin_redirect(attempt: Attempt) -> Action {
    let first = &attempt.previous()[0];
    if first.origin() != attempt.url().origin() {
        let why = format!("redirected to {}: not the same origin as {first} (followRedirects)", attempt.url());
        return attempt.error(why);
    }
    if attempt.previous().len() > MAX_REDIRECTS {
        return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
    }
    attempt.follow()
}

/// One call of `metric`'s provider: the outcome, and the URL or query after templating.
pub async fn measure(http: &Http, metric: &Metric, args: &BTreeMap<String, String>) -> (Outcome, String) {
    match (&metric.provider.web, &metric.provider.prometheus) {
        (Some(web), _) => match super::fill(&web.url, args) {
            Ok(url) => (get_web(http, web, &url, args).await, format!("GET {url}")),
            Err(e) => (Outcome::Error(e), web.url.clone()),
        },
        (None, Some(prom)) => match super::fill(&prom.query, args) {
            Ok(query) => (query_prometheus(http, prom, &query, args).await, format!("query {query}")),
            Err(e) => (Outcome::Error(e), prom.query.clone()),
        },
        (None, None) => (Outcome::Error("the metric has no provider".into()), String::new()),
    }
}

async fn get_web(http: &Http, web: &Web, url: &str, args: &BTreeMap<String, String>) -> Outcome {
    let client = if web.follow_redirects { &http.same_origin } else { &http.direct };
    let mut request = client.get(url).timeout(Duration::from_secs(web.timeout_seconds));
    for h in &web.headers {
        match super::fill(&h.value, args) {
            Ok(v) => request = request.header(&h.key, v),
            Err(e) => return Outcome::Error(format!("header {}: {e}", h.key)),
        }
    }
    let (status, body) = match send(request, http.max_response_bytes).await {
        Ok(answer) => answer,
        Err(e) => return Outcome::Error(e),
    };
    if !status.is_success() {
        return Outcome::Error(format!("answered {status}: {}", snippet(&body)));
    }
    outcome_of_body(&body, web.json_path.as_deref(), http.max_response_bytes)
}

/// What a web answer's body gives: its JSON, or what `json_path` selects in it, or (without a
/// path and not JSON) its text. A selection over `max_bytes` is an error, not a value: `$..*`
/// copies every node once per ancestor, far more than the body. Pure, for the fuzz target.
pub fn outcome_of_body(body: &[u8], json_path: Option<&str>, max_bytes: u64) -> Outcome {
    let json: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        // Without a JSON path a plain-text body is the result as it is.
        Err(_) if json_path.is_none() => {
            return Outcome::Value(serde_json::Value::String(String::from_utf8_lossy(body).trim().to_string()))
        }
        Err(e) => return Outcome::Error(format!("the answer is not JSON ({e}): {}", snippet(body))),
    };
    let Some(written) = json_path else { return Outcome::Value(json) };
    let path = match super::validate::json_path(written) {
        Ok(p) => p,
        Err(e) => return Outcome::Error(e),
    };
    let found = path.query(&json).all();
    if !fits(&found, max_bytes) {
        return Outcome::Error(format!("what jsonPath {written} selects is larger than {max_bytes} bytes"));
    }
    match found.as_slice() {
        [] => Outcome::NoData,
        [one] => Outcome::Value((*one).clone()),
        many => Outcome::Value(serde_json::Value::Array(many.iter().map(|v| (*v).clone()).collect())),
    }
}

/// Whether `values` as JSON take at most `max_bytes`; stops counting once past it.
fn fits(values: &[&serde_json::Value], max_bytes: u64) -> bool {
    struct Count(u64, u64);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len() as u64;
            if self.0 > self.1 {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0, max_bytes);
    values.iter().all(|v| serde_json::to_writer(&mut count, v).is_ok())
}

/// An instant query: a vector's sample values as a list of numbers (NaN and the infinities as
/// Prometheus spells them stay strings a condition reads with asFloat), a scalar as a number;
/// an empty vector is no data.
async fn query_prometheus(http: &Http, prom: &Prometheus, query: &str, args: &BTreeMap<String, String>) -> Outcome {
    let address = match super::fill(&prom.address, args) {
        Ok(a) => a,
        Err(e) => return Outcome::Error(e),
    };
    let url = format!("{}/api/v1/query", address.trim_end_matches('/'));
    let request = http.direct.get(&url).query(&[("query", query)]).timeout(PROMETHEUS_TIMEOUT);
    let (status, body) = match send(request, http.max_response_bytes).await {
        Ok(answer) => answer,
        Err(e) => return Outcome::Error(e),
    };
    let json: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return Outcome::Error(format!("{url} answered {status}, not JSON ({e}): {}", snippet(&body))),
    };
    if json["status"] != "success" {
        let why = json["error"].as_str().unwrap_or("no reason given");
        return Outcome::Error(format!("Prometheus refused the query ({status}): {why}"));
    }
    let number = |v: &serde_json::Value| -> serde_json::Value {
        let text = v.as_str().unwrap_or_default();
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => serde_json::json!(f),
            _ => serde_json::Value::String(text.to_string()),
        }
    };
    let data = &json["data"];
    match data["resultType"].as_str() {
        Some("vector") => {
            let samples = data["result"].as_array().cloned().unwrap_or_default();
            if samples.is_empty() {
                return Outcome::NoData;
            }
            Outcome::Value(serde_json::Value::Array(samples.iter().map(|s| number(&s["value"][1])).collect()))
        }
        Some("scalar") => Outcome::Value(number(&data["result"][1])),
        other => {
            Outcome::Error(format!("a {} result; the query must give a vector or a scalar", other.unwrap_or("missing")))
        }
    }
}

/// Sends `request` and reads the answer, at most `max_bytes` of it: a longer one is refused as
/// soon as it says so (Content-Length) or its reading passes the bound, and the connection is
/// dropped there. An error says why, with its cause.
async fn send(request: reqwest::RequestBuilder, max_bytes: u64) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
    let too_large = || format!("the answer is larger than {max_bytes} bytes (hook_max_response_bytes)");
    let mut response = request.send().await.map_err(|e| describe(&e))?;
    let status = response.status();
    if response.content_length().is_some_and(|n| n > max_bytes) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("reading the answer: {}", describe(&e)))? {
        if (body.len() + chunk.len()) as u64 > max_bytes {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, body))
}

/// A reqwest error with its cause (connection refused, timed out), not only "error sending request".
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    if e.is_timeout() {
        text.push_str(" (timed out)");
    }
    text
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.chars().count() > 200 {
        format!("{}…", text.chars().take(200).collect::<String>())
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_body_is_its_json_its_text_or_what_the_path_selects() {
        assert_eq!(outcome_of_body(b" plain \n", None, 100), Outcome::Value(json!("plain")));
        assert_eq!(outcome_of_body(br#"{"age": 20}"#, None, 100), Outcome::Value(json!({"age": 20})));
        assert_eq!(outcome_of_body(br#"{"age": 20}"#, Some("{$.age}"), 100), Outcome::Value(json!(20)));
        assert_eq!(outcome_of_body(br#"{"age": 20}"#, Some("$.name"), 100), Outcome::NoData);
        let Outcome::Error(e) = outcome_of_body(b"plain", Some("$.age"), 100) else { panic!() };
        assert!(e.starts_with("the answer is not JSON"), "{e}");
    }

    /// `$..*` over nested arrays copies each node once per ancestor: held to the bound.
    #[test]
    fn a_selection_larger_than_the_bound_is_an_error() {
        let nested = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        let Outcome::Error(e) = outcome_of_body(nested.as_bytes(), Some("$..*"), 1000) else { panic!() };
        assert_eq!(e, "what jsonPath $..* selects is larger than 1000 bytes");
        assert!(matches!(outcome_of_body(nested.as_bytes(), Some("$..*"), 1 << 20), Outcome::Value(_)));
        assert!(fits(&[&json!([1, 2])], 5) && !fits(&[&json!([1, 2]), &json!(3)], 5));
    }
}
