//! Static rules of a pod's `template.spec` (seed 001).

use crate::spec::error::{Errors, Path};
use crate::spec::model::pod::{parse_rate, ContainerResources, DOLLAR_VARS};
use crate::spec::model::*;
use std::collections::BTreeSet;

/// Docker refuses less (seed 001: "memory: 最小4M").
pub const MIN_MEMORY_MB: f64 = 4.0;

/// Static rules of a pod's `template.spec`; `at` is its path.
pub fn validate(t: &TemplateSpec, stateful: bool, at: &Path, errors: &mut Errors) {
    if !t.processes.is_empty() {
        errors.add(&at.field("processes"), "a pod has containers, not processes");
    }
    let cs = at.field("containers");
    if t.containers.is_empty() {
        errors.add(&cs, "needs at least one container");
    }
    identity(t, at, errors);
    for (i, name) in t.image_pull_secrets.iter().enumerate() {
        // A secret's name, as `steward secret create` takes it.
        if name.is_empty() || name.len() > 253 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            let why = format!(
                "{name:?} must be a secret's name in the pod's namespace: 1-253 letters, digits, '-', '_' or '.'"
            );
            errors.add(&at.field("imagePullSecrets").index(i), why);
        }
    }
    let net_param = t.parameters.iter().find(|p| p.key == "net");
    for (i, p) in t.parameters.iter().enumerate() {
        if p.key != "net" {
            errors.add(
                &at.field("parameters").index(i).field("key"),
                format!("{:?} is not supported (only \"net\")", p.key),
            );
        }
    }
    match t.network {
        NetworkMode::User if net_param.is_none_or(|p| p.value.is_empty()) => errors
            .add(&at.field("parameters"), "USER networking needs a {\"key\": \"net\", \"value\": NETWORK} parameter"),
        NetworkMode::User => {}
        _ if net_param.is_some() => {
            errors.add(&at.field("parameters"), "the net parameter is for USER networking only")
        }
        _ => {}
    }
    let mut names = BTreeSet::new();
    let mut port_names = BTreeSet::new();
    let mut fixed = BTreeSet::new();
    for (ci, c) in t.containers.iter().enumerate() {
        let at = cs.index(ci);
        name_and_image(c, &at, &mut names, errors);
        for (i, port) in c.ports.iter().enumerate() {
            let pp = at.field("ports").index(i);
            if port.name.is_empty() || !port.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                errors.add(&pp.field("name"), format!("{:?} must be 1-63 letters, digits, '_' or '-'", port.name));
            } else if !port_names.insert(port.name.clone()) {
                errors.add(&pp.field("name"), format!("duplicate port name {:?}", port.name));
            }
            if !(0..=65535).contains(&port.host_port) {
                errors.add(&pp.field("hostPort"), format!("{} is out of range: 0 (random) or 1-65535", port.host_port));
            } else if port.host_port > 0 && !fixed.insert(port.host_port) {
                errors.add(&pp.field("hostPort"), format!("port {} is declared twice", port.host_port));
            }
            match t.network {
                NetworkMode::Bridge | NetworkMode::User if !(1..=65535).contains(&port.container_port) => {
                    errors.add(&pp.field("containerPort"), format!("{} must be 1-65535", port.container_port))
                }
                NetworkMode::None => errors.add(&pp, "a pod with network NONE cannot publish ports"),
                _ => {}
            }
            if ci > 0 && t.network != NetworkMode::Host {
                errors.add(&pp, "only the first (main) container publishes ports: the others share its network");
            }
        }
        for (i, e) in c.env.iter().enumerate() {
            let ep = at.field("env").index(i);
            if !super::is_env_name(&e.name) {
                errors.add(&ep.field("name"), format!("{:?} is not a valid environment variable name", e.name));
            } else if DOLLAR_VARS.contains(&e.name.as_str()) {
                errors.add(&ep.field("name"), format!("{} is injected by Steward and cannot be redefined", e.name));
            }
            if let Some(var) = e.value.strip_prefix('$') {
                if !DOLLAR_VARS.contains(&var) {
                    errors.add(
                        &ep.field("value"),
                        format!(
                            "${var} cannot be copied: the $ operator takes only {} (no nesting)",
                            DOLLAR_VARS.map(|v| format!("${v}")).join(", ")
                        ),
                    );
                }
            }
        }
        resources(&c.resources, &at.field("resources"), errors);
        super::health_checks(&c.health_checks, &at.field("healthChecks"), &port_names_of(t), errors);
        super::probe::probes(&c.probe, &at.field("probe"), &port_names_of(t), errors);
        super::probe::lifecycle(&c.lifecycle, &at.field("lifecycle"), &port_names_of(t), errors);
        super::env_from(&c.env_from, &at.field("envFrom"), errors);
        if !c.working_dir.is_empty() && !c.working_dir.starts_with('/') {
            errors.add(&at.field("workingDir"), format!("{:?} must be an absolute path", c.working_dir));
        }
        for (i, s) in c.secrets.iter().enumerate() {
            let sp = at.field("secrets").index(i);
            if s.secret_name.is_empty() {
                errors.add(&sp.field("secretName"), "is required");
            }
            super::key_items(&s.items, &sp.field("items"), true, errors);
        }
        for (i, s) in c.configmaps.iter().enumerate() {
            let sp = at.field("configmaps").index(i);
            if s.name.is_empty() {
                errors.add(&sp.field("name"), "is required");
            }
            super::key_items(&s.items, &sp.field("items"), true, errors);
        }
        mounts(c, t, &at, errors);
        for (i, v) in c.volumes.iter().enumerate() {
            if !v.mount_path.starts_with('/') {
                errors.add(
                    &at.field("volumes").index(i).field("mountPath"),
                    format!("{:?} must be an absolute path", v.mount_path),
                );
            }
        }
    }
    init_containers(t, at, &mut names, errors);
    volumes(t, stateful, at, errors);
}

