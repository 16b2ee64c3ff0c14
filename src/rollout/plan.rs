//! The rollout planner: from what each instance of an app is now, what to do next so that the
//! app moves to the target revision without ever taking more down, or running more, than the
//! strategy allows. Pure: no clock, no I/O; the caller gives the time and carries out the steps.
//!
//! Rolling (seed 003): surge instances ("spares", ids of their own beyond the app's) are added up
//! to `max_surge`; old instances are replaced in place (stopped, then started on the target
//! revision under the same id, keeping their ports and directories) while at least
//! `wanted - max_unavailable` instances stay available; old instances that are not available
//! anyway are replaced at no cost; once every instance is on the target and available, the
//! spares are removed. So an app keeps its ids, and the count stays within
//! [wanted − max_unavailable, wanted + max_surge] (seed 003's interval).
//!
//! Serial (seed 002): one old instance at a time is stopped, a pause passes, it is started on the
//! target revision, and the next goes only once it is available.

/// What the planner knows of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u32,
    /// The revision the instance is assigned: what runs, or what runs once it restarts.
    pub revision: u64,
    pub health: Health,
    /// A surge instance, beyond the app's ids: removed at the end.
    pub spare: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Its current run is on `revision` and ready, since `since_ms`.
    Ready { since_ms: u64 },
    /// On its way: starting, not yet ready, or still running an older revision's run; since
    /// `since_ms` it has been on `revision`.
    Pending { since_ms: u64 },
    /// Stopped by an operator (it stays stopped) or by a serial step (see [`View::held`]).
    Stopped,
    /// Ended for good, or failing, on `revision`.
    Failed { reason: String },
}

/// The strategy, resolved to counts and milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Rolling { max_unavailable: u32, max_surge: u32, min_ready_ms: u64, deadline_ms: u64 },
    Serial { pause_ms: u64, min_ready_ms: u64, deadline_ms: u64 },
}

impl Rule {
    fn min_ready_ms(&self) -> u64 {
        match *self {
            Rule::Rolling { min_ready_ms, .. } | Rule::Serial { min_ready_ms, .. } => min_ready_ms,
        }
    }

    fn deadline_ms(&self) -> u64 {
        match *self {
            Rule::Rolling { deadline_ms, .. } | Rule::Serial { deadline_ms, .. } => deadline_ms,
        }
    }
}

/// An app as the planner sees it.
#[derive(Debug, Clone)]
pub struct View<'a> {
    pub target: u64,
    pub members: &'a [Member],
    pub rule: Rule,
    pub now_ms: u64,
    /// Serial: the instance the rollout stopped, and when.
    pub held: Option<(u32, u64)>,
    /// Spares take the lowest free ids from here up (the app's own ids are below).
    pub first_spare_id: u32,
    /// A partition step's: the most of the app's own instances to move to the target now
    /// (None: all of them).
    pub cap: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Move the instance to the target revision: a running one restarts on it, a stopped one
    /// takes it and stays stopped.
    Replace(u32),
    /// Serial: stop the instance and hold it (the caller records the hold and its time).
    Hold(u32),
    /// Serial: the pause is over: move the held instance to the target revision and start it.
    StartHeld(u32),
    /// Create a surge instance on the target revision.
    AddSpare(u32),
    /// Delete a surge instance.
    RemoveSpare(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Carry these out, then plan again.
    Act(Vec<Step>),
    /// Nothing to do until an instance changes, or until `until_ms` at the latest.
    Wait { until_ms: Option<u64> },
    /// Every instance is on the target revision and available (or stopped by an operator),
    /// and no spare is left.
    Done,
    /// An instance of the target revision failed: the rollout stops here.
    Failed { id: u32, reason: String },
}

