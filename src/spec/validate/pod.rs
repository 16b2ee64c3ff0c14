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

/// The host's own directories a Static volume may not be, hold or lie in: the system's (a
/// container writing there owns the host) and the kernel's.
pub const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
];

/// A Static volume's `target`: a host directory (absolute, clean, none of the system's), or
/// the name of one Steward keeps per namespace (empty: the volume's name). Whether it clashes
/// with Steward's own directories or an instance's is the daemon's check (it knows them).
pub fn static_target(target: &str) -> Result<(), String> {
    if !target.starts_with('/') {
        return match target.is_empty() {
            true => Ok(()),
            false => super::check_name(target)
                .map_err(|e| format!("{e} (a named Static volume; a host directory is an absolute path)")),
        };
    }
    if target.split('/').any(|part| part == ".." || part == ".") {
        return Err(format!("{target:?} must be a clean absolute path (no '.' or '..')"));
    }
    let path = std::path::Path::new(target);
    if path.parent().is_none() {
        return Err("\"/\" is the whole host: name a directory of its own".into());
    }
    for dir in SYSTEM_DIRS.iter().copied() {
        if path.starts_with(dir) {
            return Err(format!(
                "{target:?} lies in the host's own {dir}: a container writing there would own the host"
            ));
        }
    }
    Ok(())
}

/// The smallest filesystem image a kept volume's limit may ask for (an ext4's own metadata
/// takes a few MiB).
const MIN_IMAGE_MIB: f64 = 8.0;

/// A directory owner as written: a user name, or numeric `uid[:gid]`.
fn owner_text(owner: &str) -> Result<(), String> {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u32>().is_ok();
    match owner.split_once(':') {
        Some((u, g)) if numeric(u) && numeric(g) => Ok(()),
        Some(_) => Err(format!("{owner:?} is not uid:gid (numbers); a user name stands alone")),
        None if owner.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) => Ok(()),
        None => Err(format!("{owner:?} is not a user name or a uid")),
    }
}

/// Seed 003 `volumes`: named uniquely, of a type Steward provides (Temp, Config, Secret, Static
/// host directories, and Dynamic and Isolated kept per ordinal; Isolated in a stateful set
/// only), with the source fields of their type.
fn volumes(t: &TemplateSpec, stateful: bool, at: &Path, errors: &mut Errors) {
    use crate::spec::pod::{parse_file_mode, VolumeType, DELETE, RETAIN};
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
            VolumeType::Static => {
                if let Err(e) = static_target(&s.target) {
                    errors.add(&sp.field("target"), e);
                }
                if !s.owner.is_empty() {
                    if let Err(e) = owner_text(&s.owner) {
                        errors.add(&sp.field("owner"), e);
                    }
                }
                if !s.dir_mode.is_empty() {
                    if let Err(e) = parse_file_mode(&s.dir_mode) {
                        errors.add(&sp.field("dirMode"), e);
                    }
                }
                if !v.storage.limit.is_empty() {
                    errors.add(
                        &vp.field("storage").field("limit"),
                        "is not enforced on a Static volume (a host directory of any filesystem): refused rather \
                         than left unenforced; a Dynamic volume's limit is",
                    );
                }
                not_for("medium", !s.medium.is_empty(), errors);
                not_for("items", !s.items.is_empty(), errors);
                not_for("default", !s.default.is_empty(), errors);
                not_for("optional", s.optional, errors);
                not_for("class", !s.class.is_empty(), errors);
                not_for("mode", !s.mode.is_empty(), errors);
            }
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
                use crate::spec::render::pod::KEPT_IMAGE_CLASS;
                match (s.class.as_str(), v.storage.limit.is_empty()) {
                    ("" | "local", true) | (KEPT_IMAGE_CLASS, false) => {}
                    ("" | "local", false) => errors.add(
                        &vp.field("storage").field("limit"),
                        format!(
                            "is not enforced on a plain directory (class {:?}): refused rather than left \
                             unenforced; class \"{KEPT_IMAGE_CLASS}\" keeps the volume in a filesystem image of the limit",
                            s.class
                        ),
                    ),
                    (KEPT_IMAGE_CLASS, true) => errors.add(
                        &vp.field("storage").field("limit"),
                        format!("is required by class \"{KEPT_IMAGE_CLASS}\" (the size of the volume's filesystem image)"),
                    ),
                    (other, _) => errors.add(
                        &sp.field("class"),
                        format!(
                            "{other:?} is no storage class here: \"\" or \"local\" (a directory), \
                             \"{KEPT_IMAGE_CLASS}\" (a filesystem image of storage.limit, loop-mounted)"
                        ),
                    ),
                }
                if s.class == KEPT_IMAGE_CLASS {
                    let bytes = crate::resources::parse_memory(&v.storage.limit).ok().and_then(|q| q.positive());
                    if bytes.is_some_and(|mib| mib < MIN_IMAGE_MIB) {
                        errors.add(
                            &vp.field("storage").field("limit"),
                            format!("{:?} is below {MIN_IMAGE_MIB}Mi, the smallest filesystem image", v.storage.limit),
                        );
                    }
                }
                not_for("medium", !s.medium.is_empty(), errors);
                not_for("target", !s.target.is_empty(), errors);
                not_for("items", !s.items.is_empty(), errors);
                not_for("default", !s.default.is_empty(), errors);
                not_for("optional", s.optional, errors);
                not_for("readonly", s.readonly, errors);
                for (field, word) in [("whenDeleted", &s.when_deleted), ("whenScaled", &s.when_scaled)] {
                    if !["", RETAIN, DELETE].contains(&word.as_str()) {
                        errors.add(
                            &sp.field(field),
                            format!("{word:?} must be \"{RETAIN}\" (kept for `steward volume rm`) or \"{DELETE}\""),
                        );
                    }
                }
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
        if v.kind != VolumeType::Static {
            not_for("owner", !s.owner.is_empty(), errors);
            not_for("dirMode", !s.dir_mode.is_empty(), errors);
        }
        if !matches!(v.kind, VolumeType::Dynamic | VolumeType::Isolated) {
            not_for("whenDeleted", !s.when_deleted.is_empty(), errors);
            not_for("whenScaled", !s.when_scaled.is_empty(), errors);
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

/// A process instance's `volumes`: the pod's rules, less what needs a mount namespace. Its
/// processes run in the host's, so each sees a volume's host directory itself (`VOLUME_<NAME>`):
/// a configmap's or secret's files are its own `secrets` and `configmaps` items, and a
/// read-only Static volume could not be kept read-only for them.
pub fn process_volumes(t: &TemplateSpec, stateful: bool, at: &Path, errors: &mut Errors) {
    use crate::spec::pod::VolumeType;
    volumes(t, stateful, at, errors);
    for (i, v) in t.volumes.iter().enumerate() {
        let vp = at.field("volumes").index(i);
        if matches!(v.kind, VolumeType::Config | VolumeType::Secret) {
            errors.add(
                &vp.field("type"),
                format!(
                    "{:?} is for a pod's containers; a process takes a configmap's or secret's keys as files \
                     through its own `configmaps` and `secrets` items",
                    v.kind
                ),
            );
        }
        if v.source.readonly {
            errors.add(
                &vp.field("source").field("readonly"),
                "cannot be kept for a process (it sees the host directory itself, in the host's mount namespace): \
                 refused rather than left unenforced",
            );
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
