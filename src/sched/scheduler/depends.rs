//! Dependencies (seed 002's dependency pods): a spec stored once (`depend apply`), deployed
//! nowhere until a dependent instance arrives on a host. Then one copy runs there, shared by
//! every dependent on the host (scope `node`) or by those of one namespace (scope `namespace`,
//! one copy per namespace, run in it). The reference count of a copy is what the desired state
//! says: the dependents' placements on its host (and namespace), so it never drifts from them.
//! A copy left with none is idle; the leader removes it once it stayed idle for the grace period
//! (default 5 min, the seed's), counted from a moment kept in the store.
//!
//! A copy runs as an ordinary app on its host: `namespace/name` of the dependency (its namespace
//! replaced by the dependents' in namespace scope), one instance, labelled with its owner
//! ([`OWNER_LABEL`]).

use super::{check_spec, Emit, Scheduler, UPDATE_TRIES};
use crate::client::ClientError;
pub use crate::protocol::sched_answers::{CopyStatus, DependencyStatus};
use crate::protocol::{DesiredChange, SchedEvent, SchedLine, WatchLine};
use crate::sched::store::{App, Dependency, DependencyCopy};
use crate::sched::SchedError;
use crate::spec::model::{DependencyRef, DependencyScope};
use crate::spec::{Format, ProcessSpec, SpecError, SpecErrors};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The label every copy carries: the dependency it is a copy of.
pub const OWNER_LABEL: &str = "steward/dependency";
/// Seed 002: a dependency pod nobody verified for 5 minutes is collected.
pub const DEFAULT_GRACE_SECS: u64 = 300;

/// A copy the dependents' placements call for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    node: String,
    namespace: String,
    refs: usize,
}

/// How long a copy a rolling update moved may take to be ready before the update says it holds
/// there (it goes on once the copy is ready, or at the next `depend apply`).
const COPY_READY_WITHIN_MS: u64 = 120_000;
/// How often a rolling update asks whether the copy it moved is ready.
const COPY_READY_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// How soon the leader looks at a dependency again while its copies move (a rolling update's
/// next step, a start or removal that failed).
const UPDATE_AGAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// What this process learnt of copies on their dependency's revision, so a rolling update asks a
/// node once: (dependency, revision, copy key) seen ready, and those whose lateness was said.
/// Memory only: a new leader asks again.
#[derive(Debug, Default)]
pub(super) struct CopyChecks {
    ready: BTreeSet<(String, u64, String)>,
    said_late: BTreeSet<(String, u64, String)>,
}

fn not_ready(dependency: &str) -> String {
    format!(
        "not ready within {} s on its new revision: the update of {dependency} holds here, its other copies \
         keep theirs until it is ready (or depend apply is run again)",
        COPY_READY_WITHIN_MS / 1000
    )
}

/// Whether a copy a rolling update moved is past [`COPY_READY_WITHIN_MS`] without being ready.
fn late(moving: &DependencyCopy) -> bool {
    moving.updated_ms.is_some_and(|at| crate::clock::now_ms().saturating_sub(at) >= COPY_READY_WITHIN_MS)
}

/// The dependencies an app's spec declares (read from the stored document: cheap enough to do
/// for every app on every sweep, unlike a whole spec check).
fn declared(app_spec: &Value) -> Vec<DependencyRef> {
    serde_json::from_value(app_spec.get("dependencies").cloned().unwrap_or(Value::Null)).unwrap_or_default()
}

fn namespace_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

fn name_of(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, n)| n)
}

/// The namespace a copy runs in for a dependent in `app_namespace`.
fn copy_namespace<'a>(dependency: &'a str, scope: DependencyScope, app_namespace: &'a str) -> &'a str {
    match scope {
        DependencyScope::Node => namespace_of(dependency),
        DependencyScope::Namespace => app_namespace,
    }
}

/// Dependency key → copy key → the copy its dependents' placements call for, with their count.
/// An app being deleted holds none.
fn wanted(apps: &[App]) -> BTreeMap<String, BTreeMap<String, Wanted>> {
    let mut out: BTreeMap<String, BTreeMap<String, Wanted>> = BTreeMap::new();
    for app in apps.iter().filter(|a| a.deleting.is_none()) {
        let app_namespace = app.key.namespace.as_str();
        for d in declared(&app.spec) {
            let key = d.key(app_namespace);
            let namespace = copy_namespace(&key, d.scope, app_namespace).to_string();
            for p in app.placements.values() {
                let copy = DependencyCopy::key(&p.node, &namespace);
                let w = out.entry(key.clone()).or_default().entry(copy).or_insert_with(|| Wanted {
                    node: p.node.clone(),
                    namespace: namespace.clone(),
                    refs: 0,
                });
                w.refs += 1;
            }
        }
    }
    out
}