/// A relative path inside a volume: no `..`, not absolute, not empty.
fn inside_volume(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("is required".into());
    }
    if path.starts_with('/') {
        return Err(format!("{path:?} must be relative to the volume"));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(format!("{path:?} must stay inside the volume (no '..')"));
    }
    Ok(())
}

/// Seed 003 `volumes`: named uniquely, of a type Steward provides (Temp, Config, Secret, and
/// Dynamic and Isolated kept per ordinal; Isolated in a stateful set only), with the source
/// fields of their type.
fn volumes(t: &TemplateSpec, stateful: bool, at: &Path, errors: &mut Errors) {
    use crate::spec::pod::{parse_file_mode, VolumeType};
    let mut names = BTreeSet::new();
    for (i, v) in t.volumes.iter().enumerate() {
        let vp = at.field("volumes").index(i);
        match super::check_name(&v.name) {
            Err(e) => errors.add(&vp.field("name"), e),
            Ok(()) if !names.insert(v.name.as_str()) => {
                errors.add(&vp.field("name"), format!("duplicate volume name {:?}", v.name))
            }
            Ok(()) => {}
        }
        let sp = vp.field("source");
        let s = &v.source;
        let not_for = |field: &str, used: bool, errors: &mut Errors| {
            if used {
                errors.add(&sp.field(field), format!("is not read by a {:?} volume", v.kind));
            }
        };
        match v.kind {
            VolumeType::Static => errors.add(
                &vp.field("type"),
                "Static is not supported yet (Temp, Config, Secret, Dynamic and Isolated are; a host \
                 directory is a container's `volumes` hostPath)",
            ),
            VolumeType::Dynamic | VolumeType::Isolated => {
                if v.kind == VolumeType::Isolated && !stateful {
                    errors.add(&vp.field("type"), "Isolated is for a stateful set (seed 003): Dynamic keeps one too");
                }
                // One directory on the instance's host: mounted by its one instance.
                if !["", "ReadWriteOnce"].contains(&s.mode.as_str()) {
                    errors.add(
                        &sp.field("mode"),
                        format!(
                            "{:?}: a kept volume is a directory on one host, mounted by one instance: ReadWriteOnce",
                            s.mode
                        ),
                    );
                }
                if !v.storage.limit.is_empty() {
                    errors.add(
                        &vp.field("storage").field("limit"),
                        "is not enforced on a kept volume yet: refused rather than left unenforced",
                    );
                }
                not_for("medium", !s.medium.is_empty(), errors);
                not_for("target", !s.target.is_empty(), errors);
                not_for("items", !s.items.is_empty(), errors);
                not_for("default", !s.default.is_empty(), errors);
                not_for("optional", s.optional, errors);
                not_for("readonly", s.readonly, errors);
            }
            VolumeType::Temp => {
                if !["", "Memory"].contains(&s.medium.as_str()) {
                    errors.add(&sp.field("medium"), format!("{:?} must be \"\" (disk) or \"Memory\"", s.medium));
                }
                not_for("target", !s.target.is_empty(), errors);
                not_for("items", !s.items.is_empty(), errors);
                not_for("default", !s.default.is_empty(), errors);
                not_for("optional", s.optional, errors);
            }
            VolumeType::Config | VolumeType::Secret => {
                not_for("medium", !s.medium.is_empty(), errors);
                if s.target.is_empty() {
                    errors.add(&sp.field("target"), "is required (a configmap's or secret's name in the namespace)");
                }
                if !s.default.is_empty() {
                    if let Err(e) = parse_file_mode(&s.default) {
                        errors.add(&sp.field("default"), e);
                    }
                }
                let mut paths = BTreeSet::new();
                for (k, item) in s.items.iter().enumerate() {
                    let ip = sp.field("items").index(k);
                    if item.key.is_empty() {
                        errors.add(&ip.field("key"), "is required");
                    }
                    match inside_volume(&item.path) {
                        Err(e) => errors.add(&ip.field("path"), e),
                        Ok(()) if !paths.insert(item.path.trim_matches('/')) => {
                            errors.add(&ip.field("path"), format!("{:?} is written twice", item.path))
                        }
                        Ok(()) => {}
                    }
                    if !item.mode.is_empty() {
                        if let Err(e) = parse_file_mode(&item.mode) {
                            errors.add(&ip.field("mode"), e);
                        }
                    }
                }
            }
        }
        for (field, text) in [("request", &v.storage.request), ("limit", &v.storage.limit)] {
            if text.is_empty() {
                continue;
            }
            match crate::resources::parse_memory(text) {
                Ok(q) if q.positive().is_some() => {}
                _ => errors.add(
                    &vp.field("storage").field(field),
                    format!("{text:?} must be a positive size (\"64Mi\", \"1Gi\", or MiB as a number)"),
                ),
            }
        }
    }
}

