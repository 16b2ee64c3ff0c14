//! Endpoints (issue 27): per app and port name, the Ready instances and where they answer,
//! kept by the leading `run` from what the nodes report. Each change is a new revision, written
//! to the desired store first (a new leader continues from it) and then handed to every daemon
//! (PUT /v1/endpoints/...), where forwarding and names follow it and clients watch it.
//!
//! What triggers a look: an instance event on a node (a readiness change arrives as one) makes
//! the leader list that app's instances there; a node heard (new, back, resynced) or each
//! reconcile pass lists everything there; a lost node's endpoints are dropped at once.

use super::{Emit, Scheduler};
use crate::protocol::{AppEndpoints, Endpoint, Event, EventBody, InstanceEvent, SchedEvent};
use crate::spec::AppId;
use crate::supervisor::state::Kind;
use std::collections::{BTreeMap, BTreeSet};

/// Port name → its ready endpoints.
type Ports = BTreeMap<String, Vec<Endpoint>>;

/// The leader's picture: what each node last said of each app's Ready instances, and the
/// revisions as stored.
#[derive(Default)]
pub(super) struct EndpointBook {
    seen: BTreeMap<AppId, BTreeMap<String, Ports>>,
    stored: BTreeMap<AppId, AppEndpoints>,
    /// Each node's address (its daemon's `host_ip`).
    ips: BTreeMap<String, String>,
}

/// The leader's endpoints controller: the book, and per app the nodes whose listing of it is
/// to be read again (an instance event there). An event only marks its app; the app's sync
/// reads those nodes, several apps at once, off `run`'s loop (it read each event's node inline).
#[derive(Default)]
pub(super) struct Endpoints {
    book: tokio::sync::Mutex<EndpointBook>,
    stale: std::sync::Mutex<BTreeMap<AppId, BTreeSet<String>>>,
    /// Each app's spec as last published (a print of it): one whose spec changed (a service
    /// added, removed or changed: no instance event tells) is published again; one no longer
    /// stored loses its endpoints.
    printed: std::sync::Mutex<BTreeMap<AppId, Option<SpecPrint>>>,
    /// Apps offered with another print than the last published, or gone: their sync reads
    /// the store (a sync for an instance event alone does not).
    respec: std::sync::Mutex<BTreeSet<AppId>>,
    /// One read of a node at a time (its listing and what it makes of it), so an older
    /// listing is never taken after a newer one; different nodes are read at once.
    reading: std::sync::Mutex<BTreeMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

/// What a node runs, as listed for the endpoints: its address and its instances.
struct Listed {
    ip: String,
    instances: Vec<crate::protocol::InstanceStatus>,
}

impl Endpoints {
    /// A new leadership: the stored revisions are where it goes on from; the nodes are looked
    /// at afresh as each is heard.
    pub async fn lead(&self, sched: &Scheduler) {
        let mut book = self.book.lock().await;
        *book = EndpointBook::default();
        self.stale.lock().expect("endpoints lock").clear();
        self.respec.lock().expect("endpoints lock").clear();
        match sched.store.endpoints().await {
            Ok(all) => book.stored = all.into_iter().map(|e| (e.app(), e)).collect(),
            Err(e) => tracing::warn!("reading the stored endpoints: {e}"),
        }
        // Every app with stored endpoints is looked at once (its spec may have changed, or it
        // may be gone, while nobody led).
        *self.printed.lock().expect("endpoints lock") = book.stored.keys().map(|k| (k.clone(), None)).collect();
        // What was stored stands for each node until that node says otherwise (or is lost):
        // learning the nodes one by one must not publish the lists they make on the way.
        let book = &mut *book;
        for (key, e) in &book.stored {
            let nodes = book.seen.entry(key.clone()).or_default();
            for (port, list) in &e.ports {
                for endpoint in list {
                    let ports = nodes.entry(endpoint.node.clone()).or_default();
                    ports.entry(port.clone()).or_default().push(endpoint.clone());
                }
            }
        }
    }

