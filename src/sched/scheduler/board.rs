//! The nodes as last read, kept between reads (a watch-fed cache, as Kubernetes' informers).
//!
//! A placement needs every node's free ports, resources and apps. Reading all of them per
//! deploy costs a thousand requests at a thousand hosts; most have not changed since the last
//! read. A reading is kept until its node says it changed: any line of its event stream (an
//! instance created, started, removed), a gap, a disconnect or a reconnect. A process that
//! follows the nodes (the leading `run` or `serve`) keeps readings up to [`FED_KEEP`]; one that
//! does not (a command, a server that does not lead) hears nothing, and keeps them only
//! [`UNFED_KEEP`], across one burst of work. What this process places itself is taken out of
//! the readings at once (see [`Board::took`]), so its next placement sees it before the node
//! reports it.
//!
//! What each node runs of each app (its instances' states, as `status` shows them) is kept the
//! same way, per app: an instance's event makes only its app's listing stale there, anything
//! else (a gap, a reconnect, a daemon event, a write of this process) every listing of the
//! node. Listings are kept only while the streams are followed: a process that hears nothing
//! would show a state the leader changed a moment ago.

use super::Seen;
use crate::sched::placement::NodeView;
use crate::spec::{AppId, ProcessSpec};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a reading is kept while the node's event stream is followed: the stream says
/// when it changed; this bounds what a change no event tells (a reloaded configuration).
const FED_KEEP: Duration = Duration::from_secs(10);

/// How long a reading is kept when no stream is followed.
const UNFED_KEEP: Duration = Duration::from_secs(1);

pub(super) struct Board {
    nodes: Mutex<BTreeMap<String, Entry>>,
    /// The nodes' event streams are followed: changes are heard.
    fed: AtomicBool,
    /// How long a reading or listing is kept while fed ([`FED_KEEP`]; shorter in tests).
    fed_keep: Duration,
}

impl Default for Board {
    fn default() -> Board {
        Board { nodes: Default::default(), fed: Default::default(), fed_keep: FED_KEEP }
    }
}

#[derive(Default)]
struct Entry {
    /// Changes heard so far: a reading taken before the last one is stale.
    changes: u64,
    reading: Option<Reading>,
    /// Changes heard that may touch any app's instances here.
    resets: u64,
    /// Each app's instances here, as last listed.
    apps: BTreeMap<AppId, AppEntry>,
}

#[derive(Default)]
struct AppEntry {
    /// Events of this app's instances heard so far.
    changes: u64,
    listing: Option<Listing>,
}

struct Listing {
    seen: Vec<(u32, Seen)>,
    at: Instant,
    ticket: ListTicket,
}

/// What a listing must be stored with: the node's resets and the app's changes when it was
/// asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ListTicket {
    resets: u64,
    changes: u64,
}

struct Reading {
    view: NodeView,
    at: Instant,
    /// `changes` when the read was asked.
    changes: u64,
}

/// What a read must be stored with: the node's changes when it was asked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ticket(u64);

impl Board {
    /// From now on the nodes' event streams say when each changed.
    pub fn fed(&self) {
        self.fed.store(true, Ordering::SeqCst);
    }

    /// `node` changed (or may have: a gap, a reconnect, a write): its reading and every
    /// listing of it are stale.
    pub fn changed(&self, node: &str) {
        let mut nodes = self.nodes.lock().expect("board lock");
        let entry = nodes.entry(node.to_string()).or_default();
        entry.changes += 1;
        entry.resets += 1;
    }

    /// An instance of `app` changed on `node`: the node's reading and that app's listing
    /// there are stale.
    pub fn instance_changed(&self, node: &str, app: AppId) {
        let mut nodes = self.nodes.lock().expect("board lock");
        let entry = nodes.entry(node.to_string()).or_default();
        entry.changes += 1;
        entry.apps.entry(app).or_default().changes += 1;
    }

    /// What `node` runs of `app` as last listed, unless it changed since or is too old; else
    /// the ticket to store a new listing with. (Only a fed board stores listings.)
    pub fn listed(&self, node: &str, app: &AppId) -> Result<Vec<(u32, Seen)>, ListTicket> {
        let nodes = self.nodes.lock().expect("board lock");
        let entry = nodes.get(node);
        let resets = entry.map_or(0, |e| e.resets);
        let app_entry = entry.and_then(|e| e.apps.get(app));
        let ticket = ListTicket { resets, changes: app_entry.map_or(0, |a| a.changes) };
        match app_entry.and_then(|a| a.listing.as_ref()) {
            Some(l) if l.ticket == ticket && l.at.elapsed() < self.fed_keep => Ok(l.seen.clone()),
            _ => Err(ticket),
        }
    }

