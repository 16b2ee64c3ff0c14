//! What the store holds, as its callers see it: the record tables, a journal entry, and a
//! snapshot of every record. Plain data; reading them from redb is read.rs's.

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A table of string-keyed JSON records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    Instances,
    Specs,
    Ports,
    Meta,
    /// Namespace-scoped secrets (values never leave the daemon except into instances).
    Secrets,
    ConfigMaps,
    /// Apps' revisions (`namespace/name/NNNNNNNNNN`), the newest few of each.
    Revisions,
    /// Seed 004's HookTemplates (`namespace/name`).
    HookTemplates,
    /// HookRuns with every measurement (`namespace/name`).
    HookRuns,
    /// steward-sched's dependencies (seed 002's dependency pods, `namespace/name`).
    Depends,
    /// steward-sched's node records (what the leading run knows of each node, by name).
    SchedNodes,
    /// Pods' CNI attachments whose DEL is owed (by CNI container id), until it succeeds.
    CniReleases,
    /// Apps' endpoints as steward-sched handed them (`namespace/name`); also steward-sched's
    /// own copy in its embedded store.
    Endpoints,
}

impl Table {
    pub const ALL: [Table; 13] = [
        Table::Instances,
        Table::Specs,
        Table::Ports,
        Table::Meta,
        Table::Secrets,
        Table::ConfigMaps,
        Table::Revisions,
        Table::HookTemplates,
        Table::HookRuns,
        Table::Depends,
        Table::SchedNodes,
        Table::CniReleases,
        Table::Endpoints,
    ];

    /// The table's name on disk and in [`Snapshot::records`] keys (`"instances"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Table::Instances => "instances",
            Table::Specs => "specs",
            Table::Ports => "ports",
            Table::Meta => "meta",
            Table::Secrets => "secrets",
            Table::ConfigMaps => "configmaps",
            Table::Revisions => "revisions",
            Table::HookTemplates => "hooktemplates",
            Table::HookRuns => "hookruns",
            Table::Depends => "depends",
            Table::SchedNodes => "schednodes",
            Table::CniReleases => "cnireleases",
            Table::Endpoints => "endpoints",
        }
    }

    pub fn from_name(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }

    pub(super) fn def(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        TableDefinition::new(self.name())
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Sequence number: 1, 2, 3... with no gaps, never reused.
    pub seq: u64,
    /// When the store committed it, unix milliseconds.
    pub at_ms: u64,
    pub body: Value,
}

/// A consistent view of every record, as of `last_seq`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every record, keyed `"table:key"` (e.g. `"instances:web/api/0"`).
    pub records: BTreeMap<String, Value>,
    /// Sequence number of the newest event committed with (or before) these records; 0 if none.
    pub last_seq: u64,
    /// Oldest event still in the journal; `last_seq + 1` if the journal is empty.
    pub first_seq: u64,
}

impl Snapshot {
    /// The `"table:key"` string used in [`Snapshot::records`].
    pub fn record_key(table: Table, key: &str) -> String {
        format!("{}:{key}", table.name())
    }

    pub fn get(&self, table: Table, key: &str) -> Option<&Value> {
        self.records.get(&Snapshot::record_key(table, key))
    }

    /// The records of one table as `(key, value)`, in key order.
    pub fn table(&self, table: Table) -> impl Iterator<Item = (&str, &Value)> + '_ {
        let prefix = Snapshot::record_key(table, "");
        let skip = prefix.len();
        self.records
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
            .map(move |(k, v)| (&k[skip..], v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_names_round_trip() {
        for t in Table::ALL {
            assert_eq!(Table::from_name(t.name()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), json!(t.name()));
            assert_eq!(Table::ALL[t.index()], t);
        }
        assert_eq!(Table::from_name("_events"), None);
    }

    #[test]
    fn snapshot_table_view_strips_prefix_and_stays_in_table() {
        let mut s = Snapshot::default();
        s.records.insert("instances:a/b/0".into(), json!(1));
        s.records.insert("instances:a/b/1".into(), json!(2));
        s.records.insert("meta:x".into(), json!(3));
        s.records.insert("ports:a/b/0".into(), json!(4));
        let inst: Vec<_> = s.table(Table::Instances).collect();
        assert_eq!(inst, vec![("a/b/0", &json!(1)), ("a/b/1", &json!(2))]);
        assert_eq!(s.get(Table::Meta, "x"), Some(&json!(3)));
        assert_eq!(s.table(Table::Specs).count(), 0);
    }
}
