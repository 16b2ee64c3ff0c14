//! The fuzz target's body (issue 14): an apply request's body through the same path as the API's
//! ([`crate::api::apply_body`]: UTF-8, the format by content type or first character, parse,
//! normalize, validate, the host's rules), as JSON, as TOML and sniffed; then, for a spec that
//! passes, every computation the daemon makes from it: rendering, the deadlines of its grace
//! periods, the restart policy's delays and Backoff deadlines, health-check grace, the limits as
//! a cgroup takes them, and the stored form read back. Nothing may panic (debug builds also
//! check arithmetic for overflow), and what is refused says why.
//!
//! Driven by libFuzzer through `fuzz/` (cargo-fuzz, nightly), and over a corpus and its
//! mutations by `tests/fuzz_apply.rs` on every run of the suite.

use crate::spec::validate::HostCapacity;
use crate::spec::{ProcessSpec, Roots};
use crate::supervisor::policy::{decide, Decision, RestartCounter};
use crate::supervisor::state::{self, Event, ExitStatus, State};
use std::path::PathBuf;
use std::time::Duration;

/// What [`apply_body`] found, for the harness's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub accepted: usize,
    pub refused: usize,
}

/// Runs one input through every content type. Panics on a broken invariant.
pub fn apply_body(data: &[u8]) -> Outcome {
    let roots = Roots {
        work_base_dir: PathBuf::from("/var/lib/steward/work"),
        run_base_dir: PathBuf::from("/var/lib/steward/run"),
        volume_root: PathBuf::from("/var/lib/steward/volumes"),
    };
    // A host with every user: what a spec names is exercised, whatever this host's passwd holds.
    let host = HostCapacity {
        cpu_cores: 64.0,
        memory_mib: 262_144.0,
        max_instances: crate::spec::validate::MAX_INSTANCES,
        has_user: |_| true,
    };
    let mut outcome = Outcome::default();
    for content_type in ["application/json", "application/toml", ""] {
        match crate::api::apply_body(data, content_type, &roots, &host) {
            Ok(spec) => {
                outcome.accepted += 1;
                exercise(&spec, &roots);
            }
            Err(e) => {
                outcome.refused += 1;
                assert!(!e.body.message.trim().is_empty(), "a refusal says why");
                assert!(
                    e.body.errors.iter().all(|f| !f.message.trim().is_empty()),
                    "each error says why: {:?}",
                    e.body
                );
            }
        }
    }
    outcome
}

/// Everything the daemon computes from an accepted spec.
pub fn exercise(spec: &ProcessSpec, roots: &Roots) {
    // The stored form reads back as the same spec (a daemon start reloads it from the store).
    let stored = serde_json::to_value(spec).expect("an accepted spec serializes");
    let back: ProcessSpec = serde_json::from_value(stored).expect("the stored spec reads back");
    assert_eq!(&back, spec, "the stored spec reads back unchanged");

    // Rendering, as a start does it, for the first and the last instance.
    let ports = spec.placeholder_ports();
    let now_ms = crate::supervisor::record::now_ms();
    let ctx = crate::spec::render::RenderContext { roots, host_ip: "192.0.2.1".into(), allocated_ports: &ports };
    let last = spec.spec.instance.saturating_sub(1);
    for index in [0, last] {
        if spec.is_pod() {
            let id = crate::spec::InstanceId {
                namespace: spec.metadata.namespace.clone(),
                name: spec.metadata.name.clone(),
                index,
            };
            let mut errors = crate::spec::error::Errors::default();
            let pod = crate::spec::render::pod::render_pod(spec, &id, &ctx, &roots.run_base_dir, &mut errors);
            for c in &pod.containers {
                let _ = c.resources.cpu_shares();
            }
        } else if let Ok(rendered) = crate::spec::render::render(spec, index, &ctx) {
            for p in &rendered.processes {
                let _ = crate::clock::deadline_after(Duration::from_secs(p.start_grace_period_secs));
                for c in &p.health_checks {
                    let _ = crate::health::Tracker::new(c, now_ms);
                    let _ = crate::clock::deadline_after(Duration::from_secs(c.delay_seconds));
                    let _ = crate::clock::deadline_after(Duration::from_secs(c.interval_seconds));
                }
            }
        }
    }

    // The stop's grace as a deadline.
    let _ = crate::clock::deadline_after(Duration::from_secs(spec.kill_policy.grace_period));

    // The restart policy: its delays for a run of failures up to (and past) maxtimes, each as
    // the Backoff deadline the state machine computes.
    let policy = &spec.restart_policy;
    let mut counter = RestartCounter::default();
    let runs = if policy.maxtimes == 0 { 12 } else { policy.maxtimes.min(12) + 1 };
    for _ in 0..runs {
        let _ = decide(policy, &counter, false, now_ms);
        let ctx = state::Context { policy, counter: &counter, now_ms, restarts_in_place: false };
        if let Ok(step) = state::step(&State::Running, &Event::MainExited { status: ExitStatus::Code(1) }, &ctx) {
            if let State::Backoff { until_ms } = step.next {
                assert!(until_ms >= now_ms, "a Backoff ends after it begins");
            }
        }
        if let Decision::GiveUp { .. } = decide(policy, &counter, false, now_ms) {
            break;
        }
        counter.count_restart(now_ms);
    }

    // Limits as the cgroup takes them.
    let limits = spec.instance_limits();
    let at = std::path::Path::new("/sys/fs/cgroup/steward/fuzz");
    if let Some(cores) = limits.cpu_cores {
        crate::cgroups::cpu_quota_us(cores, at).expect("an accepted cpu limit is a quota");
    }
    if let Some(mb) = limits.memory_mib {
        crate::cgroups::memory_bytes(mb, at).expect("an accepted memory limit is a byte count");
    }
}

