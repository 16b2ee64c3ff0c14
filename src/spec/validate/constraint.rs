//! Static rules of a placement constraint (seed 000's operators and their parameter types).

use crate::spec::error::{Errors, Path};
use crate::spec::model::*;

pub(super) fn constraint(c: &Constraint, at: &Path, errors: &mut Errors) {
    for (ii, item) in c.intersection_item.iter().enumerate() {
        let ip = at.field("intersectionItem").index(ii);
        if item.union_data.is_empty() {
            errors.add(&ip.field("unionData"), "needs at least one rule");
        }
        for (ui, u) in item.union_data.iter().enumerate() {
            union_data(u, &ip.field("unionData").index(ui), errors);
        }
    }
}

fn union_data(u: &UnionData, at: &Path, errors: &mut Errors) {
    if u.name.is_empty() {
        errors.add(&at.field("name"), "is required (the node attribute, e.g. hostname)");
    }
    if u.operate == Some(Operator::Exclude) && !u.name.is_empty() && u.name != "label" {
        errors.add(&at.field("name"), format!("EXCLUDE works on \"label\" only, found {:?}", u.name));
    }
    let Some(op) = u.operate else {
        errors.add(
            &at.field("operate"),
            "is required (UNIQUE, MAXPER, CLUSTER, LIKE, UNLIKE, GROUPBY, EXCLUDE or GREATER)",
        );
        return;
    };
    if !matches!(u.kind, 0 | TYPE_SCALAR | TYPE_TEXT | TYPE_SET) {
        errors.add(&at.field("type"), format!("{} is not a type: 1 (scalar), 3 (text) or 4 (set)", u.kind));
        return;
    }
    // Which parameter types each operator takes (seed 000).
    let allowed: &[i64] = match op {
        Operator::Unique => &[],
        Operator::MaxPer => &[TYPE_TEXT],
        Operator::Cluster | Operator::GroupBy | Operator::Exclude => &[TYPE_SET],
        Operator::Like | Operator::Unlike => &[TYPE_TEXT, TYPE_SET],
        Operator::Greater => &[TYPE_SCALAR],
    };
    let op_name = serde_json::to_value(op).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    if allowed.is_empty() {
        return; // UNIQUE takes no parameter; a type given anyway is ignored.
    }
    if !allowed.contains(&u.kind) {
        let want: Vec<String> = allowed.iter().map(|t| type_name(*t)).collect();
        let found = if u.kind == 0 { "none".to_string() } else { type_name(u.kind) };
        errors.add(&at.field("type"), format!("{op_name} needs type {}, found {found}", want.join(" or ")));
        return;
    }
    match u.kind {
        TYPE_TEXT => match &u.text {
            None => errors.add(&at.field("text"), format!("is required for {op_name} with type 3")),
            Some(t) => {
                let v = t.value.as_str();
                let vp = at.field("text").field("value");
                match op {
                    Operator::MaxPer => {
                        if !v.trim().parse::<u32>().is_ok_and(|n| n > 0) {
                            errors.add(&vp, format!("MAXPER needs a positive whole number, found {v:?}"));
                        }
                    }
                    _ => check_regex(v, &vp, errors),
                }
            }
        },
        TYPE_SET => match &u.set {
            None => errors.add(&at.field("set"), format!("is required for {op_name} with type 4")),
            Some(s) if s.item.is_empty() => errors.add(&at.field("set").field("item"), "must not be empty"),
            Some(s) => {
                for (i, item) in s.item.iter().enumerate() {
                    let p = at.field("set").field("item").index(i);
                    match op {
                        Operator::Like | Operator::Unlike => check_regex(item, &p, errors),
                        Operator::Exclude if !is_label_pair(item) => {
                            errors.add(&p, format!("EXCLUDE items are key:value labels, found {item:?}"));
                        }
                        _ => {}
                    }
                }
            }
        },
        TYPE_SCALAR => match &u.scalar {
            None => errors.add(&at.field("scalar"), format!("is required for {op_name} with type 1")),
            Some(s) if !s.value.is_finite() => errors.add(&at.field("scalar").field("value"), "must be a number"),
            Some(_) => {}
        },
        _ => {}
    }
}

fn is_label_pair(item: &str) -> bool {
    item.split_once(':').is_some_and(|(k, v)| !k.is_empty() && !v.is_empty())
}

fn type_name(t: i64) -> String {
    match t {
        TYPE_SCALAR => "1 (scalar)".into(),
        TYPE_TEXT => "3 (text)".into(),
        TYPE_SET => "4 (set)".into(),
        other => other.to_string(),
    }
}

/// LIKE/UNLIKE patterns match the whole attribute value.
pub fn anchored_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

fn check_regex(pattern: &str, at: &Path, errors: &mut Errors) {
    if pattern.is_empty() {
        errors.add(at, "must not be empty");
    } else if let Err(e) = anchored_regex(pattern) {
        let last = e.to_string().lines().last().unwrap_or_default().trim().to_string();
        let first = last.strip_prefix("error: ").unwrap_or(&last).to_string();
        errors.add(at, format!("{pattern:?} is not a valid regular expression: {first}"));
    }
}
