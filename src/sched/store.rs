//! The scheduler's desired state: apps, their specs and placements. Behind [`DesiredStore`],
//! so a distributed store (etcd) can replace the embedded one; [`LocalStore`] keeps it in the
//! project's redb store (durable commits, a journal of the scheduler's decisions).

use super::SchedError;
use crate::protocol::DesiredChange;
use crate::spec::AppId;
use crate::store::{Batch, Store, Table};
use std::collections::BTreeSet;
use std::path::Path;

pub use crate::protocol::sched_records::{
    App, Cordon, Deleting, Dependency, DependencyCopy, Maintenance, NodeRecord, Placement, PlacementState, RoomWait,
    SchedRollout, Settings,
};
pub use crate::protocol::NodeState;

/// Where desired state lives. Every method is one durable step.
#[async_trait::async_trait]
pub trait DesiredStore: Send + Sync {
    async fn apps(&self) -> Result<Vec<App>, SchedError>;
    async fn app(&self, key: &AppId) -> Result<Option<App>, SchedError>;
    /// Creates or replaces; `why` is journaled with it. A store that keeps versions (etcd)
    /// writes only over the version `app` was read at (a new app: only when there is none),
    /// else fails with [`SchedError::Conflict`]; `app.version` is then the one written.
    async fn put_app(&self, app: &mut App, why: &DesiredChange) -> Result<(), SchedError> {
        self.put_app_noting(app, std::slice::from_ref(why)).await
    }
    /// As [`DesiredStore::put_app`], journaling each of `whys` with it (one write for several
    /// changes: a lost fleet's instances of one app marked at once).
    async fn put_app_noting(&self, app: &mut App, whys: &[DesiredChange]) -> Result<(), SchedError>;
    async fn delete_app(&self, key: &AppId) -> Result<(), SchedError>;
    /// Every HookTemplate (seed 004) the cluster's rollouts and runs use.
    async fn hook_templates(&self) -> Result<Vec<crate::hooks::HookTemplate>, SchedError>;
    async fn put_hook_template(&self, template: &crate::hooks::HookTemplate) -> Result<(), SchedError>;
    async fn delete_hook_template(&self, namespace: &str, name: &str) -> Result<(), SchedError>;
    /// Every dependency (seed 002's dependency pods).
    async fn dependencies(&self) -> Result<Vec<Dependency>, SchedError>;
    /// Creates or replaces by compare-and-swap, as [`DesiredStore::put_app`].
    async fn put_dependency(&self, dependency: &mut Dependency, why: &DesiredChange) -> Result<(), SchedError>;
    async fn delete_dependency(&self, key: &str) -> Result<(), SchedError>;
    /// Every node record the leading `run` wrote.
    async fn node_records(&self) -> Result<Vec<NodeRecord>, SchedError>;
    /// One node's record, if the leader wrote one.
    async fn node_record(&self, name: &str) -> Result<Option<NodeRecord>, SchedError>;
    /// Writes a node's record (the leader alone writes them: no compare-and-swap).
    async fn put_node_record(&self, record: &NodeRecord) -> Result<(), SchedError>;
    /// Every app's endpoints the leading `run` wrote (issue 27).
    async fn endpoints(&self) -> Result<Vec<crate::protocol::AppEndpoints>, SchedError>;
    /// Writes an app's endpoints (the leader alone writes them: no compare-and-swap).
    async fn put_endpoints(&self, endpoints: &crate::protocol::AppEndpoints) -> Result<(), SchedError>;
    /// Removes an app's endpoints (`namespace/name`; nothing to remove is no error).
    async fn delete_endpoints(&self, key: &str) -> Result<(), SchedError>;
    /// The cluster's controls (default when never written).
    async fn settings(&self) -> Result<Settings, SchedError>;
    /// Writes them over the version read (else [`SchedError::Conflict`]), journaling `why`.
    async fn put_settings(&self, settings: &mut Settings, why: &DesiredChange) -> Result<(), SchedError>;
    /// Who leads the `run`s, if one does.
    async fn leader(&self) -> Option<String>;
    /// Waits until this process leads the `run`s sharing the store (one acts, the others follow
    /// and take over when it dies); the leadership lasts while the returned value is held and its
    /// `lost` has not fired.
    async fn lead(&self, who: &str) -> Result<Leadership, SchedError>;
    /// Wakes whenever the desired state may have changed (a watch), if the store can tell;
    /// None: the caller polls.
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
    /// The apps written since the last call, as far as the store's watch tells (a store
    /// without one, or a watch that restarted, tells [`AppsChanged::All`]).
    fn apps_changed(&self) -> AppsChanged {
        AppsChanged::All
    }
}

