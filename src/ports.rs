//! Host port allocator: `hostPort: 0` gets a port from the configured range (default
//! 31000–32000) that no other instance holds and nothing on the host listens on; fixed ports are
//! checked against every allocation. Allocations are durable (the store's Ports table, written
//! in the same batch as the instance record), so a daemon restart never hands a port out twice.

use crate::store::{Batch, Snapshot, Table};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Who holds a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// `namespace/name/index`.
    pub instance: String,
    /// The spec's port name.
    pub name: String,
    /// Allocated from the range (true) or fixed by the spec (false).
    pub random: bool,
}

/// A port wanted by an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub name: String,
    /// 0 = any free port from the range.
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error("port {port} ({name}) is already used by {holder}")]
    Conflict { port: u16, name: String, holder: String },
    #[error("no free port left in {start}-{end} for {instance} port {name}")]
    Exhausted { start: u16, end: u16, instance: String, name: String },
}

/// The allocations, in memory; the store holds the durable copy.
#[derive(Debug, Clone)]
pub struct Allocator {
    start: u16,
    end: u16,
    held: BTreeMap<u16, Holder>,
    /// Where the next search starts, so released ports are not reused at once.
    cursor: u16,
}

impl Allocator {
    pub fn new(start: u16, end: u16) -> Allocator {
        Allocator { start, end, held: BTreeMap::new(), cursor: start }
    }

    /// The range `hostPort: 0` ports come from (fixed for the allocator's life: a new range in
    /// the configuration takes effect at the daemon's next start).
    pub fn range(&self) -> (u16, u16) {
        (self.start, self.end)
    }

    /// Rebuilds the allocations from the store.
    pub fn load(start: u16, end: u16, snapshot: &Snapshot) -> Allocator {
        let mut a = Allocator::new(start, end);
        for (key, value) in snapshot.table(Table::Ports) {
            match (key.parse::<u16>(), serde_json::from_value::<Holder>(value.clone())) {
                (Ok(port), Ok(holder)) => {
                    a.held.insert(port, holder);
                }
                _ => tracing::error!("unreadable port allocation {key}: {value}"),
            }
        }
        if let Some(last) = a.held.keys().rfind(|p| (start..=end).contains(*p)) {
            a.cursor = last.saturating_add(1);
        }
        a
    }

    /// Ports of `instance`, by name.
    pub fn ports_of(&self, instance: &str) -> BTreeMap<String, u16> {
        self.held.iter().filter(|(_, h)| h.instance == instance).map(|(p, h)| (h.name.clone(), *p)).collect()
    }

    /// Allocates every wanted port of `instance` (keeping the ones it already holds), adding the
    /// durable writes to `batch`. All or nothing: on error neither `self` nor `batch` changes.
    pub fn allocate(
        &mut self,
        instance: &str,
        wants: &[Want],
        in_use_on_host: &BTreeSet<u16>,
        batch: &mut Batch,
    ) -> Result<BTreeMap<String, u16>, PortError> {
        let held_before = self.ports_of(instance);
        let keeps = |name: &str, port: u16| wants.iter().any(|w| w.name == name && (w.port == 0 || w.port == port));
        // Ports the instance holds under names (or numbers) it no longer wants are released.
        let released: BTreeSet<u16> = held_before.iter().filter(|(n, p)| !keeps(n, **p)).map(|(_, p)| *p).collect();
        let mut taken: BTreeSet<u16> = BTreeSet::new();
        let mut cursor = self.cursor;
        let mut result = BTreeMap::new();
        let mut new_holders = Vec::new();
        for w in wants {
            if let Some(port) = held_before.get(&w.name).filter(|p| !released.contains(p)) {
                result.insert(w.name.clone(), *port);
                continue;
            }
            let busy = |p: u16| (self.held.contains_key(&p) && !released.contains(&p)) || taken.contains(&p);
            let port = if w.port > 0 {
                if busy(w.port) {
                    let holder = self.held.get(&w.port).map_or(instance.to_string(), |h| h.instance.clone());
                    return Err(PortError::Conflict { port: w.port, name: w.name.clone(), holder });
                }
                w.port
            } else {
                let found = self.next_free(cursor, |p| busy(p) || in_use_on_host.contains(&p));
                let port = found.ok_or_else(|| PortError::Exhausted {
                    start: self.start,
                    end: self.end,
                    instance: instance.to_string(),
                    name: w.name.clone(),
                })?;
                cursor = if port == self.end { self.start } else { port + 1 };
                port
            };
            taken.insert(port);
            result.insert(w.name.clone(), port);
            new_holders
                .push((port, Holder { instance: instance.to_string(), name: w.name.clone(), random: w.port == 0 }));
        }
        for p in released {
            self.held.remove(&p);
            batch.push_delete(Table::Ports, &p.to_string());
        }
        for (port, holder) in new_holders {
            batch.push_put(Table::Ports, &port.to_string(), &serde_json::to_value(&holder).expect("holder serializes"));
            self.held.insert(port, holder);
        }
        self.cursor = cursor;
        Ok(result)
    }

