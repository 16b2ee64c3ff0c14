//! Names (issue 27 part 3): a DNS responder on the host, answering from the endpoints this
//! daemon keeps (so every host answers alike, and from its store while steward-sched is away).
//! Under the zone `<dns_domain>` (default `steward`):
//!
//! - `APP.NS.<zone>`: A, the hosts of the app's Ready instances (turned round at each answer:
//!   seed 003's round robin); SRV, every Ready instance's port (target: the instance's name);
//! - `_PORT._tcp.APP.NS.<zone>` (or `_udp`, as the port's protocol): SRV, that port only;
//! - an instance: `K.APP.NS.<zone>`, or for a stateful set `NAME-K.DOMAIN.NS.<zone>` (seed 003
//!   `statefulSet.name`/`domain`, both the app's name by default), whose `DOMAIN.NS.<zone>`
//!   answers as the app; a stateful set's ordinal also as `K.DOMAIN.NS.<zone>` (and under the
//!   app's name, where the domain differs);
//! - a pod's seed-003 `HOSTNAME.SUBDOMAIN.NS.<zone>`: A, the hosts of every Ready instance of
//!   the namespace's pods with that hostname and subdomain (a stateful set's hostname is each
//!   ordinal's `NAME-K` unless its spec sets one);
//! - a service: `SERVICE.NS.<zone>`: A, its cluster IP (the endpoints' hosts when it has none);
//!   SRV, its ports (`_PORT._PROTO.SERVICE…` by the target port's name).
//!
//! Names under the zone that name nothing are NXDOMAIN; names outside it are REFUSED at
//! `[services] dns` (this is no open resolver) and forwarded to the host's resolvers at
//! `[services] pod_dns`, the address ClusterFirst pods ask (forward.rs says why). TTL 1 s:
//! endpoints change within a second of a readiness change.

use super::EndpointsKeeper;
use crate::protocol::AppEndpoints;
use crate::spec::model::Protocol;
use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{Header, HeaderCounts, Message, Metadata, ResponseCode};
use hickory_server::proto::rr::rdata::{A, SRV};
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Seconds a resolver may keep an answer.
const TTL: u32 = 1;

/// What a name comes to.
#[derive(Debug, Default, PartialEq)]
pub struct Answer {
    pub code: Code,
    pub answers: Vec<Record>,
    /// The A records of SRV targets.
    pub additionals: Vec<Record>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The name exists (answers may still be empty: no record of that type).
    #[default]
    Found,
    NoSuchName,
    /// Outside the zone.
    Refused,
}

/// The names of the apps' endpoints under `zone`.
pub struct Names {
    zone: Name,
    /// Turns the A records round, answer after answer.
    turn: AtomicUsize,
}

/// One instance as the names see it.
struct Instance {
    ip: Ipv4Addr,
    name: Name,
    index: u32,
}

impl Instance {
    /// Its own label: `K`, or a stateful set's `NAME-K`.
    fn label(&self) -> String {
        self.name.iter().next().map(|l| String::from_utf8_lossy(l).to_lowercase()).unwrap_or_default()
    }
}

impl Names {
    /// Err: `zone` is no domain name.
    pub fn new(zone: &str) -> Result<Names, String> {
        let mut zone = Name::from_ascii(zone.trim_end_matches('.')).map_err(|e| format!("{zone:?}: {e}"))?;
        zone.set_fqdn(true);
        Ok(Names { zone: zone.to_lowercase(), turn: AtomicUsize::new(0) })
    }