/// The bound [`hook_response`] reads an answer with.
pub const HOOK_RESPONSE_MAX_BYTES: u64 = 64 << 10;

/// The hooks' response path (issue 51): the first line of `data` is a jsonPath (empty: none),
/// the rest an answer's body, through [`crate::hooks::provider::outcome_of_body`]. Nothing may
/// panic, and what comes out is bounded: a value is the bound or a few times the input at most
/// (text as JSON grows up to 6×: a control byte is `\u00XX`), an error a short text.
pub fn hook_response(data: &[u8]) -> crate::hooks::metric::Outcome {
    use crate::hooks::metric::Outcome;
    let (path, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&data[..0], data),
    };
    let path = String::from_utf8_lossy(path);
    let path = (!path.is_empty()).then_some(path.as_ref());
    let outcome = crate::hooks::provider::outcome_of_body(body, path, HOOK_RESPONSE_MAX_BYTES);
    let size = match &outcome {
        Outcome::Value(v) => serde_json::to_string(v).expect("a value serializes").len(),
        Outcome::Error(e) => e.len(),
        Outcome::NoData => 0,
    };
    let bound = HOOK_RESPONSE_MAX_BYTES as usize + 6 * data.len() + 1024;
    assert!(size <= bound, "{size} bytes out of {} in (bound {bound})", data.len());
    outcome
}

/// The event path (issue 51): `data` as an event body (its JSON, or the bytes as one string
/// field when they are not JSON) through the journal's bounding ([`crate::store::Batch`]'s
/// `push_event`). Nothing may panic; what would be journaled is at most
/// [`crate::store::MAX_EVENT_BYTES`] when the body was larger, and untouched when it was not.
/// Returns whether the body was shortened.
pub fn event_body(data: &[u8]) -> bool {
    let body: serde_json::Value = serde_json::from_slice(data)
        .unwrap_or_else(|_| serde_json::json!({"type": "fuzz", "value": String::from_utf8_lossy(data)}));
    let size = serde_json::to_vec(&body).expect("a value serializes").len();
    let mut batch = crate::store::Batch::new();
    batch.push_event(body.clone());
    let (kept, bytes) = batch.event_at(0).expect("an event was pushed");
    let again: serde_json::Value = serde_json::from_slice(bytes).expect("the journaled bytes are JSON");
    assert_eq!(&again, kept, "the bytes are the body's");
    if size <= crate::store::MAX_EVENT_BYTES {
        assert_eq!(kept, &body, "a body within the bound is journaled as it is");
        false
    } else {
        assert!(bytes.len() <= crate::store::MAX_EVENT_BYTES, "{} bytes journaled of {size}", bytes.len());
        true
    }
}
