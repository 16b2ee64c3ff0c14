//! A HookTemplate's rules, every mistake with its field path: names, seed 004's count and
//! interval rules, limits, conditions that compile, one provider with a usable URL or query,
//! JSON paths that parse, and `{{ args.NAME }}` only for declared args.

use super::condition::Condition;
use super::model::{parse_duration_ms, HookTemplate, Metric};
use crate::spec::error::{Errors, Path};
use std::collections::BTreeSet;

pub fn template(t: &HookTemplate, errors: &mut Errors) {
    let root = Path::root();
    if t.kind != "HookTemplate" {
        errors.add(&root.field("kind"), format!("must be HookTemplate, found {:?}", t.kind));
    }
    let meta = root.field("metadata");
    if let Err(e) = crate::spec::validate::check_name(&t.metadata.name) {
        errors.add(&meta.field("name"), e);
    }
    // As a process spec's: the default namespace is spelled as seed 000 spells it.
    if t.metadata.namespace != crate::spec::model::DEFAULT_NAMESPACE {
        if let Err(e) = crate::spec::validate::check_name(&t.metadata.namespace) {
            errors.add(&meta.field("namespace"), e);
        }
    }
    let spec = root.field("spec");
    let mut args = BTreeSet::new();
    for (i, a) in t.spec.args.iter().enumerate() {
        let at = spec.field("args").index(i).field("name");
        if a.name.is_empty() {
            errors.add(&at, "is required");
        } else if !args.insert(a.name.as_str()) {
            errors.add(&at, format!("{:?} is declared twice", a.name));
        }
    }
    if t.spec.metrics.is_empty() {
        errors.add(&spec.field("metrics"), "at least one metric is required");
    }
    let mut names = BTreeSet::new();
    for (i, m) in t.spec.metrics.iter().enumerate() {
        let at = spec.field("metrics").index(i);
        if m.name.is_empty() {
            errors.add(&at.field("name"), "is required");
        } else if !names.insert(m.name.as_str()) {
            errors.add(&at.field("name"), format!("{:?} is used by another metric", m.name));
        }
        metric(m, &at, &args, errors);
    }
}

fn metric(m: &Metric, at: &Path, args: &BTreeSet<&str>, errors: &mut Errors) {
    match &m.interval {
        Some(i) => match parse_duration_ms(i) {
            Ok(0) => errors.add(&at.field("interval"), "must be more than 0"),
            Ok(_) => {}
            Err(e) => errors.add(&at.field("interval"), e),
        },
        // Seed 004: "如果 count 大于 1,必须配置 interval".
        None if m.count.is_some_and(|n| n > 1) => {
            errors.add(&at.field("interval"), "is required when count is more than 1 (seed 004)")
        }
        None => {}
    }
    if m.count == Some(0) {
        errors.add(&at.field("count"), "must be at least 1 (leave it out for one measurement)");
    }
    for (field, limit) in [("failureLimit", m.failure_limit), ("consecutiveErrorLimit", m.consecutive_error_limit)] {
        if limit < -1 {
            errors.add(&at.field(field), format!("must be -1 (no limit) or more, found {limit}"));
        }
    }
    for (field, cond) in [("successCondition", &m.success_condition), ("failureCondition", &m.failure_condition)] {
        if let Some(c) = cond {
            if let Err(e) = Condition::parse(c) {
                errors.add(&at.field(field), e);
            }
        }
    }
    let p = at.field("provider");
    match (&m.provider.web, &m.provider.prometheus) {
        (Some(_), Some(_)) => errors.add(&p, "names both web and prometheus; a metric has one provider"),
        (None, None) => errors.add(&p, "needs web or prometheus"),
        (Some(web), None) => {
            let w = p.field("web");
            url(&web.url, &w.field("url"), args, errors);
            for (i, h) in web.headers.iter().enumerate() {
                if h.key.is_empty() {
                    errors.add(&w.field("headers").index(i).field("key"), "is required");
                }
                placeholders(&h.value, &w.field("headers").index(i).field("value"), args, errors);
            }
            if let Some(path) = &web.json_path {
                if let Err(e) = json_path(path) {
                    errors.add(&w.field("jsonPath"), e);
                }
            }
            if web.timeout_seconds == 0 || web.timeout_seconds > 600 {
                errors.add(&w.field("timeoutSeconds"), "must be 1 to 600");
            }
        }
        (None, Some(prom)) => {
            let q = p.field("prometheus");
            url(&prom.address, &q.field("address"), args, errors);
            if prom.query.trim().is_empty() {
                errors.add(&q.field("query"), "is required");
            }
            placeholders(&prom.query, &q.field("query"), args, errors);
        }
    }
}

/// An http(s) URL once its placeholders are filled.
fn url(value: &str, at: &Path, args: &BTreeSet<&str>, errors: &mut Errors) {
    placeholders(value, at, args, errors);
    let sample = super::fill_sample(value);
    match url::Url::parse(&sample) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(u) => errors.add(at, format!("{value:?}: the scheme must be http or https, found {}", u.scheme())),
        Err(e) => errors.add(at, format!("{value:?} is not a URL: {e}")),
    }
}

/// `{{ args.NAME }}` names a declared arg.
fn placeholders(value: &str, at: &Path, args: &BTreeSet<&str>, errors: &mut Errors) {
    for name in super::template_args(value) {
        match name.as_deref() {
            Ok(n) if args.contains(n) => {}
            Ok(n) => errors.add(at, format!("{{{{ args.{n} }}}}: no arg {n:?} is declared in spec.args")),
            Err(bad) => errors.add(at, format!("{bad:?}: placeholders are {{{{ args.NAME }}}}")),
        }
    }
}

/// Seed 004 writes `{$.age}`: the braces are optional.
pub fn json_path(path: &str) -> Result<serde_json_path::JsonPath, String> {
    let inner = path.trim().strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path.trim());
    serde_json_path::JsonPath::parse(inner).map_err(|e| format!("{path:?} is not a JSON path: {e}"))
}
