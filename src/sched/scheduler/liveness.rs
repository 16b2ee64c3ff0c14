//! The leader's knowledge of each node's liveness, as a pure state machine (Horust's model): fed
//! what the followers heard and the clock, it says which nodes came up, came back or are lost;
//! `run` acts on what it says, and every read of a node asks it how long the read may take.

use super::follow::HeardAt;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long reading one node (GET /v1/node, list) may take before it counts as unreachable.
pub(super) const NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// The shortest a read of a node past its heartbeat deadline may take.
pub(super) const LATE_NODE_TIMEOUT: Duration = Duration::from_millis(300);

/// Each node as this leader knows it: heard (up), declared lost, or neither yet.
#[derive(Default)]
pub(super) struct Liveness {
    /// When each node last sent a line (the followers write it, however busy `run` is).
    heard_at: HeardAt,
    /// A node silent for longer is lost.
    timeout: Duration,
    /// Whether this process leads now: otherwise it declares nothing and reads take the
    /// default time.
    leading: bool,
    /// Since when a node never heard counts as silent: when `run` began.
    since: Option<Instant>,
    /// Nodes this leadership heard (each said up once).
    up: BTreeSet<String>,
    /// Nodes declared lost and not heard since.
    lost: BTreeSet<String>,
}

/// What a line proving a node alive made of it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Became {
    /// Heard for the first time by this leadership.
    pub up: bool,
    /// It had been declared lost.
    pub back: bool,
}

impl Liveness {
    /// Knowledge starting `now` (a node never heard is silent from then).
    pub fn new(heard_at: HeardAt, timeout: Duration, now: Instant) -> Liveness {
        Liveness { heard_at, timeout, since: Some(now), ..Default::default() }
    }

    /// This process leads, or leads again after maintenance: every node is looked at afresh
    /// (none up, none lost: each is up when next heard, lost once silent past the timeout).
    pub fn lead(&mut self) {
        self.leading = true;
        self.up.clear();
        self.lost.clear();
    }

    /// The lead is lost: nothing is declared until it is won again.
    pub fn follow(&mut self) {
        self.leading = false;
        self.up.clear();
        self.lost.clear();
    }

    /// A line that proves `node` alive (an event, a heartbeat) arrived. A line that waited in
    /// the queue while its node was declared lost proves nothing: a node lost is back only once
    /// it was heard again within the timeout.
    pub fn proof(&mut self, node: &str, now: Instant) -> Became {
        let fresh = self
            .heard_at
            .lock()
            .expect("heard lock")
            .get(node)
            .is_some_and(|at| now.duration_since(*at) <= self.timeout);
        if !fresh && self.lost.contains(node) {
            return Became::default();
        }
        Became { up: self.up.insert(node.to_string()), back: self.lost.remove(node) }
    }