    /// Keeps what `node` runs of `app`, listed with `ticket`, unless either changed meanwhile.
    pub fn store_listing(&self, node: &str, app: &AppId, seen: &[(u32, Seen)], ticket: ListTicket) {
        if !self.fed.load(Ordering::SeqCst) {
            return;
        }
        let mut nodes = self.nodes.lock().expect("board lock");
        let entry = nodes.entry(node.to_string()).or_default();
        if entry.resets != ticket.resets {
            return;
        }
        let app_entry = entry.apps.entry(app.clone()).or_default();
        if app_entry.changes == ticket.changes {
            app_entry.listing = Some(Listing { seen: seen.to_vec(), at: Instant::now(), ticket });
        }
    }

    /// `node` left the cluster file or now means another host.
    pub fn forget(&self, node: &str) {
        self.nodes.lock().expect("board lock").remove(node);
    }

    /// `node`'s reading, unless it changed since or is too old; else the ticket to store a
    /// new one with.
    pub fn kept(&self, node: &str) -> Result<NodeView, Ticket> {
        let keep = if self.fed.load(Ordering::SeqCst) { self.fed_keep } else { UNFED_KEEP };
        let nodes = self.nodes.lock().expect("board lock");
        let Some(entry) = nodes.get(node) else { return Err(Ticket(0)) };
        match &entry.reading {
            Some(r) if r.changes == entry.changes && r.at.elapsed() < keep => Ok(r.view.clone()),
            _ => Err(Ticket(entry.changes)),
        }
    }

    /// Keeps `view`, read with `ticket`, unless the node changed while it was read.
    pub fn store(&self, node: &str, view: &NodeView, ticket: Ticket) {
        let mut nodes = self.nodes.lock().expect("board lock");
        let entry = nodes.entry(node.to_string()).or_default();
        if entry.changes == ticket.0 {
            entry.reading = Some(Reading { view: view.clone(), at: Instant::now(), changes: ticket.0 });
        }
    }

    /// What a placement took, out of the kept readings: the app's instances, their random
    /// ports and their requests.
    pub fn took(&self, key: &AppId, spec: &ProcessSpec, placed: &BTreeMap<u32, String>) {
        let mut nodes = self.nodes.lock().expect("board lock");
        for node in placed.values() {
            if let Some(r) = nodes.get_mut(node).and_then(|e| e.reading.as_mut()) {
                take(&mut r.view, key, spec);
            }
        }
    }
}

