//! Taking one measurement (seed 004's providers): a `web` GET whose JSON body, or what its
//! `jsonPath` selects, is the result; or a `prometheus` instant query whose vector's values (or
//! scalar) are. URLs, headers and queries are filled from the run's args first, and what was
//! called is returned with the outcome, so a measurement says exactly what it asked.

use super::metric::Outcome;
use super::model::{Metric, Prometheus, Web};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a Prometheus query may take.
const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(30);

/// One call of `metric`'s provider: the outcome, and the URL or query after templating.
pub async fn measure(http: &reqwest::Client, metric: &Metric, args: &BTreeMap<String, String>) -> (Outcome, String) {
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

async fn get_web(http: &reqwest::Client, web: &Web, url: &str, args: &BTreeMap<String, String>) -> Outcome {
    let mut request = http.get(url).timeout(Duration::from_secs(web.timeout_seconds));
    for h in &web.headers {
        match super::fill(&h.value, args) {
            Ok(v) => request = request.header(&h.key, v),
            Err(e) => return Outcome::Error(format!("header {}: {e}", h.key)),
        }
    }
    let (status, body) = match send(request).await {
        Ok(answer) => answer,
        Err(e) => return Outcome::Error(e),
    };
    if !status.is_success() {
        return Outcome::Error(format!("answered {status}: {}", snippet(&body)));
    }
    let json: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        // Without a JSON path a plain-text body is the result as it is.
        Err(_) if web.json_path.is_none() => {
            return Outcome::Value(serde_json::Value::String(String::from_utf8_lossy(&body).trim().to_string()))
        }
        Err(e) => return Outcome::Error(format!("the answer is not JSON ({e}): {}", snippet(&body))),
    };
    let Some(path) = &web.json_path else { return Outcome::Value(json) };
    let path = match super::validate::json_path(path) {
        Ok(p) => p,
        Err(e) => return Outcome::Error(e),
    };
    let found = path.query(&json).all();
    match found.as_slice() {
        [] => Outcome::NoData,
        [one] => Outcome::Value((*one).clone()),
        many => Outcome::Value(serde_json::Value::Array(many.iter().map(|v| (*v).clone()).collect())),
    }
}

/// An instant query: a vector's sample values as a list of numbers (NaN and the infinities as
/// Prometheus spells them stay strings a condition reads with asFloat), a scalar as a number;
/// an empty vector is no data.
async fn query_prometheus(
    http: &reqwest::Client,
    prom: &Prometheus,
    query: &str,
    args: &BTreeMap<String, String>,
) -> Outcome {
    let address = match super::fill(&prom.address, args) {
        Ok(a) => a,
        Err(e) => return Outcome::Error(e),
    };
    let url = format!("{}/api/v1/query", address.trim_end_matches('/'));
    let (status, body) = match send(http.get(&url).query(&[("query", query)]).timeout(PROMETHEUS_TIMEOUT)).await {
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

/// Sends `request` and reads the whole answer; an error says why, with its cause.
async fn send(request: reqwest::RequestBuilder) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
    let response = request.send().await.map_err(|e| describe(&e))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| format!("reading the answer: {}", describe(&e)))?.to_vec();
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