    /// A node lost (or removed from the cluster file): its instances answer no more.
    pub async fn node_lost(&self, sched: &Scheduler, node: &str, emit: &Emit) {
        let mut book = self.book.lock().await;
        let mut touched = BTreeSet::new();
        for (app, nodes) in book.seen.iter_mut() {
            if nodes.remove(node).is_some() {
                touched.insert(app.clone());
            }
        }
        book.ips.remove(node);
        self.reading.lock().expect("endpoints lock").remove(node);
        for app in touched {
            sched.endpoints_publish(&mut book, &app, emit).await;
        }
    }

    /// An instance event on `node`: that app's instances there are to be looked at again. The
    /// app to queue, if the event is of an instance.
    pub fn on_event(&self, node: &str, event: &Event) -> Option<AppId> {
        let EventBody::Instance(InstanceEvent { instance, .. }) = &event.body else { return None };
        let key = crate::client::parse_instance_id(instance).ok()?.app();
        self.stale.lock().expect("endpoints lock").entry(key.clone()).or_default().insert(node.to_string());
        Some(key)
    }

    /// Publishes `key` again after its spec changed (or it went), and notes its print. Some(d):
    /// the store did not answer; look again after d.
    async fn publish_respec(&self, sched: &Scheduler, key: &AppId, emit: &Emit) -> Option<std::time::Duration> {
        let print = match sched.store.app(key).await {
            Ok(app) => app.as_ref().map(SpecPrint::of),
            Err(e) => {
                tracing::warn!("endpoints of {key}: {e}");
                self.respec.lock().expect("endpoints lock").insert(key.clone());
                return Some(std::time::Duration::from_secs(2));
            }
        };
        sched.endpoints_publish(&mut *self.book.lock().await, key, emit).await;
        let mut printed = self.printed.lock().expect("endpoints lock");
        match print {
            Some(p) => printed.insert(key.clone(), Some(p)),
            None => printed.remove(key),
        };
        None
    }

    /// Of the apps published, those `apps` (every app stored) no longer has: to be synced
    /// (their endpoints removed).
    pub fn gone(&self, apps: &[crate::sched::store::App]) -> Vec<AppId> {
        let stored: BTreeSet<&AppId> = apps.iter().map(|a| &a.key).collect();
        let printed = self.printed.lock().expect("endpoints lock");
        let gone: Vec<AppId> = printed.keys().filter(|k| !stored.contains(k)).cloned().collect();
        self.respec.lock().expect("endpoints lock").extend(gone.iter().cloned());
        gone
    }

    /// Lists what `node` runs (of `app`, or everything) and publishes each app whose ready
    /// endpoints there changed. The node is asked without holding the book. Whether it answered.
    pub async fn refresh(&self, sched: &Scheduler, node: &str, app: Option<&AppId>, emit: &Emit) -> bool {
        let reading = self.reading.lock().expect("endpoints lock").entry(node.to_string()).or_default().clone();
        let _reading = reading.lock().await;
        let known_ip = self.book.lock().await.ips.get(node).cloned();
        let Some(listed) = list(sched, node, app, known_ip).await else { return false };
        let mut book = self.book.lock().await;
        book.ips.insert(node.to_string(), listed.ip.clone());
        let mut now: BTreeMap<AppId, Ports> = BTreeMap::new();
        for s in listed.instances {
            let key = s.id.app();
            let ports = now.entry(key).or_default();
            if !(s.ready && s.state.kind() == Kind::Running) {
                continue;
            }
            for (name, port) in &s.ports {
                let endpoint =
                    Endpoint { ip: listed.ip.clone(), port: *port, node: node.to_string(), instance: s.id.index };
                ports.entry(name.clone()).or_default().push(endpoint);
            }
        }
        // Apps the node ran before and runs no more (all looked at when listing everything).
        let gone: Vec<AppId> = match app {
            Some(a) => vec![a.clone()],
            None => book.seen.iter().filter(|(_, nodes)| nodes.contains_key(node)).map(|(a, _)| a.clone()).collect(),
        };
        let mut touched = BTreeSet::new();
        for key in gone.into_iter().chain(now.keys().cloned()).collect::<BTreeSet<_>>() {
            let ports = now.remove(&key).unwrap_or_default();
            let nodes = book.seen.entry(key.clone()).or_default();
            let before = nodes.get(node).cloned().unwrap_or_default();
            if ports.is_empty() {
                nodes.remove(node);
            } else {
                nodes.insert(node.to_string(), ports.clone());
            }
            if before != ports || !book.stored.contains_key(&key) {
                touched.insert(key);
            }
        }
        for key in touched {
            sched.endpoints_publish(&mut book, &key, emit).await;
        }
        true
    }
}

/// What `node` runs (of `app`, or everything) and its address, within its heartbeat deadline
/// (a node cut off must not hold up its loss). None: it did not answer (logged).
async fn list(sched: &Scheduler, node: &str, app: Option<&AppId>, known_ip: Option<String>) -> Option<Listed> {
    let client = sched.client(node)?;
    let limit = sched.node_timeout(node)?;
    let ip = match known_ip {
        Some(ip) => ip,
        None => match within(limit, client.node()).await {
            Ok(doc) => doc.host_ip,
            Err(e) => {
                tracing::debug!("endpoints: {node}: {e}");
                return None;
            }
        },
    };
    let filters: Vec<(&str, &str)> = match app {
        Some(a) => vec![("namespace", &a.namespace), ("name", &a.name)],
        None => Vec::new(),
    };
    match within(limit, client.list(&filters)).await {
        Ok(instances) => Some(Listed { ip, instances }),
        Err(e) => {
            tracing::debug!("endpoints: {node}: {e}");
            None
        }
    }
}

#[async_trait::async_trait]
impl super::controller::Controller for Endpoints {
    type Key = AppId;

