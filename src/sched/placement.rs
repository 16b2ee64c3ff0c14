//! Placement by seed 000's constraints, pure: given the nodes as their daemons describe them
//! and the instances already placed, choose a node for each instance still to place.
//!
//! `constraint.intersectionItem[]`: every item must hold; an item's `unionData[]`: at least one
//! rule must hold. Rules read a node attribute by `name`: `hostname` (the daemon's node name),
//! `ip`, seed 003's topology keys (zone, region, instance type, os, arch: what the daemon
//! reports, in any of their spellings), then the node's configured attributes, then its labels.
//! A node without the attribute fails the rule. Operators:
//! - UNIQUE: no other instance of the app on a node with the same value.
//! - MAXPER n: at most n instances of the app per value.
//! - CLUSTER set: the value is one of the set.
//! - LIKE text|set: the value matches the regex (any of the set), anchored.
//! - UNLIKE text|set: the value matches none.
//! - GROUPBY set: the value is one of the set and the instances spread evenly over the set's
//!   values (each gets at most ceil(instances / values)).
//! - EXCLUDE set of `key:value`: the node runs no instance of another app with one of these labels.
//! - GREATER scalar: the value, as a number, is above the scalar.
//!
//! Among the nodes that satisfy everything, an instance goes where its GROUPBY group has the
//! fewest instances, then where the app has the fewest, then where the node runs the fewest
//! instances in all, then by node name: spread, deterministic.
//!
//! Over 600 lines: its second half (`mod tests`) is the unit tests, rule by rule and operator by
//! operator, kept next to the rules they pin down.

use super::affinity::Affinities;
use crate::protocol::NodeDocument;
use crate::resources::Requests;
use crate::spec::model::{Constraint, IntersectionItem, Operator, ProcessSpec, Schedule, TopologyKey, UnionData};
use std::collections::{BTreeMap, BTreeSet};

/// A node as the scheduler sees it (from the daemon's GET /v1/node).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    /// The node's name in the cluster file.
    pub name: String,
    pub hostname: String,
    pub ip: String,
    pub attributes: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// The topology facts the daemon reports, by short name (`zone`, `os`, `arch`).
    pub topology: BTreeMap<String, String>,
    /// Apps with instances on the node: `namespace/name` → (labels, instance count).
    pub apps: BTreeMap<String, (BTreeMap<String, String>, usize)>,
    pub free_ports: usize,
    /// cpu and memory left for new requests (allocatable less allocated); None: the daemon
    /// does not say (an older one), and admits by its own rule.
    pub free: Option<Requests>,
    /// The ordinals whose kept volume is here (`namespace/name/ordinal`): each is placed here
    /// and nowhere else (issue 47).
    pub kept: std::collections::BTreeSet<String>,
    /// The daemon answers ClusterFirst pods (`[services] pod_dns`).
    pub pod_dns: bool,
}

impl NodeView {
    /// The value a constraint's `name` reads on this node. A topology fact the daemon reports
    /// wins over an attribute or label of that name, which older configurations (`zone` in
    /// `[node.attributes]`) still supply.
    pub fn value(&self, name: &str) -> Option<&str> {
        let configured = |name: &str| self.attributes.get(name).or_else(|| self.labels.get(name));
        match (name, TopologyKey::parse(name)) {
            (_, Some(TopologyKey::Hostname)) => Some(&self.hostname),
            ("ip" | "hostip", _) => Some(&self.ip),
            (_, Some(key)) => {
                self.topology.get(key.short()).or_else(|| configured(name)).or_else(|| configured(key.short()))
            }
            _ => configured(name),
        }
        .map(String::as_str)
    }

    /// A node as its daemon's GET /v1/node describes it; `name` is the cluster file's.
    pub fn from_node(name: &str, doc: &NodeDocument) -> NodeView {
        let apps = doc
            .apps
            .iter()
            // One a failed rollout kept for its output runs nothing: not counted.
            .map(|a| {
                let running = a.instances.iter().filter(|i| !i.kept).count();
                (format!("{}/{}", a.namespace, a.name), (a.labels.clone(), running))
            })
            .collect();
        NodeView {
            name: name.to_string(),
            hostname: doc.hostname.clone(),
            ip: doc.host_ip.clone(),
            attributes: doc.attributes.clone(),
            labels: doc.labels.clone(),
            topology: doc.topology(),
            apps,
            free_ports: doc.ports.free,
            free: (doc.resources.capacity != Requests::default()).then(|| doc.resources.free()),
            kept: doc.kept_volumes.iter().cloned().collect(),
            pod_dns: doc.pod_dns.is_some(),
        }
    }
}