    /// The answer to `qname`/`qtype` from `apps`.
    pub fn lookup(&self, apps: &[AppEndpoints], qname: &Name, qtype: RecordType) -> Answer {
        let qname = qname.to_lowercase();
        if !self.zone.zone_of(&qname) {
            return Answer { code: Code::Refused, ..Answer::default() };
        }
        let depth = usize::from(qname.num_labels() - self.zone.num_labels());
        let labels: Vec<String> =
            qname.iter().take(depth).map(|l| String::from_utf8_lossy(l).into_owned()).collect::<Vec<_>>();
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let found = |answers: Vec<Record>, additionals: Vec<Record>| Answer { code: Code::Found, answers, additionals };
        let nothing = || Answer { code: Code::NoSuchName, ..Answer::default() };
        match labels.as_slice() {
            // The zone and its namespaces exist, with no record of their own.
            [] => found(vec![], vec![]),
            [ns] if apps.iter().any(|a| a.namespace == *ns) => found(vec![], vec![]),
            [port, proto, name, ns] if port.starts_with('_') && proto.starts_with('_') => {
                match self.target(apps, ns, name) {
                    Some(t) => self.answer(&t, Some((&port[1..], &proto[1..])), qtype),
                    None => nothing(),
                }
            }
            [first, middle @ .., ns] => {
                if let ([], Some(t)) = (middle, self.target(apps, ns, first)) {
                    return self.answer(&t, None, qtype);
                }
                let ips = self.named(apps, ns, first, middle);
                if ips.is_empty() {
                    // A subdomain (or a part of one) that only has names below it.
                    let below = labels[..labels.len() - 1].join(".");
                    let above = |sub: &str| sub == below || sub.ends_with(&format!(".{below}"));
                    let exists = apps.iter().filter(|a| a.namespace == *ns).flat_map(|a| &a.pod_names);
                    return match exists.into_iter().any(|p| above(&p.subdomain)) {
                        true => found(vec![], vec![]),
                        false => nothing(),
                    };
                }
                match qtype {
                    RecordType::A => {
                        found(self.turned(ips.into_iter().map(|ip| a_record(&qname, ip)).collect()), vec![])
                    }
                    _ => found(vec![], vec![]),
                }
            }
            _ => nothing(),
        }
    }

    /// The hosts of the Ready instances `FIRST.MIDDLE.NS` names: an instance (`K.APP`, or a
    /// stateful set's `NAME-K.DOMAIN` and `K.DOMAIN`, DOMAIN or the app's name), or seed 003's
    /// `HOSTNAME.SUBDOMAIN`: every instance of every app in NS whose pods have that hostname and
    /// subdomain (Kubernetes' rule; a stateful set's hostname is each ordinal's `NAME-K` unless
    /// its spec sets one).
    fn named(&self, apps: &[AppEndpoints], ns: &str, first: &str, middle: &[&str]) -> BTreeSet<Ipv4Addr> {
        let mut ips = BTreeSet::new();
        for app in apps.iter().filter(|a| a.namespace == ns) {
            let instance_of_app = matches!(middle, [m] if *m == domain_of(app) || *m == app.name);
            let host_of_app = app.pod_names.as_ref().is_some_and(|p| p.subdomain == middle.join("."));
            if !instance_of_app && !host_of_app {
                continue;
            }
            for (i, _) in self.instances(app, None) {
                let ordinal = i.index.to_string();
                let label = i.label();
                let by_instance = instance_of_app && (first == label || first == ordinal);
                let by_host = host_of_app
                    && app.pod_names.as_ref().is_some_and(|p| match p.hostname.as_str() {
                        "" => first == label,
                        hostname => first == hostname,
                    });
                if by_instance || by_host {
                    ips.insert(i.ip);
                }
            }
        }
        ips
    }