    fn name(&self) -> &'static str {
        "endpoints"
    }

    /// An app with nodes to read again (an event's, or one a read failed on), or whose spec
    /// changed since it was last published.
    fn wants(&self, app: &crate::sched::store::App, _live: &super::liveness::Liveness) -> bool {
        let respec = self.printed.lock().expect("endpoints lock").get(&app.key) != Some(&Some(SpecPrint::of(app)));
        if respec {
            self.respec.lock().expect("endpoints lock").insert(app.key.clone());
        }
        respec || self.stale.lock().expect("endpoints lock").contains_key(&app.key)
    }

    async fn sync(&self, sched: &std::sync::Arc<Scheduler>, key: &AppId, emit: &Emit) -> Option<std::time::Duration> {
        // Its spec (services) changed, or it is gone: published again (a changed listing below
        // publishes it anyway).
        if self.respec.lock().expect("endpoints lock").remove(key) {
            if let Some(again) = self.publish_respec(sched, key, emit).await {
                return Some(again);
            }
        }
        let nodes = self.stale.lock().expect("endpoints lock").remove(key).unwrap_or_default();
        let reads = nodes.iter().map(|node| async move { (node, self.refresh(sched, node, Some(key), emit).await) });
        let unread: BTreeSet<String> = futures_util::future::join_all(reads)
            .await
            .into_iter()
            .filter(|(node, read)| !read && !sched.live().is_lost(node))
            .map(|(node, _)| node.clone())
            .collect();
        if unread.is_empty() {
            return None;
        }
        // Read again later (a node lost meanwhile has its endpoints dropped instead).
        self.stale.lock().expect("endpoints lock").entry(key.clone()).or_default().extend(unread);
        Some(std::time::Duration::from_secs(2))
    }
}

