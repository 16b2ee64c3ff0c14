//! The actor's flows: what it does between the state machine's steps. A start (stage, launch,
//! watch), a stop (ask, wait while serving requests, kill what remains), the end of a run, a
//! resume after a daemon restart, a reload, an in-place restart, a delete. Each asks the
//! workload to act and the state machine what follows.

use super::messages::{next_interrupt, Command, Msg, Reply};
use super::workload::{Cancel, InPlace, Launched, Readopted, Workload};
use super::{cx, Actor};
use crate::protocol::{EventBody, InstanceChange, NoDetail, OomKilled, RestartedBy};
use crate::store::{Batch, Table};
use crate::supervisor::record::now_ms;
use crate::supervisor::state::{self, Event, ExitStatus, Kind, State, StopGoal};

impl<W: Workload> Actor<W> {
    /// After a daemon restart (or a fresh apply): pick up where the record says we were.
    pub(super) async fn resume(&mut self) {
        match self.rec.state.clone() {
            State::Running | State::Lost { .. } => {
                self.new_generation();
                let found = self.workload.readopt(&mut cx!(self)).await;
                self.take_up(found).await;
                // A process that ended while we were away: its end must be durable (and so
                // shown) before the daemon answers for this instance.
                self.flush_unjournaled().await;
                self.mark_resumed();
            }
            State::Starting => {
                self.ensure_rendered();
                if let Some(found) = self.workload.take_up_start(&mut cx!(self)).await {
                    self.new_generation();
                    self.take_up_started(found).await;
                    self.flush_unjournaled().await;
                    self.mark_resumed();
                    return;
                }
                self.mark_resumed();
                // The start was interrupted before its main process was recorded. The cgroup
                // (or dockerd) holds whatever it launched: clear it so that exactly one runs.
                self.workload.kill(&mut cx!(self)).await;
                self.feed(Event::Resume).await;
            }
            State::Staging => {
                self.mark_resumed();
                self.queue(state::Action::Start);
            }
            State::Stopping { .. } => {
                self.mark_resumed();
                self.stop_flow(false).await;
            }
            _ => {
                // Recorded without processes, yet the runtime may hold some: a start whose
                // spawn the daemon did not live to record. Nothing runs unsupervised.
                self.workload.clear_unrecorded(&mut cx!(self)).await;
                self.mark_resumed();
            }
        }
    }

    /// What re-adoption found, acted on: watched, or ended.
    async fn take_up(&mut self, found: Readopted) {
        match found {
            Readopted::Running => {
                self.watch_run();
            }
            Readopted::Ended { index, status } => self.on_exit(index, status).await,
            Readopted::Lost(reason) => self.lose(reason).await,
        }
    }

    /// A start the daemon did not live to record, taken up (see `Workload::take_up_start`):
    /// Running as a launch would have made it (its postStart hook is not run: whether it ran
    /// is not known), or ended as a launch that saw its end.
    async fn take_up_started(&mut self, found: Readopted) {
        match found {
            Readopted::Running => {
                let now = now_ms();
                self.rec.counter.running_since_ms = Some(now);
                self.rec.last_start_ms = Some(now);
                self.feed(Event::MainReady).await;
            }
            Readopted::Ended { index, status } => self.on_exit(index, status).await,
            Readopted::Lost(reason) => self.lose(reason).await,
        }
    }

    /// Watches the run the workload launched or re-adopted, and probes its health; a run just
    /// started also gets its postStart hook (a failure is reported as `Msg::HookFailed`).
    pub(super) fn watch_run(&mut self) {
        self.ensure_rendered();
        self.workload.watch(&mut cx!(self));
        self.start_health_checks();
        // Ready (an instance without readiness probes is Ready once Running) shows at once,
        // not at the next commit.
        self.journal.show(&self.rec);
        if std::mem::take(&mut self.post_start_due) {
            if let Some(hook) = self.workload.post_start(&cx!(self)) {
                let (tx, generation) = (self.tx.clone(), self.generation);
                self.health_tasks.push(tokio::spawn(async move {
                    if let Err(reason) = hook.await {
                        let _ = tx.send(Msg::HookFailed { generation, reason });
                    }
                }));
            }
        }
    }