/// One instance of `spec` placed on `view`.
pub(super) fn take(view: &mut NodeView, key: &AppId, spec: &ProcessSpec) {
    // With the labels the node will report for it (pod affinity places by them).
    let app = view.apps.entry(key.to_string()).or_default();
    app.0 = spec.instance_labels();
    app.1 += 1;
    view.free_ports = view.free_ports.saturating_sub(spec.random_ports());
    view.free = view.free.map(|free| free.minus(spec.instance_requests()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, ports: usize) -> NodeView {
        NodeView { name: name.into(), free_ports: ports, ..Default::default() }
    }

    #[test]
    fn a_reading_is_kept_until_its_node_changes() {
        let board = Board::default();
        board.fed();
        let Err(ticket) = board.kept("h1") else { panic!("nothing read yet") };
        board.store("h1", &view("h1", 10), ticket);
        assert_eq!(board.kept("h1").unwrap().free_ports, 10);
        // An event: read again.
        board.changed("h1");
        let Err(ticket) = board.kept("h1") else { panic!("h1 changed") };
        // It changes again while being read: that reading is not kept.
        board.changed("h1");
        board.store("h1", &view("h1", 9), ticket);
        let Err(ticket) = board.kept("h1") else { panic!("read while it changed") };
        board.store("h1", &view("h1", 8), ticket);
        assert_eq!(board.kept("h1").unwrap().free_ports, 8);
        board.forget("h1");
        assert!(board.kept("h1").is_err());
    }

    #[test]
    fn what_a_placement_takes_is_counted_with_its_labels() {
        let board = Board::default();
        let Err(ticket) = board.kept("h1") else { panic!() };
        board.store("h1", &view("h1", 10), ticket);
        let spec = crate::sched::scheduler::check_spec(&serde_json::json!({
            "apiVersion": "v4", "kind": "process", "metadata": {"name": "big", "namespace": "ns",
                "labels": {"app": "big"}},
            "spec": {"instance": 1, "template": {"spec": {"processes": [{
                "procName": "sh", "workPath": "${work_base_dir}/x", "startCmd": "sleep 1"}]}}}
        }))
        .unwrap();
        let key = AppId::new("ns", "big");
        board.took(&key, &spec, &BTreeMap::from([(0, "h1".to_string())]));
        let kept = board.kept("h1").unwrap();
        let (labels, count) = &kept.apps["ns/big"];
        assert_eq!(*count, 1);
        assert!(!labels.is_empty());
        assert_eq!(labels, &spec.instance_labels(), "pod affinity places by them before the node reports them");
    }

    fn seen(state: &str) -> Vec<(u32, Seen)> {
        vec![(0, Seen::none(state, ""))]
    }

    #[test]
    fn a_listing_is_kept_until_its_apps_instances_change() {
        let (a, b) = (AppId::new("ns", "a"), AppId::new("ns", "b"));
        let board = Board::default();
        // Unfed: never kept (a state the leader changed would be shown as it was).
        let Err(ticket) = board.listed("h1", &a) else { panic!() };
        board.store_listing("h1", &a, &seen("Running"), ticket);
        assert!(board.listed("h1", &a).is_err());

        board.fed();
        for app in [&a, &b] {
            let Err(ticket) = board.listed("h1", app) else { panic!() };
            board.store_listing("h1", app, &seen("Running"), ticket);
        }
        assert_eq!(board.listed("h1", &a).unwrap(), seen("Running"));
        // An event of a's instance: a is listed again, b is not.
        board.instance_changed("h1", a.clone());
        let Err(a_ticket) = board.listed("h1", &a) else { panic!("a changed") };
        assert!(board.listed("h1", &b).is_ok());
        assert!(board.kept("h1").is_err(), "the node's reading is stale too");
        // It changes again while listed: that listing is not kept.
        board.instance_changed("h1", a.clone());
        board.store_listing("h1", &a, &seen("Stopped"), a_ticket);
        assert!(board.listed("h1", &a).is_err());
        // A gap, a reconnect or a write of this process: every listing of the node is stale,
        // also one asked before it and stored after.
        let Err(a_ticket) = board.listed("h1", &a) else { panic!() };
        board.changed("h1");
        board.store_listing("h1", &a, &seen("Stopped"), a_ticket);
        assert!(board.listed("h1", &a).is_err());
        assert!(board.listed("h1", &b).is_err());
    }

    #[test]
    fn fed_readings_and_listings_older_than_their_keep_are_read_again() {
        // FED_KEEP bounds what no event tells (a node's reloaded labels); 10 s, here 50 ms.
        let board = Board { fed_keep: Duration::from_millis(50), ..Board::default() };
        board.fed();
        let app = AppId::new("ns", "a");
        let Err(ticket) = board.kept("h1") else { panic!() };
        board.store("h1", &view("h1", 10), ticket);
        let Err(ticket) = board.listed("h1", &app) else { panic!() };
        board.store_listing("h1", &app, &seen("Running"), ticket);
        assert!(board.kept("h1").is_ok() && board.listed("h1", &app).is_ok(), "unchanged, within the keep");
        std::thread::sleep(Duration::from_millis(80));
        assert!(board.kept("h1").is_err(), "a reading older than the keep is read again");
        assert!(board.listed("h1", &app).is_err(), "a listing older than the keep is listed again");
    }

    #[test]
    fn unfed_readings_last_a_second() {
        let board = Board::default();
        let Err(ticket) = board.kept("h1") else { panic!() };
        board.store("h1", &view("h1", 10), ticket);
        assert!(board.kept("h1").is_ok());
        std::thread::sleep(UNFED_KEEP + Duration::from_millis(50));
        assert!(board.kept("h1").is_err(), "an unfed reading is read again after a second");
    }
}