/// Which apps changed: a controller woken by a change looks at those, not at every app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppsChanged {
    /// Any may have: list them all.
    All,
    Some(BTreeSet<crate::spec::AppId>),
}

/// What a store's watch noted of the apps between two [`DesiredStore::apps_changed`] calls.
#[derive(Debug, Default)]
pub struct ChangedApps(std::sync::Mutex<(bool, BTreeSet<crate::spec::AppId>)>);

impl ChangedApps {
    /// App `key` was written (or deleted).
    pub fn note(&self, key: crate::spec::AppId) {
        self.0.lock().expect("changed apps lock").1.insert(key);
    }

    /// What happened is not known (a watch restarted).
    pub fn note_all(&self) {
        self.0.lock().expect("changed apps lock").0 = true;
    }

    /// What was noted, emptied.
    pub fn take(&self) -> AppsChanged {
        let (all, keys) = std::mem::take(&mut *self.0.lock().expect("changed apps lock"));
        if all {
            AppsChanged::All
        } else {
            AppsChanged::Some(keys)
        }
    }
}

/// This process leads: it alone acts on the cluster while this is held.
pub struct Leadership {
    /// Fires (with why) when the leadership is lost: a lease that could not be kept alive.
    pub lost: tokio::sync::oneshot::Receiver<String>,
    /// What keeps it (a lock file, a lease's keep-alive task).
    pub _held: Box<dyn std::any::Any + Send + Sync>,
}

/// The embedded store: the project's redb store under the cluster's `state_dir`. redb allows
/// one open handle, and `steward-sched status` (or `deploy`) must be able to run while
/// `steward-sched run` follows the cluster: the handle is held only while this process uses
/// it — shared by its tasks, let go once idle for [`IDLE_RELEASE`] and at the latest after
/// [`HOLD_AT_MOST`] — and another process's busy store is waited for. (Opening it for each
/// operation, as before, cost two fsyncs and a thread each: a lost node's pass of 12 apps
/// took 7 s.)
pub struct LocalStore {
    dir: std::path::PathBuf,
    held: std::sync::Arc<std::sync::Mutex<Option<Held>>>,
}

/// The open handle, and since when it is held and was last used.
struct Held {
    store: Store,
    opened: std::time::Instant,
    used: std::time::Instant,
}

/// How long an operation waits for another process (or task) to finish with the store.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The handle goes once unused this long (another process may be waiting for it)...
const IDLE_RELEASE: std::time::Duration = std::time::Duration::from_millis(20);

/// ...or once held this long, however busy this process is; it then waits this long before
/// taking it again, so a waiting process (which looks every 10 ms) gets in.
const HOLD_AT_MOST: std::time::Duration = std::time::Duration::from_millis(500);
const YIELD_FOR: std::time::Duration = std::time::Duration::from_millis(25);

impl LocalStore {
    pub fn open(dir: &Path) -> Result<LocalStore, SchedError> {
        let local = LocalStore { dir: dir.to_path_buf(), held: Default::default() };
        local.with(|_| Ok(()))?;
        Ok(local)
    }

    fn with<T>(&self, f: impl FnOnce(&Store) -> Result<T, SchedError>) -> Result<T, SchedError> {
        let mut held = self.held.lock().expect("store handle lock");
        if held.as_ref().is_some_and(|h| h.opened.elapsed() >= HOLD_AT_MOST) {
            *held = None;
            std::thread::sleep(YIELD_FOR);
        }
        let now = std::time::Instant::now();
        if held.is_none() {
            let store = Store::open_waiting(&self.dir, BUSY_WAIT).map_err(store_err)?;
            *held = Some(Held { store, opened: now, used: now });
            self.release_when_idle(now);
        }
        let h = held.as_mut().expect("opened above");
        h.used = now;
        f(&h.store)
    }

