//! The durable side of hooks: templates and runs kept in the daemon's store, and one task per
//! unfinished run that drives it.
//!
//! A run's metrics are measured concurrently; each measurement is sent to the run's task, which
//! folds it into the run and commits the whole run (one write, with a `hookRunMeasured` event
//! unless the metric measures until stopped and nothing changed: metric.rs, `journals_last`)
//! before the metric may take its next one. So what the store holds is every measurement taken
//! and judged, each once: after a kill -9 the task resumes from the store, and a metric's next
//! measurement is due an interval after the last committed one (runner.rs). A measurement in
//! flight when the daemon died was never recorded and is simply taken again.
//!
//! The task is the only writer of its run's record: `terminate` asks it to stop and waits
//! for it to commit the terminated run.

use super::metric::MetricResult;
use super::model::HookTemplate;
use super::run::{self, CreateHookRun, HookRun, HookRunSummary, HookTemplateSummary};
use crate::clock::now_ms;
use crate::protocol::{DaemonEvent, EventBody};
use crate::store::{Batch, Store, StoreError, Table};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// Templates and runs: cheap to clone.
#[derive(Clone)]
pub struct Hooks {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    http: super::provider::Http,
    templates: Mutex<BTreeMap<String, HookTemplate>>,
    /// Every run as last committed.
    runs: Mutex<BTreeMap<String, HookRun>>,
    /// The stop signal of each run's task.
    stops: Mutex<BTreeMap<String, watch::Sender<bool>>>,
    /// Bumped after every committed change of a run, for those who wait on one.
    changed: watch::Sender<u64>,
}

impl Hooks {
    /// Reads the templates and runs the store holds; [`Hooks::resume`] starts the unfinished.
    /// `max_response_bytes`: `hook_max_response_bytes`, the most of an answer a measurement reads.
    pub fn open(store: Store, max_response_bytes: u64) -> Result<Hooks, StoreError> {
        let snapshot = store.snapshot()?;
        let read = |table: Table| -> BTreeMap<String, serde_json::Value> {
            snapshot.table(table).map(|(k, v)| (k.to_string(), v.clone())).collect()
        };
        let mut templates = BTreeMap::new();
        for (key, value) in read(Table::HookTemplates) {
            match serde_json::from_value::<HookTemplate>(value) {
                Ok(t) => {
                    templates.insert(key, t);
                }
                Err(e) => tracing::error!("stored hook template {key} is unreadable: {e}"),
            }
        }
        let mut runs = BTreeMap::new();
        for (key, value) in read(Table::HookRuns) {
            match serde_json::from_value::<HookRun>(value) {
                Ok(r) => {
                    runs.insert(key, r);
                }
                Err(e) => tracing::error!("stored hook run {key} is unreadable: {e}"),
            }
        }
        let http = super::provider::Http::new(max_response_bytes);
        Ok(Hooks {
            inner: Arc::new(Inner {
                store,
                http,
                templates: Mutex::new(templates),
                runs: Mutex::new(runs),
                stops: Mutex::default(),
                changed: watch::channel(0).0,
            }),
        })
    }

    /// Starts a task for every run that has not finished (after a restart: where it stood).
    pub fn resume(&self) {
        let unfinished: Vec<String> =
            self.runs_locked().iter().filter(|(_, r)| !r.is_done()).map(|(k, _)| k.clone()).collect();
        for key in unfinished {
            tracing::info!("hook run {key} resumes");
            self.spawn_driver(key);
        }
    }