impl Scheduler {
    /// The app's endpoints over every node: a new revision when they changed, stored, then
    /// handed to every daemon. An app gone from the desired store (or being deleted) loses
    /// them, in the store and on every daemon that answers.
    async fn endpoints_publish(&self, book: &mut EndpointBook, key: &AppId, emit: &Emit) {
        let mut ports: Ports = BTreeMap::new();
        for node_ports in book.seen.get(key).into_iter().flat_map(|nodes| nodes.values()) {
            for (name, list) in node_ports {
                ports.entry(name.clone()).or_default().extend(list.iter().cloned());
            }
        }
        for list in ports.values_mut() {
            list.sort();
        }
        let stored_app = match self.store.app(key).await {
            Ok(app) => app,
            Err(e) => return tracing::warn!("endpoints of {key}: {e}"),
        };
        let named = stored_app.as_ref().map(|a| Described::of(&a.spec)).unwrap_or_default();
        let kept = book.stored.get(key);
        // An app being deleted is gone as far as its clients go.
        let exists = stored_app.as_ref().is_some_and(|a| a.deleting.is_none());
        // Unchanged — but a deleted app's are never "unchanged": one with no ready endpoint and
        // no service looked so, and its record stayed in the store (issue 43, item 7).
        if exists && kept.is_some_and(|k| k.ports == ports && named.is_in(k)) {
            return;
        }
        let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
        // A deleted app's endpoints go at once, whatever still stops on its nodes.
        if !exists {
            if kept.is_some() {
                if let Err(e) = self.store.delete_endpoints(&key.to_string()).await {
                    return tracing::warn!("removing the endpoints of {key}: {e}");
                }
                book.stored.remove(key);
                let (namespace, name) = (namespace.to_string(), name.to_string());
                for (_, client) in self.nodes().iter() {
                    let (client, namespace, name) = (client.clone(), namespace.clone(), name.clone());
                    tokio::spawn(async move { within(PUSH_TIMEOUT, client.delete_endpoints(&namespace, &name)).await });
                }
                book.seen.remove(key);
            }
            return;
        }
        let endpoints = AppEndpoints {
            namespace: namespace.to_string(),
            name: name.to_string(),
            revision: kept.map_or(1, |k| k.revision + 1),
            updated_ms: crate::clock::now_ms(),
            ports,
            services: named.services,
            port_protocols: named.port_protocols,
            ordinals: named.ordinals,
            pod_names: named.pod_names,
        };
        if let Err(e) = self.store.put_endpoints(&endpoints).await {
            return tracing::warn!("storing the endpoints of {key}: {e}");
        }
        book.stored.insert(key.clone(), endpoints.clone());
        // Handed over in the background (the leader goes on at once; a daemon refuses a
        // revision older than its own, so hand-overs that cross cannot roll one back), and
        // reported once every node answered or timed out.
        let clients: Vec<crate::client::Client> = self.nodes().iter().map(|(_, c)| c.clone()).collect();
        let (emit, key) = (emit.clone(), key.to_string());
        tokio::spawn(async move {
            let pushes = clients.iter().map(|c| within(PUSH_TIMEOUT, c.put_endpoints(&endpoints)));
            let handed = futures_util::future::join_all(pushes).await;
            let ok = handed.iter().filter(|r| r.is_ok()).count();
            let ready = endpoints.ports.values().map(Vec::len).sum();
            emit(&super::run::sched_line(SchedEvent::EndpointsUpdated {
                app: key,
                revision: endpoints.revision,
                ready,
                nodes: ok,
                of: handed.len(),
            }));
        });
    }
}

/// How long handing endpoints to one daemon may take.
const PUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `call` within `limit`: Err says which way it failed.
async fn within<T>(
    limit: std::time::Duration,
    call: impl std::future::Future<Output = Result<T, crate::client::ClientError>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {:.1} s", limit.as_secs_f64())),
    }
}

/// A print of what an app's endpoints are published from in its record: its spec, and whether
/// it is being deleted. Cheap to take for every app at every offer (a hash of the document, no
/// spec check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SpecPrint {
    spec: u64,
    deleting: bool,
}

impl SpecPrint {
    fn of(app: &crate::sched::store::App) -> SpecPrint {
        SpecPrint { spec: super::spec_print(&app.spec), deleting: app.deleting.is_some() }
    }
}

/// What an app's endpoints carry from its stored spec besides the endpoints: its services
/// (each port's target resolved to a port name: one that resolves to none was refused at
/// deploy, one left out here forwards nowhere) and what its DNS names need.
#[derive(Default)]
struct Described {
    services: Vec<crate::protocol::ServiceEntry>,
    port_protocols: BTreeMap<String, crate::spec::model::Protocol>,
    ordinals: Option<crate::protocol::OrdinalNames>,
    pod_names: Option<crate::protocol::PodNames>,
}

