//! Static rules of the process spec. Every rule adds to one error list, so a user sees all
//! mistakes at once; rules that need an instance (paths inside the roots) live in `render`.

use super::error::{Errors, Path};
use super::model::*;
use super::template::{Template, Var};
use std::collections::{BTreeSet, HashSet};

mod constraint;
pub mod host_users;
pub mod image_reference;
pub mod pod;
pub(super) mod probe;
mod schedule;
mod service;
mod strategy;

pub use constraint::anchored_regex;
use constraint::constraint;

pub use super::model::{API_VERSION, KIND, POD_KIND};
/// A spec with more instances than this is almost surely a typo (the daemon's
/// `max_instances_per_app` may bound it lower).
pub const MAX_INSTANCES: u32 = 10_000;
/// Upper bounds of a spec's numbers (docs/spec.md, "Ranges"). What a restart, a start or a stop
/// waits for is at most a day; a health check's grace at most a week. Bounded so that all time
/// arithmetic stays far from overflow, and so that a typo is refused rather than obeyed.
pub const MAX_DAY_SECS: u64 = 86_400;
pub const MAX_WEEK_SECS: u64 = 604_800;
pub const MAX_MAXTIMES: u32 = 1_000_000;
pub const MAX_CONSECUTIVE_FAILURES: u32 = 10_000;
/// Cores and MiB a limit may name before the host is asked (the daemon checks the host's own).
pub const MAX_CPU_CORES: f64 = 4096.0;
pub const MAX_MEMORY_MIB: f64 = 1_073_741_824.0;
pub const MAX_HEALTH_CHECKS: usize = 3;
const MAX_NAME_LEN: usize = 63;

