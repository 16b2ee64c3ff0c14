//! Health checks of seed 000: HTTP, TCP and COMMAND, run by the daemon on the host.
//! (REMOTE_HTTP and REMOTE_TCP are the scheduler plugin's.) The probes do I/O; the [`Tracker`]
//! that turns results into verdicts — grace period, consecutive failures — is pure.

mod http;

use crate::spec::model::Scheme;
use crate::spec::render::{Probe, RenderedCheck};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// One probe's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
}

/// What a result means for the instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Healthy,
    /// Failed; `counted` is false while the grace period forgives failures.
    Unhealthy {
        counted: bool,
    },
    /// consecutiveFailures reached: kill the instance (its restart policy applies).
    Kill {
        reason: String,
    },
}

/// The health an instance reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// None until the first check has run.
    pub healthy: Option<bool>,
    pub consecutive_failures: u32,
    pub last_failure: Option<String>,
    pub checked_ms: Option<u64>,
}

/// Failures are ignored until the first success or until `gracePeriodSeconds` after the start;
/// after that, `consecutiveFailures` in a row (0 = never) kill the instance.
#[derive(Debug, Clone)]
pub struct Tracker {
    grace_until_ms: u64,
    seen_success: bool,
    threshold: u32,
    pub health: Health,
}

impl Tracker {
    pub fn new(check: &RenderedCheck, started_ms: u64) -> Tracker {
        Tracker {
            grace_until_ms: started_ms.saturating_add(check.grace_period_seconds.saturating_mul(1000)),
            seen_success: false,
            threshold: check.consecutive_failures,
            health: Health::default(),
        }
    }

    pub fn record(&mut self, outcome: Outcome, now_ms: u64) -> Verdict {
        self.health.checked_ms = Some(now_ms);
        match outcome {
            Outcome::Pass => {
                self.seen_success = true;
                self.health.healthy = Some(true);
                self.health.consecutive_failures = 0;
                Verdict::Healthy
            }
            Outcome::Fail(why) => {
                self.health.healthy = Some(false);
                self.health.last_failure = Some(why.clone());
                let in_grace = !self.seen_success && now_ms < self.grace_until_ms;
                if in_grace {
                    return Verdict::Unhealthy { counted: false };
                }
                self.health.consecutive_failures += 1;
                if self.threshold > 0 && self.health.consecutive_failures >= self.threshold {
                    Verdict::Kill {
                        reason: format!(
                            "health check failed {}: {why}",
                            crate::wording::in_a_row(self.health.consecutive_failures)
                        ),
                    }
                } else {
                    Verdict::Unhealthy { counted: true }
                }
            }
        }
    }
}

/// Seed 003's counting for a liveness or readiness probe: `success` passes in a row make it
/// pass, `failure` failures in a row make it fail. Pure, like [`Tracker`].
#[derive(Debug, Clone)]
pub struct ThresholdTracker {
    success: u32,
    failure: u32,
    passes: u32,
    failures: u32,
    /// The verdict so far: None until a threshold is first reached.
    pub passing: Option<bool>,
    pub last_failure: Option<String>,
}

impl ThresholdTracker {
    /// `passing`: the verdict to start from (a readiness found true before a daemon restart
    /// holds until `failure` failures say otherwise).
    pub fn new(success: u32, failure: u32, passing: Option<bool>) -> ThresholdTracker {
        ThresholdTracker {
            success: success.max(1),
            failure: failure.max(1),
            passes: 0,
            failures: 0,
            passing,
            last_failure: None,
        }
    }