impl Described {
    fn of(doc: &serde_json::Value) -> Described {
        use crate::spec::model::Protocol;
        let Ok(spec) = super::check_spec(doc) else { return Described::default() };
        let mut services = Vec::new();
        for s in &spec.services {
            for p in &s.ports {
                let Some(target) = spec.service_target(p) else { continue };
                services.push(crate::protocol::ServiceEntry {
                    service: s.name.clone(),
                    kind: s.kind,
                    export: s.export,
                    protocol: p.protocol,
                    port: u16::try_from(p.port).unwrap_or_default(),
                    node_port: u16::try_from(p.node_port).ok().filter(|n| *n > 0),
                    target,
                    cluster_ip: Some(s.cluster_ip.clone()).filter(|ip| !ip.is_empty()),
                });
            }
        }
        let t = &spec.spec.template.spec;
        let ports = t.processes.iter().flat_map(|p| &p.ports).map(|p| (&p.name, p.protocol));
        let ports = ports.chain(t.containers.iter().flat_map(|c| &c.ports).map(|p| (&p.name, p.protocol)));
        let port_protocols = ports.filter(|(_, p)| *p == Protocol::Udp).map(|(n, p)| (n.clone(), p)).collect();
        let ordinals = spec.stateful_set.as_ref().map(|set| {
            let or_app = |s: &str| if s.is_empty() { spec.metadata.name.clone() } else { s.to_string() };
            crate::protocol::OrdinalNames { name: or_app(&set.name), domain: or_app(&set.domain) }
        });
        let pod_names = pod_names(&spec);
        Described { services, port_protocols, ordinals, pod_names }
    }

    /// Whether `kept` carries this already.
    fn is_in(&self, kept: &AppEndpoints) -> bool {
        kept.services == self.services
            && kept.port_protocols == self.port_protocols
            && kept.ordinals == self.ordinals
            && kept.pod_names == self.pod_names
    }
}

/// A pod's `hostname.subdomain` names (seed 003): only with a subdomain, and a hostname or a
/// stateful set (whose ordinals are each named `NAME-K`).
fn pod_names(spec: &crate::spec::ProcessSpec) -> Option<crate::protocol::PodNames> {
    let t = &spec.spec.template.spec;
    let named = !t.subdomain.is_empty() && (!t.hostname.is_empty() || spec.stateful_set.is_some());
    (spec.is_pod() && named)
        .then(|| crate::protocol::PodNames { hostname: t.hostname.clone(), subdomain: t.subdomain.clone() })
}

impl Scheduler {
    /// `endpoints APP`: the app's endpoints as stored (None: none yet: nothing was ever ready).
    pub async fn stored_endpoints(&self, key: &AppId) -> Result<Option<AppEndpoints>, super::SchedError> {
        self.stored_any(key).await?;
        Ok(self.store.endpoints().await?.into_iter().find(|e| e.app() == *key))
    }

    /// `endpoints APP --watch`: calls `each` with every new revision (the first with what is
    /// stored now) until it returns false. Woken by the store's watch where it has one, else
    /// every 200 ms.
    pub async fn watch_endpoints(
        &self,
        key: &AppId,
        mut each: impl FnMut(Option<&AppEndpoints>) -> bool,
    ) -> Result<(), super::SchedError> {
        let mut changes = self.store.changes();
        let mut last: Option<u64> = None;
        loop {
            let now = self.stored_endpoints(key).await?;
            let revision = now.as_ref().map_or(0, |e| e.revision);
            if last != Some(revision) {
                last = Some(revision);
                if !each(now.as_ref()) {
                    return Ok(());
                }
            }
            match changes.as_mut() {
                Some(rx) => {
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed()).await;
                }
                None => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            }
        }
    }
}