    /// Releases every port of `instance`, adding the durable deletes to `batch`.
    pub fn release(&mut self, instance: &str, batch: &mut Batch) -> Vec<u16> {
        let ports: Vec<u16> = self.held.iter().filter(|(_, h)| h.instance == instance).map(|(p, _)| *p).collect();
        for p in &ports {
            self.held.remove(p);
            batch.push_delete(Table::Ports, &p.to_string());
        }
        ports
    }

    /// Ports of the range nobody holds and nothing listens on.
    pub fn free_count(&self, in_use_on_host: &BTreeSet<u16>) -> usize {
        (self.start..=self.end).filter(|p| !self.held.contains_key(p) && !in_use_on_host.contains(p)).count()
    }

    /// The first port from `cursor` on (wrapping) that `busy` does not claim.
    fn next_free(&self, cursor: u16, busy: impl Fn(u16) -> bool) -> Option<u16> {
        let span = u32::from(self.end - self.start) + 1;
        let first = u32::from(cursor.clamp(self.start, self.end) - self.start);
        (0..span).map(|step| self.start + ((first + step) % span) as u16).find(|p| !busy(*p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(name: &str, port: u16) -> Want {
        Want { name: name.into(), port }
    }

    #[test]
    fn random_ports_skip_held_and_listening_ones() {
        let mut a = Allocator::new(31000, 31004);
        let host: BTreeSet<u16> = [31001].into();
        let mut b = Batch::new();
        let p = a.allocate("ns/a/0", &[want("http", 0), want("admin", 0)], &host, &mut b).unwrap();
        assert_eq!(p, BTreeMap::from([("admin".into(), 31002), ("http".into(), 31000)]));
        assert_eq!(b.len(), 2);
        let again = a.allocate("ns/a/0", &[want("http", 0), want("admin", 0)], &host, &mut Batch::new()).unwrap();
        assert_eq!(again, p, "an instance keeps its ports");
    }

    #[test]
    fn fixed_ports_conflict_with_any_holder() {
        let mut a = Allocator::new(31000, 31010);
        a.allocate("ns/a/0", &[want("http", 8080)], &BTreeSet::new(), &mut Batch::new()).unwrap();
        let err = a.allocate("ns/b/0", &[want("web", 8080)], &BTreeSet::new(), &mut Batch::new()).unwrap_err();
        assert_eq!(err.to_string(), "port 8080 (web) is already used by ns/a/0");
    }

    #[test]
    fn exhaustion_is_all_or_nothing() {
        let mut a = Allocator::new(31000, 31001);
        a.allocate("ns/a/0", &[want("x", 0)], &BTreeSet::new(), &mut Batch::new()).unwrap();
        let mut b = Batch::new();
        let err = a.allocate("ns/b/0", &[want("y", 0), want("z", 0)], &BTreeSet::new(), &mut b).unwrap_err();
        assert_eq!(err.to_string(), "no free port left in 31000-31001 for ns/b/0 port z");
        assert!(a.ports_of("ns/b/0").is_empty(), "nothing half-allocated");
        assert_eq!(a.free_count(&BTreeSet::new()), 1);
    }

    #[test]
    fn release_frees_and_the_cursor_moves_on() {
        let mut a = Allocator::new(31000, 31009);
        a.allocate("ns/a/0", &[want("x", 0)], &BTreeSet::new(), &mut Batch::new()).unwrap();
        assert_eq!(a.release("ns/a/0", &mut Batch::new()), vec![31000]);
        let p = a.allocate("ns/b/0", &[want("x", 0)], &BTreeSet::new(), &mut Batch::new()).unwrap();
        assert_eq!(p["x"], 31001, "a just-released port is not handed out again at once");
    }
}