impl View<'_> {
    /// Ready for at least minReadySeconds.
    fn available(&self, m: &Member) -> bool {
        matches!(m.health, Health::Ready { since_ms } if self.now_ms.saturating_sub(since_ms) >= self.rule.min_ready_ms())
    }

    /// Serving what the budget protects: an old instance while it is ready (minReadySeconds
    /// gates the new revision, not what already runs), a new one once available.
    fn serving(&self, m: &Member) -> bool {
        if m.revision == self.target {
            self.available(m)
        } else {
            matches!(m.health, Health::Ready { .. })
        }
    }

    /// When the next instance becomes available or overdue by the clock alone.
    fn next_due(&self) -> Option<u64> {
        let (min_ready, deadline) = (self.rule.min_ready_ms(), self.rule.deadline_ms());
        self.members
            .iter()
            .filter(|m| m.revision == self.target)
            .filter_map(|m| match m.health {
                Health::Ready { since_ms } if !self.available(m) => Some(since_ms.saturating_add(min_ready)),
                Health::Pending { since_ms } => Some(since_ms.saturating_add(deadline).saturating_add(1)),
                _ => None,
            })
            .min()
    }

    fn wait(&self) -> Plan {
        Plan::Wait { until_ms: self.next_due() }
    }

    /// A member of the target revision that failed or is overdue.
    fn failure(&self) -> Option<Plan> {
        let deadline = self.rule.deadline_ms();
        self.members.iter().filter(|m| m.revision == self.target).find_map(|m| match &m.health {
            Health::Failed { reason } => Some(Plan::Failed { id: m.id, reason: reason.clone() }),
            Health::Pending { since_ms } if self.now_ms.saturating_sub(*since_ms) > deadline => Some(Plan::Failed {
                id: m.id,
                reason: format!("not available within the progress deadline ({} s)", deadline / 1000),
            }),
            _ => None,
        })
    }

    /// Members meant to run (not spares, not stopped by an operator).
    fn wanted(&self) -> usize {
        let held = self.held.map(|(id, _)| id);
        self.members.iter().filter(|m| !m.spare && (m.health != Health::Stopped || Some(m.id) == held)).count()
    }

    /// Every non-spare member on the target so far is available or stopped by an operator.
    fn moved_available(&self) -> bool {
        let held = self.held.map(|(id, _)| id);
        self.members
            .iter()
            .filter(|m| !m.spare && m.revision == self.target)
            .all(|m| self.available(m) || (m.health == Health::Stopped && Some(m.id) != held))
    }

    /// How many more of the app's own instances may move under the partition.
    fn room(&self) -> usize {
        let moved = self.members.iter().filter(|m| !m.spare && m.revision == self.target).count();
        self.cap.map_or(usize::MAX, |cap| (cap as usize).saturating_sub(moved))
    }

    /// Old members: not on the target revision (spares always are).
    fn old(&self) -> Vec<&Member> {
        let mut old: Vec<&Member> = self.members.iter().filter(|m| !m.spare && m.revision != self.target).collect();
        old.sort_by_key(|m| m.id);
        old
    }
}

/// The instance of the target revision that failed or is overdue, and why: what fails a
/// rollout at any step, also while it waits on a hook or a pause.
pub fn failure(view: &View<'_>) -> Option<(u32, String)> {
    match view.failure() {
        Some(Plan::Failed { id, reason }) => Some((id, reason)),
        _ => None,
    }
}

/// What to do next. Done: every instance the partition allows is on the target, available,
/// and the spares are gone.
pub fn plan(view: &View<'_>) -> Plan {
    if let Some(failed) = view.failure() {
        return failed;
    }
    // Spares of an earlier revision (a rollout this one took over) cover for nothing now.
    let stale: Vec<Step> =
        view.members.iter().filter(|m| m.spare && m.revision != view.target).map(|m| Step::RemoveSpare(m.id)).collect();
    if !stale.is_empty() {
        return Plan::Act(stale);
    }
    match view.rule {
        Rule::Rolling { max_unavailable, max_surge, .. } => rolling(view, max_unavailable, max_surge),
        Rule::Serial { pause_ms, .. } => serial(view, pause_ms),
    }
}