/// What to place.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// `namespace/name`.
    pub app: &'a str,
    pub constraint: Option<&'a Constraint>,
    /// `spec.instance`: all of the app's instances (GROUPBY spreads these).
    pub total: u32,
    /// Instances that stay where they are: index → node name.
    pub keep: BTreeMap<u32, String>,
    /// Instance ids to place.
    pub place: Vec<u32>,
    /// Random (hostPort 0) ports one instance needs.
    pub ports_per_instance: usize,
    /// What one instance requests (cpu, memory): placed only where it fits in the node's free.
    pub requests: Requests,
    /// Nodes that take no new instance (the app failed there); their instances still count.
    pub avoid: BTreeSet<String>,
    /// Nodes closed to new instances by the operator (a cordon), with why.
    pub closed: BTreeMap<String, String>,
    /// Nodes that take an instance only when no other node can (a preferred cordon): decided
    /// per instance, so they take the overflow and no more.
    pub shunned: BTreeSet<String>,
    /// The only node that may take an instance (`drift --to`); the others still count for the
    /// app's rules, and are not listed as refusing.
    pub only: Option<String>,
    /// Place instances whose kept volume is on a node elsewhere too (`drift --force`, which
    /// moves them without their data).
    pub unpinned: bool,
    /// Seed 003's affinities and tolerations.
    pub schedule: Option<&'a Schedule>,
    /// The labels the app's instances carry (its pod affinity may pick itself).
    pub labels: BTreeMap<String, String>,
    /// A ClusterFirst pod: placed only on a node with `[services] pod_dns`.
    pub needs_pod_dns: bool,
}

impl<'a> Request<'a> {
    /// All of `spec`'s instances, none kept, none yet to place.
    pub fn new(app: &'a str, spec: &'a ProcessSpec) -> Request<'a> {
        Request {
            app,
            constraint: spec.constraint.as_ref(),
            total: spec.spec.instance,
            keep: BTreeMap::new(),
            place: Vec::new(),
            ports_per_instance: spec.random_ports(),
            requests: spec.instance_requests(),
            avoid: BTreeSet::new(),
            closed: BTreeMap::new(),
            shunned: BTreeSet::new(),
            only: None,
            unpinned: false,
            schedule: Some(&spec.schedule).filter(|s| !s.is_empty()),
            labels: spec.instance_labels(),
            needs_pod_dns: spec.needs_pod_dns(),
        }
    }
}

#[cfg(test)]
impl<'a> Request<'a> {
    /// Instances 0..n of `app` to place, nothing else asked (tests).
    pub fn bare(app: &'a str, n: u32) -> Request<'a> {
        Request {
            app,
            constraint: None,
            total: n,
            keep: BTreeMap::new(),
            place: (0..n).collect(),
            ports_per_instance: 0,
            requests: Requests::default(),
            avoid: BTreeSet::new(),
            closed: BTreeMap::new(),
            shunned: BTreeSet::new(),
            only: None,
            unpinned: false,
            schedule: None,
            labels: BTreeMap::new(),
            needs_pod_dns: false,
        }
    }
}

/// Why one node could not take an instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub node: String,
    /// Index of the failing `constraint.intersectionItem`; None for a capacity reason.
    pub item: Option<usize>,
    pub reason: String,
}

/// No node could take an instance.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct PlacementError {
    pub app: String,
    pub index: u32,
    pub refusals: Vec<Refusal>,
    /// The failing item's description, when every node failed on the same one.
    pub common: Option<(usize, String)>,
}

impl PlacementError {
    fn describe(&self) -> String {
        let mut out = match &self.common {
            Some((i, desc)) => format!(
                "cannot place {}/{}: constraint.intersectionItem[{i}] ({desc}) fails on {}",
                self.app,
                self.index,
                match self.refusals.as_slice() {
                    [one] => one.node.as_str(),
                    _ => "every node",
                }
            ),
            None if self.refusals.iter().all(|r| r.reason.starts_with("unreachable")) => {
                format!("cannot place {}/{}: no node is reachable", self.app, self.index)
            }
            // Seed 002's "NotAllowed: not enough resources".
            None if self.refusals.iter().all(|r| r.reason.starts_with("not enough")) => {
                format!("cannot place {}/{}: not enough resources on any node", self.app, self.index)
            }
            None => format!("cannot place {}/{}: no node meets every constraint", self.app, self.index),
        };
        for r in &self.refusals {
            match r.item {
                Some(i) => out.push_str(&format!("\n  {}: constraint.intersectionItem[{i}]: {}", r.node, r.reason)),
                None => out.push_str(&format!("\n  {}: {}", r.node, r.reason)),
            }
        }
        out
    }
}

/// What is placed so far: the app's instances by node.
struct Tally<'a> {
    nodes: &'a [NodeView],
    by_node: BTreeMap<String, usize>,
    /// Every instance on each node (by index), of any app, this round's placements counted.
    load: Vec<usize>,
    /// The app's instances on each node (by index), as `by_node`.
    own: Vec<usize>,
}

impl Tally<'_> {
    /// Instances of the app on nodes whose `name` attribute is `value`.
    fn per_value(&self, name: &str, value: &str) -> usize {
        self.nodes.iter().filter(|n| n.value(name) == Some(value)).map(|n| self.on(&n.name)).sum()
    }

    fn on(&self, node: &str) -> usize {
        self.by_node.get(node).copied().unwrap_or(0)
    }
}

