//! Rules of seed 003's probes, lifecycle handlers and init steps, shared by processes and pods'
//! containers. `exec_in_container`: a pod's EXEC handler runs inside the container.

use super::{check_port, in_range, MAX_CONSECUTIVE_FAILURES, MAX_DAY_SECS};
use crate::spec::error::{Errors, Path};
use crate::spec::model::*;
use std::collections::BTreeSet;

/// The most init steps of one process (or init containers of one pod).
pub const MAX_INIT_STEPS: usize = 16;

/// `probe.liveness` and `probe.readiness`.
pub(in crate::spec) fn probes(p: &Probes, at: &Path, port_names: &BTreeSet<String>, errors: &mut Errors) {
    for (name, probe) in [("liveness", &p.liveness), ("readiness", &p.readiness)] {
        let Some(probe) = probe else { continue };
        let pp = at.field(name);
        handler(&probe.handler, &pp.field("handler"), port_names, errors);
        const DAY: &str = "seconds, at most a day";
        in_range(probe.delay, 0, MAX_DAY_SECS, DAY, &pp.field("delay"), errors);
        in_range(probe.period, 1, MAX_DAY_SECS, DAY, &pp.field("period"), errors);
        in_range(probe.timeout, 1, MAX_DAY_SECS, DAY, &pp.field("timeout"), errors);
        if probe.timeout > probe.period && probe.period > 0 {
            let (t, p) = (probe.timeout, probe.period);
            errors.add(&pp.field("timeout"), format!("must not exceed period ({t} > {p}): one probe at a time"));
        }
        let max = MAX_CONSECUTIVE_FAILURES.into();
        let th = pp.field("threshold");
        in_range(probe.threshold.success.into(), 1, max, "successes in a row", &th.field("success"), errors);
        in_range(probe.threshold.failure.into(), 1, max, "failures in a row", &th.field("failure"), errors);
    }
}

/// `lifecycle.postStart` and `lifecycle.preStop`.
pub(in crate::spec) fn lifecycle(l: &Lifecycle, at: &Path, port_names: &BTreeSet<String>, errors: &mut Errors) {
    for (name, h) in [("postStart", &l.post_start), ("preStop", &l.pre_stop)] {
        if let Some(h) = h {
            handler(h, &at.field(name), port_names, errors);
        }
    }
}

/// A handler names what its type needs and nothing of another type's.
pub(in crate::spec) fn handler(h: &Handler, at: &Path, port_names: &BTreeSet<String>, errors: &mut Errors) {
    let m = &h.method;
    let mp = at.field("method");
    let foreign = |field: &str, set: bool, errors: &mut Errors| {
        if set {
            let kind = match h.kind {
                HandlerType::Http => "HTTP",
                HandlerType::Exec => "EXEC",
                HandlerType::Tcp => "TCP",
            };
            errors.add(&mp.field(field), format!("is not a field of a {kind} handler"));
        }
    };
    match h.kind {
        HandlerType::Exec => {
            if m.command.first().is_none_or(|c| c.trim().is_empty()) {
                errors.add(&mp.field("command"), "is required for an EXEC handler (the command, then its arguments)");
            }
            foreign("port", m.port != 0, errors);
            foreign("portName", !m.port_name.is_empty(), errors);
            foreign("path", !m.path.is_empty(), errors);
            foreign("host", !m.host.is_empty(), errors);
            foreign("header", !m.header.is_empty(), errors);
        }
        HandlerType::Tcp => {
            check_port(m.port, &m.port_name, &mp, port_names, errors);
            foreign("command", !m.command.is_empty(), errors);
            foreign("path", !m.path.is_empty(), errors);
            foreign("host", !m.host.is_empty(), errors);
            foreign("header", !m.header.is_empty(), errors);
        }
        HandlerType::Http => {
            check_port(m.port, &m.port_name, &mp, port_names, errors);
            foreign("command", !m.command.is_empty(), errors);
            if !m.path.is_empty() && !m.path.starts_with('/') {
                errors.add(&mp.field("path"), format!("{:?} must start with '/'", m.path));
            }
            if m.host.chars().any(|c| c.is_whitespace() || c.is_control()) {
                errors.add(&mp.field("host"), format!("{:?} is not a valid Host header", m.host));
            }
            for (i, header) in m.header.iter().enumerate() {
                let name = &header.name;
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                    errors.add(
                        &mp.field("header").index(i).field("name"),
                        format!("{name:?} is not a valid header name"),
                    );
                }
                if header.value.bytes().any(|b| b == b'\r' || b == b'\n') {
                    errors.add(&mp.field("header").index(i).field("value"), "must not hold a line break");
                }
            }
        }
    }
}

/// A process's `initializers`: named uniquely, each a command, within a day.
pub(in crate::spec) fn init_steps(steps: &[InitStep], at: &Path, errors: &mut Errors) {
    if steps.len() > MAX_INIT_STEPS {
        errors.add(at, format!("at most {MAX_INIT_STEPS} init steps, found {}", steps.len()));
    }
    let mut names = BTreeSet::new();
    for (i, s) in steps.iter().enumerate() {
        let sp = at.index(i);
        match super::check_name(&s.name) {
            Err(e) => errors.add(&sp.field("name"), e),
            Ok(()) if !names.insert(s.name.as_str()) => {
                errors.add(&sp.field("name"), format!("{:?} is used by another init step", s.name))
            }
            Ok(()) => {}
        }
        if s.command.trim().is_empty() {
            errors.add(&sp.field("command"), "is required");
        }
        in_range(s.timeout, 1, MAX_DAY_SECS, "seconds, at most a day", &sp.field("timeout"), errors);
    }
}
