//! `steward job ls|status|logs`: jobs' counts and runs (a run's logs are its instance's).

use super::steward::{exit, CronCommand, JobCommand, Output};
use crate::client::{Client, ClientError};
use crate::protocol::{JobBody, JobPhase, RunPhase};

pub(super) async fn run(client: &Client, cmd: JobCommand, output: Output) -> Result<i32, ClientError> {
    match cmd {
        JobCommand::Ls { namespace } => {
            let jobs = client.jobs(namespace.as_deref()).await?;
            if output == Output::Json {
                println!("{}", serde_json::to_string_pretty(&jobs).unwrap_or_default());
                return Ok(exit::OK);
            }
            crate::say!("{:<32} {:<10} {:>9} {:>6} {:>6}  REASON", "JOB", "PHASE", "SUCCEEDED", "ACTIVE", "FAILED");
            for j in jobs {
                let done = format!("{}/{}", j.status.succeeded, j.completions);
                crate::say!(
                    "{:<32} {:<10} {done:>9} {:>6} {:>6}  {}",
                    j.app,
                    j.status.phase.name(),
                    j.active,
                    j.status.failed,
                    reason(&j)
                );
            }
        }
        JobCommand::Status { job } => {
            let (ns, name) = job.split_once('/').expect("clap checked namespace/name");
            let j = client.job(ns, name).await?;
            if output == Output::Json {
                println!("{}", serde_json::to_string_pretty(&j).unwrap_or_default());
                return Ok(exit::OK);
            }
            crate::say!(
                "{}: {}; {} of {} succeeded, {} active (parallelism {}), {} failed{}",
                j.app,
                j.status.phase.name(),
                j.status.succeeded,
                j.completions,
                j.active,
                j.parallelism,
                j.status.failed,
                if reason(&j).is_empty() { String::new() } else { format!(": {}", reason(&j)) }
            );
            crate::say!("{:<6} {:<10} {:<24} {:<24} {:>5}  REASON", "RUN", "PHASE", "STARTED", "ENDED", "EXIT");
            for r in &j.status.runs {
                let ended = r.ended_ms.map(crate::clock::rfc3339_utc).unwrap_or_else(|| "-".into());
                let code = r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
                crate::say!(
                    "{:<6} {:<10} {:<24} {ended:<24} {code:>5}  {}",
                    r.index,
                    format!("{:?}", r.phase),
                    crate::clock::rfc3339_utc(r.started_ms),
                    r.reason
                );
            }
        }
        JobCommand::Logs { .. } => unreachable!("handled with the logs"),
    }
    Ok(exit::OK)
}

fn reason(j: &JobBody) -> String {
    match &j.status.phase {
        JobPhase::Failed { reason } => reason.clone(),
        _ => String::new(),
    }
}

/// The instance id whose logs `job logs` shows: run `n`, else the last failed, else the last.
pub(super) async fn run_for_logs(client: &Client, job: &str, n: Option<u32>) -> Result<String, ClientError> {
    let (ns, name) = job.split_once('/').expect("clap checked namespace/name");
    let j = client.job(ns, name).await?;
    let runs = &j.status.runs;
    let chosen = match n {
        Some(n) => runs.iter().find(|r| r.index == n),
        None => runs.iter().rev().find(|r| r.phase == RunPhase::Failed).or(runs.last()),
    };
    let run = chosen.ok_or_else(|| ClientError::Api {
        status: 404,
        code: "not_found".into(),
        message: match n {
            Some(n) => format!("job {job} has no run {n}"),
            None => format!("job {job} has no run yet"),
        },
        field: None,
        errors: Vec::new(),
    })?;
    Ok(format!("{job}/{}", run.index))
}

/// `steward cron ls|status|trigger|suspend|resume`.
pub(super) async fn cron(client: &Client, cmd: CronCommand, output: Output) -> Result<i32, ClientError> {
    let split = |id: &str| {
        let (ns, name) = id.split_once('/').expect("clap checked namespace/name");
        (ns.to_string(), name.to_string())
    };
    let time = |ms: Option<u64>| ms.map(crate::clock::rfc3339_utc).unwrap_or_else(|| "-".into());
    let body = match cmd {
        CronCommand::Ls { namespace } => {
            let list = client.crons(namespace.as_deref()).await?;
            if output == Output::Json {
                println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default());
                return Ok(exit::OK);
            }
            crate::say!(
                "{:<28} {:<16} {:<24} {:<24} {:>7} {:>7} {:>6} {:>6}",
                "CRONJOB",
                "RULE",
                "NEXT",
                "LAST",
                "STARTED",
                "SKIPPED",
                "MISSED",
                "FAILED"
            );
            for c in list {
                let rule = if c.suspended { format!("{} (suspended)", c.rule) } else { c.rule.clone() };
                let s = &c.status;
                crate::say!(
                    "{:<28} {rule:<16} {:<24} {:<24} {:>7} {:>7} {:>6} {:>6}",
                    c.app,
                    time(s.next_tick_ms),
                    time(s.last_tick_ms),
                    s.started,
                    s.skipped,
                    s.missed,
                    s.failed
                );
            }
            return Ok(exit::OK);
        }
        CronCommand::Status { cron } => {
            let (ns, name) = split(&cron);
            client.cron(&ns, &name).await?
        }
        CronCommand::Trigger { cron, force } => {
            let (ns, name) = split(&cron);
            client.trigger_cron(&ns, &name, force).await?
        }
        CronCommand::Suspend { cron } => {
            let (ns, name) = split(&cron);
            client.cron_action(&ns, &name, "suspend").await?
        }
        CronCommand::Resume { cron } => {
            let (ns, name) = split(&cron);
            client.cron_action(&ns, &name, "resume").await?
        }
    };
    if output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&body).unwrap_or_default());
        return Ok(exit::OK);
    }
    let s = &body.status;
    crate::say!(
        "{}: {} ({}, {}){}; next {}, last {}; {} started, {} skipped, {} missed, {} succeeded, {} failed",
        body.app,
        body.rule,
        body.time_zone,
        body.policy,
        if body.suspended { " suspended" } else { "" },
        time(s.next_tick_ms),
        time(s.last_tick_ms),
        s.started,
        s.skipped,
        s.missed,
        s.succeeded,
        s.failed
    );
    if !s.last_failure.is_empty() {
        crate::say!("  last failure: {}", s.last_failure);
    }
    for ex in &s.executions {
        let runs: Vec<String> = ex.job.runs.iter().map(|r| format!("{}:{:?}", r.index, r.phase)).collect();
        crate::say!(
            "  tick {}{}: {} ({})",
            crate::clock::rfc3339_utc(ex.tick_ms),
            if ex.triggered { " (triggered)" } else { "" },
            ex.job.phase.name(),
            runs.join(" ")
        );
    }
    Ok(exit::OK)
}