    /// After this instance's previous actor panicked (a bug in stewardd): nothing of it may run
    /// unsupervised, and the record must not lead this actor (or the next daemon start) into the
    /// same panic. Its processes are killed and it is recorded Failed with the panic's message;
    /// start, stop and delete then work as on any failed instance.
    pub async fn fail_after_panic(&mut self, what: &str) {
        self.workload.kill(&mut cx!(self)).await;
        let reason = format!("stewardd internal error, the instance's processes were killed: {what}");
        let from = self.rec.state.kind();
        self.rec.state = State::Failed { reason: reason.clone() };
        self.rec.mains.clear();
        self.rec.message = reason.clone();
        self.rec.last_exit_reason = Some(reason);
        self.rec.updated_ms = now_ms();
        // It failed on this spec: the next daemon start has no apply of it left to carry out.
        self.rec.run_generation = self.spec.generation;
        self.rec.run_revision = self.spec.revision;
        let body = self.transition_body(from, "internal error");
        self.persist(vec![body]).await;
    }

    /// The record is true again (processes re-adopted, or their end recorded): the daemon may
    /// answer for this instance. Long work that follows (a stop's grace period, a start) goes on.
    fn mark_resumed(&mut self) {
        if let Some(tx) = self.resumed.take() {
            let _ = tx.send(());
        }
    }

    /// Staging → Starting → Running, or a failure handed to the restart policy.
    pub(super) async fn start_flow(&mut self) {
        let interrupted = self.try_start().await;
        self.launch_permit = None;
        if let Some((cmd, reply)) = interrupted {
            // A request interrupted the start: it says what follows.
            Box::pin(self.handle(cmd, reply)).await;
        }
    }

    /// One attempt; returns a request that interrupted it, to be handled by the caller.
    async fn try_start(&mut self) -> Option<(Command, Option<Reply>)> {
        crate::failpoint::panic_for("actor-panic", &self.rec.key());
        self.take_launch_place().await;
        let rendered = match self.stage() {
            Ok(p) => p,
            Err(reason) => {
                self.feed(Event::StageFailed { reason }).await;
                return None;
            }
        };
        if self.needs_fetch() {
            // A download can take minutes: it holds no place among the launches.
            self.launch_permit = None;
        }
        match self.fetch_packages(&rendered).await {
            Ok(None) => {}
            Ok(Some(interrupt)) => return Some(interrupt),
            Err(reason) => {
                self.feed(Event::StageFailed { reason }).await;
                return None;
            }
        }
        self.take_launch_place().await;
        if !self.workload.clear(&mut cx!(self)).await {
            let reason = "processes of the previous run would not end after SIGKILL".to_string();
            self.feed(Event::StageFailed { reason }).await;
            return None;
        }
        // Starting is committed while the launch runs (see the workloads' `launch`).
        if !self.hold_transition(Event::Staged) {
            return None;
        }
        self.new_generation();
        let cancel = Cancel::default();
        let mut interrupt = None;
        let launched = {
            let mut cx = cx!(self);
            let launching = self.workload.launch(&mut cx, &rendered, &cancel);
            tokio::pin!(launching);
            loop {
                tokio::select! {
                    biased;
                    launched = &mut launching => break launched,
                    m = next_interrupt(&mut self.rx, &self.marks), if interrupt.is_none() => {
                        cancel.set();
                        interrupt = Some(m);
                    }
                }
            }
        };
        if interrupt.is_some() {
            // What the launch made is removed by it or ended by the stop the request brings.
            return interrupt;
        }
        match launched {
            Launched::Running { since_ms } => {
                self.post_start_due = true;
                let now = now_ms();
                // Timed from the spawn: a run's length is the process's, not less the commit's.
                self.rec.counter.running_since_ms = Some(since_ms.min(now));
                self.rec.last_start_ms = Some(now);
                self.feed(Event::MainReady).await;
            }
            // The workload has ended what it launched.
            Launched::Failed(reason) => {
                self.feed(Event::StartFailed { reason }).await;
            }
            Launched::Exited(status) => {
                self.rec.last_exit = Some(status);
                self.feed(Event::MainExited { status }).await;
            }
            Launched::Cancelled => {}
        }
        None
    }

    /// Stopping → stopped: stopCmd or SIGTERM, up to the grace period for all of the instance
    /// to end while requests are served, then SIGKILL for all that remains.
    pub(super) async fn stop_flow(&mut self, polite: bool) {
        crate::failpoint::hit("stop-recorded");
        let deadline = crate::clock::deadline_after(self.kill_grace());
        // preStop first (an operator's stop, restart or a spec's; not a stop taken up after a
        // daemon restart, which ran it already), within the same grace period.
        if polite {
            self.ensure_rendered();
            if let Some(hook) = self.workload.pre_stop(&cx!(self), deadline) {
                tokio::pin!(hook);
                loop {
                    tokio::select! {
                        _ = &mut hook => break,
                        Some(msg) = self.rx.recv() => self.during_stop(msg).await,
                    }
                }
            }
        }
        let grace = deadline.saturating_duration_since(tokio::time::Instant::now());
        let waiting = self.workload.stop(&mut cx!(self), polite, grace);
        tokio::pin!(waiting);
        let waited = loop {
            tokio::select! {
                waited = &mut waiting => break waited,
                Some(msg) = self.rx.recv() => self.during_stop(msg).await,
            }
        };
        let stopped = self.workload.finish_stop(&mut cx!(self), waited).await;
        self.new_generation();
        match stopped {
            Ok(()) => self.feed(Event::StopCompleted).await,
            Err(reason) => self.feed(Event::StopFailed { reason }).await,
        };
        for msg in std::mem::take(&mut self.deferred) {
            let _ = self.tx.send(msg);
        }
    }