    /// Lets the handle opened at `opened` go once idle (a thread while it is held).
    fn release_when_idle(&self, opened: std::time::Instant) {
        let held = std::sync::Arc::downgrade(&self.held);
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(5));
            let Some(held) = held.upgrade() else { return };
            let mut held = held.lock().expect("store handle lock");
            match held.as_ref() {
                // Gone, or another handle (with a watcher of its own).
                Some(h) if h.opened != opened => return,
                None => return,
                Some(h) if h.used.elapsed() >= IDLE_RELEASE => {
                    *held = None;
                    return;
                }
                Some(_) => {}
            }
        });
    }

    /// Writes `value` (its `storeVersion` bumped) at `key` with `why` journaled, only over the
    /// version `read` (None: only where there is no record yet); compared and written while this
    /// process alone holds the store (redb's one handle). The version written, or None when
    /// another writer came first.
    fn swap(
        &self,
        table: Table,
        key: &str,
        read: Option<i64>,
        mut value: serde_json::Value,
        whys: &[DesiredChange],
    ) -> Result<Option<i64>, SchedError> {
        let whys: Vec<serde_json::Value> =
            whys.iter().map(serde_json::to_value).collect::<Result<_, _>>().map_err(store_err)?;
        self.with(|s| {
            let current = s.get(table, key).map_err(store_err)?.map(|v| version_of(&v));
            if current != read {
                return Ok(None);
            }
            let next = current.unwrap_or(0) + 1;
            value[STORE_VERSION] = serde_json::json!(next);
            let mut batch = Batch::new().put(table, key, &value);
            for why in whys {
                batch.push_event(why);
            }
            s.commit_blocking(batch).map_err(store_err)?;
            Ok(Some(next))
        })
    }
}

/// The cluster's settings, in the embedded store's meta table.
const SETTINGS_KEY: &str = "sched-settings";

/// The record's version in the embedded store (absent in records written before it: 0).
const STORE_VERSION: &str = "storeVersion";

fn version_of(record: &serde_json::Value) -> i64 {
    record.get(STORE_VERSION).and_then(serde_json::Value::as_i64).unwrap_or(0)
}

fn read_app(key: &str, record: &serde_json::Value) -> Result<App, SchedError> {
    let mut app: App = serde_json::from_value(record.clone()).map_err(|e| store_err(format!("app {key}: {e}")))?;
    app.version = Some(version_of(record));
    Ok(app)
}

fn store_err(e: impl std::fmt::Display) -> SchedError {
    SchedError::Store(e.to_string())
}

#[async_trait::async_trait]
impl DesiredStore for LocalStore {
    async fn apps(&self) -> Result<Vec<App>, SchedError> {
        let snapshot = self.with(|s| s.snapshot().map_err(store_err))?;
        snapshot.table(Table::Specs).map(|(key, v)| read_app(key, v)).collect()
    }

    async fn app(&self, key: &AppId) -> Result<Option<App>, SchedError> {
        let key = key.to_string();
        match self.with(|s| s.get(Table::Specs, &key).map_err(store_err))? {
            Some(v) => read_app(&key, &v).map(Some),
            None => Ok(None),
        }
    }

    /// Compare-and-swap on the record's `storeVersion`, read and written while this process
    /// alone holds the store (redb's one handle): the `run` and the commands beside it never
    /// overwrite each other's change unseen.
    async fn put_app_noting(&self, app: &mut App, whys: &[DesiredChange]) -> Result<(), SchedError> {
        let value = serde_json::to_value(&*app).map_err(store_err)?;
        let written = self.swap(Table::Specs, &app.key.to_string(), app.version, value, whys)?;
        app.version = Some(written.ok_or_else(|| SchedError::Conflict { app: app.key.to_string() })?);
        Ok(())
    }

    async fn delete_app(&self, key: &AppId) -> Result<(), SchedError> {
        let why = serde_json::to_value(DesiredChange::AppDeleted { app: key.to_string() }).map_err(store_err)?;
        let batch = Batch::new().delete(Table::Specs, &key.to_string()).event(why);
        self.with(|s| s.commit_blocking(batch).map(|_| ()).map_err(store_err))
    }

    async fn hook_templates(&self) -> Result<Vec<crate::hooks::HookTemplate>, SchedError> {
        let snapshot = self.with(|s| s.snapshot().map_err(store_err))?;
        snapshot
            .table(Table::HookTemplates)
            .map(|(key, v)| {
                serde_json::from_value(v.clone()).map_err(|e| store_err(format!("hook template {key}: {e}")))
            })
            .collect()
    }