/// Checks every static rule, appending to `errors`.
pub fn validate(spec: &ProcessSpec, errors: &mut Errors) {
    let root = Path::root();
    if spec.api_version.is_empty() {
        errors.add(&root.field("apiVersion"), format!("is required (\"{API_VERSION}\")"));
    } else if spec.api_version != API_VERSION {
        errors.add(&root.field("apiVersion"), format!("must be \"{API_VERSION}\", found {:?}", spec.api_version));
    }
    if spec.kind.is_empty() {
        errors.add(&root.field("kind"), format!("is required (\"{KIND}\")"));
    } else if spec.kind != KIND && spec.kind != POD_KIND {
        let hint = crate::spec::error::did_you_mean(&spec.kind, [KIND, POD_KIND])
            .map(|k| format!(" (did you mean \"{k}\"?)"))
            .unwrap_or_default();
        errors.add(&root.field("kind"), format!("must be \"{KIND}\" or \"{POD_KIND}\", found {:?}{hint}", spec.kind));
    }
    metadata(&spec.metadata, &root.field("metadata"), errors);
    dependencies(spec, &root.field("dependencies"), errors);
    if spec.daemon_set.is_some() && (spec.runs_to_completion() || spec.stateful_set.is_some()) {
        errors.add(&root.field("daemonSet"), "a daemon set is neither a job, a cron job nor a stateful set");
    } else if spec.stateful_set.is_some() && spec.runs_to_completion() {
        errors.add(&root.field("statefulSet"), "a stateful set is neither a job nor a cron job");
    }
    policies(spec, &root, errors);
    strategy::strategy(&spec.strategy, spec.spec.instance, &root.field("strategy"), errors);
    if spec.runs_to_completion() {
        job_spec(spec, &spec.job_params(), &root.field("job"), errors);
    }
    if let Some(cron) = &spec.cron_job {
        let at = root.field("cronJob");
        if cron.rule.trim().is_empty() {
            errors.add(&at.field("rule"), "is required (e.g. \"*/5 * * * *\" or \"@daily\")");
        } else if let Err(e) = crate::cron::Schedule::parse(&cron.rule, &cron.time_zone) {
            let (field, message) = e.split_once(": ").unwrap_or(("rule", e.as_str()));
            errors.add(&at.field(field), message.to_string());
        }
        if cron.deadline > MAX_WEEK_SECS {
            errors.add(&at.field("deadline"), format!("must be at most {MAX_WEEK_SECS}"));
        }
        for (field, n) in [("success", cron.history.success), ("fail", cron.history.fail)] {
            if n > 1000 {
                errors.add(&at.field("history").field(field), "must be at most 1000");
            }
        }
    }

    let body = root.field("spec");
    // 0 is allowed (seed 003 `replica: uint`; DESIGN § 7): the app keeps its spec, revisions and
    // port names with nothing running.
    if spec.spec.instance > MAX_INSTANCES {
        errors.add(&body.field("instance"), format!("must be at most {MAX_INSTANCES}"));
    }
    if !spec.schedule.is_empty() {
        schedule::schedule(&spec.schedule, &root.field("schedule"), errors);
    }
    service::services(spec, &root.field("services"), errors);
    service::stateful_set_names(spec, &root.field("statefulSet"), errors);
    if spec.is_pod() {
        pod::validate(
            &spec.spec.template.spec,
            spec.stateful_set.is_some(),
            &body.field("template").field("spec"),
            errors,
        );
        if let Some(c) = &spec.constraint {
            constraint(c, &root.field("constraint"), errors);
        }
        return;
    }
    let tp = body.field("template").field("spec");
    for (field, used) in [
        ("containers", !spec.spec.template.spec.containers.is_empty()),
        ("network", spec.spec.template.spec.network != Default::default()),
        ("parameters", !spec.spec.template.spec.parameters.is_empty()),
        ("imagePullSecrets", !spec.spec.template.spec.image_pull_secrets.is_empty()),
        ("hostname", !spec.spec.template.spec.hostname.is_empty()),
        ("subdomain", !spec.spec.template.spec.subdomain.is_empty()),
        ("dns", spec.spec.template.spec.dns != Default::default()),
        ("dnsConfig", spec.spec.template.spec.dns_config.is_some()),
        ("host", spec.spec.template.spec.host != Default::default()),
    ] {
        if used {
            errors.add(&tp.field(field), format!("is for kind \"{POD_KIND}\" only"));
        }
    }
    if !spec.spec.template.spec.initializers.is_empty() {
        let why = format!("is for kind \"{POD_KIND}\" only (a process's init steps are its own `initializers`)");
        errors.add(&tp.field("initializers"), why);
    }
    pod::process_volumes(&spec.spec.template.spec, spec.stateful_set.is_some(), &tp, errors);
    let procs_path = body.field("template").field("spec").field("processes");
    let procs = &spec.spec.template.spec.processes;
    if procs.is_empty() {
        errors.add(&procs_path, "needs at least one process");
    }
    // Port names are one namespace per instance: `${ports.NAME}` may name any process's port.
    let mut port_names = BTreeSet::new();
    let mut fixed_ports = HashSet::new();
    for (pi, p) in procs.iter().enumerate() {
        for (i, port) in p.ports.iter().enumerate() {
            let at = procs_path.index(pi).field("ports").index(i);
            if port.name.is_empty() {
                errors.add(&at.field("name"), "is required");
            } else if !port.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                || port.name.len() > MAX_NAME_LEN
            {
                errors.add(&at.field("name"), format!("{:?} must be 1-63 letters, digits, '_' or '-'", port.name));
            } else if !port_names.insert(port.name.clone()) {
                errors.add(&at.field("name"), format!("duplicate port name {:?}", port.name));
            }
            if !(0..=65535).contains(&port.host_port) {
                errors.add(&at.field("hostPort"), format!("{} is out of range: 0 (random) or 1-65535", port.host_port));
            } else if port.host_port > 0 && !fixed_ports.insert((port.host_port, port.protocol == Protocol::Udp)) {
                errors.add(&at.field("hostPort"), format!("port {} is declared twice", port.host_port));
            }
        }
    }
    let mut proc_names = HashSet::new();
    for (pi, p) in procs.iter().enumerate() {
        let at = procs_path.index(pi);
        if !p.proc_name.is_empty() && !proc_names.insert(p.proc_name.as_str()) {
            errors.add(&at.field("procName"), format!("duplicate procName {:?}", p.proc_name));
        }
        process(p, &at, &port_names, errors);
    }
    if let Some(c) = &spec.constraint {
        constraint(c, &root.field("constraint"), errors);
    }
}

/// `value` of a count or seconds field must lie in `min..=max`; `what` says the unit.
pub(super) fn in_range(value: u64, min: u64, max: u64, what: &str, at: &Path, errors: &mut Errors) {
    if value < min {
        errors.add(at, format!("must be at least {min}"));
    } else if value > max {
        errors.add(at, format!("{value} is out of range {min}-{max} ({what})"));
    }
}