    /// What `NAME.NS` names: an app (by its name or its stateful set's domain), or a service.
    fn target<'a>(&self, apps: &'a [AppEndpoints], ns: &str, name: &str) -> Option<Target<'a>> {
        let in_ns = || apps.iter().filter(move |a| a.namespace == ns);
        if let Some(app) = in_ns().find(|a| domain_of(a) == name || a.name == name) {
            return Some(Target::App(app));
        }
        in_ns().find(|a| a.services.iter().any(|s| s.service == name)).map(|app| Target::Service(app, name.to_string()))
    }

    /// The A or SRV records of a target, of one port (`_PORT._PROTO`) or all.
    fn answer(&self, target: &Target, port: Option<(&str, &str)>, qtype: RecordType) -> Answer {
        let owner = |app: &AppEndpoints, name: &str| -> Name {
            let mut n = Name::from_ascii(format!("{name}.{}", app.namespace)).expect("checked names");
            n = n.append_domain(&self.zone).expect("a name within limits");
            n
        };
        let mut answers = Vec::new();
        let mut additionals = Vec::new();
        match target {
            Target::App(app) => {
                let protocol_ok =
                    |p: &str| port.is_none_or(|(want, proto)| want == p && proto == protocol_label(app, p));
                let instances = self.instances(app, Some(&protocol_ok));
                let qname = owner(app, domain_of(app));
                match qtype {
                    RecordType::A if port.is_none() => {
                        let ips: BTreeSet<Ipv4Addr> = instances.iter().map(|(i, _)| i.ip).collect();
                        answers = self.turned(ips.into_iter().map(|ip| a_record(&qname, ip)).collect());
                    }
                    RecordType::SRV => {
                        let qname = match port {
                            Some((p, proto)) => srv_name(p, proto, &qname),
                            None => qname,
                        };
                        let mut glue = BTreeSet::new();
                        for (i, port) in &instances {
                            answers.push(srv_record(&qname, *port, &i.name));
                            if glue.insert(i.name.clone()) {
                                additionals.push(a_record(&i.name, i.ip));
                            }
                        }
                    }
                    _ => {}
                }
            }
            Target::Service(app, service) => {
                let entries: Vec<_> = app
                    .services
                    .iter()
                    .filter(|s| s.service == *service)
                    .filter(|s| port.is_none_or(|(p, proto)| s.target == p && proto == protocol_name(s.protocol)))
                    .collect();
                let qname = owner(app, service);
                let vip = entries.iter().find_map(|s| s.cluster_ip.as_deref().and_then(|ip| ip.parse().ok()));
                match (qtype, vip) {
                    (RecordType::A, Some(vip)) if port.is_none() => answers.push(a_record(&qname, vip)),
                    (RecordType::A, None) if port.is_none() => {
                        let targets: BTreeSet<&str> = entries.iter().map(|s| s.target.as_str()).collect();
                        let ips: BTreeSet<Ipv4Addr> = self
                            .instances(app, Some(&|p: &str| targets.contains(p)))
                            .iter()
                            .map(|(i, _)| i.ip)
                            .collect();
                        answers = self.turned(ips.into_iter().map(|ip| a_record(&qname, ip)).collect());
                    }
                    (RecordType::SRV, _) => {
                        let srv_owner = match port {
                            Some((p, proto)) => srv_name(p, proto, &qname),
                            None => qname.clone(),
                        };
                        for s in &entries {
                            match vip {
                                // The service's own port on its cluster IP.
                                Some(vip) => {
                                    answers.push(srv_record(&srv_owner, s.port, &qname));
                                    if additionals.is_empty() {
                                        additionals.push(a_record(&qname, vip));
                                    }
                                }
                                None => {
                                    for (i, port) in self.instances(app, Some(&|p: &str| p == s.target)) {
                                        answers.push(srv_record(&srv_owner, port, &i.name));
                                        additionals.push(a_record(&i.name, i.ip));
                                    }
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        Answer { code: Code::Found, answers, additionals }
    }

    /// The app's Ready instances on the ports `port_ok` takes, each with its port.
    fn instances(&self, app: &AppEndpoints, port_ok: Option<&dyn Fn(&str) -> bool>) -> Vec<(Instance, u16)> {
        let mut out = Vec::new();
        for (port_name, list) in &app.ports {
            if port_ok.is_some_and(|ok| !ok(port_name)) {
                continue;
            }
            for e in list {
                let Ok(ip) = e.ip.parse::<Ipv4Addr>() else { continue };
                let label = match &app.ordinals {
                    Some(o) => format!("{}-{}", o.name, e.instance),
                    None => e.instance.to_string(),
                };
                let name = Name::from_ascii(format!("{label}.{}.{}", domain_of(app), app.namespace))
                    .and_then(|n| n.append_domain(&self.zone));
                if let Ok(name) = name {
                    out.push((Instance { ip, name, index: e.instance }, e.port));
                }
            }
        }
        out
    }

    /// `records` turned round by one more than last time.
    fn turned(&self, mut records: Vec<Record>) -> Vec<Record> {
        if !records.is_empty() {
            let by = self.turn.fetch_add(1, Ordering::Relaxed) % records.len();
            records.rotate_left(by);
        }
        records
    }
}

enum Target<'a> {
    App(&'a AppEndpoints),
    /// An app's service, by name.
    Service(&'a AppEndpoints, String),
}

/// The label an app's instances live under: its stateful set's domain, or its name.
fn domain_of(app: &AppEndpoints) -> &str {
    app.ordinals.as_ref().map_or(app.name.as_str(), |o| o.domain.as_str())
}

/// `tcp` or `udp`, as the app declares its port (TCP when it does not say).
fn protocol_label(app: &AppEndpoints, port: &str) -> &'static str {
    protocol_name(app.port_protocols.get(port).copied().unwrap_or_default())
}

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Udp => "udp",
        Protocol::Tcp | Protocol::Http | Protocol::Https => "tcp",
    }
}

fn srv_name(port: &str, proto: &str, under: &Name) -> Name {
    Name::from_ascii(format!("_{port}._{proto}")).and_then(|n| n.append_domain(under)).unwrap_or_else(|_| under.clone())
}

fn a_record(name: &Name, ip: Ipv4Addr) -> Record {
    Record::from_rdata(name.clone(), TTL, RData::A(A(ip)))
}

fn srv_record(name: &Name, port: u16, target: &Name) -> Record {
    Record::from_rdata(name.clone(), TTL, RData::SRV(SRV::new(0, 1, port, target.clone())))
}

/// The responder: each query answered from the keeper's endpoints as they are now.
struct Responder {
    names: Names,
    keeper: EndpointsKeeper,
    counts: Arc<QueryCounts>,
    /// Where names outside the zone go (at `pod_dns`); None: they are refused.
    forward: Option<Arc<super::forward::Upstreams>>,
}

/// Queries answered since the last summary, by answer (logged once a minute, never per query:
/// a workload can send tens of thousands a second).
#[derive(Default)]
struct QueryCounts {
    found: AtomicU64,
    no_such_name: AtomicU64,
    refused: AtomicU64,
    forwarded: AtomicU64,
}

/// How often the responder's summary is logged (only when it answered anything).
const SUMMARY_EVERY: Duration = Duration::from_secs(60);

impl QueryCounts {
    fn count(&self, code: Code) {
        let counter = match code {
            Code::Found => &self.found,
            Code::NoSuchName => &self.no_such_name,
            Code::Refused => &self.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts since the last call, reset.
    fn take(&self) -> [u64; 4] {
        [&self.found, &self.no_such_name, &self.refused, &self.forwarded].map(|c| c.swap(0, Ordering::Relaxed))
    }
}

#[async_trait::async_trait]
impl RequestHandler for Responder {
    async fn handle_request<R: ResponseHandler, T: Time>(&self, request: &Request, mut response: R) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let builder = MessageResponseBuilder::from_message_request(request);
        let answer = match request.queries.queries() {
            [q] => self.names.lookup(&self.keeper.list(None), &Name::from(q.name()), q.query_type()),
            _ => Answer { code: Code::Refused, ..Answer::default() },
        };
        if let (Code::Refused, Some(forward), [_]) = (answer.code, &self.forward, request.queries.queries()) {
            self.counts.forwarded.fetch_add(1, Ordering::Relaxed);
            return self.forwarded(request, response, forward).await;
        }
        self.counts.count(answer.code);
        if tracing::enabled!(tracing::Level::DEBUG) {
            let asked: Vec<String> =
                request.queries.queries().iter().map(|q| format!("{} {}", q.name(), q.query_type())).collect();
            tracing::debug!("dns: {} asks {}: {:?}", request.src(), asked.join(", "), answer.code);
        }
        metadata.response_code = match answer.code {
            Code::Found => ResponseCode::NoError,
            Code::NoSuchName => ResponseCode::NXDomain,
            Code::Refused => {
                metadata.authoritative = false;
                ResponseCode::Refused
            }
        };
        let message = builder.build(metadata, answer.answers.iter(), [], [], answer.additionals.iter());
        match response.send_response(message).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!("dns: cannot answer {}: {e}", request.src());
                let mut failed = Metadata::response_from_request(&request.metadata);
                failed.response_code = ResponseCode::ServFail;
                Header { metadata: failed, counts: HeaderCounts::default() }.into()
            }
        }
    }
}

impl Responder {
    /// The upstreams' answer to a query outside the zone, as it came (SERVFAIL when none
    /// answered).
    async fn forwarded<R: ResponseHandler>(
        &self,
        request: &Request,
        mut response: R,
        forward: &super::forward::Upstreams,
    ) -> ResponseInfo {
        let builder = MessageResponseBuilder::from_message_request(request);
        let upstream = forward.ask(request.as_slice()).await.and_then(|raw| Message::from_vec(&raw).ok());
        let sent = match &upstream {
            Some(m) => {
                let mut metadata = m.metadata;
                metadata.truncation = false;
                let message = builder.build(metadata, m.answers.iter(), m.authorities.iter(), [], m.additionals.iter());
                response.send_response(message).await
            }
            None => {
                let mut metadata = Metadata::response_from_request(&request.metadata);
                metadata.response_code = ResponseCode::ServFail;
                metadata.recursion_available = true;
                response.send_response(builder.build_no_records(metadata)).await
            }
        };
        sent.unwrap_or_else(|e| {
            tracing::debug!("dns: cannot answer {}: {e}", request.src());
            let mut failed = Metadata::response_from_request(&request.metadata);
            failed.response_code = ResponseCode::ServFail;
            Header { metadata: failed, counts: HeaderCounts::default() }.into()
        })
    }
}

/// Answers on `address` (UDP and TCP) for as long as the daemon runs: names outside the zone
/// refused. Err: the address cannot be bound (named).
pub async fn serve(address: SocketAddr, zone: &str, keeper: EndpointsKeeper) -> Result<(), String> {
    let udp = tokio::net::UdpSocket::bind(address).await.map_err(|e| format!("services.dns {address} (udp): {e}"))?;
    let tcp = tokio::net::TcpListener::bind(address).await.map_err(|e| format!("services.dns {address} (tcp): {e}"))?;
    serve_on(udp, tcp, zone, keeper, None)
}

/// What a ClusterFirst pod's resolver is given (seed 003 `dns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResolver {
    /// `[services] pod_dns`.
    pub server: Ipv4Addr,
    /// The zone, without its final dot.
    pub zone: String,
}

impl PodResolver {
    /// The resolver of a pod in `namespace`: the responder, searching the namespace's names
    /// then the zone's (`web-1.web`, `NS2.APP` resolve as Kubernetes' short names do).
    pub fn for_namespace(&self, namespace: &str) -> crate::spec::pod::DnsConfig {
        crate::spec::pod::DnsConfig {
            servers: vec![self.server.to_string()],
            searches: vec![format!("{namespace}.{}", self.zone), self.zone.clone()],
            options: Vec::new(),
        }
    }
}

/// Why a ClusterFirst pod cannot run on a daemon with no `pod_dns`.
pub fn no_pod_dns() -> &'static str {
    "needs this daemon's DNS responder for pods: set `[services] pod_dns` in stewardd.toml (an address \
     the pods reach; the responder answers on its port 53), or use dns Default"
}

/// The port ClusterFirst pods' resolvers ask.
pub const POD_DNS_PORT: u16 = 53;

/// Answers on port 53 of `ip` (`[services] pod_dns`), forwarding names outside the zone to
/// `upstreams` (`[services] dns_upstream`). An address no link has is put on the host's
/// loopback first (labelled [`super::vips::DNS_LABEL`]; left there, like cluster IPs). Err:
/// why it cannot answer there (named).
pub async fn serve_pods(
    ip: Ipv4Addr,
    zone: &str,
    keeper: EndpointsKeeper,
    upstreams: &[String],
    reaper: Option<&crate::runtime::reaper::Reaper>,
) -> Result<(), String> {
    let address = SocketAddr::from((ip, POD_DNS_PORT));
    let udp = match tokio::net::UdpSocket::bind(address).await {
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
            super::vips::hold_one(reaper, ip, super::vips::DNS_LABEL)
                .await
                .map_err(|e| format!("services.pod_dns {ip}: putting it on lo: {e}"))?;
            tokio::net::UdpSocket::bind(address).await
        }
        other => other,
    };
    let udp = udp.map_err(|e| format!("services.pod_dns {address} (udp): {e}"))?;
    let tcp =
        tokio::net::TcpListener::bind(address).await.map_err(|e| format!("services.pod_dns {address} (tcp): {e}"))?;
    let forward = super::forward::Upstreams::new(upstreams, address);
    serve_on(udp, tcp, zone, keeper, Some(Arc::new(forward)))
}