impl Scheduler {
    /// A deploy's service addresses, written into the document that is stored, and its DNS
    /// names checked against the namespace's (seed 003). Node ports (`nodePort`): one another
    /// app holds is refused naming it; 0 keeps the port this app's stored spec had for the same
    /// service port, else takes the lowest free one of 30000-32767. Cluster IPs: see
    /// [`Scheduler::assign_cluster_ips`].
    pub(super) async fn assign_service_addresses(
        &self,
        mut doc: serde_json::Value,
        spec: &crate::spec::ProcessSpec,
    ) -> Result<serde_json::Value, crate::spec::SpecErrors> {
        use crate::spec::model::{Protocol, ServiceType, NODE_PORTS};
        let key = AppId::of(spec);
        let stored = self.store.apps().await.map_err(|e| one_error("services", e.to_string()))?;
        // Every stored spec parsed once, for the three checks below.
        let apps: Vec<Stored> = stored
            .iter()
            .filter_map(|a| {
                Some(Stored { key: &a.key, deleting: a.deleting.is_some(), spec: super::check_spec(&a.spec).ok()? })
            })
            .collect();
        let mut errors = name_clashes(spec, &key, &apps);
        errors.extend(self.assign_cluster_ips(&mut doc, spec, &key, &apps));
        let mut taken: BTreeMap<(bool, i64), String> = BTreeMap::new();
        let mut before: BTreeMap<(String, i64, bool), i64> = BTreeMap::new();
        for app in &apps {
            for s in &app.spec.services {
                for p in s.ports.iter().filter(|p| p.node_port > 0) {
                    let udp = p.protocol == Protocol::Udp;
                    if *app.key == key {
                        before.insert((s.name.clone(), p.port, udp), p.node_port);
                    } else {
                        taken.insert((udp, p.node_port), app.key.to_string());
                    }
                }
            }
        }
        for (i, s) in spec.services.iter().enumerate().filter(|(_, s)| s.kind == ServiceType::NodePort) {
            for (k, p) in s.ports.iter().enumerate() {
                let udp = p.protocol == Protocol::Udp;
                let at = format!("services[{i}].ports[{k}].nodePort");
                let port = match p.node_port {
                    0 => {
                        match before.get(&(s.name.clone(), p.port, udp)).filter(|n| !taken.contains_key(&(udp, **n))) {
                            Some(n) => *n,
                            None => match NODE_PORTS.clone().find(|n| !taken.contains_key(&(udp, *n))) {
                                Some(n) => n,
                                None => {
                                    errors
                                        .push(crate::spec::SpecError::new(at, "every node port 30000-32767 is taken"));
                                    continue;
                                }
                            },
                        }
                    }
                    n => match taken.get(&(udp, n)) {
                        Some(owner) => {
                            errors.push(crate::spec::SpecError::new(at, format!("{n} is {owner}'s node port")));
                            continue;
                        }
                        None => n,
                    },
                };
                taken.insert((udp, port), key.to_string());
                doc["services"][i]["ports"][k]["nodePort"] = serde_json::json!(port);
            }
        }
        if errors.is_empty() {
            Ok(doc)
        } else {
            Err(crate::spec::SpecErrors(errors))
        }
    }
}

impl Scheduler {
    /// Every service's cluster IP: the one it had (same app, same service name), the one the
    /// spec asks for (within the cluster's `service_range`, held by no other service), or the
    /// lowest free one.
    fn assign_cluster_ips(
        &self,
        doc: &mut serde_json::Value,
        spec: &crate::spec::ProcessSpec,
        key: &AppId,
        apps: &[Stored],
    ) -> Vec<crate::spec::SpecError> {
        let range = self.cluster.service_range;
        let mut taken: BTreeMap<std::net::Ipv4Addr, String> = BTreeMap::new();
        let mut before: BTreeMap<String, std::net::Ipv4Addr> = BTreeMap::new();
        for app in apps {
            for s in &app.spec.services {
                let Ok(ip) = s.cluster_ip.parse::<std::net::Ipv4Addr>() else { continue };
                if app.key == key {
                    before.insert(s.name.clone(), ip);
                } else {
                    taken.insert(ip, format!("{}'s service {}", app.key, s.name));
                }
            }
        }
        let mut errors = Vec::new();
        for (i, s) in spec.services.iter().enumerate() {
            let at = format!("services[{i}].clusterIP");
            let ip = if s.cluster_ip.is_empty() {
                let free = |ip: &std::net::Ipv4Addr| !taken.contains_key(ip);
                match before.get(&s.name).filter(|ip| range.contains(*ip) && free(ip)) {
                    Some(ip) => *ip,
                    None => match range.hosts().find(free) {
                        Some(ip) => ip,
                        None => {
                            errors.push(crate::spec::SpecError::new(at, format!("every address of {range} is taken")));
                            continue;
                        }
                    },
                }
            } else {
                let asked: std::net::Ipv4Addr = s.cluster_ip.parse().expect("checked by validation");
                // The range's own network and broadcast addresses are no host's (`hosts()`).
                if !range.contains(&asked) || asked == range.network() || asked == range.broadcast() {
                    let why = format!("{asked} is outside the cluster's service_range {range}");
                    errors.push(crate::spec::SpecError::new(at, why));
                    continue;
                }
                if let Some(owner) = taken.get(&asked) {
                    errors.push(crate::spec::SpecError::new(at, format!("{asked} is {owner}'s")));
                    continue;
                }
                asked
            };
            taken.insert(ip, format!("{key}'s service {}", s.name));
            doc["services"][i]["clusterIP"] = serde_json::json!(ip.to_string());
        }
        errors
    }
}

