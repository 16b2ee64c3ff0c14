//! Placement constraints (seed 000's `constraint`): read by the scheduler, checked by
//! `validate`, never by the daemon.

use super::{is_default, NumberText};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Constraint {
    /// All items must hold.
    pub intersection_item: Vec<IntersectionItem>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IntersectionItem {
    /// At least one must hold.
    pub union_data: Vec<UnionData>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operator {
    #[serde(rename = "UNIQUE")]
    Unique,
    #[serde(rename = "MAXPER")]
    MaxPer,
    #[serde(rename = "CLUSTER")]
    Cluster,
    #[serde(rename = "LIKE")]
    Like,
    #[serde(rename = "UNLIKE")]
    Unlike,
    #[serde(rename = "GROUPBY")]
    GroupBy,
    #[serde(rename = "EXCLUDE")]
    Exclude,
    #[serde(rename = "GREATER")]
    Greater,
}

/// Constraint parameter types of seed 000.
pub const TYPE_SCALAR: i64 = 1;
pub const TYPE_TEXT: i64 = 3;
pub const TYPE_SET: i64 = 4;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UnionData {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operate: Option<Operator>,
    /// 1 scalar, 3 text, 4 set; 0 when left out.
    #[serde(rename = "type", skip_serializing_if = "is_default")]
    pub kind: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<TextValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<SetValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scalar: Option<ScalarValue>,
    /// The seed's prose spells it `scaler`; folded into `scalar`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaler: Option<ScalarValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TextValue {
    pub value: NumberOrString,
}

/// A text parameter that real files sometimes write as a bare number (`"value": 5`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NumberOrString(pub NumberText);

impl NumberOrString {
    pub fn as_str(&self) -> &str {
        &self.0 .0
    }
}

impl From<&str> for NumberOrString {
    fn from(s: &str) -> Self {
        NumberOrString(NumberText(s.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SetValue {
    pub item: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ScalarValue {
    pub value: f64,
}