/// How a node ranks for the next instance, lowest first: shunned (a preferred cordon), then
/// less preferred (affinity weights, negated), then the spread (its GROUPBY group's, the app's
/// own, every app's instances).
type Score = (bool, i64, usize, usize, usize);

/// One placement round: the request, the nodes and what the round has taken from them.
struct Round<'r, 'a> {
    req: &'r Request<'a>,
    nodes: &'r [NodeView],
    items: &'r [IntersectionItem],
    tally: Tally<'r>,
    affinities: Affinities<'r>,
    ports_left: Vec<usize>,
    room_left: Vec<Option<Requests>>,
}

impl Round<'_, '_> {
    /// The node the next instance goes to: among those that pass every rule, one not shunned,
    /// then the highest preference, then the spread. Each refused node's reason goes into `refusals` if asked
    /// for (only once nothing fits: reasons are text, and most rounds need none).
    fn best(&self, mut refusals: Option<&mut Vec<Refusal>>, pin: Option<&str>) -> Option<usize> {
        let req = self.req;
        let mut refuse = |node: &NodeView, item: Option<usize>, reason: &dyn Fn() -> String| {
            if let Some(list) = refusals.as_deref_mut() {
                list.push(Refusal { node: node.name.clone(), item, reason: reason() });
            }
        };
        let mut best: Option<(Score, usize)> = None;
        for (ni, node) in self.nodes.iter().enumerate() {
            if req.only.as_ref().is_some_and(|only| *only != node.name) {
                continue;
            }
            if let Some(pin) = pin.filter(|pin| *pin != node.name) {
                refuse(node, None, &|| format!("the instance's kept volume is on {pin}: it is placed there only"));
                continue;
            }
            if req.avoid.contains(&node.name) {
                refuse(node, None, &|| "avoided: the app's instance was lost or failed there".to_string());
                continue;
            }
            if let Some(why) = req.closed.get(&node.name) {
                refuse(node, None, &|| why.clone());
                continue;
            }
            if req.needs_pod_dns && !node.pod_dns {
                refuse(node, None, &|| "no [services] pod_dns: it refuses ClusterFirst pods".to_string());
                continue;
            }
            let ports = self.ports_left[ni];
            if ports < req.ports_per_instance {
                refuse(node, None, &|| format!("{ports} free port(s), an instance needs {}", req.ports_per_instance));
                continue;
            }
            if let Some(short) = self.room_left[ni].and_then(|room| req.requests.exceeds(&room)) {
                refuse(node, None, &|| short.to_string());
                continue;
            }
            let failed = self
                .items
                .iter()
                .enumerate()
                .find_map(|(i, item)| item_holds(item, node, req, &self.tally).err().map(|reason| (i, reason)));
            if let Some((i, reason)) = failed {
                refuse(node, Some(i), &|| reason.clone());
                continue;
            }
            if let Err(reason) = self.affinities.filter(ni) {
                refuse(node, None, &|| reason.clone());
                continue;
            }
            let score = (
                req.shunned.contains(&node.name),
                -self.affinities.score(ni),
                groupby_count(self.items, node, &self.tally),
                self.tally.own[ni],
                self.tally.load[ni],
            );
            if best.as_ref().is_none_or(|(s, _)| score < *s) {
                best = Some((score, ni));
            }
        }
        best.map(|(_, ni)| ni)
    }

    /// An instance goes to node `ni`.
    fn take(&mut self, ni: usize) {
        let node = &self.nodes[ni];
        self.affinities.placed(ni);
        *self.tally.by_node.entry(node.name.clone()).or_default() += 1;
        self.tally.load[ni] += 1;
        self.tally.own[ni] += 1;
        self.ports_left[ni] -= self.req.ports_per_instance;
        if let Some(room) = self.room_left[ni].as_mut() {
            *room = room.minus(self.req.requests);
        }
    }
}

/// Places `req.place` on `nodes`; returns index → node name for each. All or nothing.
pub fn place(req: &Request, nodes: &[NodeView]) -> Result<BTreeMap<u32, String>, PlacementError> {
    let mut by_node: BTreeMap<String, usize> = BTreeMap::new();
    for node in req.keep.values() {
        *by_node.entry(node.clone()).or_default() += 1;
    }
    let load = nodes.iter().map(|n| n.apps.values().map(|(_, count)| count).sum()).collect();
    let own: Vec<usize> = nodes.iter().map(|n| by_node.get(&n.name).copied().unwrap_or(0)).collect();
    let tally = Tally { nodes, by_node, load, own: own.clone() };
    let mut round = Round {
        req,
        nodes,
        items: req.constraint.map_or(&[], |c| c.intersection_item.as_slice()),
        tally,
        affinities: Affinities::new(req.schedule, req.app, &req.labels, nodes, &own),
        ports_left: nodes.iter().map(|n| n.free_ports).collect(),
        room_left: nodes.iter().map(|n| n.free).collect(),
    };
    let mut placed = BTreeMap::new();
    for &index in &req.place {
        // An ordinal whose kept volume is on a node goes there, where its data is.
        let kept = format!("{}/{index}", req.app);
        let pin = nodes.iter().filter(|_| !req.unpinned).find(|n| n.kept.contains(&kept)).map(|n| n.name.as_str());
        let Some(ni) = round.best(None, pin) else {
            let mut refusals = Vec::new();
            round.best(Some(&mut refusals), pin);
            let items = round.items;
            let first = refusals.first().and_then(|r| r.item);
            let common =
                first.filter(|i| refusals.iter().all(|r| r.item == Some(*i))).map(|i| (i, describe_item(&items[i])));
            return Err(PlacementError { app: req.app.to_string(), index, refusals, common });
        };
        round.take(ni);
        placed.insert(index, nodes[ni].name.clone());
    }
    Ok(placed)
}