    /// Declares lost, all at once, every node of `nodes` silent past the timeout: those newly
    /// lost, with how long each was silent.
    pub fn declare_silent<'a>(
        &mut self,
        nodes: impl Iterator<Item = &'a String>,
        now: Instant,
    ) -> Vec<(String, Duration)> {
        let Some(since) = self.since.filter(|_| self.leading) else { return Vec::new() };
        let heard = self.heard_at.lock().expect("heard lock");
        let mut newly = Vec::new();
        for node in nodes {
            let silent = now.saturating_duration_since(heard.get(node).copied().unwrap_or(since));
            if silent > self.timeout && !self.lost.contains(node) {
                newly.push((node.clone(), silent));
            }
        }
        drop(heard);
        self.lost.extend(newly.iter().map(|(n, _)| n.clone()));
        newly
    }

    /// `node` left the cluster file: what ran there counts as lost. Whether it is newly lost.
    pub fn removed(&mut self, node: &str) -> bool {
        self.up.remove(node);
        self.heard_at.lock().expect("heard lock").remove(node);
        self.lost.insert(node.to_string())
    }

    /// `node` is followed anew (new in the cluster file, or its address changed): heard from
    /// now on, or lost a timeout from now.
    pub fn followed_anew(&mut self, node: &str, now: Instant) {
        self.up.remove(node);
        self.heard_at.lock().expect("heard lock").insert(node.to_string(), now);
    }

    pub fn is_lost(&self, node: &str) -> bool {
        self.lost.contains(node)
    }

    pub fn lost(&self) -> &BTreeSet<String> {
        &self.lost
    }

    /// Heard by this leadership and not lost since: the nodes a pass acts on.
    pub fn ready(&self) -> BTreeSet<String> {
        self.up.difference(&self.lost).cloned().collect()
    }

    pub fn is_ready(&self, node: &str) -> bool {
        self.up.contains(node) && !self.lost.contains(node)
    }

    /// How long a read of `node` may take: None when it is lost (it is not asked); else, while
    /// leading, until a timeout after it was last heard (a read must not keep the leader from
    /// declaring it lost on time), between [`LATE_NODE_TIMEOUT`] and [`NODE_TIMEOUT`].
    pub fn read_limit(&self, node: &str, now: Instant) -> Option<Duration> {
        if self.lost.contains(node) {
            return None;
        }
        if !self.leading {
            return Some(NODE_TIMEOUT);
        }
        let last = self.heard_at.lock().expect("heard lock").get(node).copied();
        let left = last.map_or(NODE_TIMEOUT, |at| (at + self.timeout).saturating_duration_since(now));
        Some(left.clamp(LATE_NODE_TIMEOUT, NODE_TIMEOUT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heard(live: &Liveness, node: &str, at: Instant) {
        live.heard_at.lock().unwrap().insert(node.into(), at);
    }

    fn names(n: &[(String, Duration)]) -> Vec<&str> {
        n.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn a_node_silent_past_the_timeout_is_lost_once_and_back_when_heard_again() {
        let t0 = Instant::now();
        let mut live = Liveness::new(HeardAt::default(), Duration::from_secs(10), t0);
        live.lead();
        let nodes: Vec<String> = vec!["a".into(), "b".into()];
        heard(&live, "a", t0);
        assert_eq!(live.proof("a", t0), Became { up: true, back: false });
        assert_eq!(live.proof("a", t0), Became::default(), "up once");
        assert!(live.declare_silent(nodes.iter(), t0 + Duration::from_secs(5)).is_empty());
        // b was never heard: silent since the leadership began.
        let t = t0 + Duration::from_secs(11);
        heard(&live, "a", t0 + Duration::from_secs(9));
        assert_eq!(names(&live.declare_silent(nodes.iter(), t)), ["b"]);
        assert!(live.declare_silent(nodes.iter(), t + Duration::from_secs(1)).is_empty(), "declared once");
        assert_eq!(live.ready(), BTreeSet::from(["a".to_string()]));
        assert_eq!(live.read_limit("b", t), None, "a lost node is not asked");
        // A line b sent long ago, read only now, does not bring it back; a fresh one does.
        heard(&live, "b", t0);
        assert_eq!(live.proof("b", t), Became::default());
        heard(&live, "b", t);
        assert_eq!(live.proof("b", t), Became { up: true, back: true });
        assert_eq!(live.proof("b", t), Became::default());
    }

    #[test]
    fn a_node_silent_for_an_hour_is_lost_as_soon_as_a_new_leader_looks() {
        // Heard an hour ago, while this process followed: nothing is declared while following;
        // once leading, its silence counts from when it was last heard, not from the lead.
        let t0 = Instant::now();
        let mut live = Liveness::new(HeardAt::default(), Duration::from_secs(10), t0);
        heard(&live, "old", t0);
        let nodes: Vec<String> = vec!["old".into(), "never".into()];
        let led = t0 + Duration::from_secs(3600);
        assert!(live.declare_silent(nodes.iter(), led).is_empty(), "nothing is declared while following");
        live.lead();
        let newly = live.declare_silent(nodes.iter(), led);
        assert_eq!(names(&newly), ["old", "never"]);
        assert_eq!(newly[0].1, Duration::from_secs(3600));
    }

    #[test]
    fn reads_are_bounded_by_the_heartbeat_deadline_only_while_leading() {
        let t0 = Instant::now();
        let mut live = Liveness::new(HeardAt::default(), Duration::from_secs(10), t0);
        heard(&live, "a", t0);
        let late = t0 + Duration::from_secs(9) + Duration::from_millis(900);
        assert_eq!(live.read_limit("a", late), Some(NODE_TIMEOUT));
        live.lead();
        assert_eq!(live.read_limit("a", late), Some(LATE_NODE_TIMEOUT));
        assert_eq!(live.read_limit("a", t0 + Duration::from_secs(7)), Some(Duration::from_secs(3)));
        assert_eq!(live.read_limit("unknown", t0), Some(NODE_TIMEOUT));
    }

    #[test]
    fn a_node_removed_from_the_file_is_lost_and_one_followed_anew_gets_a_timeout() {
        let t0 = Instant::now();
        let mut live = Liveness::new(HeardAt::default(), Duration::from_secs(10), t0);
        live.lead();
        heard(&live, "a", t0);
        live.proof("a", t0);
        assert!(live.removed("a"));
        assert!(!live.removed("a"));
        assert!(live.is_lost("a") && live.ready().is_empty());
        let nodes: Vec<String> = vec!["c".into()];
        let t = t0 + Duration::from_secs(60);
        live.followed_anew("c", t);
        assert!(live.declare_silent(nodes.iter(), t + Duration::from_secs(9)).is_empty());
        assert_eq!(names(&live.declare_silent(nodes.iter(), t + Duration::from_secs(11))), ["c"]);
        // The lead lost: nothing is known, nothing declared.
        live.follow();
        assert!(live.lost().is_empty() && live.ready().is_empty());
    }
}
