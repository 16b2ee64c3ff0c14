//! Seed 003's probes, lifecycle handlers and init steps as they run: ports resolved, commands
//! rendered. A handler becomes the same [`Probe`] the seed-000 checks use (HTTP, TCP, or a
//! command), so one prober runs both.

use super::Probe;
use crate::spec::model::{Handler, HandlerType, HttpScheme, InitStep, Lifecycle, ProbeSpec, Probes, Scheme};
use serde::{Deserialize, Serialize};

/// A probe as it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedProbe {
    pub handler: Probe,
    pub delay_secs: u64,
    pub timeout_secs: u64,
    pub period_secs: u64,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

/// A process's (container's) probes and hooks as they run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedLifecycle {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness: Option<RenderedProbe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<RenderedProbe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_start: Option<Probe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<Probe>,
}

impl RenderedLifecycle {
    pub fn is_empty(&self) -> bool {
        *self == RenderedLifecycle::default()
    }
}

/// HTTP checks, probes and hooks on a port the spec declares `HTTPS` (seed 003's port
/// protocol) go over TLS whatever scheme they say; the certificate is not verified, as
/// Kubernetes' probes do not.
pub(crate) fn tls_on_https_ports(
    checks: &mut [super::RenderedCheck],
    lifecycle: &mut RenderedLifecycle,
    https: &[u16],
) {
    if https.is_empty() {
        return;
    }
    let upgrade = |probe: &mut Probe| {
        if let Probe::Http { scheme, port, .. } = probe {
            if https.contains(port) {
                *scheme = Scheme::Https;
            }
        }
    };
    checks.iter_mut().for_each(|c| upgrade(&mut c.probe));
    let l = lifecycle;
    l.liveness.iter_mut().chain(l.readiness.iter_mut()).for_each(|p| upgrade(&mut p.handler));
    l.post_start.iter_mut().chain(l.pre_stop.iter_mut()).for_each(upgrade);
}

/// One init step of a process as it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedInitStep {
    pub name: String,
    pub command: String,
    pub timeout_secs: u64,
}

/// Probes and hooks with ports resolved by `port_of` (`port` > 0, else the named port) and
/// command text by `render_text`. Validation has refused what would not resolve.
pub(super) fn render_lifecycle(
    probes: &Probes,
    lifecycle: &Lifecycle,
    port_of: &dyn Fn(i64, &str) -> u16,
    render_text: &dyn Fn(&str) -> String,
) -> RenderedLifecycle {
    let handler = |h: &Handler| render_handler(h, port_of, render_text);
    let probe = |p: &ProbeSpec| RenderedProbe {
        handler: handler(&p.handler),
        delay_secs: p.delay,
        timeout_secs: p.timeout,
        period_secs: p.period,
        success_threshold: p.threshold.success,
        failure_threshold: p.threshold.failure,
    };
    RenderedLifecycle {
        liveness: probes.liveness.as_ref().map(probe),
        readiness: probes.readiness.as_ref().map(probe),
        post_start: lifecycle.post_start.as_ref().map(handler),
        pre_stop: lifecycle.pre_stop.as_ref().map(handler),
    }
}

pub(super) fn render_init_steps(steps: &[InitStep], render_text: &dyn Fn(&str) -> String) -> Vec<RenderedInitStep> {
    steps
        .iter()
        .map(|s| RenderedInitStep { name: s.name.clone(), command: render_text(&s.command), timeout_secs: s.timeout })
        .collect()
}

fn render_handler(h: &Handler, port_of: &dyn Fn(i64, &str) -> u16, render_text: &dyn Fn(&str) -> String) -> Probe {
    let m = &h.method;
    match h.kind {
        HandlerType::Http => Probe::Http {
            scheme: match m.scheme {
                HttpScheme::Http => Scheme::Http,
                HttpScheme::Https => Scheme::Https,
            },
            port: port_of(m.port, &m.port_name),
            path: if m.path.is_empty() { "/".into() } else { m.path.clone() },
            headers: m.header.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            host: (!m.host.is_empty()).then(|| m.host.clone()),
        },
        HandlerType::Tcp => Probe::Tcp { port: port_of(m.port, &m.port_name) },
        // The seed's EXEC is an argument list, run without a shell: each argument is quoted for
        // the `/bin/sh -c` every command of an instance runs by.
        HandlerType::Exec => Probe::Command {
            command: m.command.iter().map(|a| shell_quote(&render_text(a))).collect::<Vec<_>>().join(" "),
        },
    }
}

/// `arg` as one word for `/bin/sh`: in single quotes, a quote inside as `'\''`.
pub fn shell_quote(arg: &str) -> String {
    if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b)) {
        return arg.to_string();
    }
    format!("'{}'", arg.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn exec_arguments_stay_one_word_each() {
        assert_eq!(shell_quote("cat"), "cat");
        assert_eq!(shell_quote("/tmp/ready file"), "'/tmp/ready file'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME;rm"), "'$HOME;rm'");
    }
}
