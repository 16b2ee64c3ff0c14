//! A HookTemplate as written (seed 004): `metadata`, `spec.args`, `spec.metrics[]` each with a
//! `web` or `prometheus` provider. Field names are the seed's; durations are the seed's strings
//! (`60s`, `2m`, `1h30m`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookTemplate {
    #[serde(default = "api_version")]
    pub api_version: String,
    #[serde(default = "kind")]
    pub kind: String,
    pub metadata: HookMetadata,
    pub spec: HookTemplateSpec,
}

fn api_version() -> String {
    "v1alpha1".into()
}

fn kind() -> String {
    "HookTemplate".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookMetadata {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
}

fn default_namespace() -> String {
    crate::spec::model::DEFAULT_NAMESPACE.to_string()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HookTemplateSpec {
    /// Values the URLs, headers and queries take as `{{ args.NAME }}`; one without a value is
    /// given when a HookRun is created.
    pub args: Vec<Arg>,
    pub metrics: Vec<Metric>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arg {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    pub name: String,
    /// Measurements to take. Seed 004: neither count nor interval = one; interval alone = until
    /// the run is stopped; a count over 1 needs an interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Between two measurements: `30s`, `2m`, `1h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_condition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_condition: Option<String>,
    /// Failed measurements the metric tolerates: more fail it. 0 (the seed's default): one
    /// failed measurement fails it; -1: no limit.
    #[serde(default)]
    pub failure_limit: i64,
    /// Errors in a row the metric tolerates: more make it Error. The seed gives no default;
    /// 4, as Argo Rollouts (whose AnalysisTemplate seed 004 follows); -1: no limit.
    #[serde(default = "default_consecutive_error_limit")]
    pub consecutive_error_limit: i64,
    /// What a measurement that found no data (an empty Prometheus vector, a JSON path that
    /// matched nothing) counts as.
    #[serde(default)]
    pub no_data: NoData,
    pub provider: Provider,
}

pub const DEFAULT_CONSECUTIVE_ERROR_LIMIT: i64 = 4;

fn default_consecutive_error_limit() -> i64 {
    DEFAULT_CONSECUTIVE_ERROR_LIMIT
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NoData {
    /// An Error measurement (counts toward consecutiveErrorLimit).
    #[default]
    Error,
    /// An Inconclusive measurement.
    Inconclusive,
    /// A Failed measurement (counts toward failureLimit).
    Fail,
}

/// Exactly one of them (checked).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Provider {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web: Option<Web>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<Prometheus>,
}

/// A GET of `url`; the result is the body (JSON), or what `jsonPath` selects in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Web {
    pub url: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<Header>,
    /// Seed 004 writes `{$.age}`; the braces are optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_path: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Follow redirects, within the URL's origin (scheme, host and port) only; unset, a
    /// redirect is an error: the daemon is not pointed elsewhere by what it probes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follow_redirects: bool,
}

fn default_timeout() -> u64 {
    10
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub key: String,
    pub value: String,
}

/// An instant query against a Prometheus server: the result is the vector's values (numbers),
/// or a scalar's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prometheus {
    /// `http://127.0.0.1:9090`.
    pub address: String,
    pub query: String,
}

impl Metric {
    /// The texts its `{{ args.NAME }}` may be written in: a web URL and header values, a
    /// Prometheus address and query.
    pub fn templated_texts(&self) -> Vec<&str> {
        let web = self
            .provider
            .web
            .iter()
            .flat_map(|w| std::iter::once(w.url.as_str()).chain(w.headers.iter().map(|h| h.value.as_str())));
        let prometheus = self.provider.prometheus.iter().flat_map(|p| [p.address.as_str(), p.query.as_str()]);
        web.chain(prometheus).collect()
    }

    /// How many measurements it takes: Some(n), or None for "until stopped".
    pub fn planned(&self) -> Option<u32> {
        match (self.count, &self.interval) {
            (Some(n), _) => Some(n),
            (None, None) => Some(1),
            (None, Some(_)) => None,
        }
    }
}

/// A seed duration (`90s`, `2m`, `1h30m`, `500ms`) in milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a duration (e.g. 30s, 2m, 1h30m, 500ms)");
    let mut total: u64 = 0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.chars().take_while(char::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(bad()),
        };
        total = n.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(bad)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_the_seed_writes_them() {
        assert_eq!(parse_duration_ms("60s"), Ok(60_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        for bad in ["", "60", "s", "1d", "-1s", "1.5s"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }
}