fn policies(spec: &ProcessSpec, root: &Path, errors: &mut Errors) {
    let rp = root.field("restartPolicy");
    let r = &spec.restart_policy;
    in_range(r.interval, 0, MAX_DAY_SECS, "seconds, at most a day", &rp.field("interval"), errors);
    in_range(r.backoff, 0, MAX_DAY_SECS, "seconds, at most a day", &rp.field("backoff"), errors);
    in_range(r.maxtimes.into(), 0, MAX_MAXTIMES.into(), "restarts; 0 = unlimited", &rp.field("maxtimes"), errors);
    let grace = spec.kill_policy.grace_period;
    in_range(grace, 0, MAX_DAY_SECS, "seconds, at most a day", &root.field("killPolicy").field("gracePeriod"), errors);
    if let Some(d) = &spec.disconnect {
        disconnect(d, grace, &root.field("disconnect"), errors);
    }
}

/// The shortest `disconnect.stopAfterSecs`: a host stopping itself sooner would do so between
/// two of a healthy scheduler's hand-overs.
pub const MIN_STOP_AFTER_SECS: u64 = 5;

fn disconnect(d: &crate::spec::model::Disconnect, grace: u64, at: &Path, errors: &mut Errors) {
    if let Some(stop) = d.stop_after_secs {
        let why = "seconds, at least 5 and at most a day";
        in_range(stop, MIN_STOP_AFTER_SECS, MAX_DAY_SECS, why, &at.field("stopAfterSecs"), errors);
    }
    let Some(replace) = d.replace_after_secs else { return };
    in_range(replace, 0, MAX_DAY_SECS, "seconds, at most a day", &at.field("replaceAfterSecs"), errors);
    let floor = d.replace_after(grace);
    if replace < floor {
        errors.add(
            &at.field("replaceAfterSecs"),
            format!(
                "must be at least {floor} (stopAfterSecs + killPolicy.gracePeriod + {}): the host must have stopped \
                 its copy before another starts",
                crate::spec::model::DISCONNECT_MARGIN_SECS
            ),
        );
    }
}

/// Seed 000: lowercase letters and digits, not all digits, not starting with a digit.
/// Tolerated: '-' inside (the seed's own example namespace is `ns-a`), and the default
/// namespace `defaultGroup` spelled exactly.
pub fn check_name(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("is required".into());
    }
    if value.len() > MAX_NAME_LEN {
        return Err(format!("{value:?} is longer than {MAX_NAME_LEN} characters"));
    }
    if !value.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(format!("{value:?} may hold only lowercase letters, digits and '-'"));
    }
    if value.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("{value:?} must not start with a digit"));
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Err(format!("{value:?} must not start or end with '-'"));
    }
    Ok(())
}

fn metadata(m: &Metadata, at: &Path, errors: &mut Errors) {
    if let Err(e) = check_name(&m.name) {
        errors.add(&at.field("name"), e);
    }
    if m.namespace.is_empty() {
        errors.add(&at.field("namespace"), format!("must not be empty (leave it out for {DEFAULT_NAMESPACE})"));
    } else if m.namespace != DEFAULT_NAMESPACE {
        if let Err(e) = check_name(&m.namespace) {
            errors.add(&at.field("namespace"), e);
        }
    }
    for key in m.labels.keys() {
        if key.is_empty() {
            errors.add(&at.field("labels"), "label keys must not be empty");
        }
    }
}

/// Each names a dependency (`name` or `namespace/name`) once, never the app itself.
fn dependencies(spec: &ProcessSpec, at: &Path, errors: &mut Errors) {
    let own = format!("{}/{}", spec.metadata.namespace, spec.metadata.name);
    let mut seen = BTreeSet::new();
    for (i, d) in spec.dependencies.iter().enumerate() {
        let at = at.index(i).field("name");
        let parts: Vec<&str> = d.name.split('/').collect();
        let bad = match parts.as_slice() {
            [name] => check_name(name).err(),
            [ns, name] => check_name(ns).err().or_else(|| check_name(name).err()),
            _ => Some("expected name or namespace/name".to_string()),
        };
        let key = d.key(&spec.metadata.namespace);
        if d.name.is_empty() {
            errors.add(&at, "is required (a dependency stored with `steward-sched depend apply`)");
        } else if let Some(e) = bad {
            errors.add(&at, e);
        } else if key == own {
            errors.add(&at, "an app cannot depend on itself");
        } else if !seen.insert(key.clone()) {
            errors.add(&at, format!("{key} is named twice"));
        }
    }
}

