//! Static rules of `schedule` (seed 003): weights 1-100 on Prefered terms only, operators and
//! their values, label keys and values, tolerations.

use crate::spec::error::{Errors, Path};
use crate::spec::model::*;

pub(super) fn schedule(s: &Schedule, at: &Path, errors: &mut Errors) {
    if !s.scheduler.is_empty() {
        errors.add(&at.field("scheduler"), format!("{:?}: only \"\" (the default scheduler) is offered", s.scheduler));
    }
    for (k, v) in &s.labels {
        if k.is_empty() || k.len() > 253 || v.len() > 253 {
            errors.add(&at.field("labels").field(k), "keys must be 1-253 characters, values at most 253");
        }
    }
    let aff = at.field("affinity");
    if let Some(p) = &s.affinity.pod {
        pod(p, &aff.field("pod"), errors);
    }
    if let Some(n) = &s.affinity.node {
        node(n, &aff.field("node"), errors);
    }
    if let Some(p) = &s.antiaffinity.pod {
        pod(p, &at.field("antiaffinity").field("pod"), errors);
    }
    for (i, t) in s.tolerations.iter().enumerate() {
        let tp = at.field("tolerations").index(i);
        if t.key.is_empty() && t.operator == TolerationOperator::Equal {
            errors.add(
                &tp.field("key"),
                "is required unless operator is Exists (which, without a key, tolerates every taint)",
            );
        }
        if t.operator == TolerationOperator::Exists && !t.value.is_empty() {
            errors.add(&tp.field("value"), "must be empty with operator Exists");
        }
        if t.toleration_seconds.is_some() && t.effect != Some(TaintEffect::NoExecute) {
            errors.add(&tp.field("tolerationSeconds"), "is for effect NoExecute only");
        }
    }
}

fn weight(kind: AffinityType, weight: u32, at: &Path, errors: &mut Errors) {
    match kind {
        AffinityType::Required if weight != 0 => {
            errors.add(&at.field("weight"), "is for type Prefered only");
        }
        AffinityType::Prefered if !(1..=100).contains(&weight) => {
            errors.add(&at.field("weight"), format!("{weight} is out of range 1-100 (type Prefered)"));
        }
        _ => {}
    }
}

fn pod(p: &PodAffinity, at: &Path, errors: &mut Errors) {
    if p.terms.is_empty() {
        errors.add(&at.field("terms"), "needs at least one term");
    }
    for (i, t) in p.terms.iter().enumerate() {
        let tp = at.field("terms").index(i);
        weight(p.kind, t.weight, &tp, errors);
        if t.topology_key.trim() != t.topology_key {
            errors.add(&tp.field("topologyKey"), format!("{:?} has spaces around it", t.topology_key));
        }
        for (ni, ns) in t.namespaces.iter().enumerate() {
            if ns.is_empty() {
                errors.add(&tp.field("namespaces").index(ni), "is empty");
            }
        }
        for (ei, e) in t.selector.expressions.iter().enumerate() {
            expression(e, false, &tp.field("selector").field("expressions").index(ei), errors);
        }
    }
}

fn node(n: &NodeAffinity, at: &Path, errors: &mut Errors) {
    if n.terms.is_empty() {
        errors.add(&at.field("terms"), "needs at least one term");
    }
    for (i, t) in n.terms.iter().enumerate() {
        let tp = at.field("terms").index(i);
        weight(n.kind, t.weight, &tp, errors);
        if t.expressions.is_empty() {
            errors.add(&tp.field("expressions"), "needs at least one expression");
        }
        for (ei, e) in t.expressions.iter().enumerate() {
            expression(e, true, &tp.field("expressions").index(ei), errors);
        }
    }
}

/// Kubernetes' rules, which seed 003 takes: In/NotIn need values, Exists/DoesNotExist none,
/// Gt/Lt (node affinity only) exactly one integer.
fn expression(e: &Expression, on_nodes: bool, at: &Path, errors: &mut Errors) {
    if e.key.is_empty() {
        errors.add(&at.field("key"), "is required");
    }
    let Some(op) = e.operator else {
        let ops =
            if on_nodes { "In, NotIn, Exists, DoesNotExist, Gt or Lt" } else { "In, NotIn, Exists or DoesNotExist" };
        errors.add(&at.field("operator"), format!("is required ({ops})"));
        return;
    };
    let vp = at.field("value");
    match op {
        ExpressionOperator::In | ExpressionOperator::NotIn if e.value.is_empty() => {
            errors.add(&vp, format!("{op:?} needs at least one value"));
        }
        ExpressionOperator::Exists | ExpressionOperator::DoesNotExist if !e.value.is_empty() => {
            errors.add(&vp, format!("{op:?} takes no value"));
        }
        ExpressionOperator::Gt | ExpressionOperator::Lt if !on_nodes => {
            errors.add(&at.field("operator"), format!("{op:?} is for node affinity only (seed 003)"));
        }
        ExpressionOperator::Gt | ExpressionOperator::Lt => match e.value.as_slice() {
            [v] if v.trim().parse::<i64>().is_ok() => {}
            [v] => errors.add(&vp.index(0), format!("{v:?} is not an integer ({op:?} compares numbers)")),
            _ => errors.add(&vp, format!("{op:?} needs exactly one value, an integer")),
        },
        _ => {}
    }
}