/// The spec document a copy runs: one instance, in its namespace, labelled with its owner.
fn copy_doc(dependency: &Dependency, namespace: &str) -> Value {
    let mut doc = dependency.spec.clone();
    doc["metadata"]["namespace"] = json!(namespace);
    doc["metadata"]["labels"][OWNER_LABEL] = json!(dependency.key);
    doc["spec"]["instance"] = json!(1);
    doc
}

fn copy_instance(dependency: &str, namespace: &str) -> String {
    format!("{namespace}/{}/0", name_of(dependency))
}

fn line(body: SchedEvent) -> WatchLine {
    WatchLine::Sched(SchedLine::now(body))
}

impl Scheduler {
    /// `depend apply FILE`: stores a dependency (a changed spec bumps its revision, and its
    /// copies take it: here unless a leader applies, else by the leader's sweep). Deploys nothing
    /// new: copies start with their first dependent.
    pub async fn put_dependency(&self, doc: Value, grace_secs: Option<u64>) -> Result<DependencyStatus, SchedError> {
        let spec = check_spec(&doc).map_err(|errors| SchedError::Spec { path: "(dependency)".into(), errors })?;
        let mut refused = Vec::new();
        if spec.runs_to_completion() {
            refused.push(SpecError::new("job", "a dependency runs beside its dependents: it cannot be a job"));
        }
        if !spec.dependencies.is_empty() {
            refused.push(SpecError::new("dependencies", "a dependency cannot have dependencies of its own"));
        }
        let key = super::app_key(&spec).to_string();
        let name = spec.metadata.name.clone();
        if let Some(app) = self.store.apps().await?.into_iter().find(|a| a.key.name == name) {
            let why = format!("an app is named {name} ({}): a copy in its namespace would replace it", app.key);
            refused.push(SpecError::new("metadata.name", why));
        }
        if !refused.is_empty() {
            return Err(SchedError::Spec { path: "(dependency)".into(), errors: SpecErrors(refused) });
        }
        let mut doc = doc;
        doc["spec"]["instance"] = json!(1);
        let default_grace =
            self.store.settings().await?.config.get("dependencyGraceSecs").unwrap_or(DEFAULT_GRACE_SECS);
        for _ in 0..UPDATE_TRIES {
            let stored = self.store.dependencies().await?.into_iter().find(|d| d.key == key);
            let mut dep = match stored {
                Some(mut d) => {
                    if d.spec != doc {
                        d.spec = doc.clone();
                        d.revision += 1;
                    }
                    d.grace_secs = grace_secs.unwrap_or(d.grace_secs);
                    d
                }
                None => Dependency {
                    key: key.to_string(),
                    spec: doc.clone(),
                    revision: 1,
                    grace_secs: grace_secs.unwrap_or(default_grace),
                    copies: BTreeMap::new(),
                    version: None,
                },
            };
            let why = DesiredChange::DependencyStored { dependency: key.to_string(), revision: dep.revision };
            match self.store.put_dependency(&mut dep, &why).await {
                Ok(()) => {
                    if !self.hands_off() {
                        self.update_copies(&key, &|_| {}).await;
                    }
                    return self.dependency_status(&key).await;
                }
                Err(SchedError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(SchedError::Conflict { app: format!("dependency {key}") })
    }

    /// `depend ls`: every dependency, its dependents and copies.
    pub async fn dependency_statuses(&self) -> Result<Vec<DependencyStatus>, SchedError> {
        let apps = self.store.apps().await?;
        let wanted = wanted(&apps);
        Ok(self.store.dependencies().await?.iter().map(|d| status_of(d, &apps, &wanted)).collect())
    }

    async fn dependency_status(&self, key: &str) -> Result<DependencyStatus, SchedError> {
        let all = self.dependency_statuses().await?;
        all.into_iter().find(|d| d.dependency == key).ok_or_else(|| SchedError::Apply {
            app: key.to_string(),
            message: "no such dependency (`steward-sched depend ls` lists them)".into(),
        })
    }

    /// `depend rm KEY [--force]`: refused while an app declares it, unless forced: then its
    /// copies are deleted on every node that answers. Returns the nodes that did not (their
    /// copies stay until removed there).
    pub async fn delete_dependency(&self, key: &str, force: bool) -> Result<Vec<String>, SchedError> {
        let apps = self.store.apps().await?;
        let Some(dep) = self.store.dependencies().await?.into_iter().find(|d| d.key == key) else {
            return Err(SchedError::Apply {
                app: key.to_string(),
                message: "no such dependency (`steward-sched depend ls` lists them)".into(),
            });
        };
        let dependents = dependents_of(key, &apps);
        if !dependents.is_empty() && !force {
            return Err(SchedError::Apply {
                app: key.to_string(),
                message: format!(
                    "{} depend(s) on it: delete them first, or --force (its copies are removed under them)",
                    dependents.join(", ")
                ),
            });
        }
        let mut away = Vec::new();
        for copy in dep.copies.values() {
            let removed = match self.client(&copy.node) {
                Some(client) => self.remove_copy(&client, key, &copy.namespace).await,
                None => false,
            };
            if !removed {
                away.push(copy.node.clone());
            }
        }
        self.store.delete_dependency(key).await?;
        Ok(away)
    }

    /// Checks a dependent's declared dependencies exist, by field path, and that the app does
    /// not take a dependency's name (its copies are apps of that name).
    pub(super) async fn check_dependencies(&self, spec: &ProcessSpec) -> Result<(), SpecErrors> {
        let stored: BTreeSet<String> = match self.store.dependencies().await {
            Ok(list) => list.into_iter().map(|d| d.key).collect(),
            Err(e) => return Err(SpecErrors(vec![SpecError::new("dependencies", e.to_string())])),
        };
        let mut missing: Vec<SpecError> = stored
            .iter()
            .filter(|d| name_of(d) == spec.metadata.name)
            .map(|d| SpecError::new("metadata.name", format!("{d} is a dependency of that name: its copies use it")))
            .collect();
        missing.extend(
            spec.dependencies
                .iter()
                .enumerate()
                .filter(|(_, d)| !stored.contains(&d.key(&spec.metadata.namespace)))
                .map(|(i, d)| {
                    SpecError::new(
                        format!("dependencies[{i}].name"),
                        format!("no dependency {} (steward-sched depend apply FILE)", d.key(&spec.metadata.namespace)),
                    )
                }),
        );
        SpecErrors(missing).into_result(())
    }

    /// Starts on `node` the copies `spec`'s instances there need (a deploy, before applying
    /// them): a dependency runs before its dependents.
    pub(super) async fn start_dependencies(&self, spec: &ProcessSpec, node: &str) -> Result<(), String> {
        if spec.dependencies.is_empty() {
            return Ok(());
        }
        let deps = self.store.dependencies().await.map_err(|e| e.to_string())?;
        for d in &spec.dependencies {
            let key = d.key(&spec.metadata.namespace);
            let Some(dep) = deps.iter().find(|x| x.key == key) else {
                return Err(format!("no dependency {key}"));
            };
            let namespace = copy_namespace(&key, d.scope, &spec.metadata.namespace);
            let copy = dep.copies.get(&DependencyCopy::key(node, namespace));
            if copy.is_some_and(|c| c.revision == dep.revision && c.idle_since_ms.is_none()) {
                continue;
            }
            self.start_copy(dep, node, namespace).await.map_err(|e| format!("dependency {key}: {e}"))?;
        }
        Ok(())
    }

    /// Applies the copy (unless it runs at the dependency's revision already) and records it
    /// in use.
    async fn start_copy(&self, dep: &Dependency, node: &str, namespace: &str) -> Result<bool, String> {
        let copy_key = DependencyCopy::key(node, namespace);
        let current = dep.copies.get(&copy_key).is_some_and(|c| c.revision == dep.revision);
        if !current {
            let client = self.client(node).ok_or_else(|| format!("no node {node}"))?;
            let text = copy_doc(dep, namespace).to_string();
            client.apply(&text, Format::Json).await.map_err(|e| e.to_string())?;
        }
        let (revision, started) = (dep.revision, crate::clock::now_ms());
        let what = if current { "in use" } else { "started" };
        self.update_dependency(&dep.key, &copy_key, what, |d| {
            let copy = d.copies.entry(copy_key.clone()).or_insert_with(|| DependencyCopy {
                node: node.to_string(),
                namespace: namespace.to_string(),
                revision,
                started_ms: started,
                updated_ms: None,
                idle_since_ms: None,
            });
            if copy.revision < revision || !current {
                copy.updated_ms = Some(started);
            }
            copy.revision = copy.revision.max(revision);
            copy.idle_since_ms = None;
        })
        .await
        .map_err(|e| e.to_string())?;
        Ok(!current)
    }

    /// Deletes a copy on its node (gone already counts as done).
    async fn remove_copy(&self, client: &crate::client::Client, dependency: &str, namespace: &str) -> bool {
        match client.delete_app(namespace, name_of(dependency), Some(60.0)).await {
            Ok(_) | Err(ClientError::Api { status: 404, .. }) => true,
            Err(e) => {
                tracing::warn!("removing the copy of {dependency} in {namespace}: {e}");
                false
            }
        }
    }

    /// Reads dependency `key`, changes it and writes it back by compare-and-swap.
    async fn update_dependency(
        &self,
        key: &str,
        copy: &str,
        what: &str,
        change: impl Fn(&mut Dependency),
    ) -> Result<(), SchedError> {
        for _ in 0..UPDATE_TRIES {
            let Some(mut dep) = self.store.dependencies().await?.into_iter().find(|d| d.key == key) else {
                return Ok(());
            };
            change(&mut dep);
            let why = DesiredChange::DependencyCopies {
                dependency: key.to_string(),
                copy: copy.to_string(),
                what: what.to_string(),
            };
            match self.store.put_dependency(&mut dep, &why).await {
                Ok(()) => return Ok(()),
                Err(SchedError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(SchedError::Conflict { app: format!("dependency {key}") })
    }

    /// Copies on an older revision of dependency `key` take the new one, one node at a time, the
    /// next once every copy on the new revision is ready (seed 002: a dependency updates
    /// "similar to the podgroup update"). Each step reads the store again, so this and the
    /// leader's sweep (which rolls the same way) judge by the same copies and the same nodes. A
    /// copy not ready in time ends it there, said through `emit`.
    async fn update_copies(&self, key: &str, emit: &(dyn Fn(&WatchLine) + Send + Sync)) {
        loop {
            let Ok(deps) = self.store.dependencies().await else { return };
            let Some(dep) = deps.into_iter().find(|d| d.key == key) else { return };
            // One on a lost node takes it when back (the sweep).
            let next = dep.copies.values().find(|c| c.revision < dep.revision && self.node_timeout(&c.node).is_some());
            let Some(next) = next.cloned() else { return };
            if let Some(moving) = self.copy_in_flight(&dep).await {
                if late(&moving) {
                    emit(&line(SchedEvent::DependencyStarted {
                        dependency: dep.key.clone(),
                        instance: copy_instance(&dep.key, &moving.namespace),
                        node: moving.node.clone(),
                        error: Some(not_ready(&dep.key)),
                    }));
                    return;
                }
                tokio::time::sleep(COPY_READY_POLL).await;
                continue;
            }
            let r = self.start_copy(&dep, &next.node, &next.namespace).await;
            let failed = r.is_err();
            emit(&line(SchedEvent::DependencyStarted {
                dependency: dep.key.clone(),
                instance: copy_instance(&dep.key, &next.namespace),
                node: next.node.clone(),
                error: r.err(),
            }));
            if failed {
                return;
            }
        }
    }

    /// A copy on `dep`'s revision that its node does not say ready yet: a rolling update waits
    /// for it. One on a lost node holds nothing up (it takes the update when back).
    async fn copy_in_flight(&self, dep: &Dependency) -> Option<DependencyCopy> {
        for (copy_key, copy) in dep.copies.iter().filter(|(_, c)| c.revision == dep.revision) {
            let seen = (dep.key.clone(), dep.revision, copy_key.clone());
            if self.copy_checks.lock().expect("copy checks lock").ready.contains(&seen) {
                continue;
            }
            match self.copy_ready(&copy.node, &dep.key, &copy.namespace).await {
                None => continue,
                Some(true) => {
                    let mut checks = self.copy_checks.lock().expect("copy checks lock");
                    // Older revisions' entries are of no use any more.
                    checks.ready.retain(|(d, r, _)| d != &dep.key || *r >= dep.revision);
                    checks.said_late.retain(|(d, r, _)| d != &dep.key || *r >= dep.revision);
                    checks.ready.insert(seen);
                }
                Some(false) => return Some(copy.clone()),
            }
        }
        None
    }

    /// Whether the copy on `node` runs its app's latest spec, ready (its rollout there complete
    /// or none); None when the node is lost. A node that does not answer says not ready.
    async fn copy_ready(&self, node: &str, dependency: &str, namespace: &str) -> Option<bool> {
        use crate::protocol::RolloutPhase;
        let limit = self.node_timeout(node)?;
        let client = self.client(node)?;
        match tokio::time::timeout(limit, client.rollout_status(namespace, name_of(dependency))).await {
            Ok(Ok(body)) => {
                let rolled = body.rollout.is_none_or(|r| r.phase == RolloutPhase::Complete);
                let p = body.progress;
                Some(rolled && p.instances > 0 && p.updated == p.instances && p.ready == p.instances)
            }
            _ => Some(false),
        }
    }

    /// The sweep's turn in `dep`'s rolling update: whether the next copy on an older revision
    /// may move now (none on the new revision is still becoming ready). A copy late past
    /// [`COPY_READY_WITHIN_MS`] is said once.
    async fn update_turn(&self, dep: &Dependency, emit: &Emit) -> bool {
        let Some(moving) = self.copy_in_flight(dep).await else { return true };
        let late = late(&moving);
        let seen = (dep.key.clone(), dep.revision, DependencyCopy::key(&moving.node, &moving.namespace));
        if late && self.copy_checks.lock().expect("copy checks lock").said_late.insert(seen) {
            emit(&line(SchedEvent::DependencyStarted {
                dependency: dep.key.clone(),
                instance: copy_instance(&dep.key, &moving.namespace),
                node: moving.node.clone(),
                error: Some(not_ready(&dep.key)),
            }));
        }
        false
    }

    /// The dependencies controller's sync of `dep` (as just read): copies its dependents'
    /// placements (`wanted`, of the desired state as just read) call for on `ready` nodes are
    /// started (or take a newer revision), copies without dependents become idle, and idle ones
    /// past their grace period are removed. With `verify`, each copy's node is asked whether it
    /// still runs it (applied again if not). Some(d): something to look at again within d (a
    /// rolling update under way, an idle copy's grace running).
    async fn sweep_dependency(
        &self,
        dep: &Dependency,
        wanted: &BTreeMap<String, BTreeMap<String, Wanted>>,
        ready: &BTreeSet<String>,
        verify: bool,
        emit: &Emit,
    ) -> Option<std::time::Duration> {
        let now = crate::clock::now_ms();
        let mut again: Option<std::time::Duration> = None;
        let mut soon = |d: std::time::Duration| again = Some(again.map_or(d, |a: std::time::Duration| a.min(d)));
        let none = BTreeMap::new();
        let want = wanted.get(&dep.key).unwrap_or(&none);
        // An update rolls: one copy per sync, once those on the new revision are ready
        // (asked when a copy on an older one is met).
        let mut turn: Option<bool> = None;
        for (copy_key, w) in want {
            if !ready.contains(&w.node) {
                continue;
            }
            let instance = copy_instance(&dep.key, &w.namespace);
            let copy = dep.copies.get(copy_key);
            let mut stale = copy.is_none_or(|c| c.revision < dep.revision);
            if verify && !stale {
                stale = self.copy_missing(&w.node, &dep.key, &w.namespace).await;
                if stale {
                    emit(&line(SchedEvent::InstanceMissing { instance: instance.clone(), node: w.node.clone() }));
                }
            }
            if stale && copy.is_some_and(|c| c.revision < dep.revision) {
                let go = match turn {
                    Some(go) => go,
                    None => self.update_turn(dep, emit).await,
                };
                // This one moves now; the next waits for it (a later sync).
                turn = Some(false);
                soon(UPDATE_AGAIN);
                if !go {
                    continue;
                }
            }
            if stale {
                let mut dep = dep.clone();
                if let Some(c) = dep.copies.get_mut(copy_key) {
                    c.revision = 0; // applied again
                }
                let r = self.start_copy(&dep, &w.node, &w.namespace).await;
                if r.is_err() {
                    soon(UPDATE_AGAIN);
                }
                emit(&line(SchedEvent::DependencyStarted {
                    dependency: dep.key.clone(),
                    instance,
                    node: w.node.clone(),
                    error: r.err(),
                }));
            } else if copy.is_some_and(|c| c.idle_since_ms.is_some()) {
                let _ = self
                    .update_dependency(&dep.key, copy_key, "in use", |d| {
                        if let Some(c) = d.copies.get_mut(copy_key) {
                            c.idle_since_ms = None;
                        }
                    })
                    .await;
            }
        }
        for (copy_key, copy) in dep.copies.iter().filter(|(k, _)| !want.contains_key(*k)) {
            let instance = copy_instance(&dep.key, &copy.namespace);
            let grace_ms = dep.grace_secs * 1000;
            match copy.idle_since_ms {
                None => {
                    let marked = self.update_dependency(&dep.key, copy_key, "idle", |d| {
                        if let Some(c) = d.copies.get_mut(copy_key) {
                            c.idle_since_ms.get_or_insert(now);
                        }
                    });
                    if marked.await.is_ok() {
                        emit(&line(SchedEvent::DependencyIdle {
                            dependency: dep.key.clone(),
                            instance,
                            node: copy.node.clone(),
                            grace_secs: dep.grace_secs,
                        }));
                    }
                    soon(std::time::Duration::from_millis(grace_ms));
                }
                Some(since) if now.saturating_sub(since) >= grace_ms && ready.contains(&copy.node) => {
                    let Some(client) = self.client(&copy.node) else { continue };
                    let ok = self.remove_copy(&client, &dep.key, &copy.namespace).await;
                    if ok {
                        let _ = self
                            .update_dependency(&dep.key, copy_key, "removed", |d| {
                                // Removed only if still idle: a dependent may have come meanwhile.
                                if d.copies.get(copy_key).is_some_and(|c| c.idle_since_ms.is_some()) {
                                    d.copies.remove(copy_key);
                                }
                            })
                            .await;
                    } else {
                        soon(UPDATE_AGAIN);
                    }
                    emit(&line(SchedEvent::DependencyRemoved {
                        dependency: dep.key.clone(),
                        instance,
                        node: copy.node.clone(),
                        ok,
                    }));
                }
                // Its grace runs (or its node is away): looked at again when it ends.
                Some(since) => {
                    soon(std::time::Duration::from_millis(grace_ms.saturating_sub(now.saturating_sub(since)).max(1000)))
                }
            }
        }
        again
    }

    /// Whether `node` answers that it runs no copy of `dependency` in `namespace`.
    async fn copy_missing(&self, node: &str, dependency: &str, namespace: &str) -> bool {
        let Some(client) = self.client(node) else { return false };
        let filters = [("namespace", namespace), ("name", name_of(dependency))];
        match tokio::time::timeout(super::NODE_TIMEOUT, client.list(&filters)).await {
            Ok(Ok(list)) => list.is_empty(),
            _ => false,
        }
    }
}

/// The dependencies controller: each dependency's copies follow its dependents' placements
/// ([`Scheduler::sweep_dependency`]), synced when the leader's pass over the desired state
/// finds it (every few seconds), again while its copies move or idle ones wait out their grace,
/// and at least once a reconcile period (when its copies' nodes are asked whether they still
/// run them).
pub(super) struct Dependencies {
    /// Nodes still owed their arrival are left to it.
    hosts: std::sync::Arc<super::hosts::Hosts>,
    /// When each dependency's copies were last asked for on their nodes.
    verified: std::sync::Mutex<BTreeMap<String, std::time::Instant>>,
}

impl Dependencies {
    pub fn new(hosts: std::sync::Arc<super::hosts::Hosts>) -> Dependencies {
        Dependencies { hosts, verified: Default::default() }
    }

    /// Nothing is known any more (the lead lost, or maintenance began).
    pub fn forget(&self) {
        self.verified.lock().expect("dependencies lock").clear();
    }
}

#[async_trait::async_trait]
impl super::controller::Controller for Dependencies {
    type Key = String;

    fn name(&self) -> &'static str {
        "dependencies"
    }

    async fn sync(&self, sched: &std::sync::Arc<Scheduler>, key: &String, emit: &Emit) -> Option<std::time::Duration> {
        let every = self.hosts.every();
        let (deps, apps) = futures_util::future::join(sched.store.dependencies(), sched.store.apps()).await;
        let (Ok(deps), Ok(apps)) = (deps, apps) else { return Some(UPDATE_AGAIN) };
        // Removed meanwhile: nothing left to do.
        let dep = deps.into_iter().find(|d| d.key == *key)?;
        let ready: BTreeSet<String> = sched.live().ready().into_iter().filter(|n| !self.hosts.owes(n)).collect();
        let verify = {
            let mut verified = self.verified.lock().expect("dependencies lock");
            let due = verified.get(key).is_none_or(|at| at.elapsed() >= every);
            if due {
                verified.insert(key.clone(), std::time::Instant::now());
            }
            due
        };
        let again = sched.sweep_dependency(&dep, &wanted(&apps), &ready, verify, emit).await;
        Some(again.map_or(every, |a| a.min(every)))
    }
}

/// The apps that declare `dependency`.
fn dependents_of(dependency: &str, apps: &[App]) -> Vec<String> {
    apps.iter()
        .filter(|a| declared(&a.spec).iter().any(|d| d.key(&a.key.namespace) == dependency))
        .map(|a| a.key.to_string())
        .collect()
}

fn status_of(dep: &Dependency, apps: &[App], wanted: &BTreeMap<String, BTreeMap<String, Wanted>>) -> DependencyStatus {
    let want = wanted.get(&dep.key);
    DependencyStatus {
        dependency: dep.key.clone(),
        revision: dep.revision,
        grace_secs: dep.grace_secs,
        dependents: dependents_of(&dep.key, apps),
        copies: dep
            .copies
            .iter()
            .map(|(k, c)| CopyStatus {
                instance: copy_instance(&dep.key, &c.namespace),
                node: c.node.clone(),
                refs: want.and_then(|w| w.get(k)).map_or(0, |w| w.refs),
                revision: c.revision,
                idle_since_ms: c.idle_since_ms,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::store::{Placement, PlacementState};

    fn app(key: &str, deps: Value, nodes: &[&str]) -> App {
        App {
            key: crate::spec::AppId::from_key(key),
            spec: json!({"dependencies": deps}),
            placements: nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    (i as u32, Placement { node: n.to_string(), state: PlacementState::Placed, reschedules: 0 })
                })
                .collect(),
            previous: None,
            rollout: None,
            stopped: Default::default(),
            deleting: None,
            wait_for_room: false,
            waiting: None,
            version: None,
        }
    }

    /// Node scope: one copy per host for every dependent there; namespace scope: one per host
    /// and namespace; the count is the dependents' placements; an app being deleted holds none.
    #[test]
    fn copies_follow_the_dependents_placements() {
        let node = json!([{"name": "infra/cache"}]);
        let per_ns = json!([{"name": "infra/cache", "scope": "namespace"}]);
        let mut gone = app("a/gone", node.clone(), &["h1"]);
        gone.deleting = Some(crate::sched::store::Deleting { since_ms: 1, nodes: Default::default() });
        let apps = vec![
            app("a/one", node.clone(), &["h1", "h1", "h2"]),
            app("b/two", node.clone(), &["h1"]),
            app("a/three", per_ns.clone(), &["h1"]),
            app("b/four", per_ns, &["h1", "h2"]),
            gone,
            app("a/none", json!([]), &["h3"]),
        ];
        let w = &wanted(&apps)["infra/cache"];
        let refs: BTreeMap<&str, usize> = w.iter().map(|(k, w)| (k.as_str(), w.refs)).collect();
        assert_eq!(refs, BTreeMap::from([("h1/infra", 3), ("h2/infra", 1), ("h1/a", 1), ("h1/b", 1), ("h2/b", 1)]));
        assert_eq!(wanted(&apps).len(), 1);
        assert_eq!(dependents_of("infra/cache", &apps), ["a/one", "b/two", "a/three", "b/four", "a/gone"]);
    }

    #[test]
    fn a_copy_runs_one_instance_in_its_namespace_with_its_owner() {
        let dep = Dependency {
            key: "infra/cache".into(),
            spec: json!({"metadata": {"name": "cache", "namespace": "infra"}, "spec": {"instance": 1}}),
            revision: 1,
            grace_secs: 300,
            copies: BTreeMap::new(),
            version: None,
        };
        let doc = copy_doc(&dep, "game");
        assert_eq!(doc["metadata"]["namespace"], "game");
        assert_eq!(doc["metadata"]["labels"][OWNER_LABEL], "infra/cache");
        assert_eq!(copy_instance(&dep.key, "game"), "game/cache/0");
    }
}
