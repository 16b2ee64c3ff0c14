//! Hooks that gate updates (seed 004, issue 19): a HookTemplate names metrics — a web endpoint or
//! a Prometheus query, called a number of times at an interval, each result judged by CEL
//! conditions — and a HookRun runs a template's metrics with its args and records every
//! measurement. Here: the template as written and checked ([`model`], [`validate`]), the
//! conditions ([`condition`]), and the pure bookkeeping of a metric's measurements into its
//! phase ([`metric`]), one call of a provider ([`provider`]) and one metric run to its verdict
//! ([`runner`]); a run as stored ([`run`]) and the store-backed keeper of templates and runs
//! that drives each unfinished run ([`keeper`]); what a controller knows of an instance and
//! passes as args ([`facts`]), and a rollout step's args, checked when its spec is applied
//! ([`steps`]).

pub mod condition;
pub mod facts;
pub mod keeper;
pub mod metric;
pub mod model;
pub mod provider;
pub mod run;
pub mod runner;
pub mod steps;
pub mod validate;

pub use condition::Condition;
pub use keeper::{HookError, Hooks};
pub use metric::{MeasurementPhase, MetricPhase, MetricResult};
pub use model::{HookTemplate, Metric, NoData, Provider};
pub use run::{CreateHookRun, HookRun, HookRunSummary, HookTemplateSummary};

/// Reads a HookTemplate document (JSON, TOML or YAML): every mistake at once, each with its
/// field path.
pub fn parse_template(text: &str, format: crate::spec::Format) -> Result<HookTemplate, crate::spec::SpecErrors> {
    let doc = crate::spec::parse_document(text, format)?;
    template_from_document(&doc)
}

/// As [`parse_template`], from a document already parsed.
pub fn template_from_document(doc: &serde_json::Value) -> Result<HookTemplate, crate::spec::SpecErrors> {
    let (template, errors) = crate::spec::decode_as::<HookTemplate>(doc);
    let Some(template) = template else { return Err(crate::spec::SpecErrors(errors)) };
    let mut found = crate::spec::error::Errors::default();
    validate::template(&template, &mut found);
    crate::spec::SpecErrors(crate::spec::with_rule_errors(errors, found.0)).into_result(template)
}

/// `text` with each `{{ ... }}` replaced by what `each` makes of its trimmed inside; the
/// first error (`each`'s, or an unclosed `{{`) ends it.
fn substitute(text: &str, mut each: impl FnMut(&str) -> Result<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let len = rest[start..].find("}}").ok_or_else(|| format!("{:?}: an unclosed {{{{", &rest[start..]))?;
        out.push_str(&rest[..start]);
        out.push_str(&each(rest[start + 2..start + len].trim())?);
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The NAME of `args.NAME`, if that is what a placeholder holds.
fn arg_name(inside: &str) -> Option<&str> {
    inside
        .strip_prefix("args.")
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
}

/// Every mistake in `text`'s placeholders: Ok(NAME) for each `{{ args.NAME }}`, Err(what was
/// written) for one that is not.
pub fn template_args(text: &str) -> Vec<Result<String, String>> {
    let mut found = Vec::new();
    if let Err(e) = substitute(text, |inside| {
        found.push(arg_name(inside).map(String::from).ok_or_else(|| format!("{{{{ {inside} }}}}")));
        Ok(String::new())
    }) {
        found.push(Err(e));
    }
    found
}

/// `text` with its `{{ args.NAME }}` filled from `args`; an arg without a value is an error
/// naming it.
pub fn fill(text: &str, args: &std::collections::BTreeMap<String, String>) -> Result<String, String> {
    substitute(text, |inside| {
        let name = arg_name(inside).ok_or_else(|| format!("{text:?}: {inside:?} is not args.NAME"))?;
        args.get(name).cloned().ok_or_else(|| format!("arg {name:?} has no value"))
    })
}

/// `text` with every placeholder replaced by a sample value, to check what is left is a URL
/// (`1` fits a host, a port and a path).
fn fill_sample(text: &str) -> String {
    substitute(text, |_| Ok("1".into())).unwrap_or_else(|_| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = r#"{
      "apiVersion": "tkex.tencent.com/v1alpha1", "kind": "HookTemplate",
      "metadata": {"name": "test"},
      "spec": {
        "args": [{"name": "service-name", "value": "svc.local"}, {"name": "PodName"}],
        "metrics": [{"name": "webtest", "count": 2, "interval": "60s", "failureLimit": 0,
                     "successCondition": "asInt(result) < 30",
                     "provider": {"web": {"url": "http://{{ args.service-name }}:9091", "jsonPath": "{$.age}"}}}]
      }
    }"#;

    #[test]
    fn the_seeds_template_reads_and_every_mistake_is_named() {
        let t = parse_template(SEED, crate::spec::Format::Json).unwrap();
        assert_eq!(t.spec.metrics[0].planned(), Some(2));
        assert_eq!(t.metadata.namespace, "defaultGroup");
        let toml =
            "kind = \"HookTemplate\"\n[metadata]\nname = \"t\"\n[[spec.metrics]]\nname = \"q\"\ninterval = \"30s\"\n\
                    successCondition = \"result[0] < 0.05\"\n[spec.metrics.provider.prometheus]\n\
                    address = \"http://127.0.0.1:9090\"\nquery = \"rate(errors[1m])\"\n";
        let t = parse_template(toml, crate::spec::Format::Toml).unwrap();
        assert_eq!(t.spec.metrics[0].planned(), None, "interval alone: until stopped");

        let bad = r#"{"kind": "HookTemplate", "metadata": {"name": "t"}, "spec": {"args": [{"name": "a"}],
          "metrics": [{"name": "m", "count": 3, "successCondition": "asInt(result) <", "failureLimit": -2,
                       "provider": {"web": {"url": "ftp://{{ args.b }}/x", "jsonPath": "{$.[}"}}},
                      {"name": "m", "provider": {}}]}}"#;
        let e = parse_template(bad, crate::spec::Format::Json).unwrap_err().to_string();
        for want in [
            "spec.metrics[0].interval: is required when count is more than 1",
            "spec.metrics[0].failureLimit: must be -1 (no limit) or more",
            "spec.metrics[0].successCondition: \"asInt(result) <\" does not parse",
            "spec.metrics[0].provider.web.url: {{ args.b }}: no arg \"b\" is declared",
            "the scheme must be http or https",
            "spec.metrics[0].provider.web.jsonPath: \"{$.[}\" is not a JSON path",
            "spec.metrics[1].name: \"m\" is used by another metric",
            "spec.metrics[1].provider: needs web or prometheus",
        ] {
            assert!(e.contains(want), "missing {want:?} in:\n{e}");
        }
    }

    #[test]
    fn placeholders_are_filled_from_args() {
        let args = std::collections::BTreeMap::from([("PodIP".to_string(), "127.0.0.1".to_string())]);
        assert_eq!(fill("http://{{ args.PodIP }}:9091/x", &args).unwrap(), "http://127.0.0.1:9091/x");
        assert!(fill("{{ args.Other }}", &args).unwrap_err().contains("\"Other\" has no value"));
        assert_eq!(template_args("a {{args.x}} {{ nope }}"), vec![Ok("x".to_string()), Err("{{ nope }}".to_string())]);
    }
}