/// For the spread: the instances in the node's group of the first GROUPBY rule it belongs to.
fn groupby_count(items: &[IntersectionItem], node: &NodeView, tally: &Tally) -> usize {
    items
        .iter()
        .flat_map(|i| &i.union_data)
        .filter(|u| u.operate == Some(Operator::GroupBy))
        .find_map(|u| node.value(&u.name).map(|v| tally.per_value(&u.name, v)))
        .unwrap_or(0)
}

fn item_holds(item: &IntersectionItem, node: &NodeView, req: &Request, tally: &Tally) -> Result<(), String> {
    let mut reasons = Vec::new();
    for rule in &item.union_data {
        match rule_holds(rule, node, req, tally) {
            Ok(()) => return Ok(()),
            Err(r) => reasons.push(format!("{} {}: {r}", rule.name, op_name(rule))),
        }
    }
    Err(match reasons.len() {
        1 => reasons.remove(0),
        _ => format!("none of {}", reasons.join("; ")),
    })
}

fn op_name(rule: &UnionData) -> String {
    rule.operate
        .and_then(|o| serde_json::to_value(o).ok())
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| "?".into())
}

/// `hostname UNIQUE`, `idc MAXPER 5`, `one of a | b`.
fn describe_item(item: &IntersectionItem) -> String {
    let rules: Vec<String> = item
        .union_data
        .iter()
        .map(|u| {
            let param = match (&u.text, &u.set, &u.scalar) {
                (Some(t), _, _) => format!(" {}", t.value.as_str()),
                (_, Some(s), _) => format!(" [{}]", s.item.join(", ")),
                (_, _, Some(s)) => format!(" {}", s.value),
                _ => String::new(),
            };
            format!("{} {}{param}", u.name, op_name(u))
        })
        .collect();
    match rules.len() {
        1 => rules[0].clone(),
        _ => format!("one of {}", rules.join(" | ")),
    }
}

fn rule_holds(rule: &UnionData, node: &NodeView, req: &Request, tally: &Tally) -> Result<(), String> {
    let name = rule.name.as_str();
    let op = rule.operate.ok_or("no operator")?;
    if op == Operator::Exclude {
        return exclude(rule, node, req);
    }
    let value = node.value(name).ok_or_else(|| format!("the node has no attribute {name:?}"))?;
    let set: Vec<&str> = rule.set.as_ref().map(|s| s.item.iter().map(String::as_str).collect()).unwrap_or_default();
    let text = rule.text.as_ref().map(|t| t.value.as_str().to_string());
    let patterns = || -> Vec<String> {
        text.clone().map(|t| vec![t]).unwrap_or_else(|| set.iter().map(|s| s.to_string()).collect())
    };
    let matches = |pattern: &str| crate::spec::validate::anchored_regex(pattern).is_ok_and(|r| r.is_match(value));
    match op {
        Operator::Unique => match tally.per_value(name, value) {
            0 => Ok(()),
            n => Err(format!("{name} {value} already runs {n} instance(s) of {}", req.app)),
        },
        Operator::MaxPer => {
            let max: usize = text.as_deref().unwrap_or_default().trim().parse().map_err(|_| "MAXPER needs a number")?;
            match tally.per_value(name, value) {
                n if n < max => Ok(()),
                n => Err(format!("{name} {value} already runs {n} instance(s) of {}, at most {max}", req.app)),
            }
        }
        Operator::Cluster if set.contains(&value) => Ok(()),
        Operator::Cluster => Err(format!("{value} is not one of [{}]", set.join(", "))),
        Operator::Like if patterns().iter().any(|p| matches(p)) => Ok(()),
        Operator::Like => Err(format!("{value} does not match {}", patterns().join(" or "))),
        Operator::Unlike => match patterns().into_iter().find(|p| matches(p)) {
            None => Ok(()),
            Some(p) => Err(format!("{value} matches {p}")),
        },
        Operator::GroupBy => {
            if !set.contains(&value) {
                return Err(format!("{value} is not one of [{}]", set.join(", ")));
            }
            let cap = (req.total as usize).div_ceil(set.len().max(1));
            match tally.per_value(name, value) {
                n if n < cap => Ok(()),
                n => Err(format!("{name} {value} already has {n} of {} instance(s), its even share", req.total)),
            }
        }
        Operator::Greater => {
            let min = rule.scalar.as_ref().map(|s| s.value).ok_or("GREATER needs a scalar")?;
            match value.trim().parse::<f64>() {
                Ok(v) if v > min => Ok(()),
                Ok(v) => Err(format!("{v} is not above {min}")),
                Err(_) => Err(format!("{value:?} is not a number")),
            }
        }
        Operator::Exclude => unreachable!("handled above"),
    }
}

