//! The hook a rollout step runs (`{hook: {template, args}}`): the args its run gets — the
//! step's, then the controller's facts ([`super::facts`]) for the template's args without a
//! value, the template's own values as defaults — and the check when the spec is applied that
//! every arg the template needs will have a value, so a missing one fails the apply naming the
//! step and the arg rather than the rollout at the gate.

use super::facts;
use super::model::HookTemplate;
use crate::spec::{ProcessSpec, SpecError};
use std::collections::{BTreeMap, BTreeSet};

/// The args a run of `template` gets: `given` (the step's), and for each of the template's
/// args without a value that the step does not give, the fact of that name. Facts are
/// offered, not imposed: an arg the template does not declare, or gives a value, gets none.
pub fn run_args(
    template: &HookTemplate,
    mut given: BTreeMap<String, String>,
    facts: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    for arg in template.spec.args.iter().filter(|a| a.value.is_none()) {
        if let (false, Some(fact)) = (given.contains_key(&arg.name), facts.get(&arg.name)) {
            given.insert(arg.name.clone(), fact.clone());
        }
    }
    given
}

/// The args `template` needs a value for when it runs: those it declares without one, and any
/// `{{ args.NAME }}` it writes that it gives no value (a checked template declares them all).
pub fn needed_args(template: &HookTemplate) -> BTreeSet<String> {
    let valued: BTreeSet<&str> =
        template.spec.args.iter().filter(|a| a.value.is_some()).map(|a| a.name.as_str()).collect();
    let declared = template.spec.args.iter().map(|a| a.name.clone());
    let written = template.spec.metrics.iter().flat_map(|m| m.templated_texts()).flat_map(super::template_args);
    declared.chain(written.filter_map(Result::ok)).filter(|name| !valued.contains(name.as_str())).collect()
}

/// Every mistake in the hooks `spec`'s rollout runs, each with its field path: the template
/// must be stored (`stored` finds one by name in the spec's namespace; `store_with` is the
/// command that stores one, for the message), each arg a step gives must be one the template
/// declares, and each arg the template needs must have a value from the template, the step or
/// the controller's facts.
pub fn check(spec: &ProcessSpec, stored: impl Fn(&str) -> Option<HookTemplate>, store_with: &str) -> Vec<SpecError> {
    let namespace = &spec.metadata.namespace;
    let ports = spec.port_wants();
    let facts = facts::fact_names(ports.iter().map(|w| w.name.as_str()));
    let mut errors = Vec::new();
    for (path, hook) in spec.strategy.hooks() {
        let at = format!("strategy.{path}");
        let Some(template) = stored(&hook.template) else {
            errors.push(SpecError::new(
                format!("{at}.template"),
                format!("no hook template {namespace}/{} ({store_with} FILE)", hook.template),
            ));
            continue;
        };
        let key = template.key();
        for (j, arg) in hook.args.iter().enumerate() {
            if !template.spec.args.iter().any(|a| a.name == arg.name) {
                let message = format!("template {key} declares no arg {:?} (its spec.args)", arg.name);
                errors.push(SpecError::new(format!("{at}.args[{j}].name"), message));
            }
        }
        let given: BTreeSet<&str> = hook.args.iter().map(|a| a.name.as_str()).collect();
        for name in needed_args(&template) {
            if !given.contains(name.as_str()) && !facts.contains(&name) {
                let message = format!(
                    "template {key} needs arg {name:?}, which neither the template, the step nor the controller gives"
                );
                errors.push(SpecError::new(format!("{at}.args"), message));
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> HookTemplate {
        crate::hooks::parse_template(
            r#"{"kind": "HookTemplate", "metadata": {"name": "check", "namespace": "test"}, "spec": {
                 "args": [{"name": "PodIP"}, {"name": "PORT_http"}, {"name": "path", "value": "/ok"},
                          {"name": "token"}],
                 "metrics": [{"name": "m", "provider": {"web": {
                     "url": "http://{{ args.PodIP }}:{{ args.PORT_http }}{{ args.path }}",
                     "headers": [{"key": "Authorization", "value": "Bearer {{ args.token }}"}]}}}]}}"#,
            crate::spec::Format::Json,
        )
        .unwrap()
    }

    fn spec(steps: serde_json::Value) -> ProcessSpec {
        let doc = serde_json::json!({"apiVersion": "v1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "test"},
            "spec": {"instance": 1, "template": {"spec": {"processes": [{"procName": "p", "startCmd": "sleep 1",
                     "ports": [{"name": "http", "hostPort": 0}]}]}}},
            "strategy": {"steps": steps}});
        let (spec, errors) = crate::spec::decode(&doc);
        assert_eq!(errors, []);
        spec.unwrap()
    }

    #[test]
    fn the_step_wins_facts_fill_the_rest_and_values_are_defaults() {
        let t = template();
        let given = BTreeMap::from([("PodIP".to_string(), "10.1.1.1".to_string())]);
        let facts = BTreeMap::from([
            ("PodIP".to_string(), "10.0.0.5".to_string()),
            ("PORT_http".to_string(), "31000".to_string()),
            ("path".to_string(), "/fact".to_string()),
            ("PodName".to_string(), "test.web.0".to_string()),
        ]);
        let args = run_args(&t, given, &facts);
        assert_eq!(args["PodIP"], "10.1.1.1", "the step's value");
        assert_eq!(args["PORT_http"], "31000", "a fact for an arg without a value");
        assert!(!args.contains_key("path"), "the template's value stays its default");
        assert!(!args.contains_key("PodName"), "a fact the template does not declare is not passed");
        assert_eq!(needed_args(&t), BTreeSet::from(["PORT_http".into(), "PodIP".into(), "token".into()]));
    }

    #[test]
    fn an_arg_nothing_gives_is_named_with_its_step() {
        let t = template();
        let stored = |name: &str| (name == "check").then(|| t.clone());
        let errors = check(
            &spec(serde_json::json!([{"partition": 1}, {"pause": 1},
                                      {"hook": {"template": "check", "args": [{"name": "nope", "value": "1"}]}},
                                      {"hook": {"template": "absent"}}])),
            stored,
            "steward hook template apply",
        );
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "strategy.steps[2].hook.args[0].name: template test/check declares no arg \"nope\" (its spec.args)",
                "strategy.steps[2].hook.args: template test/check needs arg \"token\", which neither the template, \
                 the step nor the controller gives",
                "strategy.steps[3].hook.template: no hook template test/absent (steward hook template apply FILE)",
            ]
        );
        let given =
            spec(serde_json::json!([{"hook": {"template": "check", "args": [{"name": "token", "value": "t"}]}}]));
        assert_eq!(check(&given, stored, "steward hook template apply"), []);
    }
}
