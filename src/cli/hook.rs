//! `steward hook template apply|ls|show|rm` and `steward hook run create|ls|status|terminate|rm`.

use super::steward::{exit, HookCommand, HookRunCommand, HookTemplateCommand, Output};
use crate::client::{Client, ClientError};
use crate::hooks::{CreateHookRun, HookRun, MetricPhase};
use std::time::Duration;

fn split(id: &str) -> (String, String) {
    let (ns, name) = id.split_once('/').expect("clap checked namespace/name");
    (ns.to_string(), name.to_string())
}

fn print_json<T: serde::Serialize>(value: &T) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

pub(super) async fn run(client: &Client, cmd: HookCommand, output: Output) -> Result<i32, ClientError> {
    match cmd {
        HookCommand::Template(cmd) => template(client, cmd, output).await,
        HookCommand::Run(cmd) => runs(client, cmd, output).await,
    }
}

async fn template(client: &Client, cmd: HookTemplateCommand, output: Output) -> Result<i32, ClientError> {
    match cmd {
        HookTemplateCommand::Apply { file } => {
            // Checked here first, every document before any is stored: every mistake at once,
            // with the file's name (and a YAML one's line).
            let templates = match crate::spec::source::read_checked(&file, crate::hooks::template_from_document) {
                Ok(t) => t,
                Err(refused) => {
                    crate::esay!("steward: {refused}");
                    return Ok(exit::INVALID);
                }
            };
            for (doc, template) in &templates {
                let (ns, name) = (&template.metadata.namespace, &template.metadata.name);
                let (text, format) = doc.body();
                let summary = client.put_hook_template(ns, name, text, format).await?;
                match output {
                    Output::Json => print_json(&summary),
                    Output::Text => {
                        crate::say!("hook template {ns}/{name}: {} metric(s) stored", summary.metrics.len())
                    }
                }
            }
        }
        HookTemplateCommand::Ls { namespace } => {
            let list = client.hook_templates(namespace.as_deref()).await?;
            match output {
                Output::Json => print_json(&list),
                Output::Text => {
                    crate::say!("{:<32} {:<24} METRICS", "TEMPLATE", "ARGS");
                    for t in list {
                        let id = format!("{}/{}", t.namespace, t.name);
                        crate::say!("{id:<32} {:<24} {}", t.args.join(","), t.metrics.join(","));
                    }
                }
            }
        }
        HookTemplateCommand::Show { template } => {
            let (ns, name) = split(&template);
            print_json(&client.hook_template(&ns, &name).await?);
        }
        HookTemplateCommand::Rm { template } => {
            let (ns, name) = split(&template);
            client.delete_hook_template(&ns, &name).await?;
            if output == Output::Text {
                crate::say!("hook template {template} removed");
            }
        }
    }
    Ok(exit::OK)
}

