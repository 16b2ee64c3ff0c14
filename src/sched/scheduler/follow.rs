//! Following every node's event stream: one task per node that reconnects from the last
//! sequence seen, reports gaps and disconnects, and notes when each node was last heard.

use super::{Scheduler, NODE_TIMEOUT};
use crate::client::{Client, ClientError, StreamLine};
use crate::protocol::sched::{Disconnected, Gap, NodeHeartbeat, Resync};
use crate::protocol::{NodeItem, NodeLine};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

impl Scheduler {
    /// Follows every node's event stream from `since` (per node; None = from now), resuming
    /// after disconnects from the last sequence seen. Items arrive on the returned channel.
    pub fn follow(self: &Arc<Self>, since: Option<u64>) -> tokio::sync::mpsc::UnboundedReceiver<NodeLine> {
        self.follow_noting(since, HeardAt::default())
    }

    /// As [`Scheduler::follow`], from a cursor per node (sequence numbers are each daemon's
    /// own); a node not named is followed from now.
    pub fn follow_from(
        self: &Arc<Self>,
        cursors: &BTreeMap<String, u64>,
    ) -> tokio::sync::mpsc::UnboundedReceiver<NodeLine> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let silence = Duration::from_secs(self.cluster.heartbeat_timeout_secs);
        for (name, client) in self.nodes().iter() {
            let since = cursors.get(name).copied();
            let heard = Heard { at: HeardAt::default(), board: self.board.clone() };
            tokio::spawn(follow_node(name.clone(), client.clone(), since, silence, tx.clone(), heard));
        }
        rx
    }

    /// As [`Scheduler::follow`], noting in `heard` when each node last sent something (an
    /// event or a heartbeat), as it arrives, however busy the receiver is.
    pub(super) fn follow_noting(
        &self,
        since: Option<u64>,
        heard: HeardAt,
    ) -> tokio::sync::mpsc::UnboundedReceiver<NodeLine> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for (name, client) in self.nodes().iter() {
            self.spawn_follower(name, client, since, &tx, &heard);
        }
        rx
    }

    /// Follows one node into `tx` until aborted (a node removed from the cluster file).
    pub(super) fn spawn_follower(
        &self,
        name: &str,
        client: &Client,
        since: Option<u64>,
        tx: &tokio::sync::mpsc::UnboundedSender<NodeLine>,
        heard: &HeardAt,
    ) -> tokio::task::JoinHandle<()> {
        let silence = Duration::from_secs(self.cluster.heartbeat_timeout_secs);
        let heard = Heard { at: heard.clone(), board: self.board.clone() };
        tokio::spawn(follow_node(name.to_string(), client.clone(), since, silence, tx.clone(), heard))
    }
}

/// When each node last sent a line, shared between the followers and `run`.
pub(super) type HeardAt = Arc<Mutex<BTreeMap<String, Instant>>>;

/// What a follower notes as lines arrive, however busy their receiver is: when its node was
/// last heard, and that it changed (an event, a gap, a reconnect: its reading is stale).
struct Heard {
    at: HeardAt,
    board: Arc<super::board::Board>,
}

