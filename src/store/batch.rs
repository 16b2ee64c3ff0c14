//! The write side's unit: a [`Batch`] of puts, deletes and events, built by callers and
//! applied by the writer thread in one transaction.

use super::Table;
use serde_json::Value;

#[derive(Debug)]
pub(crate) enum Op {
    Put { table: Table, key: String, value: Vec<u8> },
    Delete { table: Table, key: String },
    Event { body: Value, bytes: Vec<u8> },
}

/// Operations committed together, atomically, in order.
///
/// ```
/// # use steward::store::{Batch, Table};
/// let b = Batch::new()
///     .put(Table::Instances, "web/api/0", &serde_json::json!({"state": "Starting"}))
///     .event(serde_json::json!({"instance": "web/api/0", "to": "Starting"}));
/// assert_eq!(b.len(), 2);
/// ```
#[derive(Debug, Default)]
#[must_use]
pub struct Batch {
    pub(crate) ops: Vec<Op>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Insert or replace the record `key` of `table`.
    pub fn put(mut self, table: Table, key: &str, value: &Value) -> Batch {
        self.push_put(table, key, value);
        self
    }

    /// Remove the record `key` of `table` (no error if it is absent).
    pub fn delete(mut self, table: Table, key: &str) -> Batch {
        self.push_delete(table, key);
        self
    }

    /// Append an event to the journal; its sequence number is returned by the commit.
    pub fn event(mut self, body: Value) -> Batch {
        self.push_event(body);
        self
    }

    /// [`Batch::put`] for callers that build a batch in a loop.
    pub fn push_put(&mut self, table: Table, key: &str, value: &Value) {
        self.ops.push(Op::Put { table, key: key.to_owned(), value: to_json(value) });
    }

    pub fn push_delete(&mut self, table: Table, key: &str) {
        self.ops.push(Op::Delete { table, key: key.to_owned() });
    }

    pub fn push_event(&mut self, body: Value) {
        let bytes = to_json(&body);
        self.ops.push(Op::Event { body, bytes });
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Number of events (= sequence numbers the commit will return).
    pub fn event_count(&self) -> usize {
        self.ops.iter().filter(|op| matches!(op, Op::Event { .. })).count()
    }
}

fn to_json(value: &Value) -> Vec<u8> {
    // A `Value` always serializes: its map keys are strings and it holds no NaN.
    serde_json::to_vec(value).expect("serializing a serde_json::Value cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn batch_builder_counts_ops_and_events() {
        let b = Batch::new()
            .put(Table::Instances, "a", &json!(1))
            .event(json!({"x": 1}))
            .delete(Table::Ports, "b")
            .event(json!(null));
        assert_eq!(b.len(), 4);
        assert_eq!(b.event_count(), 2);
        assert!(Batch::new().is_empty());
        let mut b = Batch::new();
        b.push_put(Table::Meta, "k", &json!("v"));
        b.push_event(json!(2));
        b.push_delete(Table::Meta, "k");
        assert_eq!((b.len(), b.event_count()), (3, 1));
    }
}