pub(super) fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// POSIX-ish user name as useradd accepts it.
pub(super) fn is_user_name(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 32
        && matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && s.trim_end_matches('$').chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// The fields that take `${...}` variables, with the variables each may not use
/// (a path cannot be defined in terms of itself).
pub fn templated_fields<'p>(p: &'p Process, at: &Path) -> Vec<(Path, &'p str, &'static [Var])> {
    let root = at.clone();
    let mut out: Vec<(Path, &str, &'static [Var])> = vec![
        (root.field("workPath"), p.work_path.as_str(), &[Var::WorkPath, Var::PidFile]),
        (root.field("pidFile"), p.pid_file.as_str(), &[Var::PidFile]),
        (root.field("startCmd"), p.start_cmd.as_str(), &[]),
        (root.field("stopCmd"), p.stop_cmd.as_str(), &[]),
        (root.field("restartCmd"), p.restart_cmd.as_str(), &[]),
        (root.field("reloadCmd"), p.reload_cmd.as_str(), &[]),
    ];
    for (i, e) in p.env.iter().enumerate() {
        out.push((root.field("env").index(i).field("value"), e.value.as_str(), &[]));
    }
    for (i, u) in p.uris.iter().enumerate() {
        out.push((root.field("uris").index(i).field("value"), u.value.as_str(), &[]));
        out.push((root.field("uris").index(i).field("outputDir"), u.output_dir.as_str(), &[]));
    }
    let stores = p
        .secrets
        .iter()
        .enumerate()
        .map(|(i, s)| (root.field("secrets").index(i), &s.items))
        .chain(p.configmaps.iter().enumerate().map(|(i, c)| (root.field("configmaps").index(i), &c.items)));
    for (at, items) in stores {
        for (i, item) in items.iter().enumerate() {
            if item.kind == Some(ItemType::File) {
                out.push((at.field("items").index(i).field("keyOrPath"), item.key_or_path.as_str(), &[]));
                out.push((at.field("items").index(i).field("dataKeyAlias"), item.data_key_alias.as_str(), &[]));
            }
        }
    }
    for (i, c) in p.health_checks.iter().enumerate() {
        if let Some(cmd) = &c.command {
            out.push((root.field("healthChecks").index(i).field("command").field("value"), cmd.value.as_str(), &[]));
        }
    }
    for (i, s) in p.initializers.iter().enumerate() {
        out.push((root.field("initializers").index(i).field("command"), s.command.as_str(), &[]));
    }
    let handlers = [
        ("probe", "liveness", p.probe.liveness.as_ref().map(|p| &p.handler)),
        ("probe", "readiness", p.probe.readiness.as_ref().map(|p| &p.handler)),
        ("lifecycle", "postStart", p.lifecycle.post_start.as_ref()),
        ("lifecycle", "preStop", p.lifecycle.pre_stop.as_ref()),
    ];
    for (group, name, handler) in handlers {
        let Some(h) = handler else { continue };
        let at = root.field(group).field(name);
        let method = if group == "probe" { at.field("handler").field("method") } else { at.field("method") };
        for (i, arg) in h.method.command.iter().enumerate() {
            out.push((method.field("command").index(i), arg.as_str(), &[]));
        }
    }
    out
}

