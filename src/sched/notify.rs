//! Notifications (seed 002's notify callbacks): the leading `run` POSTs a JSON document to every
//! registered URL when an instance exits, goes missing, has no address, or restarts more than K
//! times within T. A bounded queue (the oldest dropped, and counted, when it is full) feeds one
//! sender; each POST is tried up to [`TRIES`] times with a growing pause; every notification has
//! its own `id`, so a receiver that got one twice (an answer lost, a retry) can tell.

pub use crate::protocol::sched_answers::{Notification, NotificationKind as Kind};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Notifications waiting to be sent, at most.
pub const QUEUE: usize = 1_000;
/// Attempts per URL.
pub const TRIES: u32 = 4;
/// Restarts within [`RESTART_WINDOW`] beyond which `restarts` is sent (seed 002: "restarted many
/// times within a while").
pub const RESTART_LIMIT: usize = 3;
pub const RESTART_WINDOW: Duration = Duration::from_secs(300);

/// The leader's notifier: a bounded queue and a sender task.
pub struct Notifier {
    queue: Arc<Mutex<VecDeque<Notification>>>,
    wake: Arc<tokio::sync::Notify>,
    urls: Arc<Mutex<Vec<String>>>,
    who: String,
    sent: std::sync::atomic::AtomicU64,
    dropped: Arc<std::sync::atomic::AtomicU64>,
    /// Instance → when it restarted, within the window.
    restarts: Mutex<BTreeMap<String, VecDeque<Instant>>>,
    /// How many restarts within how long make a `restarts` notification (`config set`).
    restart_rule: Mutex<(usize, Duration)>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Notifier {
    pub fn new(who: &str) -> Notifier {
        let queue: Arc<Mutex<VecDeque<Notification>>> = Default::default();
        let wake = Arc::new(tokio::sync::Notify::new());
        let urls: Arc<Mutex<Vec<String>>> = Default::default();
        let dropped: Arc<std::sync::atomic::AtomicU64> = Default::default();
        let task = tokio::spawn(send_all(queue.clone(), wake.clone(), urls.clone()));
        Notifier {
            queue,
            wake,
            urls,
            who: who.to_string(),
            sent: Default::default(),
            dropped,
            restarts: Default::default(),
            restart_rule: Mutex::new((RESTART_LIMIT, RESTART_WINDOW)),
            task,
        }
    }

    /// The URLs to send to (the cluster's settings, read again now and then).
    pub fn set_urls(&self, urls: &[String]) {
        *self.urls.lock().expect("urls lock") = urls.to_vec();
    }

    /// Whether any URL is registered (else nothing is worth finding out to notify).
    pub fn has_urls(&self) -> bool {
        !self.urls.lock().expect("urls lock").is_empty()
    }

    /// Queues one notification (when some URL is registered).
    pub fn notify(&self, kind: Kind, instance: &str, node: &str, detail: &str) {
        if !self.has_urls() {
            return;
        }
        let n = self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let note = Notification {
            id: format!("{}-{n}", self.who),
            kind,
            instance: instance.to_string(),
            node: node.to_string(),
            at_ms: crate::clock::now_ms(),
            detail: detail.to_string(),
        };
        let mut queue = self.queue.lock().expect("queue lock");
        if queue.len() >= QUEUE {
            queue.pop_front();
            let lost = self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            tracing::warn!("notification queue full ({QUEUE}): the oldest dropped ({lost} so far)");
        }
        queue.push_back(note);
        self.wake.notify_one();
    }

    /// More than `limit` restarts within `window` make a `restarts` notification.
    pub fn set_restart_rule(&self, limit: usize, window: Duration) {
        *self.restart_rule.lock().expect("rule lock") = (limit, window);
    }

    /// Counts a restart of `instance`; sends `restarts` when there were more than the limit within
    /// the window (and starts counting anew).
    pub fn restarted(&self, instance: &str, node: &str) {
        let now = Instant::now();
        let (limit, window) = *self.restart_rule.lock().expect("rule lock");
        let over = {
            let mut all = self.restarts.lock().expect("restarts lock");
            let times = all.entry(instance.to_string()).or_default();
            times.push_back(now);
            while times.front().is_some_and(|t| now.duration_since(*t) > window) {
                times.pop_front();
            }
            let over = times.len() > limit;
            if over {
                times.clear();
            }
            over
        };
        if over {
            let detail =
                format!("restarted more than {} within {} s", crate::wording::times(limit as u64), window.as_secs());
            self.notify(Kind::Restarts, instance, node, &detail);
        }
    }
}

/// Sends what is queued, in order, to every URL.
async fn send_all(
    queue: Arc<Mutex<VecDeque<Notification>>>,
    wake: Arc<tokio::sync::Notify>,
    urls: Arc<Mutex<Vec<String>>>,
) {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap_or_default();
    loop {
        let next = queue.lock().expect("queue lock").pop_front();
        let Some(note) = next else {
            wake.notified().await;
            continue;
        };
        let targets = urls.lock().expect("urls lock").clone();
        let body = serde_json::to_vec(&note).expect("a notification serializes");
        for url in targets {
            let mut pause = Duration::from_millis(500);
            for attempt in 1..=TRIES {
                let request = http.post(&url).header("content-type", "application/json").body(body.clone());
                match request.send().await {
                    Ok(r) if r.status().is_success() => break,
                    Ok(r) => tracing::warn!("notify {url}: HTTP {} (attempt {attempt} of {TRIES})", r.status()),
                    Err(e) => tracing::warn!("notify {url}: {e} (attempt {attempt} of {TRIES})"),
                }
                if attempt < TRIES {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }
}