/// A stored app as a deploy's service checks read it: its spec parsed once.
struct Stored<'a> {
    key: &'a AppId,
    deleting: bool,
    spec: crate::spec::ProcessSpec,
}

/// The names an app takes in its namespace's DNS (src/services/dns.rs), each with the field
/// that gives it: its own name, its stateful set's domain, its services' names.
fn dns_names(spec: &crate::spec::ProcessSpec) -> Vec<(String, String)> {
    let mut names = vec![(spec.metadata.name.clone(), "metadata.name".to_string())];
    if let Some(domain) = spec.stateful_set.as_ref().map(|s| &s.domain).filter(|d| !d.is_empty()) {
        names.push((domain.clone(), "statefulSet.domain".into()));
    }
    names.extend(spec.services.iter().enumerate().map(|(i, s)| (s.name.clone(), format!("services[{i}].name"))));
    names
}

/// Seed 003: in one namespace a name means one thing — no two apps' stateful set domains, and
/// no domain or service named like another app's (its name, domain or service).
fn name_clashes(spec: &crate::spec::ProcessSpec, key: &AppId, apps: &[Stored]) -> Vec<crate::spec::SpecError> {
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    for app in apps.iter().filter(|a| a.key != key && !a.deleting) {
        if app.spec.metadata.namespace != spec.metadata.namespace {
            continue;
        }
        for (name, field) in dns_names(&app.spec) {
            held.entry(name).or_insert(format!("{}'s {field}", app.key));
        }
    }
    dns_names(spec)
        .into_iter()
        .filter_map(|(name, field)| {
            let owner = held.get(&name)?;
            Some(crate::spec::SpecError::new(field, format!("{name:?} is already {owner} in the namespace's DNS")))
        })
        .collect()
}

fn one_error(at: &str, message: String) -> crate::spec::SpecErrors {
    crate::spec::SpecErrors(vec![crate::spec::SpecError::new(at, message)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::PodNames;
    use serde_json::json;

    fn pod(template: serde_json::Value, top: serde_json::Value) -> serde_json::Value {
        let mut spec = json!({"apiVersion": "v4", "kind": "pod", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"instance": 2, "template": {"spec": {"network": "BRIDGE", "containers": [
                {"name": "main", "image": "busybox", "command": {"value": "sleep"}}]}}}});
        for (k, v) in template.as_object().unwrap() {
            spec["spec"]["template"]["spec"][k] = v.clone();
        }
        for (k, v) in top.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    }

    /// What every daemon's DNS names a pod by: its hostname and subdomain, only when both make
    /// a name (a stateful set's ordinals are their own hostnames).
    #[test]
    fn a_pods_hostname_and_subdomain_travel_with_its_endpoints() {
        let names = |t, top| Described::of(&pod(t, top)).pod_names;
        let both = names(json!({"hostname": "front", "subdomain": "edge"}), json!({}));
        assert_eq!(both, Some(PodNames { hostname: "front".into(), subdomain: "edge".into() }));
        let set = names(json!({"subdomain": "edge"}), json!({"statefulSet": {}}));
        assert_eq!(set, Some(PodNames { hostname: String::new(), subdomain: "edge".into() }));
        assert_eq!(names(json!({"subdomain": "edge"}), json!({})), None);
        assert_eq!(names(json!({"hostname": "front"}), json!({})), None);
    }
}