    /// Counts one result; returns the new verdict when it changed.
    pub fn record(&mut self, outcome: Outcome) -> Option<bool> {
        let verdict = match outcome {
            Outcome::Pass => {
                self.failures = 0;
                self.passes = self.passes.saturating_add(1);
                (self.passes >= self.success).then_some(true)
            }
            Outcome::Fail(why) => {
                self.passes = 0;
                self.failures = self.failures.saturating_add(1);
                self.last_failure = Some(why);
                (self.failures >= self.failure).then_some(false)
            }
        };
        match verdict {
            Some(v) if self.passing != Some(v) => {
                self.passing = Some(v);
                Some(v)
            }
            _ => None,
        }
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// A probe to run again and again: a plain-HTTP probe keeps its own connection alive between
/// runs; others are made anew each time.
#[derive(Clone)]
pub enum Prepared {
    Http(std::sync::Arc<http::HttpProbe>),
    Once(IpAddr, Probe),
}

/// Runs HTTP and TCP probes (COMMAND probes need the instance's user and cgroup: the supervisor
/// runs those).
#[derive(Clone)]
pub struct Prober {
    http: reqwest::Client,
}

impl Prober {
    pub fn new() -> Prober {
        // seed 000: https is checked without certificate verification.
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client without TLS verification builds");
        Prober { http }
    }

    pub async fn probe(&self, check: &RenderedCheck) -> Option<Outcome> {
        self.probe_at(IpAddr::V4(Ipv4Addr::LOCALHOST), check).await
    }

    /// Probes `host` instead of 127.0.0.1: the scheduler's REMOTE_HTTP and REMOTE_TCP checks.
    pub async fn probe_at(&self, host: IpAddr, check: &RenderedCheck) -> Option<Outcome> {
        self.probe_handler(host, &check.probe, Duration::from_secs(check.timeout_seconds.max(1))).await
    }

    /// One HTTP or TCP probe of `host` within `timeout`: a seed-000 check's or a seed-003
    /// probe's or hook's. None for a command, which the caller runs where it belongs.
    pub async fn probe_handler(&self, host: IpAddr, probe: &Probe, timeout: Duration) -> Option<Outcome> {
        match probe {
            Probe::Http { .. } => Some(self.http(host, probe, timeout).await),
            Probe::Tcp { port } => Some(tcp(host, *port, timeout).await),
            Probe::Command { .. } => None,
        }
    }

    /// `probe` of `host` made ready to run again and again (see [`Prepared`]).
    pub fn prepare(&self, host: IpAddr, probe: &Probe) -> Prepared {
        match probe {
            Probe::Http { scheme: Scheme::Http, port, path, headers, host: host_header } => {
                let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                let addr = SocketAddr::new(host, *port);
                Prepared::Http(std::sync::Arc::new(http::HttpProbe::new(addr, path, host_header.as_deref(), &headers)))
            }
            other => Prepared::Once(host, other.clone()),
        }
    }

    /// One run of a prepared probe within `timeout`; None for a command.
    pub async fn run(&self, prepared: &Prepared, timeout: Duration) -> Option<Outcome> {
        match prepared {
            Prepared::Http(probe) => Some(probe.probe(timeout).await),
            Prepared::Once(host, probe) => self.probe_handler(*host, probe, timeout).await,
        }
    }

    /// GET scheme://host:port/path; 200–399 is healthy.
    async fn http(&self, host: IpAddr, probe: &Probe, timeout: Duration) -> Outcome {
        let Probe::Http { scheme, port, path, headers, host: host_header } = probe else {
            return Outcome::Fail("not an HTTP probe".into());
        };
        let scheme = match scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        let url = format!("{scheme}://{}{path}", SocketAddr::new(host, *port));
        let mut req = self.http.get(&url).timeout(timeout);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        if let Some(h) = host_header {
            req = req.header(reqwest::header::HOST, h);
        }
        match req.send().await {
            Ok(resp) if (200..400).contains(&resp.status().as_u16()) => Outcome::Pass,
            Ok(resp) => Outcome::Fail(format!("GET {url}: HTTP {}", resp.status())),
            Err(e) if e.is_timeout() => Outcome::Fail(format!("GET {url}: no answer within {}s", timeout.as_secs())),
            Err(e) => Outcome::Fail(format!("GET {url}: {}", root_cause(&e))),
        }
    }
}

impl Default for Prober {
    fn default() -> Self {
        Prober::new()
    }
}

/// A TCP connection to host:port that succeeds within the timeout is healthy. It is closed
/// with a reset (linger 0, as Kubernetes does): a probe every second must not leave a socket in
/// TIME_WAIT each time, nor cost the FIN exchange.
async fn tcp(host: IpAddr, port: u16, timeout: Duration) -> Outcome {
    let addr = SocketAddr::new(host, port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            // Zero linger never blocks the close (tokio's set_linger is deprecated for the others).
            let reset = libc::linger { l_onoff: 1, l_linger: 0 };
            let _ = nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::Linger, &reset);
            Outcome::Pass
        }
        Ok(Err(e)) => Outcome::Fail(format!("connect {addr}: {e}")),
        Err(_) => Outcome::Fail(format!("connect {addr}: no answer within {}s", timeout.as_secs())),
    }
}

fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::CheckType;

    fn check(grace: u64, failures: u32) -> RenderedCheck {
        RenderedCheck {
            kind: CheckType::Tcp,
            delay_seconds: 0,
            interval_seconds: 1,
            timeout_seconds: 1,
            consecutive_failures: failures,
            grace_period_seconds: grace,
            probe: Probe::Tcp { port: 1 },
        }
    }

    fn fail() -> Outcome {
        Outcome::Fail("refused".into())
    }

    #[test]
    fn failures_in_the_grace_period_do_not_count() {
        let mut t = Tracker::new(&check(10, 2), 0);
        assert_eq!(t.record(fail(), 1_000), Verdict::Unhealthy { counted: false });
        assert_eq!(t.record(fail(), 9_999), Verdict::Unhealthy { counted: false });
        assert_eq!(t.record(fail(), 10_000), Verdict::Unhealthy { counted: true });
        assert!(matches!(t.record(fail(), 11_000), Verdict::Kill { .. }));
    }

    #[test]
    fn the_first_success_ends_the_grace_period() {
        let mut t = Tracker::new(&check(300, 2), 0);
        assert_eq!(t.record(Outcome::Pass, 1_000), Verdict::Healthy);
        assert_eq!(t.record(fail(), 2_000), Verdict::Unhealthy { counted: true });
        match t.record(fail(), 3_000) {
            Verdict::Kill { reason } => assert_eq!(reason, "health check failed 2 times in a row: refused"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_success_resets_the_count_and_zero_never_kills() {
        let mut t = Tracker::new(&check(0, 2), 0);
        t.record(fail(), 1);
        t.record(Outcome::Pass, 2);
        assert_eq!(t.record(fail(), 3), Verdict::Unhealthy { counted: true });
        let mut never = Tracker::new(&check(0, 0), 0);
        for i in 0..100 {
            assert_eq!(never.record(fail(), i), Verdict::Unhealthy { counted: true });
        }
        assert_eq!(never.health.consecutive_failures, 100);
    }

    #[tokio::test]
    async fn tcp_probe_passes_on_a_listener_and_fails_without() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(tcp(local, port, Duration::from_secs(1)).await, Outcome::Pass);
        drop(l);
        assert!(matches!(tcp(local, port, Duration::from_secs(1)).await, Outcome::Fail(_)));
    }

    #[test]
    fn thresholds_count_in_a_row() {
        let mut t = ThresholdTracker::new(2, 3, None);
        assert_eq!(t.record(Outcome::Pass), None, "one pass of two");
        assert_eq!(t.record(Outcome::Pass), Some(true));
        assert_eq!(t.record(Outcome::Pass), None, "no change");
        assert_eq!(t.record(fail()), None);
        assert_eq!(t.record(fail()), None);
        assert_eq!(t.record(Outcome::Pass), None, "a pass breaks the run of failures");
        assert_eq!(t.record(fail()), None);
        assert_eq!(t.record(fail()), None);
        assert_eq!(t.record(fail()), Some(false), "exactly the third failure in a row");
        assert_eq!(t.record(Outcome::Pass), None, "one pass of the two it takes");
        assert_eq!(t.record(Outcome::Pass), Some(true));
        let mut held = ThresholdTracker::new(1, 2, Some(true));
        assert_eq!(held.record(fail()), None, "a verdict carried over holds until the threshold");
        assert_eq!(held.record(fail()), Some(false));
    }
}