    fn runs_locked(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, HookRun>> {
        self.inner.runs.lock().expect("hook runs lock")
    }

    // ---- templates ----

    /// Creates or replaces a template (checked by `parse_template` before it gets here).
    pub async fn put_template(&self, template: HookTemplate) -> Result<HookTemplateSummary, HookError> {
        run::check_name(&template.metadata.name).map_err(|e| HookError::Invalid(format!("metadata.{e}")))?;
        let key = template.key();
        let value = serde_json::to_value(&template).expect("a template serializes");
        let event = EventBody::Daemon(DaemonEvent::HookTemplateUpdated {
            namespace: template.metadata.namespace.clone(),
            name: template.metadata.name.clone(),
        });
        self.inner.store.commit(Batch::new().put(Table::HookTemplates, &key, &value).event(event.to_value())).await?;
        let summary = template.summary();
        self.inner.templates.lock().expect("hook templates lock").insert(key, template);
        Ok(summary)
    }

    pub fn templates(&self, namespace: Option<&str>) -> Vec<HookTemplateSummary> {
        let templates = self.inner.templates.lock().expect("hook templates lock");
        templates
            .values()
            .filter(|t| namespace.is_none_or(|n| n == t.metadata.namespace))
            .map(|t| t.summary())
            .collect()
    }

    pub fn template(&self, namespace: &str, name: &str) -> Option<HookTemplate> {
        self.inner.templates.lock().expect("hook templates lock").get(&run::key(namespace, name)).cloned()
    }

    /// Removes a template; runs made from it keep their own copy of its metrics.
    pub async fn delete_template(&self, namespace: &str, name: &str) -> Result<(), HookError> {
        let key = run::key(namespace, name);
        if self.template(namespace, name).is_none() {
            return Err(HookError::NotFound(format!("no hook template {key}")));
        }
        let event =
            EventBody::Daemon(DaemonEvent::HookTemplateDeleted { namespace: namespace.into(), name: name.into() });
        self.inner.store.commit(Batch::new().delete(Table::HookTemplates, &key).event(event.to_value())).await?;
        self.inner.templates.lock().expect("hook templates lock").remove(&key);
        Ok(())
    }

    // ---- runs ----

    /// Creates a run of a stored template and starts it.
    pub async fn create_run(&self, req: CreateHookRun) -> Result<HookRun, HookError> {
        let template = self.template(&req.namespace, &req.template).ok_or_else(|| {
            HookError::NotFound(format!("template: no hook template {}", run::key(&req.namespace, &req.template)))
        })?;
        let now = now_ms();
        let name = req.name.clone().unwrap_or_else(|| format!("{}-{now}", req.template));
        let run = HookRun::new(&template, &name, &req.args, req.labels.clone(), now).map_err(HookError::Invalid)?;
        let key = run.key();
        {
            // Claimed under the lock: two creates of one name cannot both pass.
            let mut runs = self.runs_locked();
            if runs.contains_key(&key) {
                return Err(HookError::Conflict(format!("name: hook run {key} exists")));
            }
            runs.insert(key.clone(), run.clone());
        }
        let event = EventBody::Daemon(DaemonEvent::HookRunCreated {
            namespace: run.metadata.namespace.clone(),
            name: run.metadata.name.clone(),
            template: run.spec.template.clone(),
        });
        let value = serde_json::to_value(&run).expect("a run serializes");
        if let Err(e) =
            self.inner.store.commit(Batch::new().put(Table::HookRuns, &key, &value).event(event.to_value())).await
        {
            self.runs_locked().remove(&key);
            return Err(e.into());
        }
        self.spawn_driver(key);
        Ok(run)
    }

    pub fn runs(&self, namespace: Option<&str>, labels: &BTreeMap<String, String>) -> Vec<HookRunSummary> {
        self.runs_locked()
            .values()
            .filter(|r| namespace.is_none_or(|n| n == r.metadata.namespace))
            .filter(|r| labels.iter().all(|(k, v)| r.metadata.labels.get(k) == Some(v)))
            .map(HookRun::summary)
            .collect()
    }

    pub fn run(&self, namespace: &str, name: &str) -> Option<HookRun> {
        self.runs_locked().get(&run::key(namespace, name)).cloned()
    }

    /// Stops a run: it takes no more measurements, and its metrics are decided by what they
    /// measured. Returns the run as committed; a finished run is returned as it is.
    pub async fn terminate(&self, namespace: &str, name: &str) -> Result<HookRun, HookError> {
        let key = run::key(namespace, name);
        let run = self.run(namespace, name).ok_or_else(|| HookError::NotFound(format!("no hook run {key}")))?;
        if run.is_done() {
            return Ok(run);
        }
        let stop = self.inner.stops.lock().expect("hook stops lock").get(&key).cloned();
        match stop {
            Some(stop) => {
                let _ = stop.send(true);
            }
            // No task (it cannot have ended with the run unfinished): terminate it here.
            None => self.commit_terminated(&key).await?,
        }
        Ok(self.wait(namespace, name).await.expect("the run was there"))
    }

    /// Terminates a run if it is going, then removes it.
    pub async fn delete_run(&self, namespace: &str, name: &str) -> Result<(), HookError> {
        self.terminate(namespace, name).await?;
        let key = run::key(namespace, name);
        let event = EventBody::Daemon(DaemonEvent::HookRunDeleted { namespace: namespace.into(), name: name.into() });
        self.inner.store.commit(Batch::new().delete(Table::HookRuns, &key).event(event.to_value())).await?;
        self.runs_locked().remove(&key);
        self.inner.changed.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Removes every run with label `key` = `value` (an app's rollout runs, when the app goes).
    pub async fn delete_runs_labelled(&self, key: &str, value: &str) -> Result<(), HookError> {
        let labels = BTreeMap::from([(key.to_string(), value.to_string())]);
        for run in self.runs(None, &labels) {
            match self.delete_run(&run.namespace, &run.name).await {
                Ok(()) | Err(HookError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Waits until the run has finished; None if there is (or comes to be) no such run.
    pub async fn wait(&self, namespace: &str, name: &str) -> Option<HookRun> {
        let mut changed = self.inner.changed.subscribe();
        loop {
            match self.run(namespace, name) {
                Some(r) if r.is_done() => return Some(r),
                None => return None,
                Some(_) => {}
            }
            if changed.changed().await.is_err() {
                return self.run(namespace, name);
            }
        }
    }

    /// A receiver that sees a new value after every committed change of any run.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    async fn commit_terminated(&self, key: &str) -> Result<(), HookError> {
        let Some(mut run) = self.runs_locked().get(key).cloned() else { return Ok(()) };
        run.terminate(now_ms());
        self.commit_run(run, None).await
    }

    /// Writes the run (and what happened to it) and makes it what others see.
    async fn commit_run(&self, run: HookRun, measured: Option<DaemonEvent>) -> Result<(), HookError> {
        let key = run.key();
        let value = serde_json::to_value(&run).expect("a run serializes");
        let mut batch = Batch::new().put(Table::HookRuns, &key, &value);
        if let Some(e) = measured {
            batch = batch.event(EventBody::Daemon(e).to_value());
        }
        let was_done = self.runs_locked().get(&key).is_some_and(HookRun::is_done);
        if run.is_done() && !was_done {
            let finished = DaemonEvent::HookRunFinished {
                namespace: run.metadata.namespace.clone(),
                name: run.metadata.name.clone(),
                phase: run.status.phase,
                message: run.status.message.clone(),
            };
            batch = batch.event(EventBody::Daemon(finished).to_value());
        }
        self.inner.store.commit(batch).await?;
        self.runs_locked().insert(key, run);
        self.inner.changed.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Starts `key`'s task unless one drives it already: a restart's `resume` can meet a run
    /// created meanwhile (the scale-in driver creates runs as the daemon loads), and two tasks
    /// of one run would each commit it, the second's start dropping the first's stop signal.
    fn spawn_driver(&self, key: String) {
        let stop_rx = {
            let mut stops = self.inner.stops.lock().expect("hook stops lock");
            if stops.contains_key(&key) {
                return;
            }
            let (stop_tx, stop_rx) = watch::channel(false);
            stops.insert(key.clone(), stop_tx);
            stop_rx
        };
        let hooks = self.clone();
        tokio::spawn(async move {
            if let Err(e) = hooks.drive(&key, stop_rx).await {
                // The store failed: the run stays as last committed and resumes at the next start.
                tracing::error!("hook run {key} stopped: {e}");
            }
            hooks.inner.stops.lock().expect("hook stops lock").remove(&key);
        });
    }

    /// Runs `key`'s unfinished metrics concurrently, committing each measurement, until the run
    /// is decided or terminated.
    async fn drive(&self, key: &str, mut stop: watch::Receiver<bool>) -> Result<(), HookError> {
        let Some(mut run) = self.runs_locked().get(key).cloned() else { return Ok(()) };
        if run.spec.terminate {
            return self.commit_terminated(key).await;
        }
        if run.status.started_at_ms.is_none() {
            run.status.started_at_ms = Some(now_ms());
            run.status.phase = super::metric::MetricPhase::Running;
            self.commit_run(run.clone(), None).await?;
        }
        let (tx, mut rx) = mpsc::channel::<(usize, MetricResult, oneshot::Sender<()>)>(4);
        let mut metrics = tokio::task::JoinSet::new();
        let args = run.args();
        for (index, metric) in run.spec.metrics.iter().enumerate() {
            let result = run.status.metric_results[index].clone();
            if result.phase.is_done() {
                continue;
            }
            let (tx, http, metric, args) = (tx.clone(), self.inner.http.clone(), metric.clone(), args.clone());
            metrics.spawn(async move {
                let result = super::runner::run_metric(&http, &metric, &args, result, |r| {
                    let (r, tx) = (r.clone(), tx.clone());
                    async move {
                        // Committed before the metric goes on (or the run is over and no one listens).
                        let (ack, acked) = oneshot::channel();
                        if tx.send((index, r, ack)).await.is_ok() {
                            let _ = acked.await;
                        }
                    }
                })
                .await;
                (index, result)
            });
        }
        drop(tx);
        loop {
            tokio::select! {
                measured = rx.recv() => {
                    let Some((index, result, ack)) = measured else {
                        // Every metric ended; one that could not start (its conditions) told
                        // nothing, so take what each returned.
                        while let Some(Ok((index, result))) = metrics.join_next().await {
                            run.update(index, result, now_ms());
                        }
                        if !run.is_done() {
                            run.terminate(now_ms());
                        }
                        self.commit_run(run.clone(), None).await?;
                        break;
                    };
                    let journaled = result.journals_last(&run.spec.metrics[index]);
                    let event = result.measurements.last().filter(|_| journaled).map(|m| DaemonEvent::HookRunMeasured {
                        namespace: run.metadata.namespace.clone(),
                        name: run.metadata.name.clone(),
                        metric: result.name.clone(),
                        phase: m.phase,
                        value: m.value.clone(),
                    });
                    run.update(index, result, now_ms());
                    if run.is_done() {
                        // Decided: the other metrics stop with what they have.
                        metrics.abort_all();
                        for m in &mut run.status.metric_results {
                            m.terminate();
                        }
                    }
                    self.commit_run(run.clone(), event).await?;
                    let _ = ack.send(());
                    if run.is_done() {
                        break;
                    }
                }
                // Only a stop asked for ends it early (a stop signal gone is no verdict).
                Ok(()) = stop.changed() => {
                    metrics.abort_all();
                    run.terminate(now_ms());
                    self.commit_run(run.clone(), None).await?;
                    break;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::MetricPhase;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers every request on a loopback port with `body` (JSON).
    async fn answering(body: &'static str) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(format!("{head}{body}").as_bytes()).await;
                });
            }
        });
        port
    }

    /// A restart's resume that meets a run just created (the scale-in driver creates runs as the
    /// daemon loads) leaves it to its one task: it used to start a second, whose start dropped
    /// the first's stop signal, and the first then ended the run as terminated: Successful, a
    /// server with players removed.
    #[tokio::test]
    async fn a_run_resumed_as_it_is_created_is_driven_once_to_its_own_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = Hooks::open(Store::open(dir.path()).unwrap(), 1 << 20).unwrap();
        let port = answering(r#"{"players": 3}"#).await;
        let template = format!(
            r#"{{"kind": "HookTemplate", "metadata": {{"name": "drained", "namespace": "test"}},
                "spec": {{"metrics": [{{"name": "players", "count": 1, "successCondition": "asInt(result) == 0",
                  "provider": {{"web": {{"url": "http://127.0.0.1:{port}/players", "jsonPath": "{{$.players}}"}}}}}}]}}}}"#
        );
        hooks.put_template(super::super::parse_template(&template, crate::spec::Format::Json).unwrap()).await.unwrap();
        let req = CreateHookRun {
            template: "drained".into(),
            namespace: "test".into(),
            name: Some("world-scale-in-1".into()),
            args: BTreeMap::new(),
            labels: BTreeMap::new(),
        };
        hooks.create_run(req).await.unwrap();
        hooks.resume();
        let run = hooks.wait("test", "world-scale-in-1").await.unwrap();
        assert_eq!(run.status.phase, MetricPhase::Failed, "{:?}", run.status);
        assert_eq!(run.status.metric_results[0].count, 1, "measured once: {:?}", run.status);
    }
}
