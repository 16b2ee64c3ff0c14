//! The one shape of the tasks that carry out an app's change over time — a rollout, a job, a
//! cron job (issue 42): one task per app at a time (a per-app lock), each pass looking at what
//! is (the app's record and its instances' records), acting, and saying when it wants to look
//! again. Between passes it sleeps until one of the app's instances or its record changes (the
//! actors and the supervisor wake the app's [`Notify`]), a hook run changes when it waits for
//! one, or its own clock is due (a deadline, a pause, a backoff, a cron tick) — not on a beat.
//!
//! A wake is never lost: `notify_one` keeps a permit when the task is busy with a pass, so a
//! change seen by nobody is looked at right after. A burst of changes (a batch's instances
//! stopping and starting) is looked at once, [`SETTLE`] after the first of them: that also
//! keeps the old beat's margin for a process without probes that is Running for a moment
//! before it exits (docs/design.md, Rollouts).

use super::*;
use std::collections::HashMap;
use tokio::sync::Notify;

/// How long a woken driver lets a burst of changes settle before it looks.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(25);

/// How long a step that failed (a store refusing, a port taken) waits before it is tried again.
const RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Which change a driver carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drive {
    Rollout,
    Job,
    Cron,
    ScaleIn,
}

/// What a pass asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Look again at once: what it did changed what it looks at.
    Now,
    /// Look again when the app or one of its instances changes, when a hook run changes
    /// (`hooks`), or at `until_ms` (ms since the epoch), whichever comes first.
    Wait { until_ms: Option<u64>, hooks: bool },
    /// The change is over (or no longer this task's): it ends.
    Done,
}

impl Next {
    /// Try again after [`RETRY`]: a step failed for a reason that may pass.
    pub fn retry() -> Next {
        Next::Wait { until_ms: Some(crate::clock::now_ms() + RETRY.as_millis() as u64), hooks: false }
    }
}

/// Every app's wake-up, by `namespace/name`. Kept for the daemon's life once made: an actor and
/// a driver must share the same one, whichever is made first.
#[derive(Default)]
pub struct Wakers {
    apps: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Wakers {
    /// `app`'s wake-up.
    pub fn of(&self, app: &str) -> Arc<Notify> {
        let mut apps = self.apps.lock().expect("wakers lock");
        apps.entry(app.to_string()).or_default().clone()
    }

    /// Wakes `app`'s driver, if it has one (else the next one looks at once anyway).
    pub fn wake(&self, app: &str) {
        if let Some(n) = self.apps.lock().expect("wakers lock").get(app) {
            n.notify_one();
        }
    }
}

impl Supervisor {
    /// Starts the task that carries out `app`'s change `what`. One drives an app at a time: a
    /// later one waits for the earlier to end.
    pub(super) fn spawn_driver(&self, app: String, what: Drive) {
        let sup = self.clone();
        let lock = self.drivers.lock().expect("drivers lock").entry(app.clone()).or_default().clone();
        let waker = self.shared.wakers.of(&app);
        tokio::spawn(async move {
            let _driving = lock.lock().await;
            let mut hooks = sup.hooks.subscribe();
            // Since when a rollout's step keeps failing (not durable: a restart starts afresh).
            let mut failing_since = None;
            loop {
                // Seen before the pass: a run that changes during it wakes the wait below.
                hooks.borrow_and_update();
                let next = match what {
                    Drive::Rollout => sup.rollout_pass(&app, &mut failing_since).await,
                    Drive::Job => sup.job_pass(&app).await,
                    Drive::Cron => sup.cron_pass(&app).await,
                    Drive::ScaleIn => sup.scale_in_pass(&app).await,
                };
                let (until_ms, on_hooks) = match next {
                    Next::Done => return,
                    Next::Now => {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Next::Wait { until_ms, hooks } => (until_ms, hooks),
                };
                let due = async {
                    match until_ms {
                        Some(t) => {
                            let wait = t.saturating_sub(crate::clock::now_ms());
                            tokio::time::sleep(std::time::Duration::from_millis(wait)).await
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = waker.notified() => tokio::time::sleep(SETTLE).await,
                    _ = due => {}
                    Ok(()) = hooks.changed(), if on_hooks => {}
                }
            }
        });
    }

    /// Wakes the driver of `app` (its record changed).
    pub(super) fn wake(&self, app: &str) {
        self.shared.wakers.wake(app);
    }
}