    async fn put_hook_template(&self, template: &crate::hooks::HookTemplate) -> Result<(), SchedError> {
        let value = serde_json::to_value(template).map_err(store_err)?;
        let (namespace, name) = (template.metadata.namespace.clone(), template.metadata.name.clone());
        let why = serde_json::to_value(DesiredChange::HookTemplateStored { namespace, name }).map_err(store_err)?;
        let batch = Batch::new().put(Table::HookTemplates, &template.key(), &value).event(why);
        self.with(|s| s.commit_blocking(batch).map(|_| ()).map_err(store_err))
    }

    async fn delete_hook_template(&self, namespace: &str, name: &str) -> Result<(), SchedError> {
        let key = crate::hooks::run::key(namespace, name);
        let why = DesiredChange::HookTemplateDeleted { namespace: namespace.into(), name: name.into() };
        let batch =
            Batch::new().delete(Table::HookTemplates, &key).event(serde_json::to_value(why).map_err(store_err)?);
        self.with(|s| s.commit_blocking(batch).map(|_| ()).map_err(store_err))
    }

    async fn dependencies(&self) -> Result<Vec<Dependency>, SchedError> {
        let snapshot = self.with(|s| s.snapshot().map_err(store_err))?;
        snapshot
            .table(Table::Depends)
            .map(|(key, v)| {
                let mut d: Dependency =
                    serde_json::from_value(v.clone()).map_err(|e| store_err(format!("dependency {key}: {e}")))?;
                d.version = Some(version_of(v));
                Ok(d)
            })
            .collect()
    }

    async fn put_dependency(&self, dependency: &mut Dependency, why: &DesiredChange) -> Result<(), SchedError> {
        let value = serde_json::to_value(&*dependency).map_err(store_err)?;
        let written =
            self.swap(Table::Depends, &dependency.key, dependency.version, value, std::slice::from_ref(why))?;
        let conflict = || SchedError::Conflict { app: format!("dependency {}", dependency.key) };
        dependency.version = Some(written.ok_or_else(conflict)?);
        Ok(())
    }

    async fn delete_dependency(&self, key: &str) -> Result<(), SchedError> {
        let why = DesiredChange::DependencyDeleted { dependency: key.to_string() };
        let batch = Batch::new().delete(Table::Depends, key).event(serde_json::to_value(why).map_err(store_err)?);
        self.with(|s| s.commit_blocking(batch).map(|_| ()).map_err(store_err))
    }

    async fn node_records(&self) -> Result<Vec<NodeRecord>, SchedError> {
        let snapshot = self.with(|s| s.snapshot().map_err(store_err))?;
        snapshot
            .table(Table::SchedNodes)
            .map(|(key, v)| serde_json::from_value(v.clone()).map_err(|e| store_err(format!("node record {key}: {e}"))))
            .collect()
    }

    async fn node_record(&self, name: &str) -> Result<Option<NodeRecord>, SchedError> {
        match self.with(|s| s.get(Table::SchedNodes, name).map_err(store_err))? {
            Some(v) => serde_json::from_value(v).map(Some).map_err(|e| store_err(format!("node record {name}: {e}"))),
            None => Ok(None),
        }
    }

    async fn put_node_record(&self, record: &NodeRecord) -> Result<(), SchedError> {
        let value = serde_json::to_value(record).map_err(store_err)?;
        let why = DesiredChange::NodeState { node: record.name.clone(), state: record.state };
        let batch = Batch::new()
            .put(Table::SchedNodes, &record.name, &value)
            .event(serde_json::to_value(why).map_err(store_err)?);
        self.with(|s| s.commit_blocking(batch).map(|_| ()).map_err(store_err))
    }

    async fn endpoints(&self) -> Result<Vec<crate::protocol::AppEndpoints>, SchedError> {
        let snapshot = self.with(|s| s.snapshot().map_err(store_err))?;
        snapshot
            .table(Table::Endpoints)
            .map(|(key, v)| serde_json::from_value(v.clone()).map_err(|e| store_err(format!("endpoints {key}: {e}"))))
            .collect()
    }

    async fn put_endpoints(&self, endpoints: &crate::protocol::AppEndpoints) -> Result<(), SchedError> {
        let value = serde_json::to_value(endpoints).map_err(store_err)?;
        let batch = Batch::new().put(Table::Endpoints, &endpoints.key(), &value);
        self.with(|s| s.commit_blocking(batch).map(|_| ()).map_err(store_err))
    }