fn process(p: &Process, at: &Path, port_names: &BTreeSet<String>, errors: &mut Errors) {
    if p.proc_name.is_empty() {
        errors.add(&at.field("procName"), "is required (the name the main process runs under)");
    } else if p.proc_name.contains('/') || p.proc_name.chars().any(char::is_whitespace) {
        errors.add(&at.field("procName"), format!("{:?} must be a program name without '/' or spaces", p.proc_name));
    }
    if !is_user_name(&p.user) {
        errors.add(&at.field("user"), format!("{:?} is not a valid user name", p.user));
    }
    if p.work_path.is_empty() {
        errors.add(&at.field("workPath"), "is required");
    }
    if p.start_cmd.trim().is_empty() {
        errors.add(&at.field("startCmd"), "is required");
    }
    let grace = p.start_grace_period;
    in_range(grace, 0, MAX_DAY_SECS, "seconds, at most a day", &at.field("startGracePeriod"), errors);
    for (field, text, forbidden) in templated_fields(p, at) {
        let (template, problems) = Template::parse_all(text);
        for e in problems {
            errors.add(&field, e.0);
        }
        for v in template.vars() {
            match v {
                Var::Port(name) if !port_names.contains(name) => {
                    let known: Vec<&str> = port_names.iter().map(String::as_str).collect();
                    errors.add(
                        &field,
                        format!(
                            "`{v}` names no port of this spec (ports: {})",
                            if known.is_empty() { "none".to_string() } else { known.join(", ") }
                        ),
                    );
                }
                Var::PidFile if p.pid_file.is_empty() && !forbidden.contains(v) => {
                    errors.add(&field, "`${pidFile}` is used but pidFile is not set");
                }
                _ if forbidden.contains(v) => {
                    errors.add(&field, format!("`{v}` cannot be used here (it is defined by this field)"));
                }
                _ => {}
            }
        }
    }

    let mut env_names = HashSet::new();
    for (i, e) in p.env.iter().enumerate() {
        let f = at.field("env").index(i).field("name");
        if !is_env_name(&e.name) {
            errors.add(&f, format!("{:?} is not a valid environment variable name", e.name));
        } else if !env_names.insert(e.name.as_str()) {
            errors.add(&f, format!("duplicate environment variable {:?}", e.name));
        }
    }

    for (i, u) in p.uris.iter().enumerate() {
        uri(u, &at.field("uris").index(i), errors);
    }
    health_checks(&p.health_checks, &at.field("healthChecks"), port_names, errors);
    probe::probes(&p.probe, &at.field("probe"), port_names, errors);
    probe::lifecycle(&p.lifecycle, &at.field("lifecycle"), port_names, errors);
    probe::init_steps(&p.initializers, &at.field("initializers"), errors);
    resources(&p.resources.limits, &p.resources.requests, &at.field("resources"), errors);
    for (kind, amounts) in [("limits", &p.resources.limits), ("requests", &p.resources.requests)] {
        if amounts.gpu.is_some() {
            let why = format!("GPUs are given to containers only (kind \"{POD_KIND}\"), through the engine");
            errors.add(&at.field("resources").field(kind).field("gpu"), why);
        }
    }
    env_from(&p.env_from, &at.field("envFrom"), errors);
    for (i, s) in p.secrets.iter().enumerate() {
        let sp = at.field("secrets").index(i);
        if s.secret_name.is_empty() {
            errors.add(&sp.field("secretName"), "is required");
        }
        key_items(&s.items, &sp.field("items"), false, errors);
    }
    for (i, c) in p.configmaps.iter().enumerate() {
        let cp = at.field("configmaps").index(i);
        if c.name.is_empty() {
            errors.add(&cp.field("name"), "is required");
        }
        key_items(&c.items, &cp.field("items"), false, errors);
    }
}

fn uri(u: &Uri, at: &Path, errors: &mut Errors) {
    if u.value.is_empty() {
        errors.add(&at.field("value"), "is required");
    } else if u.value.starts_with('/') {
        // A path in the package repository (seed 000), resolved against the configured base.
        if u.value.split('/').any(|c| c == "..") {
            errors.add(&at.field("value"), format!("repository path {:?} must not contain '..'", u.value));
        }
    } else {
        match url::Url::parse(&u.value) {
            Ok(url) if matches!(url.scheme(), "http" | "https" | "file") => {
                if url.scheme() != "file" && url.host_str().is_none_or(str::is_empty) {
                    errors.add(&at.field("value"), format!("{:?} has no host", u.value));
                }
                if !url.username().is_empty() || url.password().is_some() {
                    errors.add(&at.field("value"), "put credentials in user/pwd, not in the URL");
                }
            }
            Ok(url) => errors.add(
                &at.field("value"),
                format!("scheme {:?} is not supported (http, https, file, or a /repository/path)", url.scheme()),
            ),
            Err(e) => errors.add(&at.field("value"), format!("{:?} is not a URL: {e}", u.value)),
        }
    }
    if !u.pwd.is_empty() && u.user.is_empty() {
        errors.add(&at.field("user"), "is required when pwd is set");
    }
    let is_sha256 = u.sha256.len() == 64 && u.sha256.chars().all(|c| c.is_ascii_hexdigit());
    if !u.sha256.is_empty() && !is_sha256 {
        errors.add(&at.field("sha256"), "must be 64 hexadecimal digits");
    }
}

