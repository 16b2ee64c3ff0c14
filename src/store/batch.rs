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
    pub(crate) on_durable: Option<OnDurable>,
}

/// What runs once a batch is durable, before its events are published (see [`Batch::on_durable`]).
pub(crate) struct OnDurable(pub(crate) Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for OnDurable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnDurable")
    }
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

    /// [`Batch::put`] of a record serialized already (straight from its type, once: an
    /// instance's journal retries a commit with the same bytes).
    pub fn put_json(mut self, table: Table, key: &str, json: Vec<u8>) -> Batch {
        self.ops.push(Op::Put { table, key: key.to_owned(), value: json });
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

    /// Runs `f` on the store's thread once the batch is durable and before any of its events
    /// is published: what an event announces (a record shown to readers) is there for whoever
    /// the event wakes. Not run if the commit fails.
    pub fn on_durable(mut self, f: impl FnOnce() + Send + 'static) -> Batch {
        self.on_durable = Some(OnDurable(Box::new(f)));
        self
    }

    /// [`Batch::put`] for callers that build a batch in a loop.
    pub fn push_put(&mut self, table: Table, key: &str, value: &Value) {
        self.ops.push(Op::Put { table, key: key.to_owned(), value: to_json(value) });
    }

    pub fn push_delete(&mut self, table: Table, key: &str) {
        self.ops.push(Op::Delete { table, key: key.to_owned() });
    }

    /// An event larger than [`MAX_EVENT_BYTES`] is journaled shortened ([`bounded_event`]):
    /// what a workload or a probed endpoint put into it must not grow every reader's copy.
    pub fn push_event(&mut self, body: Value) {
        let bytes = to_json(&body);
        if bytes.len() <= MAX_EVENT_BYTES {
            self.ops.push(Op::Event { body, bytes });
            return;
        }
        let body = bounded_event(body, bytes.len());
        let bytes = to_json(&body);
        self.ops.push(Op::Event { body, bytes });
    }

    /// The `n`th operation's event body and its journaled bytes, if it is an event.
    pub fn event_at(&self, n: usize) -> Option<(&Value, &[u8])> {
        match self.ops.get(n)? {
            Op::Event { body, bytes } => Some((body, bytes)),
            _ => None,
        }
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

/// The largest event journaled as it is (its JSON); a journal line is a few hundred bytes.
pub const MAX_EVENT_BYTES: usize = 16 << 10;

/// The longest string an oversized event keeps of each of its values.
const MAX_EVENT_STRING: usize = 1 << 10;

/// An event of `size` bytes (over [`MAX_EVENT_BYTES`]) shortened: each string longer than
/// [`MAX_EVENT_STRING`] cut there (saying how much was cut); if that is not enough, only its
/// top-level numbers, booleans and short strings are kept. Either way it says `truncated`
/// with its original size, so a reader knows it did not get all of it.
pub fn bounded_event(mut body: Value, size: usize) -> Value {
    fn cut(v: &mut Value) {
        match v {
            Value::String(s) if s.len() > MAX_EVENT_STRING => {
                let mut end = MAX_EVENT_STRING;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                let dropped = s.len() - end;
                s.truncate(end);
                s.push_str(&format!("… ({dropped} bytes cut)"));
            }
            Value::Array(items) => items.iter_mut().for_each(cut),
            Value::Object(map) => map.values_mut().for_each(cut),
            _ => {}
        }
    }
    cut(&mut body);
    if to_json(&body).len() > MAX_EVENT_BYTES {
        // The top level's scalars, in order, while they fit (room kept for `truncated`).
        let mut room = MAX_EVENT_BYTES - 256;
        body = match body {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .filter(|(k, v)| {
                        let scalar = !matches!(v, Value::Object(_) | Value::Array(_));
                        let cost = k.len() + to_json(v).len() + 4;
                        let fits = scalar && cost <= room;
                        if fits {
                            room -= cost;
                        }
                        fits
                    })
                    .collect(),
            ),
            _ => Value::Object(Default::default()),
        };
    }
    if let Value::Object(map) = &mut body {
        map.insert("truncated".into(), serde_json::json!({"bytes": size}));
    }
    body
}

fn to_json(value: &Value) -> Vec<u8> {
    // A `Value` always serializes: its map keys are strings and it holds no NaN.
    serde_json::to_vec(value).expect("serializing a serde_json::Value cannot fail")
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_oversized_event_is_journaled_shortened_and_says_so() {
        let big = "x".repeat(15 << 20);
        let mut b = super::Batch::new();
        b.push_event(serde_json::json!({"type": "hookMeasured", "run": "r", "value": big, "n": 3}));
        let super::Op::Event { body, bytes } = &b.ops[0] else { panic!("not an event") };
        assert!(bytes.len() <= super::MAX_EVENT_BYTES, "{}", bytes.len());
        assert_eq!((body["type"].as_str(), body["n"].as_u64()), (Some("hookMeasured"), Some(3)));
        assert!(body["value"].as_str().unwrap().ends_with(&format!("({} bytes cut)", (15 << 20) - 1024)));
        assert_eq!(body["truncated"]["bytes"].as_u64(), Some(15 * 1024 * 1024 + 50));
        // Many values, each under the string cap: only the top level's small ones stay.
        let many: Vec<String> = (0..200).map(|i| format!("{i}").repeat(500)).collect();
        b.push_event(serde_json::json!({"type": "x", "list": many}));
        let super::Op::Event { body, bytes } = &b.ops[1] else { panic!("not an event") };
        assert!(bytes.len() <= super::MAX_EVENT_BYTES);
        assert_eq!(body["type"], "x");
        assert!(body.get("list").is_none() && body["truncated"]["bytes"].as_u64().unwrap() > 100_000);
        // Small events are untouched.
        b.push_event(serde_json::json!({"type": "y"}));
        let super::Op::Event { body, .. } = &b.ops[2] else { panic!("not an event") };
        assert_eq!(body, &serde_json::json!({"type": "y"}));
    }

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