fn rolling(view: &View<'_>, max_unavailable: u32, max_surge: u32) -> Plan {
    let old = view.old();
    let spares: Vec<&Member> = view.members.iter().filter(|m| m.spare).collect();
    let mut room = view.room();
    if old.is_empty() || room == 0 {
        if !view.moved_available() {
            return view.wait();
        }
        if spares.is_empty() {
            return Plan::Done;
        }
        return Plan::Act(spares.iter().map(|m| Step::RemoveSpare(m.id)).collect());
    }
    let mut steps = Vec::new();
    // Spares: up to max_surge, never more than there are serving old instances to cover for
    // (one that is down anyway is replaced without cover).
    let wanted = view.wanted();
    let want_spares = (max_surge as usize).min(old.iter().filter(|m| view.serving(m)).count()).min(room);
    let mut total = view.members.iter().filter(|m| m.spare || m.health != Health::Stopped).count();
    let mut have = spares.len();
    let mut next_id = view.first_spare_id;
    while have < want_spares && total < wanted + max_surge as usize {
        while view.members.iter().any(|m| m.id == next_id) {
            next_id += 1;
        }
        steps.push(Step::AddSpare(next_id));
        next_id += 1;
        have += 1;
        total += 1;
    }
    // Old instances not serving cost nothing to replace; serving ones as the budget allows.
    let serving = view.members.iter().filter(|m| view.serving(m)).count();
    let mut allowance = serving.saturating_sub(wanted.saturating_sub(max_unavailable as usize));
    let held = view.held.map(|(id, _)| id);
    for m in old.iter().filter(|m| !view.serving(m)).take(room) {
        // One a serial rollout stopped (this one took it over) is started, not left stopped.
        steps.push(if Some(m.id) == held { Step::StartHeld(m.id) } else { Step::Replace(m.id) });
        room -= 1;
    }
    for m in old.iter().filter(|m| view.serving(m)) {
        if allowance == 0 || room == 0 {
            break;
        }
        steps.push(Step::Replace(m.id));
        allowance -= 1;
        room -= 1;
    }
    if steps.is_empty() {
        view.wait()
    } else {
        Plan::Act(steps)
    }
}