/// A container's `mounts`: each names one of the pod's volumes, at an absolute path of its own;
/// `subpath` stays inside the volume.
fn mounts(c: &Container, t: &TemplateSpec, at: &Path, errors: &mut Errors) {
    let mut paths = BTreeSet::new();
    for (i, m) in c.mounts.iter().enumerate() {
        let mp = at.field("mounts").index(i);
        if m.name.is_empty() {
            errors.add(&mp.field("name"), "is required (a volume of the pod's `volumes`)");
        } else if !t.volumes.iter().any(|v| v.name == m.name) {
            errors.add(&mp.field("name"), format!("no volume {:?} in the pod's `volumes`", m.name));
        }
        let path = m.path.trim_end_matches('/');
        if !m.path.starts_with('/') || path.is_empty() {
            errors.add(&mp.field("path"), format!("{:?} must be an absolute path, not /", m.path));
        } else if !paths.insert(path) {
            errors.add(&mp.field("path"), format!("{:?} is mounted twice", m.path));
        }
        if !m.subpath.is_empty() {
            if let Err(e) = inside_volume(&m.subpath) {
                errors.add(&mp.field("subpath"), e);
            }
        }
    }
}

/// Init containers (seed 003 `initializers`): run to completion before the pod's containers, so
/// they publish no port and have no probe, hook or check; their names share the containers'.
fn init_containers(t: &TemplateSpec, at: &Path, names: &mut BTreeSet<String>, errors: &mut Errors) {
    let is = at.field("initializers");
    if t.initializers.len() > super::probe::MAX_INIT_STEPS {
        let (max, n) = (super::probe::MAX_INIT_STEPS, t.initializers.len());
        errors.add(&is, format!("at most {max} init containers, found {n}"));
    }
    for (i, c) in t.initializers.iter().enumerate() {
        let at = is.index(i);
        name_and_image(c, &at, names, errors);
        mounts(c, t, &at, errors);
        for (field, used) in [
            ("ports", !c.ports.is_empty()),
            ("healthChecks", !c.health_checks.is_empty()),
            ("probe", !c.probe.is_empty()),
            ("lifecycle", !c.lifecycle.is_empty()),
        ] {
            if used {
                errors.add(&at.field(field), "an init container runs to completion: it has none");
            }
        }
        resources(&c.resources, &at.field("resources"), errors);
    }
}

/// A container's (or init container's) name, unique among all the pod's, and its image: a
/// reference Docker takes (the engine refuses any other at every start).
fn name_and_image(c: &Container, at: &Path, names: &mut BTreeSet<String>, errors: &mut Errors) {
    match super::check_name(&c.name) {
        Err(e) => errors.add(&at.field("name"), e),
        Ok(()) if !names.insert(c.name.clone()) => {
            errors.add(&at.field("name"), format!("duplicate container name {:?}", c.name))
        }
        Ok(()) => {}
    }
    if let Err(why) = super::image_reference::check(&c.image) {
        errors.add(&at.field("image"), why);
    }
}

fn port_names_of(t: &TemplateSpec) -> BTreeSet<String> {
    t.containers.iter().flat_map(|c| &c.ports).map(|p| p.name.clone()).collect()
}