    /// Requests while stopping: a delete upgrades the stop (durably); anything else waits its turn.
    async fn during_stop(&mut self, msg: Msg) {
        match msg {
            Msg::Request(Command::Delete(cause), reply) => {
                self.note_delete_cause(cause);
                self.feed(Event::StopRequested { goal: StopGoal::Delete }).await;
                self.waiting.extend(reply);
            }
            // Served once the stop is done, in the order they came. (Not sent back into the
            // queue being read: the stop's loop would take it again at once, for ever, never
            // yielding its thread.)
            Msg::Request(..) => self.deferred.push(msg),
            // After a request served later: it waits for it, in order.
            Msg::Recorded(_) if !self.deferred.is_empty() => self.deferred.push(msg),
            Msg::Recorded(tx) => self.marks.when_durable(tx),
            Msg::MainExited { .. } | Msg::Checked { .. } | Msg::RuntimeLost { .. } | Msg::HookFailed { .. } => {}
        }
    }

    /// Main process (container) `index` ended: the run ends, unless the workload says it goes on.
    pub(super) async fn on_exit(&mut self, index: usize, status: ExitStatus) {
        self.ensure_rendered();
        // An end the kernel told another parent: a job run's own record says how it ended (an
        // OnFailure run that succeeded while the daemon was away is not run again).
        let status = match status {
            ExitStatus::Unknown => self.workload.recorded_end(&cx!(self), index).unwrap_or(status),
            known => known,
        };
        let Some(end) = self.workload.on_end(&mut cx!(self), index, status).await else { return };
        let which = end.which.clone().unwrap_or_else(|| format!("main process {index}"));
        tracing::info!(instance = %self.rec.id, "{which} {status}");
        self.new_generation();
        self.rec.last_exit = Some(status);
        // The OOM kill is part of the end: the same commit says so, never a later one.
        let mut noted = Vec::new();
        if let Some(why) = &end.oom {
            let detail = OomKilled { reason: why.clone() };
            noted.push(EventBody::instance(self.rec.key(), InstanceChange::OomKilled { detail }));
        }
        self.end_note = end.oom.or(end.which);
        self.feed_noting(Event::MainExited { status }, noted).await;
    }

    /// The runtime (dockerd) stopped answering: the instance is Lost (its containers may well
    /// run on).
    pub(super) async fn lose(&mut self, reason: String) {
        tracing::warn!(instance = %self.rec.id, "{reason}");
        self.new_generation();
        if self.rec.state.kind() == Kind::Lost {
            return;
        }
        self.feed(Event::RuntimeLost { reason }).await;
    }

    /// A Lost instance: once its runtime answers, what still runs is watched again; an end ends
    /// the run by the policy.
    pub(super) async fn try_recover(&mut self) {
        let Some(found) = self.workload.recover(&mut cx!(self)).await else { return };
        self.new_generation();
        match found {
            Readopted::Running => {
                tracing::info!(instance = %self.rec.id, "the runtime is back; the instance still runs");
                self.feed(Event::RuntimeBack).await;
            }
            other => self.take_up(other).await,
        }
    }

    /// reloadCmd or SIGHUP, as the workload does it. No state change; journaled as an event.
    pub(super) async fn reload(&mut self) -> Result<(), String> {
        self.ensure_rendered();
        self.workload.reload(&mut cx!(self)).await?;
        self.commit_event(InstanceChange::Reloaded { detail: NoDetail {} }).await;
        Ok(())
    }

    /// A file into what runs, as the workload does it; journaled as an event (its path, size,
    /// owner and mode: never its content).
    pub(super) async fn copy_in(
        &mut self,
        file: &super::messages::FileCopy,
    ) -> Result<crate::protocol::FileCopied, String> {
        self.ensure_rendered();
        let copied = self.workload.copy_in(&mut cx!(self), file).await?;
        tracing::info!(instance = %self.rec.id, "copied {} bytes to {}", copied.bytes, copied.path);
        self.commit_event(InstanceChange::FileCopied { detail: copied.clone() }).await;
        Ok(copied)
    }