pub(super) fn health_checks(checks: &[HealthCheck], at: &Path, port_names: &BTreeSet<String>, errors: &mut Errors) {
    if checks.len() > MAX_HEALTH_CHECKS {
        errors.add(at, format!("at most {MAX_HEALTH_CHECKS} health checks, found {}", checks.len()));
    }
    let local: Vec<usize> =
        checks.iter().enumerate().filter(|(_, c)| c.kind.is_some_and(CheckType::is_local)).map(|(i, _)| i).collect();
    if local.len() > 1 {
        errors.add(
            at,
            format!("at most one of HTTP, TCP and COMMAND per process, found {} (entries {:?})", local.len(), local),
        );
    }
    for (i, c) in checks.iter().enumerate() {
        let cp = at.index(i);
        match c.kind {
            None => errors.add(&cp.field("type"), "is required (HTTP, TCP, COMMAND, REMOTE_HTTP or REMOTE_TCP)"),
            Some(CheckType::Http | CheckType::RemoteHttp) if c.http.is_none() => {
                errors.add(&cp.field("http"), "is required for an HTTP check")
            }
            Some(CheckType::Tcp | CheckType::RemoteTcp) if c.tcp.is_none() => {
                errors.add(&cp.field("tcp"), "is required for a TCP check")
            }
            Some(CheckType::Command) if c.command.as_ref().is_none_or(|cmd| cmd.value.trim().is_empty()) => {
                errors.add(&cp.field("command").field("value"), "is required for a COMMAND check")
            }
            _ => {}
        }
        const DAY: &str = "seconds, at most a day";
        in_range(c.delay_seconds, 0, MAX_DAY_SECS, DAY, &cp.field("delaySeconds"), errors);
        in_range(c.interval_seconds, 1, MAX_DAY_SECS, DAY, &cp.field("intervalSeconds"), errors);
        in_range(
            c.grace_period_seconds,
            0,
            MAX_WEEK_SECS,
            "seconds, at most a week",
            &cp.field("gracePeriodSeconds"),
            errors,
        );
        let failures = c.consecutive_failures.into();
        let what = "failures in a row; 0 = never kill";
        in_range(failures, 0, MAX_CONSECUTIVE_FAILURES.into(), what, &cp.field("consecutiveFailures"), errors);
        if c.timeout_seconds == 0 {
            errors.add(&cp.field("timeoutSeconds"), "must be at least 1");
        } else if c.interval_seconds > 0 && c.timeout_seconds >= c.interval_seconds {
            errors.add(
                &cp.field("timeoutSeconds"),
                format!("must be less than intervalSeconds ({} >= {})", c.timeout_seconds, c.interval_seconds),
            );
        }
        if let Some(h) = &c.http {
            let hp = cp.field("http");
            check_port(h.port, &h.port_name, &hp, port_names, errors);
            if !h.path.starts_with('/') {
                errors.add(&hp.field("path"), format!("{:?} must start with '/'", h.path));
            }
            for name in h.headers.keys() {
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                    errors.add(&hp.field("headers"), format!("{name:?} is not a valid header name"));
                }
            }
        }
        if let Some(t) = &c.tcp {
            check_port(t.port, &t.port_name, &cp.field("tcp"), port_names, errors);
        }
    }
}

/// seed 000: `port` > 0 wins; otherwise `portName` must name a declared port.
pub(super) fn check_port(port: i64, port_name: &str, at: &Path, port_names: &BTreeSet<String>, errors: &mut Errors) {
    if port > 65535 {
        errors.add(&at.field("port"), format!("{port} is out of range 1-65535"));
    } else if port <= 0 {
        if port_name.is_empty() {
            errors.add(at, "needs port (> 0) or portName");
        } else if !port_names.contains(port_name) {
            let known: Vec<&str> = port_names.iter().map(String::as_str).collect();
            errors.add(
                &at.field("portName"),
                format!(
                    "{port_name:?} names no port of this spec (ports: {})",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ),
            );
        }
    }
}

