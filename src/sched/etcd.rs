//! The desired state in etcd (issue 21, after Lain deployd, seed 002): several steward-sched
//! share it. Every record is a key under one prefix:
//!
//! - `{prefix}apps/{namespace}/{name}`: an [`App`] (JSON), written by compare-and-swap on the
//!   key's mod revision, so two schedulers never overwrite each other's change unseen;
//! - `{prefix}hooktemplates/{namespace}/{name}`: a HookTemplate (JSON);
//! - `{prefix}depends/{namespace}/{name}`: a [`Dependency`] (JSON), by compare-and-swap too;
//! - `{prefix}nodes/{name}`: a [`NodeRecord`] (JSON), written by the leader at each change;
//! - `{prefix}endpoints/{namespace}/{name}`: an app's endpoints (JSON), written by the leader;
//! - `{prefix}journal/{ms}-{holder}-{n}`: why each change was made (a [`DesiredChange`]), in the
//!   same transaction as the change; the newest [`JOURNAL_KEPT`] are kept;
//! - `{prefix}leader`: the election of the `run` that acts (a lease of [`LEASE_TTL_SECS`]).
//!
//! `--store etcd://HOST:PORT[,HOST:PORT...]/PREFIX` (or `store =` in the cluster file) selects it.

use super::store::{App, Dependency, DesiredStore, Leadership, NodeRecord, Settings};
use super::SchedError;
use crate::protocol::DesiredChange;
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, WatchOptions};
use std::sync::atomic::{AtomicU64, Ordering};

/// A leader that cannot renew its lease for this long is replaced.
pub const LEASE_TTL_SECS: i64 = 5;
/// Journal entries kept; older ones are removed by the leader as it writes.
pub const JOURNAL_KEPT: usize = 10_000;

pub struct EtcdStore {
    client: Client,
    prefix: String,
    /// Who writes (journal keys), and a counter that orders one writer's entries.
    holder: String,
    written: AtomicU64,
    changes: tokio::sync::watch::Receiver<u64>,
    /// The apps the watch saw written since `apps_changed` was last asked.
    changed_apps: std::sync::Arc<crate::sched::store::ChangedApps>,
}

/// `etcd://h1:2379,h2:2379/steward` → (["http://h1:2379", "http://h2:2379"], "/steward/").
pub fn parse_url(url: &str) -> Result<(Vec<String>, String), String> {
    let rest = url.strip_prefix("etcd://").ok_or_else(|| format!("{url:?}: expected etcd://HOST:PORT[,...]/PREFIX"))?;
    let (hosts, prefix) = rest.split_once('/').unwrap_or((rest, "steward"));
    let endpoints: Vec<String> = hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("http://{h}")).collect();
    if endpoints.is_empty()
        || hosts.split(',').any(|h| h.rsplit_once(':').is_none_or(|(_, p)| p.parse::<u16>().is_err()))
    {
        return Err(format!("{url:?}: every endpoint must be HOST:PORT"));
    }
    let prefix = prefix.trim_matches('/');
    let prefix = if prefix.is_empty() { "/".to_string() } else { format!("/{prefix}/") };
    Ok((endpoints, prefix))
}

fn etcd_err(e: impl std::fmt::Display) -> SchedError {
    SchedError::Store(format!("etcd: {e}"))
}

impl EtcdStore {
    /// Connects (within 5 s) and starts watching the prefix.
    pub async fn connect(url: &str) -> Result<EtcdStore, SchedError> {
        let (endpoints, prefix) = parse_url(url).map_err(SchedError::Store)?;
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(std::time::Duration::from_secs(5))
            .with_timeout(std::time::Duration::from_secs(10));
        let client = Client::connect(&endpoints, Some(options)).await.map_err(|e| etcd_err(format!("{url}: {e}")))?;
        // The connection is lazy: one read proves the cluster answers.
        client
            .kv_client()
            .get(format!("{prefix}apps/"), Some(GetOptions::new().with_count_only().with_prefix()))
            .await
            .map_err(|e| etcd_err(format!("{url}: {e}")))?;
        let changed_apps: std::sync::Arc<crate::sched::store::ChangedApps> = Default::default();
        let changes = watch_prefix(client.clone(), prefix.clone(), changed_apps.clone());
        let holder = format!("{}-{}", crate::host::hostname(), std::process::id());
        Ok(EtcdStore { client, prefix, holder, written: AtomicU64::new(0), changes, changed_apps })
    }

