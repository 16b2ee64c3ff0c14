//! Affinity terms on a node key no node reports: warned of at deploy. Such a term would
//! otherwise fail silently — a Required affinity refused everywhere, a Prefered one never
//! scoring, an anti-affinity constraining nothing — and a misspelt key (`zones`, `Zone`) looks
//! exactly like that.

use super::placement::NodeView;
use crate::spec::model::{ExpressionOperator, Schedule};
use crate::spec::SpecError;
use std::collections::BTreeSet;

/// Most keys a warning lists of what the nodes do report.
const LISTED: usize = 12;

/// A warning for each pod (anti-)affinity term whose `topologyKey`, and each node affinity
/// expression that needs its key (In, Exists, Gt, Lt), that none of `nodes` reports. None when
/// no node answered: nothing is known of what they report.
pub fn unreported_keys(schedule: &Schedule, nodes: &[NodeView]) -> Vec<SpecError> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let reported = |key: &str| nodes.iter().any(|n| n.value(key).is_some());
    let warning = |path: String, key: &str| {
        SpecError::new(path, format!("{key:?} is reported by no node (they report {})", what_nodes_report(nodes)))
    };
    let mut out = Vec::new();
    let groups = [(&schedule.affinity.pod, "affinity"), (&schedule.antiaffinity.pod, "antiaffinity")];
    for (group, field) in groups {
        for (i, term) in group.iter().flat_map(|p| p.terms.iter().enumerate()) {
            if !reported(term.topology()) {
                out.push(warning(format!("schedule.{field}.pod.terms[{i}].topologyKey"), &term.topology_key));
            }
        }
    }
    for (i, term) in schedule.affinity.node.iter().flat_map(|n| n.terms.iter().enumerate()) {
        for (ei, e) in term.expressions.iter().enumerate() {
            // NotIn and DoesNotExist hold where the key is absent: meant, not a slip.
            let needs_key =
                !matches!(e.operator, None | Some(ExpressionOperator::NotIn | ExpressionOperator::DoesNotExist));
            if needs_key && !reported(&e.key) {
                out.push(warning(format!("schedule.affinity.node.terms[{i}].expressions[{ei}].key"), &e.key));
            }
        }
    }
    out
}

/// `arch, hostname, idc, ip, os`: every key some node reports, sorted, the first few.
fn what_nodes_report(nodes: &[NodeView]) -> String {
    let mut keys: BTreeSet<&str> = BTreeSet::from(["hostname", "ip"]);
    for n in nodes {
        keys.extend(n.topology.keys().chain(n.attributes.keys()).chain(n.labels.keys()).map(String::as_str));
    }
    let mut listed: Vec<&str> = keys.iter().copied().take(LISTED).collect();
    if keys.len() > LISTED {
        listed.push("…");
    }
    listed.join(", ")
}

#[cfg(test)]
mod tests {
    use super::unreported_keys;
    use crate::sched::placement::NodeView;
    use serde_json::json;

    fn node(topology: &[(&str, &str)], attributes: &[(&str, &str)]) -> NodeView {
        let map = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        NodeView { hostname: "h".into(), topology: map(topology), attributes: map(attributes), ..NodeView::default() }
    }

    fn warnings(schedule: serde_json::Value, nodes: &[NodeView]) -> Vec<String> {
        let s = serde_json::from_value(schedule).unwrap();
        unreported_keys(&s, nodes).iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_key_no_node_reports_is_named_with_what_they_do_report() {
        let nodes = [node(&[("os", "linux"), ("zone", "a")], &[]), node(&[("os", "linux")], &[("idc", "sh")])];
        let s = json!({
            "affinity": {
                "pod": {"terms": [
                    {"topologyKey": "failure-domain.beta.kubernetes.io/zone", "selector": {}},
                    {"selector": {}},
                    {"topologyKey": "beta.kubernetes.io/instance-type", "selector": {}}]},
                "node": {"type": "Prefered", "terms": [{"weight": 5, "expressions": [
                    {"key": "kubernetes.io/os", "operator": "In", "value": ["linux"]},
                    {"key": "gpu", "operator": "Exists"},
                    {"key": "gpu", "operator": "DoesNotExist"},
                    {"key": "rack", "operator": "NotIn", "value": ["r1"]}]}]}},
            "antiaffinity": {"pod": {"terms": [{"topologyKey": "zones", "selector": {}}]}}
        });
        let they_report = "(they report hostname, idc, ip, os, zone)";
        assert_eq!(
            warnings(s.clone(), &nodes),
            [
                format!("schedule.affinity.pod.terms[2].topologyKey: \"beta.kubernetes.io/instance-type\" is reported by no node {they_report}"),
                format!("schedule.antiaffinity.pod.terms[0].topologyKey: \"zones\" is reported by no node {they_report}"),
                format!("schedule.affinity.node.terms[0].expressions[1].key: \"gpu\" is reported by no node {they_report}"),
            ]
        );
        assert!(warnings(s, &[]).is_empty(), "no node answered: nothing to say");
    }

    #[test]
    fn an_attribute_of_the_short_name_still_reports_a_topology_key() {
        let nodes = [node(&[], &[("zone", "a")])];
        let s = json!({"antiaffinity": {"pod": {"terms": [{"topologyKey": "topology.kubernetes.io/zone", "selector": {}}]}}});
        assert!(warnings(s, &nodes).is_empty());
    }
}