    async fn delete_endpoints(&self, key: &str) -> Result<(), SchedError> {
        let batch = Batch::new().delete(Table::Endpoints, key);
        self.with(|s| s.commit_blocking(batch).map(|_| ()).map_err(store_err))
    }

    async fn settings(&self) -> Result<Settings, SchedError> {
        match self.with(|s| s.get(Table::Meta, SETTINGS_KEY).map_err(store_err))? {
            Some(v) => {
                let mut settings: Settings =
                    serde_json::from_value(v.clone()).map_err(|e| store_err(format!("settings: {e}")))?;
                settings.version = Some(version_of(&v));
                Ok(settings)
            }
            None => Ok(Settings::default()),
        }
    }

    async fn put_settings(&self, settings: &mut Settings, why: &DesiredChange) -> Result<(), SchedError> {
        let value = serde_json::to_value(&*settings).map_err(store_err)?;
        let written = self.swap(Table::Meta, SETTINGS_KEY, settings.version, value, std::slice::from_ref(why))?;
        settings.version = Some(written.ok_or_else(|| SchedError::Conflict { app: "the cluster's settings".into() })?);
        Ok(())
    }

    async fn leader(&self) -> Option<String> {
        let path = self.dir.join("run.lock");
        let file = std::fs::File::open(&path).ok()?;
        // Held: `run.lock` names who holds it; free: nobody leads.
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(_) => None,
            Err(_) => std::fs::read_to_string(&path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
        }
    }