fn resources(r: &ContainerResources, at: &Path, errors: &mut Errors) {
    super::resources(&r.limits, &r.requests, at, errors);
    let memory = r.limits.memory_mib();
    if memory.is_some_and(|m| m < MIN_MEMORY_MB) {
        errors.add(
            &at.field("limits").field("memory"),
            format!("must be at least {MIN_MEMORY_MB} (MiB) for a container"),
        );
    }
    if r.cpu_set && r.limits.cpu_cores().is_none() {
        errors.add(&at.field("cpuSet"), "needs limits.cpu (how many cpus to pin)");
    }
    if r.cpu_quota && r.limits.cpu_cores().is_none() {
        errors.add(&at.field("cpuQuota"), "needs limits.cpu (the quota in cores)");
    }
    if let Some(s) = r.memory_swap {
        if s != -1 && s <= 0 {
            errors.add(&at.field("memorySwap"), format!("{s} must be a positive number of MiB, or -1 for unlimited"));
        } else if s as f64 > super::MAX_MEMORY_MIB {
            let max = super::MAX_MEMORY_MIB;
            errors.add(&at.field("memorySwap"), format!("{s} is more than {max} MiB"));
        }
    }
    if let Some(s) = r.swappiness {
        if !(0..=100).contains(&s) {
            errors.add(&at.field("swappiness"), format!("{s} must be 0-100"));
        }
    }
    let lists = [
        ("readBps", &r.blkio.read_bps, true),
        ("writeBps", &r.blkio.write_bps, true),
        ("readIops", &r.blkio.read_iops, false),
        ("writeIops", &r.blkio.write_iops, false),
    ];
    for (name, list, bytes) in lists {
        for (i, d) in list.iter().enumerate() {
            let dp = at.field("blkio").field(name).index(i);
            if !d.path.starts_with("/dev/") {
                errors.add(&dp.field("path"), format!("{:?} must be a device under /dev", d.path));
            }
            if let Err(e) = parse_rate(&d.rate, bytes) {
                errors.add(&dp.field("rate"), e);
            }
        }
    }
}

/// A DNS label: 1-63 lowercase letters, digits and '-', not at either end.
pub(crate) fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A domain name: DNS labels joined by '.', at most 253 characters.
fn dns_name(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

/// The pod's `hostname`, `subdomain`, `dns` and `dnsConfig` (seed 003): names as DNS has them, servers
/// as IP addresses; a HOST pod has the host's name (Docker refuses another).
fn identity(t: &TemplateSpec, at: &Path, errors: &mut Errors) {
    let host = t.network == NetworkMode::Host;
    if !t.hostname.is_empty() {
        if !dns_label(&t.hostname) {
            errors.add(
                &at.field("hostname"),
                format!("{:?} must be a DNS label: 1-63 lowercase letters, digits and '-'", t.hostname),
            );
        } else if host {
            errors.add(&at.field("hostname"), "a HOST pod has the host's name");
        }
    }
    if !t.subdomain.is_empty() {
        if !dns_name(&t.subdomain) {
            errors.add(
                &at.field("subdomain"),
                format!("{:?} must be a domain name (DNS labels joined by '.')", t.subdomain),
            );
        } else if host {
            errors.add(&at.field("subdomain"), "a HOST pod has the host's domain");
        }
    }
    let Some(dns) = &t.dns_config else { return };
    let dp = at.field("dnsConfig");
    // ClusterFirst puts the responder first and its two search domains before these.
    let (servers, searches) = match t.dns.cluster_first(t.network) {
        true => (2, 4),
        false => (3, 6),
    };
    let beside = |n: usize| match t.dns.cluster_first(t.network) {
        true => format!(", {n} beside dns {:?}'s own", t.dns),
        false => String::new(),
    };
    if dns.servers.len() > servers {
        let why = format!("{} servers: a resolver reads at most 3{}", dns.servers.len(), beside(servers));
        errors.add(&dp.field("servers"), why);
    }
    for (i, s) in dns.servers.iter().enumerate() {
        if s.parse::<std::net::IpAddr>().is_err() {
            errors.add(&dp.field("servers").index(i), format!("{s:?} is not an IP address"));
        }
    }
    if dns.searches.len() > searches {
        let why = format!("{} search domains: a resolver reads at most 6{}", dns.searches.len(), beside(searches));
        errors.add(&dp.field("searches"), why);
    }
    for (i, s) in dns.searches.iter().enumerate() {
        if !dns_name(s) {
            errors.add(&dp.field("searches").index(i), format!("{s:?} is not a domain name"));
        }
    }
    for (i, o) in dns.options.iter().enumerate() {
        if o.is_empty() || o.contains(char::is_whitespace) {
            errors.add(&dp.field("options").index(i), format!("{o:?} must be one resolver option (ndots:2, rotate)"));
        }
    }
}