/// `resources.limits` and `resources.requests` (`at` is `resources`): quantities
/// (`crate::resources`), limits positive or -1, requests zero or more and within the limit.
pub(super) fn resources(l: &Limits, r: &Requests, at: &Path, errors: &mut Errors) {
    use crate::resources::{parse_cpu, parse_memory, Quantity};
    for (kind, amounts) in [("limits", l), ("requests", r)] {
        if let Some(text) = &amounts.gpu {
            if amounts.gpus().is_none() {
                let why = format!("{:?} must be a number of GPUs (1-{MAX_GPUS}) or \"all\"", text.0);
                errors.add(&at.field(kind).field("gpu"), why);
            }
        }
    }
    if let Some(text) = &l.pids {
        if l.tasks().is_none() {
            let why = format!("{:?} must be a number of tasks (1-{MAX_TASKS}), or -1 for unlimited", text.0);
            errors.add(&at.field("limits").field("pids"), why);
        }
    }
    if r.pids.is_some() {
        errors.add(&at.field("requests").field("pids"), "tasks are a limit only; set limits.pids");
    }
    if let (Some(limit), Some(request)) = (l.gpus(), r.gpus()) {
        if limit != request {
            errors.add(&at.field("requests").field("gpu"), "must equal limits.gpu: GPUs are not shared");
        }
    }
    type Parse = fn(&str) -> Result<Quantity, String>;
    let fields: [(&str, Parse, &str, f64); 2] =
        [("cpu", parse_cpu, "cores", MAX_CPU_CORES), ("memory", parse_memory, "MiB", MAX_MEMORY_MIB)];
    let pick = |l: &Limits, name: &str| if name == "cpu" { l.cpu.clone() } else { l.memory.clone() };
    for (name, parse, unit, max) in fields {
        let limit_at = at.field("limits").field(name);
        let limit = match pick(l, name).map(|v| (parse(&v.0), v)) {
            None => None,
            Some((Err(why), _)) => {
                errors.add(&limit_at, format!("{why}, or -1 for unlimited"));
                None
            }
            Some((Ok(Quantity::Amount(n)), v)) if n > max => {
                errors.add(&limit_at, format!("{:?} is more than {max} {unit}", v.0));
                None
            }
            Some((Ok(Quantity::Amount(n)), v)) if n <= 0.0 => {
                errors.add(&limit_at, format!("{:?} must be a positive number of {unit}, or -1 for unlimited", v.0));
                None
            }
            Some((Ok(q), _)) => q.positive(),
        };
        let request_at = at.field("requests").field(name);
        match pick(r, name).map(|v| (parse(&v.0), v)) {
            None => {}
            Some((Err(why), _)) => errors.add(&request_at, why),
            Some((Ok(Quantity::Unlimited), _)) => {
                errors.add(&request_at, "-1: a request cannot be unlimited (it is what the host sets aside)")
            }
            Some((Ok(Quantity::Amount(n)), v)) => {
                if let Some(limit) = limit.filter(|limit| n > *limit) {
                    errors.add(&request_at, format!("{:?} is more than limits.{name} ({limit} {unit})", v.0));
                } else if n > max {
                    errors.add(&request_at, format!("{:?} is more than {max} {unit}", v.0));
                }
            }
        }
    }
}

/// What this host can give: a limit above it could never be met (and 1e308 cores would
/// overflow the cgroup's quota arithmetic); and the users its processes may run as.
#[derive(Debug, Clone, Copy)]
pub struct HostCapacity {
    pub cpu_cores: f64,
    pub memory_mib: f64,
    /// The daemon's `max_instances_per_app`.
    pub max_instances: u32,
    /// Whether a user exists on the host ([`host_users::exists_here`] for this one).
    pub has_user: fn(&str) -> bool,
}

impl HostCapacity {
    /// This host's online cpus and physical memory.
    pub fn of_this_host(max_instances: u32) -> HostCapacity {
        Self::of(crate::resources::HostResources::detect(Default::default()).capacity, max_instances)
    }

    /// A hollow host's (`runtime = "hollow"`): its configured capacity, and every user, since
    /// nothing runs as one.
    pub fn hollow(has: crate::resources::Requests, max_instances: u32) -> HostCapacity {
        HostCapacity { has_user: |_| true, ..Self::of(has, max_instances) }
    }

    fn of(has: crate::resources::Requests, max_instances: u32) -> HostCapacity {
        let memory_mib = match has.memory_bytes {
            0 => MAX_MEMORY_MIB,
            bytes => bytes as f64 / 1048576.0,
        };
        HostCapacity {
            cpu_cores: (has.milli_cpu as f64 / 1000.0).max(1.0),
            memory_mib,
            max_instances,
            has_user: host_users::exists_here,
        }
    }
}

/// Rules that depend on the host the spec is applied to: the instance count, the limits, and
/// the users it names.
pub fn within_host(spec: &ProcessSpec, host: &HostCapacity, errors: &mut Errors) {
    let body = Path::root().field("spec");
    if spec.spec.instance > host.max_instances {
        errors.add(
            &body.field("instance"),
            format!("{} is more than this daemon's max_instances_per_app ({})", spec.spec.instance, host.max_instances),
        );
    }
    let t = &spec.spec.template.spec;
    let (list, each): (&str, Vec<(&Limits, &Requests)>) = if spec.is_pod() {
        ("containers", t.containers.iter().map(|c| (&c.resources.limits, &c.resources.requests)).collect())
    } else {
        ("processes", t.processes.iter().map(|p| (&p.resources.limits, &p.resources.requests)).collect())
    };
    for (i, (l, r)) in each.iter().enumerate() {
        let at = body.field("template").field("spec").field(list).index(i).field("resources");
        for (kind, amounts) in [("limits", l), ("requests", r)] {
            let checks = [
                ("cpu", amounts.cpu_cores(), host.cpu_cores, "cores"),
                ("memory", amounts.memory_mib(), host.memory_mib, "MiB"),
            ];
            for (name, value, have, unit) in checks {
                if let Some(n) = value.filter(|n| *n > have) {
                    errors
                        .add(&at.field(kind).field(name), format!("{n} is more than this host has ({have:.0} {unit})"));
                }
            }
        }
    }
    host_users::check(spec, host.has_user, errors);
}