/// Follows one node forever: reconnects after any end, from the last sequence number seen; a
/// stream silent for `silence` (no event, no heartbeat) is dropped and reopened.
async fn follow_node(
    node: String,
    client: Client,
    since: Option<u64>,
    silence: Duration,
    tx: tokio::sync::mpsc::UnboundedSender<NodeLine>,
    heard: Heard,
) {
    let mut cursor = since;
    let mut backoff = Duration::from_millis(200);
    // The journal the cursor belongs to (see JournalBounds::journal_id).
    let mut journal: Option<u64> = None;
    loop {
        // Every (re)connect reads the journal's bounds and identity first: a daemon restarted on a
        // new state directory has another journal, whose numbers may well have passed the cursor.
        let bounds = match tokio::time::timeout(NODE_TIMEOUT, client.node()).await {
            Ok(Ok(doc)) => doc.events,
            _ => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        // What changed while it was not followed is not known: read it again.
        heard.board.changed(&node);
        let other_journal = journal.is_some_and(|j| bounds.journal_id != 0 && j != bounds.journal_id);
        if bounds.journal_id != 0 {
            journal = Some(bounds.journal_id);
        }
        let start = match cursor {
            Some(was) if other_journal => {
                let resync = Resync { was, last_seq: bounds.last_seq };
                if tx.send(NodeLine { node: node.clone(), item: NodeItem::Resync { resync } }).is_err() {
                    return;
                }
                bounds.last_seq
            }
            Some(c) => c,
            None => bounds.last_seq,
        };
        let last = Arc::new(Mutex::new((start, Instant::now())));
        let stream = {
            let last = last.clone();
            let tx = tx.clone();
            let node = node.clone();
            let heard_at = heard.at.clone();
            let board = heard.board.clone();
            client.event_stream(start, true, move |line| {
                let mut l = last.lock().expect("follower lock");
                l.1 = Instant::now();
                heard_at.lock().expect("heard lock").insert(node.clone(), l.1);
                let item = match line {
                    StreamLine::Event(event) => {
                        // An instance's event makes only its app's listing stale.
                        let instance = match &event.body {
                            crate::protocol::EventBody::Instance(e) => {
                                crate::client::parse_instance_id(&e.instance).ok()
                            }
                            _ => None,
                        };
                        match instance {
                            Some(id) => board.instance_changed(&node, id.app()),
                            None => board.changed(&node),
                        }
                        l.0 = event.seq;
                        NodeItem::Event(event)
                    }
                    StreamLine::Heartbeat { heartbeat } => {
                        NodeItem::Heartbeat { heartbeat: NodeHeartbeat { last_seq: heartbeat.last_seq } }
                    }
                };
                tx.send(NodeLine { node: node.clone(), item }).is_ok()
            })
        };
        let watchdog = async {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if last.lock().expect("follower lock").1.elapsed() > silence {
                    return;
                }
            }
        };
        let reason = tokio::select! {
            r = stream => match r {
                Ok(()) => "the stream ended".to_string(),
                Err(ClientError::Api { status: 410, .. }) => {
                    // Pruned: say what was missed and go on from the oldest event kept.
                    match client.node().await {
                        Ok(doc) => {
                            let first = doc.events.first_seq.max(start + 1);
                            let gap = NodeItem::Gap { gap: Gap { from: start + 1, to: first - 1 } };
                            if tx.send(NodeLine { node: node.clone(), item: gap }).is_err() {
                                return;
                            }
                            last.lock().expect("follower lock").0 = first - 1;
                            "events were pruned".to_string()
                        }
                        Err(e) => e.to_string(),
                    }
                }
                Err(ClientError::Api { status: 409, code, .. }) if code == "since_ahead" => {
                    // The daemon's journal starts over (a new state directory): a cursor beyond it
                    // would be refused for ever. Go on from its newest event, once, and say so.
                    match client.node().await {
                        Ok(doc) => {
                            let resync = Resync { was: start, last_seq: doc.events.last_seq };
                            if tx.send(NodeLine { node: node.clone(), item: NodeItem::Resync { resync } }).is_err() {
                                return;
                            }
                            last.lock().expect("follower lock").0 = doc.events.last_seq;
                            backoff = Duration::from_millis(0);
                            "the daemon's journal is behind the cursor: resynced".to_string()
                        }
                        Err(e) => e.to_string(),
                    }
                }
                Err(e) => e.to_string(),
            },
            _ = watchdog => format!("nothing received for {} s", silence.as_secs()),
        };
        heard.board.changed(&node);
        let resume_after = last.lock().expect("follower lock").0;
        if resume_after != start {
            backoff = Duration::from_millis(200);
        }
        cursor = Some(resume_after);
        let item = NodeItem::Disconnected { disconnected: Disconnected { reason, resume_after } };
        if tx.send(NodeLine { node: node.clone(), item }).is_err() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}