/// EXCLUDE: no instance of another app carrying one of the `key:value` labels on the node.
fn exclude(rule: &UnionData, node: &NodeView, req: &Request) -> Result<(), String> {
    let wanted: BTreeSet<(&str, &str)> =
        rule.set.as_ref().into_iter().flat_map(|s| &s.item).filter_map(|i| i.split_once(':')).collect();
    for (app, (labels, count)) in &node.apps {
        if app == req.app || *count == 0 {
            continue;
        }
        if let Some((k, v)) = labels.iter().find(|(k, v)| wanted.contains(&(k.as_str(), v.as_str()))) {
            return Err(format!("runs {app}, labelled {k}:{v}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, attrs: &[(&str, &str)]) -> NodeView {
        NodeView {
            name: name.into(),
            hostname: name.into(),
            ip: format!("10.0.0.{}", name.len()),
            attributes: attrs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            free_ports: 100,
            ..NodeView::default()
        }
    }

    fn constraint(items: serde_json::Value) -> Constraint {
        serde_json::from_value(json!({ "intersectionItem": items })).unwrap()
    }

    /// One intersection item per rule (all must hold).
    fn all_of(rules: &[serde_json::Value]) -> Constraint {
        constraint(rules.iter().map(|r| json!({"unionData": [r]})).collect())
    }

    fn place_n(c: &Constraint, n: u32, nodes: &[NodeView]) -> Result<BTreeMap<u32, String>, PlacementError> {
        place(&Request { constraint: Some(c), ..Request::bare("ns/app", n) }, nodes)
    }

    fn counts(p: &BTreeMap<u32, String>) -> BTreeMap<String, usize> {
        let mut c = BTreeMap::new();
        for n in p.values() {
            *c.entry(n.clone()).or_default() += 1;
        }
        c
    }

    fn slaves(n: usize) -> Vec<NodeView> {
        (1..=n).map(|i| node(&format!("slave{i}"), &[])).collect()
    }

    #[test]
    fn unique_hostname_puts_each_instance_on_its_own_host() {
        // Seed 000: {"name": "hostname", "operate": "UNIQUE"}.
        let c = all_of(&[json!({"name": "hostname", "operate": "UNIQUE"})]);
        let p = place_n(&c, 3, &slaves(3)).unwrap();
        assert_eq!(counts(&p).values().copied().collect::<Vec<_>>(), vec![1, 1, 1]);
        let e = place_n(&c, 4, &slaves(3)).unwrap_err();
        assert_eq!(e.index, 3);
        let text = e.to_string();
        assert!(
            text.starts_with(
                "cannot place ns/app/3: constraint.intersectionItem[0] (hostname UNIQUE) fails on every node"
            ),
            "{text}"
        );
        assert!(
            text.contains("slave1: constraint.intersectionItem[0]: hostname UNIQUE: hostname slave1 already runs 1"),
            "{text}"
        );
    }

    #[test]
    fn unique_on_an_attribute_means_one_per_value() {
        // "如果name为IDC则表示每个IDC只能部署一个实例"
        let nodes = [node("a", &[("idc", "sh")]), node("b", &[("idc", "sh")]), node("c", &[("idc", "sz")])];
        let c = all_of(&[json!({"name": "idc", "operate": "UNIQUE"})]);
        let p = place_n(&c, 2, &nodes).unwrap();
        let idcs: BTreeSet<&str> =
            p.values().map(|n| nodes.iter().find(|x| &x.name == n).unwrap().attributes["idc"].as_str()).collect();
        assert_eq!(idcs.len(), 2);
        assert!(place_n(&c, 3, &nodes).unwrap_err().to_string().contains("idc UNIQUE"));
    }

    #[test]
    fn maxper_caps_instances_per_value() {
        // Seed 000 template: {"name": "idc", "operate": "MAXPER", "type": 3, "text": {"value": "5"}}.
        let nodes = [node("a", &[("idc", "sh")]), node("b", &[("idc", "sh")]), node("c", &[("idc", "sz")])];
        let c = all_of(&[json!({"name": "idc", "operate": "MAXPER", "type": 3, "text": {"value": "5"}})]);
        let p = place_n(&c, 10, &nodes).unwrap();
        let sh = p.values().filter(|n| *n != "c").count();
        assert_eq!((sh, p.len() - sh), (5, 5));
        let e = place_n(&c, 11, &nodes).unwrap_err().to_string();
        assert!(e.contains("idc MAXPER 5") && e.contains("at most 5"), "{e}");
        // MAXPER 2 on hostname, 6 instances on 3 hosts: 2/2/2.
        let c = all_of(&[json!({"name": "hostname", "operate": "MAXPER", "type": 3, "text": {"value": "2"}})]);
        let p = place_n(&c, 6, &slaves(3)).unwrap();
        assert_eq!(counts(&p).values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    }

    #[test]
    fn cluster_limits_to_the_set() {
        // Seed 000: section CLUSTER [shenzhen, dongguan].
        let nodes = [
            node("a", &[("section", "shenzhen")]),
            node("b", &[("section", "dongguan")]),
            node("c", &[("section", "beijing")]),
            node("d", &[]),
        ];
        let c = all_of(&[
            json!({"name": "section", "operate": "CLUSTER", "type": 4, "set": {"item": ["shenzhen", "dongguan"]}}),
        ]);
        let p = place_n(&c, 6, &nodes).unwrap();
        assert_eq!(counts(&p), BTreeMap::from([("a".into(), 3), ("b".into(), 3)]));
        // hostname CLUSTER [slave3, slave4, slave5] (the template's).
        let c = all_of(&[
            json!({"name": "hostname", "operate": "CLUSTER", "type": 4, "set": {"item": ["slave3", "slave4", "slave5"]}}),
        ]);
        let p = place_n(&c, 3, &slaves(5)).unwrap();
        assert_eq!(counts(&p).keys().cloned().collect::<Vec<_>>(), ["slave3", "slave4", "slave5"]);
        let e = place_n(&c, 1, &slaves(2)).unwrap_err().to_string();
        assert!(e.contains("slave1 is not one of [slave3, slave4, slave5]"), "{e}");
    }

    #[test]
    fn like_and_unlike_match_the_whole_value() {
        // Seed 000: hostname LIKE "mesos-slave-[1-2]".
        let nodes: Vec<NodeView> = (1..=4).map(|i| node(&format!("mesos-slave-{i}"), &[])).collect();
        let c = all_of(&[
            json!({"name": "hostname", "operate": "LIKE", "type": 3, "text": {"value": "mesos-slave-[1-2]"}}),
        ]);
        let p = place_n(&c, 4, &nodes).unwrap();
        assert_eq!(counts(&p).keys().cloned().collect::<Vec<_>>(), ["mesos-slave-1", "mesos-slave-2"]);
        // Anchored: "slave-1" does not match "mesos-slave-1".
        let c = all_of(&[json!({"name": "hostname", "operate": "LIKE", "type": 3, "text": {"value": "slave-1"}})]);
        assert!(place_n(&c, 1, &nodes).is_err());
        // LIKE with a set: any pattern.
        let c = all_of(&[
            json!({"name": "hostname", "operate": "LIKE", "type": 4, "set": {"item": ["mesos-slave-1", ".*-4"]}}),
        ]);
        let p = place_n(&c, 2, &nodes).unwrap();
        assert_eq!(counts(&p).keys().cloned().collect::<Vec<_>>(), ["mesos-slave-1", "mesos-slave-4"]);
        // UNLIKE slave[1-2], and with a set: must match none.
        let c = all_of(&[json!({"name": "hostname", "operate": "UNLIKE", "type": 3, "text": {"value": "slave[1-2]"}})]);
        let p = place_n(&c, 3, &slaves(3)).unwrap();
        assert_eq!(counts(&p).keys().cloned().collect::<Vec<_>>(), ["slave3"]);
        let c = all_of(&[
            json!({"name": "hostname", "operate": "UNLIKE", "type": 4, "set": {"item": ["slave1", "slave3"]}}),
        ]);
        let p = place_n(&c, 2, &slaves(3)).unwrap();
        assert_eq!(counts(&p).keys().cloned().collect::<Vec<_>>(), ["slave2"]);
        let e = place_n(&c, 1, &[node("slave1", &[])]).unwrap_err().to_string();
        assert!(e.contains("hostname UNLIKE: slave1 matches slave1"), "{e}");
    }

    #[test]
    fn groupby_spreads_evenly_over_the_set() {
        // Seed 000: IDC GROUPBY [idc1, idc2] with 3 instances: one idc gets two.
        let nodes = [
            node("a", &[("idc", "idc1")]),
            node("b", &[("idc", "idc1")]),
            node("c", &[("idc", "idc2")]),
            node("d", &[("idc", "idc3")]),
        ];
        let c = all_of(&[json!({"name": "idc", "operate": "GROUPBY", "type": 4, "set": {"item": ["idc1", "idc2"]}})]);
        let p = place_n(&c, 3, &nodes).unwrap();
        let idc1 = p.values().filter(|n| *n == "a" || *n == "b").count();
        let idc2 = p.values().filter(|n| *n == "c").count();
        assert_eq!(idc1 + idc2, 3);
        assert!((1..=2).contains(&idc1) && (1..=2).contains(&idc2), "{p:?}");
        assert!(!p.values().any(|n| n == "d"));
        // The template's district GROUPBY [shanghai, shenzhen, tianjin] with 6: two each.
        let nodes = [
            node("s1", &[("district", "shanghai")]),
            node("s2", &[("district", "shanghai")]),
            node("z1", &[("district", "shenzhen")]),
            node("t1", &[("district", "tianjin")]),
        ];
        let c = all_of(&[
            json!({"name": "district", "operate": "GROUPBY", "type": 4, "set": {"item": ["shanghai", "shenzhen", "tianjin"]}}),
        ]);
        let p = place_n(&c, 6, &nodes).unwrap();
        let c6 = counts(&p);
        assert_eq!(c6["s1"] + c6["s2"], 2);
        assert_eq!((c6["z1"], c6["t1"]), (2, 2));
    }

    #[test]
    fn exclude_avoids_nodes_running_apps_with_those_labels() {
        // Seed 000: label EXCLUDE [processname:gamesvr, processname:dbsvr].
        let mut a = node("a", &[]);
        a.apps.insert("ns/db".into(), (BTreeMap::from([("processname".into(), "dbsvr".into())]), 1));
        let mut b = node("b", &[]);
        b.apps.insert("ns/web".into(), (BTreeMap::from([("processname".into(), "websvr".into())]), 2));
        let mut c_node = node("c", &[]);
        // An app with the label but no instance left does not count.
        c_node.apps.insert("ns/game".into(), (BTreeMap::from([("processname".into(), "gamesvr".into())]), 0));
        let c = all_of(&[
            json!({"name": "label", "operate": "EXCLUDE", "type": 4, "set": {"item": ["processname:gamesvr", "processname:dbsvr"]}}),
        ]);
        let p = place_n(&c, 4, &[a.clone(), b, c_node]).unwrap();
        assert_eq!(counts(&p).keys().cloned().collect::<Vec<_>>(), ["b", "c"]);
        let e = place_n(&c, 1, &[a]).unwrap_err().to_string();
        assert!(e.contains("runs ns/db, labelled processname:dbsvr"), "{e}");
    }

    #[test]
    fn greater_compares_numbers() {
        let nodes = [node("a", &[("cores", "8")]), node("b", &[("cores", "32")]), node("c", &[("cores", "many")])];
        let c = all_of(&[json!({"name": "cores", "operate": "GREATER", "type": 1, "scalar": {"value": 16.0}})]);
        let p = place_n(&c, 2, &nodes).unwrap();
        assert_eq!(counts(&p).keys().cloned().collect::<Vec<_>>(), ["b"]);
        let e = place_n(&c, 1, &nodes[..1]).unwrap_err().to_string();
        assert!(e.contains("8 is not above 16"), "{e}");
        let e = place_n(&c, 1, &nodes[2..]).unwrap_err().to_string();
        assert!(e.contains("\"many\" is not a number"), "{e}");
    }

    #[test]
    fn union_needs_one_and_intersection_needs_all() {
        // The seed's template, with its alternatives listed in one unionData: LIKE slave[3-5],
        // UNLIKE slave[1-2], UNIQUE hostname, and (MAXPER idc 5 or CLUSTER ...).
        let mut nodes = slaves(5);
        for n in &mut nodes {
            n.attributes.insert("idc".into(), "sh".into());
        }
        let c = constraint(json!([
            {"unionData": [{"name": "hostname", "operate": "LIKE", "type": 3, "text": {"value": "slave[3-5]"}}]},
            {"unionData": [{"name": "hostname", "operate": "UNLIKE", "type": 3, "text": {"value": "slave[1-2]"}}]},
            {"unionData": [{"name": "hostname", "operate": "UNIQUE"}]},
            {"unionData": [
                {"name": "idc", "operate": "MAXPER", "type": 3, "text": {"value": "1"}},
                {"name": "hostname", "operate": "CLUSTER", "type": 4, "set": {"item": ["slave3", "slave4", "slave5"]}}
            ]}
        ]));
        let p = place_n(&c, 3, &nodes).unwrap();
        assert_eq!(counts(&p).keys().cloned().collect::<Vec<_>>(), ["slave3", "slave4", "slave5"]);
        // A fourth: LIKE already rules out slave1/2, UNIQUE the others: not one common item.
        let e = place_n(&c, 4, &nodes).unwrap_err().to_string();
        assert!(e.starts_with("cannot place ns/app/3: no node meets every constraint"), "{e}");
        assert!(
            e.contains("slave1: constraint.intersectionItem[0]")
                && e.contains("slave3: constraint.intersectionItem[2]"),
            "{e}"
        );
        // Neither alternative of the last item holds on slave9 once idc sh has one instance.
        let mut n9 = node("slave9", &[("idc", "sh")]);
        n9.hostname = "slave9".into();
        let c = constraint(json!([{"unionData": [
            {"name": "idc", "operate": "MAXPER", "type": 3, "text": {"value": "1"}},
            {"name": "hostname", "operate": "CLUSTER", "type": 4, "set": {"item": ["slave3"]}}
        ]}]));
        let e = place_n(&c, 2, &[n9]).unwrap_err().to_string();
        assert!(e.contains("(one of idc MAXPER 1 | hostname CLUSTER [slave3])"), "{e}");
        assert!(e.contains("none of idc MAXPER: idc sh already runs 1"), "{e}");
    }

    #[test]
    fn instances_go_only_where_their_requests_fit() {
        let mut nodes = slaves(3);
        for n in &mut nodes {
            n.free = Some(Requests::of(1.0, 1024.0));
        }
        // 300m each: three fit on a node with one core free, so nine over three nodes.
        let mut req = Request { requests: Requests::of(0.3, 100.0), ..Request::bare("ns/app", 9) };
        let p = place(&req, &nodes).unwrap();
        assert_eq!(counts(&p).values().copied().collect::<Vec<_>>(), vec![3, 3, 3]);
        // A tenth fits nowhere: refused whole, each node's reason given (nothing half-placed).
        req.total = 10;
        req.place = (0..10).collect();
        let e = place(&req, &nodes).unwrap_err().to_string();
        assert!(e.starts_with("cannot place ns/app/9: not enough resources on any node"), "{e}");
        assert!(e.contains("slave1: not enough cpu: 300m cores requested, 100m cores free"), "{e}");
        // Memory as well; and a node that does not say what it has free is not refused for it.
        req.requests = Requests::of(0.1, 2048.0);
        req.place = vec![0];
        let e = place(&req, &nodes).unwrap_err().to_string();
        assert!(e.contains("slave2: not enough memory: 2048 MiB requested, 1024 MiB free"), "{e}");
        nodes[2].free = None;
        assert_eq!(place(&req, &nodes).unwrap()[&0], "slave3");
    }

    /// Issue 47: an ordinal whose kept volume a node reports goes to that node only; where it
    /// does not fit there, the refusal says why the others were not taken; a forced drift
    /// (unpinned) places it anywhere.
    #[test]
    fn an_ordinal_goes_where_its_kept_volume_is() {
        let mut nodes = slaves(3);
        nodes[2].kept.insert("ns/app/1".into());
        let mut req = Request { requests: Requests::of(0.3, 100.0), ..Request::bare("ns/app", 3) };
        let p = place(&req, &nodes).unwrap();
        assert_eq!(p[&1], "slave3");
        assert_ne!(p[&0], p[&2]);
        nodes[2].free = Some(Requests::of(0.1, 1024.0));
        req.place = vec![1];
        let e = place(&req, &nodes).unwrap_err().to_string();
        assert!(e.contains("slave1: the instance's kept volume is on slave3: it is placed there only"), "{e}");
        assert!(e.contains("slave3: not enough cpu"), "{e}");
        req.unpinned = true;
        assert_ne!(place(&req, &nodes).unwrap()[&1], "slave3");
    }

    /// Issue 47: a ClusterFirst pod goes only to a node whose daemon answers pods' names
    /// (`[services] pod_dns`, reported in its node document); where none does, each refusal says so.
    #[test]
    fn a_cluster_first_pod_goes_where_pods_can_ask_names() {
        let mut nodes = slaves(3);
        let req = Request { needs_pod_dns: true, ..Request::bare("ns/app", 2) };
        let e = place(&req, &nodes).unwrap_err().to_string();
        assert!(e.contains("slave1: no [services] pod_dns: it refuses ClusterFirst pods"), "{e}");
        nodes[1].pod_dns = true;
        assert_eq!(place(&req, &nodes).unwrap().values().collect::<Vec<_>>(), ["slave2", "slave2"]);
        let doc: crate::protocol::NodeDocument =
            serde_json::from_value(serde_json::json!({"hostname": "h", "podDns": "10.96.0.10"})).unwrap();
        assert!(NodeView::from_node("h", &doc).pod_dns);
    }

    #[test]
    fn kept_instances_count_and_ports_limit() {
        let c = all_of(&[json!({"name": "hostname", "operate": "UNIQUE"})]);
        let req = Request {
            constraint: Some(&c),
            keep: BTreeMap::from([(0, "slave1".to_string()), (1, "slave2".to_string())]),
            place: vec![2],
            ports_per_instance: 1,
            ..Request::bare("ns/app", 3)
        };
        let p = place(&req, &slaves(3)).unwrap();
        assert_eq!(p, BTreeMap::from([(2, "slave3".to_string())]));
        // An avoided node takes nothing new, but what runs there still counts.
        let avoiding = Request { avoid: BTreeSet::from(["slave3".to_string()]), ..req.clone() };
        let e = place(&avoiding, &slaves(3)).unwrap_err().to_string();
        assert!(e.contains("slave3: avoided") && e.contains("slave1: constraint.intersectionItem[0]"), "{e}");
        let mut nodes = slaves(3);
        nodes[2].free_ports = 0;
        let e = place(&req, &nodes).unwrap_err().to_string();
        assert!(e.contains("slave3: 0 free port(s), an instance needs 1"), "{e}");
        // No constraint: spread by load.
        let req = Request { constraint: None, keep: BTreeMap::new(), place: (0..6).collect(), total: 6, ..req };
        let p = place(&req, &slaves(3)).unwrap();
        assert_eq!(counts(&p).values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    }
}