fn serve_on(
    udp: tokio::net::UdpSocket,
    tcp: tokio::net::TcpListener,
    zone: &str,
    keeper: EndpointsKeeper,
    forward: Option<Arc<super::forward::Upstreams>>,
) -> Result<(), String> {
    let names = Names::new(zone).map_err(|e| format!("services.dns_domain {e}"))?;
    let address = udp.local_addr().map_err(|e| e.to_string())?;
    let counts = Arc::new(QueryCounts::default());
    let mut server = hickory_server::Server::new(Responder { names, keeper, counts: counts.clone(), forward });
    tokio::spawn(async move {
        let mut every = tokio::time::interval(SUMMARY_EVERY);
        every.tick().await;
        loop {
            every.tick().await;
            let [found, missing, refused, forwarded] = counts.take();
            let all = found + missing + refused + forwarded;
            if all > 0 {
                tracing::info!(
                    "dns on {address}: {all} queries in the last {} s ({found} answered, {missing} NXDOMAIN, \
                     {refused} refused, {forwarded} forwarded)",
                    SUMMARY_EVERY.as_secs()
                );
            }
        }
    });
    server.register_socket(udp);
    server.register_listener(tcp, Duration::from_secs(5), 64 * 1024);
    tokio::spawn(async move {
        if let Err(e) = server.block_until_done().await {
            tracing::error!("dns responder on {address}: {e}");
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Endpoint, OrdinalNames, PodNames, ServiceEntry};
    use crate::spec::model::ServiceType;

    fn app(name: &str, instances: &[(u32, &str, u16)]) -> AppEndpoints {
        let list = instances
            .iter()
            .map(|(i, ip, port)| Endpoint { ip: ip.to_string(), port: *port, node: "h".into(), instance: *i })
            .collect();
        AppEndpoints {
            namespace: "game".into(),
            name: name.into(),
            revision: 1,
            ports: [("http".to_string(), list)].into(),
            ..AppEndpoints::default()
        }
    }

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn rdata(a: &Answer) -> Vec<String> {
        let mut v: Vec<String> = a.answers.iter().map(|r| format!("{} {}", r.name, r.data)).collect();
        v.sort();
        v
    }

    #[test]
    fn an_app_answers_its_hosts_and_its_instances_ports() {
        let names = Names::new("steward").unwrap();
        let apps = [app("web", &[(0, "10.0.0.1", 31000), (1, "10.0.0.2", 31001), (2, "10.0.0.1", 31002)])];
        let a = names.lookup(&apps, &name("web.game.steward."), RecordType::A);
        assert_eq!(a.code, Code::Found);
        assert_eq!(rdata(&a), ["web.game.steward. 10.0.0.1", "web.game.steward. 10.0.0.2"]);
        let srv = names.lookup(&apps, &name("_http._tcp.WEB.game.steward."), RecordType::SRV);
        assert_eq!(
            rdata(&srv),
            [
                "_http._tcp.web.game.steward. 0 1 31000 0.web.game.steward.",
                "_http._tcp.web.game.steward. 0 1 31001 1.web.game.steward.",
                "_http._tcp.web.game.steward. 0 1 31002 2.web.game.steward."
            ]
        );
        assert_eq!(srv.additionals.len(), 3);
        let one = names.lookup(&apps, &name("1.web.game.steward."), RecordType::A);
        assert_eq!(rdata(&one), ["1.web.game.steward. 10.0.0.2"]);
        // The wrong protocol, an unknown instance, another zone.
        assert!(names.lookup(&apps, &name("_http._udp.web.game.steward."), RecordType::SRV).answers.is_empty());
        assert_eq!(names.lookup(&apps, &name("7.web.game.steward."), RecordType::A).code, Code::NoSuchName);
        assert_eq!(names.lookup(&apps, &name("api.game.steward."), RecordType::A).code, Code::NoSuchName);
        assert_eq!(names.lookup(&apps, &name("example.org."), RecordType::A).code, Code::Refused);
        // The namespace exists, with no address of its own.
        let ns = names.lookup(&apps, &name("game.steward."), RecordType::A);
        assert_eq!((ns.code, ns.answers.len()), (Code::Found, 0));
    }

    #[test]
    fn the_a_records_take_turns() {
        let names = Names::new("steward.").unwrap();
        let apps = [app("web", &[(0, "10.0.0.1", 31000), (1, "10.0.0.2", 31001)])];
        let first: Vec<String> = names
            .lookup(&apps, &name("web.game.steward."), RecordType::A)
            .answers
            .iter()
            .map(|r| r.data.to_string())
            .collect();
        let second: Vec<String> = names
            .lookup(&apps, &name("web.game.steward."), RecordType::A)
            .answers
            .iter()
            .map(|r| r.data.to_string())
            .collect();
        assert_eq!(first.len(), 2);
        assert_eq!(first[0], second[1]);
    }

    #[test]
    fn a_stateful_set_names_each_ordinal_under_its_domain() {
        let names = Names::new("steward").unwrap();
        let mut db = app("mysql", &[(0, "10.0.0.1", 31000), (1, "10.0.0.3", 31004)]);
        db.ordinals = Some(OrdinalNames { name: "db".into(), domain: "box".into() });
        let apps = [db];
        let one = names.lookup(&apps, &name("db-1.box.game.steward."), RecordType::A);
        assert_eq!(rdata(&one), ["db-1.box.game.steward. 10.0.0.3"]);
        let all = names.lookup(&apps, &name("box.game.steward."), RecordType::A);
        assert_eq!(all.answers.len(), 2);
        let srv = names.lookup(&apps, &name("box.game.steward."), RecordType::SRV);
        assert!(rdata(&srv).contains(&"box.game.steward. 0 1 31000 db-0.box.game.steward.".to_string()));
    }

    #[test]
    fn a_service_answers_its_cluster_ip_or_else_its_endpoints() {
        let names = Names::new("steward").unwrap();
        let mut web = app("web", &[(0, "10.0.0.1", 31000)]);
        let entry = |name: &str, vip: Option<&str>| ServiceEntry {
            service: name.into(),
            kind: ServiceType::ClusterIP,
            export: true,
            protocol: Protocol::Tcp,
            port: 80,
            node_port: None,
            target: "http".into(),
            cluster_ip: vip.map(String::from),
        };
        web.services = vec![entry("front", Some("10.254.0.7")), entry("plain", None)];
        let apps = [web];
        let a = names.lookup(&apps, &name("front.game.steward."), RecordType::A);
        assert_eq!(rdata(&a), ["front.game.steward. 10.254.0.7"]);
        let srv = names.lookup(&apps, &name("_http._tcp.front.game.steward."), RecordType::SRV);
        assert_eq!(rdata(&srv), ["_http._tcp.front.game.steward. 0 1 80 front.game.steward."]);
        let a = names.lookup(&apps, &name("plain.game.steward."), RecordType::A);
        assert_eq!(rdata(&a), ["plain.game.steward. 10.0.0.1"]);
        let srv = names.lookup(&apps, &name("plain.game.steward."), RecordType::SRV);
        assert_eq!(rdata(&srv), ["plain.game.steward. 0 1 31000 0.web.game.steward."]);
    }

    #[test]
    fn a_stateful_set_answers_its_ordinals_by_number_too() {
        let names = Names::new("steward").unwrap();
        let mut db = app("mysql", &[(0, "10.0.0.1", 31000), (1, "10.0.0.3", 31004)]);
        db.ordinals = Some(OrdinalNames { name: "db".into(), domain: "box".into() });
        let apps = [db];
        // ORDINAL.NAME.NAMESPACE, under the set's domain or the app's name; the answer is owned
        // by the name asked (a resolver drops records of another name).
        for asked in ["1.box.game.steward.", "1.mysql.game.steward.", "db-1.mysql.game.steward."] {
            assert_eq!(rdata(&names.lookup(&apps, &name(asked), RecordType::A)), [format!("{asked} 10.0.0.3")]);
        }
        assert_eq!(names.lookup(&apps, &name("2.box.game.steward."), RecordType::A).code, Code::NoSuchName);
        assert_eq!(names.lookup(&apps, &name("db-1.other.game.steward."), RecordType::A).code, Code::NoSuchName);
    }

    #[test]
    fn hostname_subdomain_names_every_instance_with_that_hostname() {
        let names = Names::new("steward").unwrap();
        // Two apps in one subdomain; `web` has two instances sharing its hostname.
        let mut web = app("web", &[(0, "10.0.0.1", 31000), (1, "10.0.0.2", 31001)]);
        web.pod_names = Some(PodNames { hostname: "front".into(), subdomain: "edge".into() });
        let mut api = app("api", &[(0, "10.0.0.5", 31002)]);
        api.pod_names = Some(PodNames { hostname: "back".into(), subdomain: "edge".into() });
        // A stateful set with no hostname: each ordinal is its own `NAME-K`.
        let mut db = app("db", &[(0, "10.0.0.7", 31003), (2, "10.0.0.8", 31004)]);
        db.ordinals = Some(OrdinalNames { name: "db".into(), domain: "db".into() });
        db.pod_names = Some(PodNames { hostname: String::new(), subdomain: "store.int".into() });
        let apps = [web, api, db];
        let a = names.lookup(&apps, &name("Front.edge.game.steward."), RecordType::A);
        assert_eq!(rdata(&a), ["front.edge.game.steward. 10.0.0.1", "front.edge.game.steward. 10.0.0.2"]);
        let a = names.lookup(&apps, &name("back.edge.game.steward."), RecordType::A);
        assert_eq!(rdata(&a), ["back.edge.game.steward. 10.0.0.5"]);
        let a = names.lookup(&apps, &name("db-2.store.int.game.steward."), RecordType::A);
        assert_eq!(rdata(&a), ["db-2.store.int.game.steward. 10.0.0.8"]);
        // The name exists with no AAAA; the subdomain and its parts exist with nothing of
        // their own; another hostname, namespace or ordinal is no name.
        let aaaa = names.lookup(&apps, &name("front.edge.game.steward."), RecordType::AAAA);
        assert_eq!((aaaa.code, aaaa.answers.len()), (Code::Found, 0));
        for empty in ["edge.game.steward.", "store.int.game.steward.", "int.game.steward."] {
            let a = names.lookup(&apps, &name(empty), RecordType::A);
            assert_eq!((a.code, a.answers.len()), (Code::Found, 0), "{empty}");
        }
        for missing in ["side.edge.game.steward.", "front.edge.other.steward.", "db-1.store.int.game.steward."] {
            assert_eq!(names.lookup(&apps, &name(missing), RecordType::A).code, Code::NoSuchName, "{missing}");
        }
    }
}