    fn app_key(&self, key: &crate::spec::AppId) -> String {
        format!("{}apps/{key}", self.prefix)
    }

    fn template_key(&self, namespace: &str, name: &str) -> String {
        format!("{}hooktemplates/{namespace}/{name}", self.prefix)
    }

    /// A journal entry for `why`, ordered by time, then by writer.
    fn journal_put(&self, why: &DesiredChange) -> Result<TxnOp, SchedError> {
        let n = self.written.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}journal/{:013}-{}-{n:09}", self.prefix, crate::clock::now_ms(), self.holder);
        Ok(TxnOp::put(key, serde_json::to_vec(why).map_err(etcd_err)?, None))
    }

    /// Removes the oldest journal entries beyond [`JOURNAL_KEPT`] (now and then: every 500th write).
    async fn prune_journal(&self) {
        if self.written.load(Ordering::Relaxed) % 500 != 499 {
            return;
        }
        let mut kv = self.client.kv_client();
        let prefix = format!("{}journal/", self.prefix);
        let Ok(count) = kv.get(prefix.clone(), Some(GetOptions::new().with_prefix().with_count_only())).await else {
            return;
        };
        let extra = usize::try_from(count.count()).unwrap_or(0).saturating_sub(JOURNAL_KEPT);
        if extra == 0 {
            return;
        }
        let options = GetOptions::new().with_prefix().with_keys_only().with_limit(extra as i64);
        if let Ok(oldest) = kv.get(prefix, Some(options)).await {
            for k in oldest.kvs() {
                let _ = kv.delete(k.key().to_vec(), None).await;
            }
        }
    }

    /// Writes `value` at `key` with `why` journaled, only over mod revision `read` (None: only
    /// where there is no key yet). The revision written, or None when another writer came first.
    async fn swap(
        &self,
        key: String,
        read: Option<i64>,
        value: Vec<u8>,
        whys: &[DesiredChange],
    ) -> Result<Option<i64>, SchedError> {
        let guard = match read {
            Some(revision) => Compare::mod_revision(key.clone(), CompareOp::Equal, revision),
            None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
        };
        let mut ops = vec![TxnOp::put(key, value, None)];
        for why in whys {
            ops.push(self.journal_put(why)?);
        }
        let txn = Txn::new().when([guard]).and_then(ops);
        let resp = self.client.kv_client().txn(txn).await.map_err(etcd_err)?;
        Ok(resp.succeeded().then(|| resp.header().map_or(0, |h| h.revision())))
    }

    /// Every record under `under`, with its revision: a page at a time, every page read at the
    /// first one's revision (one snapshot). One answer holding every app outgrew gRPC's 4 MiB
    /// message limit at 1,000 apps of 100 instances.
    async fn list<T: serde::de::DeserializeOwned>(&self, under: &str) -> Result<Vec<(T, i64)>, SchedError> {
        let prefix = format!("{}{under}", self.prefix).into_bytes();
        let end = range_end(&prefix);
        // A page of big records (an app of thousands of instances) may still pass 4 MiB.
        let mut kv = self.client.kv_client().max_decoding_message_size(MAX_ANSWER_BYTES);
        let mut from = prefix;
        let mut revision = 0;
        let mut out = Vec::new();
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(LIST_PAGE);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let resp = kv.get(from.clone(), Some(options)).await.map_err(etcd_err)?;
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
            }
            for kv in resp.kvs() {
                let value = serde_json::from_slice(kv.value())
                    .map_err(|e| etcd_err(format!("{}: {e}", String::from_utf8_lossy(kv.key()))))?;
                out.push((value, kv.mod_revision()));
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    // Next: right after the last key read.
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(out),
            }
        }
    }
}