    /// A restart in place (a forking daemon's restartCmd): false when its command could not
    /// run (the caller stops and starts instead).
    pub(super) async fn restart_in_place(&mut self) -> bool {
        self.ensure_rendered();
        // Exits of the old main processes during the restart are expected.
        self.new_generation();
        match self.workload.restart_in_place(&mut cx!(self)).await {
            InPlace::Restarted => {}
            InPlace::NotRun => return false,
            InPlace::Lost(index) => {
                self.on_exit(index, ExitStatus::Unknown).await;
                return true;
            }
        }
        self.rec.restarts += 1;
        self.rec.last_start_ms = Some(now_ms());
        self.post_start_due = true;
        self.watch_run();
        self.commit_event(InstanceChange::Restarted { detail: RestartedBy { by: "restartCmd".into() } }).await;
        true
    }

    /// Notes why it is to be deleted (recorded with the stop's next commit): the strongest
    /// cause asked so far, its app's delete over a scale-in over an operator's.
    pub(super) fn note_delete_cause(&mut self, cause: crate::spec::pod::DeleteCause) {
        self.rec.delete_cause = self.rec.delete_cause.max(Some(cause));
    }

    /// Removes the instance: its record, its runtime's leftovers (cgroup, containers), its run
    /// directory, and the kept volumes its policy removes for the delete's cause (journaled in
    /// the same commit as the record's removal). Its work directory (the application's data)
    /// is kept.
    pub(super) async fn delete(&mut self) {
        // What runs goes before the record: a record gone with a process left would be a
        // process nobody supervises (one recorded Stopped by a start cut short).
        // It cannot go: Failed with why (answered so), and a later delete tries again.
        if let Err(reason) = self.workload.before_delete(&mut cx!(self)).await {
            tracing::error!(instance = %self.rec.id, "{reason}");
            return self.feed(Event::StopFailed { reason }).await;
        }
        crate::failpoint::hit("delete-record");
        let key = self.rec.key();
        let body = EventBody::instance(key.clone(), InstanceChange::Deleted).to_value();
        let mut batch = Batch::new();
        for e in self.journal.take_held() {
            batch.push_event(e);
        }
        let mut batch = batch.delete(Table::Instances, &key).event(body);
        let cause = self.rec.delete_cause.unwrap_or(crate::spec::pod::DeleteCause::Operator);
        let going = match self.rendered() {
            Ok(r) => crate::supervisor::kept::volumes_going(&self.rec.id, r.volumes(), cause),
            Err(_) => Vec::new(),
        };
        for removal in &going {
            removal.journal_into(&mut batch);
        }
        let released = self.shared.ports.lock().expect("ports lock").release(&key, &mut batch);
        if !released.is_empty() {
            tracing::info!(instance = %self.rec.id, "released ports {released:?}");
        }
        if let Err(e) = self.shared.store.commit(batch).await {
            tracing::error!(instance = %self.rec.id, "cannot delete record: {e}");
        }
        crate::failpoint::hit("delete-committed");
        self.workload.remove(&mut cx!(self)).await;
        if let Ok(r) = self.rendered() {
            // A pod's Memory volumes and staged mounts are mounts below it: removing through
            // one left mounted would delete what it shows.
            if crate::runtime::volumes::release(&r.run_dir) {
                let _ = std::fs::remove_dir_all(&r.run_dir);
            }
            // A limited kept volume's image stays with its data, unmounted till the ordinal's next start.
            crate::runtime::volumes::release_kept(r.volumes()).await;
            for removal in going {
                if let Err(e) = crate::supervisor::kept::finish_removal(&self.shared, removal).await {
                    tracing::error!(instance = %self.rec.id, "removing a kept volume: {e}");
                }
            }
            // A job's or cron job's run is over for good: its work directories go with it
            // (an every-second cron would otherwise leave one a second). An app's instance
            // keeps its workPath, whose data may outlive it (docs/design.md).
            if self.spec.spec.runs_to_completion() {
                for p in &r.processes {
                    if let Err(e) = crate::safefs::remove_workload_dir(&p.work_path) {
                        tracing::warn!(instance = %self.rec.id, "cannot remove its workPath: {e}");
                    }
                }
            }
        }
        self.deleted = true;
        // Deleted is done, whatever state it was deleted from (a Failed one included).
        for r in self.waiting.drain(..) {
            let _ = r.send(Ok(()));
        }
    }
}