fn serial(view: &View<'_>, pause_ms: u64) -> Plan {
    if let Some((id, since_ms)) = view.held {
        if let Some(m) = view.members.iter().find(|m| m.id == id) {
            if m.revision != view.target {
                let due = since_ms.saturating_add(pause_ms);
                if view.now_ms < due {
                    return Plan::Wait { until_ms: Some(due) };
                }
                return Plan::Act(vec![Step::StartHeld(id)]);
            }
            if !view.available(m) {
                return view.wait();
            }
        }
    }
    let old = view.old();
    let room = view.room();
    // An operator's stopped instance takes the revision at no cost (it stays stopped).
    let stopped: Vec<Step> =
        old.iter().filter(|m| m.health == Health::Stopped).take(room).map(|m| Step::Replace(m.id)).collect();
    if !stopped.is_empty() {
        return Plan::Act(stopped);
    }
    match old.first() {
        Some(m) if room > 0 => Plan::Act(vec![Step::Hold(m.id)]),
        _ if view.moved_available() => Plan::Done,
        _ => view.wait(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1000;

    fn rolling(max_unavailable: u32, max_surge: u32) -> Rule {
        Rule::Rolling { max_unavailable, max_surge, min_ready_ms: 0, deadline_ms: 600 * SEC }
    }

    fn ready(id: u32, revision: u64) -> Member {
        Member { id, revision, health: Health::Ready { since_ms: 0 }, spare: false }
    }

    fn view<'a>(members: &'a [Member], rule: Rule, now_ms: u64) -> View<'a> {
        View { target: 2, members, rule, now_ms, held: None, first_spare_id: members.len() as u32, cap: None }
    }

    /// A host in miniature: each tick carries out the plan's steps, and an instance that was
    /// replaced or added becomes ready one tick later. Checks the budget after every tick and
    /// returns the ticks taken.
    fn simulate(n: u32, rule: Rule, min_available: usize, max_running: usize) -> usize {
        simulate_to(n, rule, min_available, max_running, None)
    }

    /// As `simulate`, under a partition step's cap.
    fn simulate_to(n: u32, rule: Rule, min_available: usize, max_running: usize, cap: Option<u32>) -> usize {
        let mut members: Vec<Member> = (0..n).map(|i| ready(i, 1)).collect();
        let mut held = None;
        for tick in 1..1000u64 {
            let now = tick * SEC;
            for m in members.iter_mut() {
                if let Health::Pending { .. } = m.health {
                    m.health = Health::Ready { since_ms: now };
                }
            }
            let v = View { target: 2, members: &members, rule, now_ms: now, held, first_spare_id: n, cap };
            match plan(&v) {
                Plan::Done => {
                    let moved = members.iter().filter(|m| m.revision == 2).count();
                    assert_eq!(moved, cap.unwrap_or(n) as usize, "{members:?}");
                    assert!(members.iter().all(|m| !m.spare), "{members:?}");
                    assert_eq!(members.len(), n as usize);
                    return tick as usize;
                }
                Plan::Failed { id, reason } => panic!("failed at {id}: {reason}"),
                Plan::Wait { .. } => {}
                Plan::Act(steps) => {
                    for step in steps {
                        match step {
                            Step::Replace(id) | Step::StartHeld(id) => {
                                let m = members.iter_mut().find(|m| m.id == id).unwrap();
                                m.revision = 2;
                                m.health = Health::Pending { since_ms: now };
                            }
                            Step::Hold(id) => {
                                members.iter_mut().find(|m| m.id == id).unwrap().health = Health::Stopped;
                                held = Some((id, now));
                            }
                            Step::AddSpare(id) => members.push(Member {
                                id,
                                revision: 2,
                                health: Health::Pending { since_ms: now },
                                spare: true,
                            }),
                            Step::RemoveSpare(id) => members.retain(|m| m.id != id),
                        }
                    }
                }
            }
            let available = members.iter().filter(|m| matches!(m.health, Health::Ready { .. })).count();
            let running = members.iter().filter(|m| m.health != Health::Stopped).count();
            assert!(available >= min_available, "tick {tick}: {available} available: {members:?}");
            assert!(running <= max_running, "tick {tick}: {running} running: {members:?}");
        }
        panic!("no end");
    }

    #[test]
    fn rolling_keeps_within_the_budget_and_ends_on_the_target() {
        // N = 10, maxUnavailable 2, surge 1: never fewer than 8 available, never more than 11.
        let ticks = simulate(10, rolling(2, 1), 8, 11);
        // A spare and 2 in place at once, then 3 at a time: 4 batches and the spare's removal.
        assert!(ticks <= 10, "{ticks} ticks");
        // Seed 003's default: unavailable 0, surge 1: one at a time, never below 10.
        simulate(10, rolling(0, 1), 10, 11);
        // DaemonSet-like: unavailable 1, no surge.
        simulate(10, rolling(1, 0), 9, 10);
        simulate(1, rolling(0, 1), 1, 2);
        simulate(3, rolling(3, 0), 0, 3);
    }

    #[test]
    fn a_partition_moves_that_many_and_no_more() {
        for cap in [0, 1, 3, 10] {
            simulate_to(10, rolling(0, 1), 10, 11, Some(cap));
            simulate_to(10, rolling(2, 1), 8, 11, Some(cap));
            let serial = Rule::Serial { pause_ms: SEC, min_ready_ms: 0, deadline_ms: 600 * SEC };
            simulate_to(10, serial, 9, 10, Some(cap));
        }
    }

    #[test]
    fn serial_moves_one_instance_at_a_time_after_its_pause() {
        let rule = Rule::Serial { pause_ms: 3 * SEC, min_ready_ms: 0, deadline_ms: 600 * SEC };
        let ticks = simulate(3, rule, 2, 3);
        // Each: hold, 3 ticks of pause, start, ready.
        assert!(ticks >= 3 * 4, "{ticks} ticks");
        let members = [ready(0, 2), ready(1, 1)];
        let mut v = view(&members, rule, 10 * SEC);
        v.held = Some((1, 9 * SEC));
        assert_eq!(plan(&v), Plan::Wait { until_ms: Some(12 * SEC) }, "the pause from the hold");
        v.now_ms = 12 * SEC;
        assert_eq!(plan(&v), Plan::Act(vec![Step::StartHeld(1)]));
    }

    #[test]
    fn a_failed_new_instance_stops_the_rollout_and_old_ones_stay() {
        let mut members: Vec<Member> = (0..4).map(|i| ready(i, 1)).collect();
        members[0] = Member { id: 0, revision: 2, health: Health::Failed { reason: "exited 1".into() }, spare: false };
        let v = view(&members, rolling(1, 0), 5 * SEC);
        assert_eq!(plan(&v), Plan::Failed { id: 0, reason: "exited 1".into() });
        // A failing old instance is not the rollout's: it is replaced at no cost.
        members[0] = Member { id: 0, revision: 1, health: Health::Failed { reason: "old".into() }, spare: false };
        let v = view(&members, rolling(0, 1), 5 * SEC);
        assert_eq!(plan(&v), Plan::Act(vec![Step::AddSpare(4), Step::Replace(0)]));
    }

    /// An old instance that is ready but started less than minReadySeconds ago still serves:
    /// it is replaced within the budget, not for free.
    #[test]
    fn old_ready_instances_count_as_serving_whatever_their_age() {
        let rule = Rule::Rolling { max_unavailable: 1, max_surge: 0, min_ready_ms: 5 * SEC, deadline_ms: 60 * SEC };
        let young = |id| Member { id, revision: 1, health: Health::Ready { since_ms: 9 * SEC }, spare: false };
        let members = [young(0), young(1), young(2)];
        assert_eq!(plan(&view(&members, rule, 10 * SEC)), Plan::Act(vec![Step::Replace(0)]));
    }

    #[test]
    fn min_ready_seconds_and_the_progress_deadline() {
        let rule = Rule::Rolling { max_unavailable: 1, max_surge: 0, min_ready_ms: 5 * SEC, deadline_ms: 60 * SEC };
        let members =
            [Member { id: 0, revision: 2, health: Health::Ready { since_ms: 10 * SEC }, spare: false }, ready(1, 1)];
        // Ready for 2 s of 5: not yet available, so the next waits, until then.
        assert_eq!(plan(&view(&members, rule, 12 * SEC)), Plan::Wait { until_ms: Some(15 * SEC) });
        assert_eq!(plan(&view(&members, rule, 15 * SEC)), Plan::Act(vec![Step::Replace(1)]));
        let slow = [Member { id: 0, revision: 2, health: Health::Pending { since_ms: 0 }, spare: false }, ready(1, 1)];
        assert_eq!(plan(&view(&slow, rule, 30 * SEC)), Plan::Wait { until_ms: Some(60 * SEC + 1) });
        match plan(&view(&slow, rule, 61 * SEC)) {
            Plan::Failed { id: 0, reason } => assert!(reason.contains("progress deadline (60 s)"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stopped_instances_take_the_revision_and_stay_stopped() {
        let members = [Member { id: 0, revision: 1, health: Health::Stopped, spare: false }, ready(1, 2)];
        assert_eq!(plan(&view(&members, rolling(0, 1), SEC)), Plan::Act(vec![Step::Replace(0)]));
        let members = [Member { id: 0, revision: 2, health: Health::Stopped, spare: false }, ready(1, 2)];
        assert_eq!(plan(&view(&members, rolling(0, 1), SEC)), Plan::Done);
    }

    #[test]
    fn spares_take_free_ids_and_go_last() {
        let members = [ready(0, 1), ready(1, 1), ready(3, 1)];
        let mut v = view(&members, rolling(0, 2), SEC);
        v.first_spare_id = 3;
        assert_eq!(plan(&v), Plan::Act(vec![Step::AddSpare(4), Step::AddSpare(5)]));
        let members = [ready(0, 2), Member { id: 1, revision: 2, health: Health::Ready { since_ms: 0 }, spare: true }];
        assert_eq!(plan(&view(&members, rolling(0, 1), SEC)), Plan::Act(vec![Step::RemoveSpare(1)]));
    }

    /// A rollout that takes over from an unfinished one (a newer apply) removes the earlier
    /// revision's spares first, and starts the instance a serial rollout held.
    #[test]
    fn a_rollout_taking_over_clears_the_earlier_ones_spares_and_hold() {
        let stale = Member { id: 2, revision: 1, health: Health::Failed { reason: "x".into() }, spare: true };
        let members = [ready(0, 1), ready(1, 1), stale];
        assert_eq!(plan(&view(&members, rolling(0, 1), SEC)), Plan::Act(vec![Step::RemoveSpare(2)]));
        let members = [ready(0, 1), Member { id: 1, revision: 1, health: Health::Stopped, spare: false }];
        let mut v = view(&members, rolling(0, 1), SEC);
        v.held = Some((1, 0));
        assert_eq!(plan(&v), Plan::Act(vec![Step::AddSpare(2), Step::StartHeld(1)]));
    }
}