/// `container_owner`: a pod's file item may also name its owner as a numeric `uid[:gid]` (an
/// image's user, which need not exist on the host).
/// Seed 003 `envFrom`: a store's name, and a prefix that keeps env var names valid.
pub(super) fn env_from(list: &[EnvFrom], at: &Path, errors: &mut Errors) {
    for (i, e) in list.iter().enumerate() {
        let ep = at.index(i);
        if e.name.is_empty() {
            errors.add(&ep.field("name"), "is required (a configmap's or secret's name in the namespace)");
        }
        let ok = e.prefix.chars().next().is_none_or(|c| c.is_ascii_alphabetic() || c == '_')
            && e.prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            errors.add(
                &ep.field("prefix"),
                format!("{:?} must start an env var name: letters, digits, '_', not a digit first", e.prefix),
            );
        }
    }
}

pub(super) fn key_items(items: &[KeyItem], at: &Path, container_owner: bool, errors: &mut Errors) {
    if items.is_empty() {
        errors.add(at, "needs at least one item");
    }
    for (i, item) in items.iter().enumerate() {
        let ip = at.index(i);
        if item.data_key.is_empty() {
            errors.add(&ip.field("dataKey"), "is required");
        }
        match item.kind {
            None => errors.add(&ip.field("type"), "is required (env or file)"),
            Some(ItemType::Env) => {
                if item.key_or_path.is_empty() {
                    errors.add(&ip.field("keyOrPath"), "is required (the environment variable's name)");
                } else if !is_env_name(&item.key_or_path) {
                    errors.add(
                        &ip.field("keyOrPath"),
                        format!("{:?} is not a valid environment variable name", item.key_or_path),
                    );
                }
            }
            Some(ItemType::File) => {
                // Where the path may point is checked when rendering.
                if item.key_or_path.is_empty() {
                    errors.add(&ip.field("keyOrPath"), "is required (the file's path)");
                }
                let numeric = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
                let uid_gid = container_owner
                    && match item.user.split_once(':') {
                        Some((u, g)) => numeric(u) && numeric(g),
                        None => numeric(&item.user),
                    };
                if !item.user.is_empty() && !uid_gid && !is_user_name(&item.user) {
                    let what = if container_owner { "a user name, uid or uid:gid" } else { "a valid user name" };
                    errors.add(&ip.field("user"), format!("{:?} is not {what}", item.user));
                }
            }
        }
    }
}

/// `job`: counts at least 1, limits within a day or a week; runs that end (Always would restart
/// a successful one); no rollout strategy (a changed job starts over).
fn job_spec(spec: &ProcessSpec, job: &crate::spec::model::JobSpec, at: &Path, errors: &mut Errors) {
    for (field, n) in [("parallelism", job.parallelism), ("completions", job.completions)] {
        if n == 0 {
            errors.add(&at.field(field), "must be at least 1 (seed 003: pint)");
        } else if n > MAX_INSTANCES {
            errors.add(&at.field(field), format!("must be at most {MAX_INSTANCES}"));
        }
    }
    if job.active > MAX_WEEK_SECS {
        errors.add(&at.field("active"), format!("must be at most {MAX_WEEK_SECS}"));
    }
    if job.job_deadline > MAX_WEEK_SECS {
        errors.add(&at.field("jobDeadline"), format!("must be at most {MAX_WEEK_SECS}"));
    }
    if job.backoff_limit > MAX_INSTANCES {
        errors.add(&at.field("backoffLimit"), format!("must be at most {MAX_INSTANCES}"));
    }
    if job.backoff_seconds > crate::spec::model::MAX_BACKOFF_SECS {
        errors.add(&at.field("backoffSeconds"), format!("must be at most {}", crate::spec::model::MAX_BACKOFF_SECS));
    }
    if spec.restart_policy.policy == crate::spec::model::RestartPolicyKind::Always {
        errors.add(
            &Path::root().field("restartPolicy").field("policy"),
            "a job's runs end: Never or OnFailure (Always would start a successful run again)",
        );
    }
    if !spec.strategy.is_empty() {
        errors.add(&Path::root().field("strategy"), "a job does not roll out: a changed job starts over");
    }
}