async fn runs(client: &Client, cmd: HookRunCommand, output: Output) -> Result<i32, ClientError> {
    match cmd {
        HookRunCommand::Create { template, name, args, wait, timeout } => {
            let (namespace, template) = split(&template);
            let req = CreateHookRun {
                template,
                namespace,
                name,
                args: args.into_iter().collect(),
                labels: Default::default(),
            };
            let run = client.create_hook_run(&req).await?;
            if wait {
                return finish(client, &run, Duration::from_secs(timeout), output).await;
            }
            match output {
                Output::Json => print_json(&run),
                Output::Text => crate::say!(
                    "hook run {}/{} started (steward hook run status {}/{} -w)",
                    run.metadata.namespace,
                    run.metadata.name,
                    run.metadata.namespace,
                    run.metadata.name
                ),
            }
        }
        HookRunCommand::Ls { namespace, label } => {
            let list = client.hook_runs(namespace.as_deref(), label.as_deref()).await?;
            match output {
                Output::Json => print_json(&list),
                Output::Text => {
                    crate::say!("{:<40} {:<20} {:<13} {:>5}  MESSAGE", "RUN", "TEMPLATE", "PHASE", "TAKEN");
                    for r in list {
                        let id = format!("{}/{}", r.namespace, r.name);
                        let phase = format!("{:?}", r.phase);
                        crate::say!("{id:<40} {:<20} {phase:<13} {:>5}  {}", r.template, r.measurements, r.message);
                    }
                }
            }
        }
        HookRunCommand::Status { run, wait, timeout } => {
            let (ns, name) = split(&run);
            let run = client.hook_run(&ns, &name, None).await?;
            if wait {
                return finish(client, &run, Duration::from_secs(timeout), output).await;
            }
            show_run(&run, output == Output::Json);
        }
        HookRunCommand::Terminate { run } => {
            let (ns, name) = split(&run);
            show_run(&client.terminate_hook_run(&ns, &name).await?, output == Output::Json);
        }
        HookRunCommand::Rm { run } => {
            let (ns, name) = split(&run);
            client.delete_hook_run(&ns, &name).await?;
            if output == Output::Text {
                crate::say!("hook run {run} removed");
            }
        }
    }
    Ok(exit::OK)
}

/// Waits for the run's verdict (asking again every minute, so a long run outlives no
/// connection), shows it; exit 0 when Successful.
async fn finish(client: &Client, run: &HookRun, timeout: Duration, output: Output) -> Result<i32, ClientError> {
    let (ns, name) = (&run.metadata.namespace, &run.metadata.name);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut run = run.clone();
    while !run.is_done() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            show_run(&run, output == Output::Json);
            crate::esay!("steward: hook run {ns}/{name} is still {:?} after {} s", run.status.phase, timeout.as_secs());
            return Ok(exit::FAILED);
        }
        run = client.hook_run(ns, name, Some(left.min(Duration::from_secs(60)))).await?;
    }
    show_run(&run, output == Output::Json);
    Ok(if run.status.phase == MetricPhase::Successful { exit::OK } else { exit::FAILED })
}

/// A run as `hook run status` prints it (steward-sched's too).
pub(super) fn show_run(run: &HookRun, json: bool) {
    if json {
        return print_json(run);
    }
    let s = &run.status;
    crate::say!(
        "{}/{}  template {}  phase {:?}",
        run.metadata.namespace,
        run.metadata.name,
        run.spec.template,
        s.phase
    );
    if !s.message.is_empty() {
        crate::say!("  {}", s.message);
    }
    let args: Vec<String> =
        run.spec.args.iter().map(|a| format!("{}={}", a.name, a.value.as_deref().unwrap_or_default())).collect();
    if !args.is_empty() {
        crate::say!("  args: {}", args.join(" "));
    }
    crate::say!(
        "{:<20} {:<13} {:>5} {:>5} {:>6} {:>7} {:>5}",
        "METRIC",
        "PHASE",
        "COUNT",
        "OK",
        "FAILED",
        "INCONCL",
        "ERROR"
    );
    for m in &s.metric_results {
        let phase = format!("{:?}", m.phase);
        crate::say!(
            "{:<20} {phase:<13} {:>5} {:>5} {:>6} {:>7} {:>5}",
            m.name,
            m.count,
            m.successful,
            m.failed,
            m.inconclusive,
            m.error
        );
        if m.measurements_dropped > 0 {
            crate::say!("  ({} older measurements not kept)", m.measurements_dropped);
        }
        // Numbered as taken: the first kept follows the dropped ones.
        let first = m.measurements_dropped as usize + 1;
        for (i, x) in m.measurements.iter().enumerate() {
            let at = crate::clock::rfc3339_utc(x.started_at_ms);
            let value = x.value.as_deref().unwrap_or("-");
            crate::say!("  #{:<3} {at}  {:<12} value {value:<10} {}", first + i, format!("{:?}", x.phase), x.message);
        }
    }
}
