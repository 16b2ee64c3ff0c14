//! The endpoints this daemon was handed (PUT /v1/endpoints/{namespace}/{name}), durable in its
//! store: a daemon restarted (by SIGTERM or kill -9) serves the same ones, and whatever forwards
//! to them starts from them. A revision never goes back: a late write of an older one (a
//! leader that lost its lease) is refused.

use crate::protocol::AppEndpoints;
use crate::store::{Batch, Store, StoreError, Table};
use crate::supervisor::desired::{MarkClock, Marked};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum EndpointsError {
    #[error("{0}")]
    Invalid(String),
    /// The write's revision is below the one kept.
    #[error("revision {offered} of {app} is older than the one kept ({kept})")]
    Stale { app: String, offered: u64, kept: u64 },
    #[error("no endpoints for {0}")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Every app's endpoints, by `namespace/name`, and a counter bumped at each change (what long
/// polls wait on).
#[derive(Clone)]
pub struct EndpointsKeeper {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    apps: Mutex<BTreeMap<String, AppEndpoints>>,
    changed: tokio::sync::watch::Sender<u64>,
    /// The scheduler's writes in order (see supervisor/desired.rs): each key's last one.
    clock: Arc<MarkClock>,
    marks: Marked,
    /// One write at a time: a desired set's sweep must not cross a write of what it sweeps.
    writing: tokio::sync::Mutex<()>,
}

impl EndpointsKeeper {
    /// The endpoints the store keeps.
    pub fn open(store: Store, clock: Arc<MarkClock>) -> Result<EndpointsKeeper, StoreError> {
        let snapshot = store.snapshot()?;
        let mut apps = BTreeMap::new();
        for (key, value) in snapshot.table(Table::Endpoints) {
            match serde_json::from_value::<AppEndpoints>(value.clone()) {
                Ok(e) => {
                    apps.insert(key.to_string(), e);
                }
                Err(e) => tracing::error!("stored endpoints {key} are unreadable: {e}"),
            }
        }
        let (changed, _) = tokio::sync::watch::channel(0);
        let inner = Inner {
            store,
            apps: Mutex::new(apps),
            changed,
            clock,
            marks: Marked::default(),
            writing: Default::default(),
        };
        Ok(EndpointsKeeper { inner: Arc::new(inner) })
    }

    fn apps(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, AppEndpoints>> {
        self.inner.apps.lock().expect("endpoints lock")
    }

    /// Every app's (in `namespace` when given).
    pub fn list(&self, namespace: Option<&str>) -> Vec<AppEndpoints> {
        self.apps().values().filter(|e| namespace.is_none_or(|n| n == e.namespace)).cloned().collect()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<AppEndpoints> {
        self.apps().get(&format!("{namespace}/{name}")).cloned()
    }

    /// Keeps `endpoints` (durably first). The same revision again is a no-op; an older one is
    /// refused.
    pub async fn put(&self, endpoints: AppEndpoints) -> Result<(), EndpointsError> {
        let _writing = self.inner.writing.lock().await;
        self.put_now(endpoints).await
    }

    async fn put_now(&self, endpoints: AppEndpoints) -> Result<(), EndpointsError> {
        crate::spec::validate::check_name(&endpoints.name)
            .and(crate::spec::validate::check_name(&endpoints.namespace))
            .map_err(|e| EndpointsError::Invalid(format!("namespace/name: {e}")))?;
        let key = endpoints.key();
        self.inner.marks.set(&key, self.inner.clock.next());
        if let Some(kept) = self.apps().get(&key) {
            if endpoints.revision < kept.revision {
                return Err(EndpointsError::Stale { app: key, offered: endpoints.revision, kept: kept.revision });
            }
            if *kept == endpoints {
                return Ok(());
            }
        }
        let value = serde_json::to_value(&endpoints).expect("endpoints serialize");
        self.inner.store.commit(Batch::new().put(Table::Endpoints, &key, &value)).await?;
        self.apps().insert(key, endpoints);
        self.inner.changed.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Forgets an app's endpoints (its app was deleted).
    pub async fn delete(&self, namespace: &str, name: &str) -> Result<(), EndpointsError> {
        let _writing = self.inner.writing.lock().await;
        self.delete_now(&format!("{namespace}/{name}")).await
    }

    async fn delete_now(&self, key: &str) -> Result<(), EndpointsError> {
        let key = key.to_string();
        if !self.apps().contains_key(&key) {
            return Err(EndpointsError::NotFound(key));
        }
        self.inner.store.commit(Batch::new().delete(Table::Endpoints, &key)).await?;
        self.apps().remove(&key);
        self.inner.marks.forget(&key);
        self.inner.changed.send_modify(|n| *n += 1);
        Ok(())
    }

    /// A scheduler's whole set (as of `as_of`, see supervisor/desired.rs): each kept (a
    /// revision older than the one here is no error: it was overtaken), every other app's
    /// written before `as_of` forgotten. The apps forgotten.
    pub async fn retain(&self, keep: Vec<AppEndpoints>, as_of: u64) -> Result<Vec<String>, EndpointsError> {
        let _writing = self.inner.writing.lock().await;
        let named: std::collections::BTreeSet<String> = keep.iter().map(AppEndpoints::key).collect();
        for endpoints in keep {
            match self.put_now(endpoints).await {
                Ok(()) | Err(EndpointsError::Stale { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let gone: Vec<String> = self
            .apps()
            .keys()
            .filter(|k| !named.contains(*k) && self.inner.marks.known_to(k, as_of))
            .cloned()
            .collect();
        for key in &gone {
            self.delete_now(key).await?;
            tracing::info!(app = %key, "endpoints forgotten: the scheduler's desired set does not name them");
        }
        Ok(gone)
    }

    /// The app's endpoints once their revision is above `after`, or whatever is kept (None when
    /// nothing) when `timeout` passes first: a long poll.
    pub async fn wait_after(&self, namespace: &str, name: &str, after: u64, timeout: Duration) -> Option<AppEndpoints> {
        let mut changes = self.inner.changed.subscribe();
        let newer = |e: &Option<AppEndpoints>| e.as_ref().is_some_and(|e| e.revision > after);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let now = self.get(namespace, name);
            if newer(&now) {
                return now;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.get(namespace, name),
            }
        }
    }

    /// Wakes at every change (what forwards to the endpoints follows it).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }
}