/// Records per page of a listing.
const LIST_PAGE: i64 = 100;

/// The largest answer a listing's page may be.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The end of the key range holding every key that starts with `prefix` (etcd's prefix end:
/// the last byte below 0xff incremented, what follows it dropped).
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the keyspace.
    vec![0]
}

/// Watches every key under `prefix`: the receiver's value is the newest revision seen. The watch
/// is opened again after an error.
fn watch_prefix(
    client: Client,
    prefix: String,
    changed: std::sync::Arc<crate::sched::store::ChangedApps>,
) -> tokio::sync::watch::Receiver<u64> {
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let apps = format!("{prefix}apps/");
    tokio::spawn(async move {
        loop {
            let mut watch = client.watch_client();
            // Whatever happened while not watching is not known.
            changed.note_all();
            if let Ok(mut stream) = watch.watch(prefix.clone(), Some(WatchOptions::new().with_prefix())).await {
                while let Ok(Some(resp)) = stream.message().await {
                    if resp.created() {
                        // Watching from here: what came before it is not known.
                        changed.note_all();
                    }
                    let revision = resp.header().map_or(0, |h| h.revision());
                    for kv in resp.events().iter().filter_map(|e| e.kv()) {
                        let key = kv.key_str().ok().and_then(|k| k.strip_prefix(apps.as_str()));
                        match key.map(str::parse::<crate::spec::AppId>) {
                            Some(Ok(key)) => changed.note(key),
                            Some(Err(_)) => changed.note_all(),
                            None => {}
                        }
                    }
                    if tx.send(u64::try_from(revision).unwrap_or(0)).is_err() {
                        return;
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    rx
}

#[async_trait::async_trait]
impl DesiredStore for EtcdStore {
    async fn apps(&self) -> Result<Vec<App>, SchedError> {
        Ok(self
            .list::<App>("apps/")
            .await?
            .into_iter()
            .map(|(mut app, revision)| {
                app.version = Some(revision);
                app
            })
            .collect())
    }

    async fn app(&self, key: &crate::spec::AppId) -> Result<Option<App>, SchedError> {
        let resp = self.client.kv_client().get(self.app_key(key), None).await.map_err(etcd_err)?;
        let Some(kv) = resp.kvs().first() else { return Ok(None) };
        let mut app: App = serde_json::from_slice(kv.value()).map_err(|e| etcd_err(format!("app {key}: {e}")))?;
        app.version = Some(kv.mod_revision());
        Ok(Some(app))
    }

    async fn put_app_noting(&self, app: &mut App, whys: &[DesiredChange]) -> Result<(), SchedError> {
        let value = serde_json::to_vec(&*app).map_err(etcd_err)?;
        let written = self.swap(self.app_key(&app.key), app.version, value, whys).await?;
        app.version = Some(written.ok_or_else(|| SchedError::Conflict { app: app.key.to_string() })?);
        self.prune_journal().await;
        Ok(())
    }

    async fn delete_app(&self, key: &crate::spec::AppId) -> Result<(), SchedError> {
        let why = DesiredChange::AppDeleted { app: key.to_string() };
        let txn = Txn::new().and_then([TxnOp::delete(self.app_key(key), None), self.journal_put(&why)?]);
        self.client.kv_client().txn(txn).await.map_err(etcd_err)?;
        Ok(())
    }

    async fn hook_templates(&self) -> Result<Vec<crate::hooks::HookTemplate>, SchedError> {
        Ok(self.list("hooktemplates/").await?.into_iter().map(|(t, _)| t).collect())
    }

    async fn put_hook_template(&self, template: &crate::hooks::HookTemplate) -> Result<(), SchedError> {
        let (namespace, name) = (template.metadata.namespace.clone(), template.metadata.name.clone());
        let key = self.template_key(&namespace, &name);
        let why = DesiredChange::HookTemplateStored { namespace, name };
        let value = serde_json::to_vec(template).map_err(etcd_err)?;
        let txn = Txn::new().and_then([TxnOp::put(key, value, None), self.journal_put(&why)?]);
        self.client.kv_client().txn(txn).await.map_err(etcd_err)?;
        Ok(())
    }

    async fn delete_hook_template(&self, namespace: &str, name: &str) -> Result<(), SchedError> {
        let why = DesiredChange::HookTemplateDeleted { namespace: namespace.into(), name: name.into() };
        let ops = [TxnOp::delete(self.template_key(namespace, name), None), self.journal_put(&why)?];
        self.client.kv_client().txn(Txn::new().and_then(ops)).await.map_err(etcd_err)?;
        Ok(())
    }

    async fn dependencies(&self) -> Result<Vec<Dependency>, SchedError> {
        Ok(self
            .list::<Dependency>("depends/")
            .await?
            .into_iter()
            .map(|(mut d, revision)| {
                d.version = Some(revision);
                d
            })
            .collect())
    }

    async fn put_dependency(&self, dependency: &mut Dependency, why: &DesiredChange) -> Result<(), SchedError> {
        let value = serde_json::to_vec(&*dependency).map_err(etcd_err)?;
        let key = format!("{}depends/{}", self.prefix, dependency.key);
        let written = self.swap(key, dependency.version, value, std::slice::from_ref(why)).await?;
        let conflict = || SchedError::Conflict { app: format!("dependency {}", dependency.key) };
        dependency.version = Some(written.ok_or_else(conflict)?);
        self.prune_journal().await;
        Ok(())
    }

    async fn delete_dependency(&self, key: &str) -> Result<(), SchedError> {
        let why = DesiredChange::DependencyDeleted { dependency: key.to_string() };
        let ops = [TxnOp::delete(format!("{}depends/{key}", self.prefix), None), self.journal_put(&why)?];
        self.client.kv_client().txn(Txn::new().and_then(ops)).await.map_err(etcd_err)?;
        Ok(())
    }

    async fn node_records(&self) -> Result<Vec<NodeRecord>, SchedError> {
        Ok(self.list::<NodeRecord>("nodes/").await?.into_iter().map(|(r, _)| r).collect())
    }

    async fn node_record(&self, name: &str) -> Result<Option<NodeRecord>, SchedError> {
        let resp = self.client.kv_client().get(format!("{}nodes/{name}", self.prefix), None).await.map_err(etcd_err)?;
        let Some(kv) = resp.kvs().first() else { return Ok(None) };
        serde_json::from_slice(kv.value()).map(Some).map_err(|e| etcd_err(format!("node record {name}: {e}")))
    }

    async fn put_node_record(&self, record: &NodeRecord) -> Result<(), SchedError> {
        let why = DesiredChange::NodeState { node: record.name.clone(), state: record.state };
        let value = serde_json::to_vec(record).map_err(etcd_err)?;
        let ops = [TxnOp::put(format!("{}nodes/{}", self.prefix, record.name), value, None), self.journal_put(&why)?];
        self.client.kv_client().txn(Txn::new().and_then(ops)).await.map_err(etcd_err)?;
        self.prune_journal().await;
        Ok(())
    }

    async fn endpoints(&self) -> Result<Vec<crate::protocol::AppEndpoints>, SchedError> {
        Ok(self.list::<crate::protocol::AppEndpoints>("endpoints/").await?.into_iter().map(|(e, _)| e).collect())
    }

    async fn put_endpoints(&self, endpoints: &crate::protocol::AppEndpoints) -> Result<(), SchedError> {
        let value = serde_json::to_vec(endpoints).map_err(etcd_err)?;
        let key = format!("{}endpoints/{}", self.prefix, endpoints.key());
        self.client.kv_client().put(key, value, None).await.map_err(etcd_err)?;
        Ok(())
    }

    async fn delete_endpoints(&self, key: &str) -> Result<(), SchedError> {
        self.client.kv_client().delete(format!("{}endpoints/{key}", self.prefix), None).await.map_err(etcd_err)?;
        Ok(())
    }

    async fn settings(&self) -> Result<Settings, SchedError> {
        let resp = self.client.kv_client().get(format!("{}settings", self.prefix), None).await.map_err(etcd_err)?;
        let Some(kv) = resp.kvs().first() else { return Ok(Settings::default()) };
        let mut settings: Settings =
            serde_json::from_slice(kv.value()).map_err(|e| etcd_err(format!("settings: {e}")))?;
        settings.version = Some(kv.mod_revision());
        Ok(settings)
    }

    async fn put_settings(&self, settings: &mut Settings, why: &DesiredChange) -> Result<(), SchedError> {
        let value = serde_json::to_vec(&*settings).map_err(etcd_err)?;
        let written =
            self.swap(format!("{}settings", self.prefix), settings.version, value, std::slice::from_ref(why)).await?;
        settings.version = Some(written.ok_or_else(|| SchedError::Conflict { app: "the cluster's settings".into() })?);
        Ok(())
    }

    async fn leader(&self) -> Option<String> {
        let mut client = self.client.clone();
        let resp = client.leader(format!("{}leader", self.prefix)).await.ok()?;
        resp.kv().and_then(|kv| kv.value_str().ok()).map(String::from)
    }

    /// An etcd election on `{prefix}leader` under a lease kept alive every third of its TTL:
    /// when this process dies (or cannot reach etcd), the lease runs out within
    /// [`LEASE_TTL_SECS`] and the next candidate leads.
    async fn lead(&self, who: &str) -> Result<Leadership, SchedError> {
        let mut client = self.client.clone();
        let lease = client.lease_grant(LEASE_TTL_SECS, None).await.map_err(etcd_err)?.id();
        let (mut keeper, mut replies) = client.lease_keep_alive(lease).await.map_err(etcd_err)?;
        let (lost_tx, lost) = tokio::sync::oneshot::channel::<String>();
        let keep_alive = tokio::spawn(async move {
            let every = std::time::Duration::from_millis((LEASE_TTL_SECS as u64) * 1000 / 3);
            let why = loop {
                tokio::time::sleep(every).await;
                if let Err(e) = keeper.keep_alive().await {
                    break format!("renewing the lease: {e}");
                }
                match tokio::time::timeout(every, replies.message()).await {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => {}
                    Ok(Ok(Some(_))) => break "the lease expired".to_string(),
                    Ok(Ok(None)) => break "etcd closed the lease's stream".to_string(),
                    Ok(Err(e)) => break format!("renewing the lease: {e}"),
                    Err(_) => break "etcd did not answer a renewal in time".to_string(),
                }
            };
            let _ = lost_tx.send(why);
        });
        let election = format!("{}leader", self.prefix);
        match client.campaign(election, who.to_string(), lease).await {
            Ok(_) => Ok(Leadership { lost, _held: Box::new(AbortOnDrop(keep_alive)) }),
            Err(e) => {
                keep_alive.abort();
                Err(etcd_err(format!("campaign: {e}")))
            }
        }
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.changes.clone())
    }

    fn apps_changed(&self) -> crate::sched::store::AppsChanged {
        self.changed_apps.take()
    }
}

/// Ends a task when dropped (the lease's keep-alive: dropping the leadership lets it run out).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_endpoints_and_a_prefix() {
        assert_eq!(
            parse_url("etcd://127.0.0.1:2379,10.0.0.2:2379/prod/sched").unwrap(),
            (vec!["http://127.0.0.1:2379".to_string(), "http://10.0.0.2:2379".to_string()], "/prod/sched/".into())
        );
        assert_eq!(parse_url("etcd://h:2379").unwrap().1, "/steward/");
        assert_eq!(range_end(b"/steward/apps/"), b"/steward/apps0".to_vec());
        assert_eq!(range_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(range_end(&[0xff]), vec![0]);
        assert!(parse_url("http://h:2379/x").unwrap_err().contains("expected etcd://"));
        assert!(parse_url("etcd://h/x").unwrap_err().contains("HOST:PORT"));
    }
}