    /// The `run` that holds `run.lock` in the state directory leads; another waits for it (a
    /// kill -9 frees the lock with the process).
    async fn lead(&self, _who: &str) -> Result<Leadership, SchedError> {
        let path = self.dir.join("run.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| store_err(format!("{}: {e}", path.display())))?;
        let file = tokio::task::spawn_blocking(move || {
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e)
        })
        .await
        .map_err(store_err)?
        .map_err(|e| store_err(format!("{}: {e}", path.display())))?;
        // Who holds it, for `status` (written once held).
        let _ = file.set_len(0);
        let _ = std::io::Write::write_all(&mut &*file, format!("{_who}\n").as_bytes());
        let (keep, lost) = tokio::sync::oneshot::channel::<String>();
        Ok(Leadership { lost, _held: Box::new((file, keep)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn changed_apps_are_told_once_and_all_when_not_known() {
        let changed = ChangedApps::default();
        assert_eq!(changed.take(), AppsChanged::Some(BTreeSet::new()));
        let a = crate::spec::AppId::new("ns", "a");
        changed.note(a.clone());
        changed.note(a.clone());
        assert_eq!(changed.take(), AppsChanged::Some(BTreeSet::from([a.clone()])));
        assert_eq!(changed.take(), AppsChanged::Some(BTreeSet::new()), "told once");
        changed.note(a);
        changed.note_all();
        assert_eq!(changed.take(), AppsChanged::All);
        assert_eq!(changed.take(), AppsChanged::Some(BTreeSet::new()));
    }

    /// Seed 002's constraints cordon the nodes they do not let in: `node==h1` every other
    /// node, `node!=h3` h3; soft (it must hold) makes the cordon required, and a required
    /// one wins over the operator's preferred cordon.
    #[test]
    fn constraints_cordon_the_nodes_they_keep_out() {
        let c = |value: &str, equal, soft| crate::protocol::Constraint {
            kind: "node".into(),
            value: value.into(),
            equal,
            soft,
            since_ms: 1,
        };
        let mut s = Settings { constraints: vec![c("h1", true, true)], ..Default::default() };
        assert!(s.cordon_of("h1").is_none());
        let h2 = s.cordon_of("h2").unwrap();
        assert!(!h2.preferred && h2.reason == "constraint node==h1", "{h2:?}");
        s.constraints = vec![c("h3", false, false)];
        assert!(s.cordon_of("h1").is_none() && s.cordon_of("h3").unwrap().preferred);
        s.constraints = vec![c("h3", false, true)];
        s.cordons.insert("h3".into(), Cordon { preferred: true, since_ms: 1, reason: "disk".into() });
        assert!(!s.cordon_of("h3").unwrap().preferred);
        assert_eq!(s.cordons_over(["h1", "h2", "h3"]).keys().collect::<Vec<_>>(), ["h3"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn apps_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let app = App {
            key: AppId::new("ns", "web"),
            spec: serde_json::json!({"metadata": {"name": "web"}}),
            placements: BTreeMap::from([
                (0, Placement { node: "h1".into(), state: PlacementState::Placed, reschedules: 0 }),
                (1, Placement { node: "h2".into(), state: PlacementState::Lost, reschedules: 1 }),
            ]),
            previous: Some(serde_json::json!({"metadata": {"name": "web"}, "v": 1})),
            rollout: Some(SchedRollout {
                phase: crate::protocol::RolloutPhase::Progressing,
                started_ms: 1,
                updated_ms: 2,
                applied: BTreeMap::from([("h1".into(), 3)]),
                done: vec!["h1".into()],
                rollback: false,
            }),
            stopped: BTreeSet::from([1]),
            deleting: Some(Deleting { since_ms: 5, nodes: BTreeSet::from(["h2".to_string()]) }),
            wait_for_room: true,
            waiting: Some(RoomWait { since_ms: 6, instances: BTreeSet::from([2]), reason: "not enough cpu".into() }),
            version: None,
        };
        {
            let s = LocalStore::open(dir.path()).unwrap();
            let mut app = app.clone();
            let why = DesiredChange::Deployed { app: app.key.to_string(), placements: BTreeMap::new() };
            s.put_app(&mut app, &why).await.unwrap();
        }
        let s = LocalStore::open(dir.path()).unwrap();
        // Idle, it lets the handle go: another (another process, say) holding it only delays
        // an operation.
        // (Waited for, not assumed after a fixed sleep: under a loaded suite the releasing
        // thread may run late.)
        std::thread::sleep(IDLE_RELEASE * 5);
        let held = Store::open_waiting(dir.path(), std::time::Duration::from_secs(10)).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            drop(held);
        });
        let app = App { version: Some(1), ..app };
        assert_eq!(s.app(&AppId::new("ns", "web")).await.unwrap(), Some(app.clone()));
        release.join().unwrap();
        assert_eq!(s.apps().await.unwrap(), vec![app.clone()]);
        // A write over a version another writer has replaced is refused.
        let (mut first, mut second) = (app.clone(), app.clone());
        s.put_app(&mut first, &DesiredChange::Applied { app: "ns/web".into() }).await.unwrap();
        assert_eq!(first.version, Some(2));
        let e = s.put_app(&mut second, &DesiredChange::Applied { app: "ns/web".into() }).await;
        assert!(matches!(e, Err(SchedError::Conflict { .. })), "{e:?}");
        let mut new = App { version: None, ..app.clone() };
        assert!(matches!(
            s.put_app(&mut new, &DesiredChange::Applied { app: "ns/web".into() }).await,
            Err(SchedError::Conflict { .. })
        ));
        s.delete_app(&AppId::new("ns", "web")).await.unwrap();
        assert_eq!(s.app(&AppId::new("ns", "web")).await.unwrap(), None);
    }

    /// A lost fleet's instances of one app are marked in one write: one version, a journal
    /// entry per node.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_write_journals_each_of_its_changes() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::open(dir.path()).unwrap();
        let mut app = App {
            key: AppId::new("ns", "web"),
            spec: serde_json::json!({}),
            placements: BTreeMap::new(),
            previous: None,
            rollout: None,
            stopped: BTreeSet::new(),
            deleting: None,
            wait_for_room: false,
            waiting: None,
            version: None,
        };
        let lost =
            |node: &str, i: u32| DesiredChange::Lost { app: "ns/web".into(), node: node.into(), instances: vec![i] };
        s.put_app_noting(&mut app, &[lost("h1", 0), lost("h2", 1)]).await.unwrap();
        assert_eq!(app.version, Some(1), "one write");
        let journal = s.with(|st| st.events_since(0, 100).map_err(store_err)).unwrap();
        let bodies: Vec<serde_json::Value> = journal.iter().map(|e| serde_json::to_value(&e.body).unwrap()).collect();
        assert_eq!(bodies.len(), 2, "{bodies:?}");
        assert_eq!(bodies[0]["node"], "h1");
        assert_eq!(bodies[1]["node"], "h2");
    }
}
