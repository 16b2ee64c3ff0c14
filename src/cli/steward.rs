//! `steward`: the operator's command line.

use super::endpoint::{parse_remote_url, Endpoint, RemoteOptions, RemoteUrl};
use crate::config::Config;
use crate::spec::{self, RenderContext, SpecErrors};
use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Exit codes, documented in steward(1).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// A spec or request was invalid (every mistake is printed).
    pub const INVALID: i32 = 1;
    /// Bad command-line usage (clap's own code).
    pub const USAGE: i32 = 2;
    /// The daemon could not be reached.
    pub const UNREACHABLE: i32 = 3;
    /// No such instance.
    pub const NOT_FOUND: i32 = 4;
    /// The caller may not do this.
    pub const FORBIDDEN: i32 = 5;
    /// The daemon could not carry the request out (an instance failed, a stop got stuck).
    pub const FAILED: i32 = 6;
}

#[derive(Debug, Parser)]
#[command(name = "steward", version, about = "Control Steward: validate, render and manage instances")]
pub struct Cli {
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// stewardd configuration, for the work/run roots, host IP and socket.
    #[arg(long, global = true, value_name = "FILE", env = "STEWARD_CONFIG")]
    pub config: Option<PathBuf>,
    /// stewardd's API socket (default: the config's `socket`).
    #[arg(long, global = true, value_name = "PATH", env = "STEWARD_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Drive a remote stewardd instead, through its remote listener (remote.listen):
    /// https://HOST:PORT or HOST:PORT. Needs --token-file and --ca.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "STEWARD_REMOTE",
        value_parser = parse_remote_url,
        conflicts_with = "socket",
        requires_all = ["token_file", "ca"]
    )]
    pub remote: Option<RemoteUrl>,
    /// With --remote: the file holding the bearer token (its first line that is neither blank
    /// nor a # comment), one of the daemon's remote.tokens_file.
    #[arg(long, global = true, value_name = "FILE", env = "STEWARD_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// With --remote: the CA certificate (PEM) that signed the daemon's certificate.
    #[arg(long, global = true, value_name = "FILE", env = "STEWARD_CA")]
    pub ca: Option<PathBuf>,
    /// With --remote: the name the daemon's certificate must carry (default: the URL's host).
    #[arg(long, global = true, value_name = "NAME")]
    pub server_name: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check spec files and HookTemplates (JSON, TOML or YAML; `-`: stdin; every document of a
    /// YAML stream); print every mistake with its field path (and a YAML one's line and column).
    ///
    /// The users a spec names (processes' user, the owners of their secret and configmap files)
    /// must exist on this host, as stewardd's apply here requires; --offline leaves that out.
    Validate {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Check only what holds on any host, as steward-sched does (not this host's users): for
        /// a spec that runs elsewhere.
        #[arg(long)]
        offline: bool,
    },
    /// Print one instance of a spec with every variable resolved, as JSON (one object per
    /// document of a YAML stream).
    Render {
        /// The spec (JSON, TOML or YAML; `-`: stdin).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Instance id (0 .. spec.instance-1).
        #[arg(long, default_value_t = 0)]
        instance: u32,
        /// Value of ${hostip}; detected from the host's interfaces by default.
        #[arg(long)]
        hostip: Option<IpAddr>,
        /// Port for a random (hostPort 0) port, as NAME=PORT; repeatable.
        #[arg(long = "port", value_name = "NAME=PORT", value_parser = parse_port_assignment)]
        ports: Vec<(String, u16)>,
    },
    /// Apply a spec to the daemon: create, update or scale its instances.
    ///
    /// The spec a failed rollout left, applied again, retries that rollout.
    Apply {
        /// The spec (JSON, TOML or YAML, told by the extension, else by the content; `-`:
        /// stdin). Each document of a YAML stream is applied in order, all checked first.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
        /// Wait until every instance is Running (or has failed), showing progress.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Should the rollout of this change fail, go back to the revision it came from (sets
        /// the spec's strategy.autoRollback).
        #[arg(long)]
        auto_rollback: bool,
    },
    /// List instances.
    #[command(alias = "list")]
    Ls {
        #[arg(long)]
        namespace: Option<String>,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        state: Option<String>,
    },
    /// Show one instance in full.
    Status {
        #[arg(value_name = "ID", value_parser = instance_arg)]
        id: String,
    },
    /// Start instances.
    Start(Targets),
    /// Stop instances (stopCmd or SIGTERM, then SIGKILL after the grace period).
    Stop(Targets),
    /// Restart instances (restartCmd, or stop then start).
    Restart(Targets),
    /// Reload instances (reloadCmd or SIGHUP).
    Reload(Targets),
    /// Tell a hollow host's instances to crash (runtime = "hollow" only): each run ends as if
    /// its process exited so, and its restart policy follows (backoff, maxtimes), as for a real
    /// process.
    Crash {
        /// Instance ids (namespace/name/index).
        #[arg(value_name = "ID", required = true, value_parser = instance_arg)]
        ids: Vec<String>,
        /// The exit code the run ends with.
        #[arg(long, default_value_t = 1)]
        exit_code: i32,
        /// End it by this signal (a number: 9 for SIGKILL) instead of an exit code.
        #[arg(long, conflicts_with = "exit_code")]
        signal: Option<i32>,
    },
    /// Stop and remove instances (namespace/name/index), or whole apps (namespace/name: every
    /// instance, then the spec). An instance deleted alone comes back at the next apply.
    Delete(DeleteTargets),
    /// Show the daemon's event journal: sequence number, time (RFC 3339, UTC), subject, what
    /// happened and, for a transition, why.
    Events {
        /// Keep streaming new events.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        since: u64,
    },
    /// Show this host as the scheduler sees it: name, IP, cpu, memory, labels, free ports.
    Node,
    /// An app's revisions, and going back to one.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Jobs (seed 003): apps that run to completion, applied and deleted like any app.
    #[command(subcommand)]
    Job(JobCommand),
    /// Cron jobs (seed 003): jobs started at the ticks of a rule.
    #[command(subcommand)]
    Cron(CronCommand),
    /// Hooks that gate updates (seed 004): templates of checks, and runs of them.
    #[command(subcommand)]
    Hook(HookCommand),
    /// Manage secrets (namespace-scoped; values are never listed back).
    #[command(subcommand)]
    Secret(ValuesCommand),
    /// Manage configmaps (namespace-scoped).
    #[command(subcommand)]
    Configmap(ValuesCommand),
    /// Kept volumes (seed 003 Dynamic, Isolated): an ordinal's data, kept when its instance goes.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write a CA (`ca.pem`, reused when DIR has one) and a server certificate it signs
    /// (`NAME.pem`, `NAME-key.pem`) for the remote listener: for tests and small fleets.
    Cert {
        /// Directory to write into.
        #[arg(long, value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// The certificate's name (files and common name); also a DNS name unless --dns is given.
        #[arg(long)]
        name: String,
        /// DNS names the certificate is valid for; repeatable.
        #[arg(long = "dns", value_name = "NAME")]
        dns: Vec<String>,
        /// IP addresses the certificate is valid for; repeatable.
        #[arg(long = "ip", value_name = "IP")]
        ips: Vec<IpAddr>,
    },
    /// Write the man pages generated from these definitions into DIR (for packaging).
    #[command(hide = true)]
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// The pages' date (YYYY-MM-DD), e.g. the release commit's.
        #[arg(long)]
        date: String,
    },
    /// The endpoints steward-sched handed this daemon: per app and port name, the
    /// Ready instances over the cluster; with --after, wait for the next revision (long poll).
    Endpoints {
        /// namespace/name; without it, every app's.
        #[arg(value_name = "APP", value_parser = app_arg)]
        app: Option<String>,
        /// Answer once the revision is above this one.
        #[arg(long, value_name = "REVISION", requires = "app")]
        after: Option<u64>,
        /// Seconds to wait with --after (then the kept revision is printed).
        #[arg(long, default_value_t = 30.0)]
        timeout: f64,
    },
    /// Copy a file into a running instance (seed 001's local file): below a process's workPath
    /// (a relative PATH is relative to it), owned by its user; or into a pod's container
    /// (absolute PATH), owned by root. Written whole or not at all.
    Cp {
        /// The file on this host.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// namespace/name/index:PATH
        #[arg(value_name = "INSTANCE:PATH", value_parser = copy_target_arg)]
        target: String,
        /// r: the owner may read it (0400); rw: read and write it (0600).
        #[arg(long, value_enum, default_value_t = CopyMode::R)]
        mode: CopyMode,
        /// The file's owner: a user name, uid or uid:gid (a pod's: uid:gid, or a name in the
        /// container's /etc/passwd).
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// The process (procName) or container (its name in the spec); default the first.
        #[arg(long, visible_alias = "process", value_name = "NAME")]
        container: Option<String>,
    },
    /// Show an instance's output: its stdout and stderr log files, oldest-written file first,
    /// each line with its file; with -f, new lines in the order they are seen.
    Logs {
        #[arg(value_name = "ID", value_parser = instance_arg)]
        id: String,
        /// Keep printing what is appended.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only the last N lines of each log.
        #[arg(long, default_value_t = 100)]
        tail: usize,
        /// Only this stream's files.
        #[arg(long, value_enum)]
        stream: Option<Stream>,
        /// Only this process (procName) or pod container (its name in the spec).
        #[arg(long, visible_alias = "process", value_name = "NAME")]
        container: Option<String>,
        /// Show each line's time (a pod's lines have Docker's; a process's have none: "-").
        #[arg(long)]
        timestamps: bool,
    },
}

/// The owner's right to a copied file (seed 001's Right).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CopyMode {
    R,
    Rw,
}

/// Which of a process's outputs `steward logs` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn word(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// List the app's revisions (the newest `revision_history`): number, hash of what runs,
    /// when and by whom it was applied; `*` marks the current one.
    History {
        /// namespace/name
        #[arg(value_name = "APP", value_parser = app_arg)]
        app: String,
        /// Show this revision instead: its entry and the spec it applied (what `undo
        /// --to-revision N` would apply again).
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
    },
    /// Apply an earlier revision's spec again (as a new revision, with the app's current
    /// instance count): the last good one (the last whose rollout completed), or --to-revision N.
    Undo {
        /// namespace/name
        #[arg(value_name = "APP", value_parser = app_arg)]
        app: String,
        #[arg(long, value_name = "N")]
        to_revision: Option<u64>,
    },
    /// Show the app's rollout: its revision, phase, and how many instances are updated and
    /// ready. With -w, follow it (a progress bar on a terminal) until it completes (exit 0) or
    /// fails (exit 6, also when autoRollback went back: it says which revision runs now).
    Status {
        /// namespace/name
        #[arg(value_name = "APP", value_parser = app_arg)]
        app: String,
        #[arg(short = 'w', long)]
        watch: bool,
        /// With -w: follow this revision (as `apply` printed it), not the current one; exit 6
        /// if a newer one is applied before it rolled out.
        #[arg(long, value_name = "N", requires = "watch")]
        revision: Option<u64>,
        /// With -w: give up after this many seconds (exit 6).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Take no further rollout step until resumed (a newer apply stays paused too).
    Pause {
        #[arg(value_name = "APP", value_parser = app_arg)]
        app: String,
    },
    /// Go on with a paused rollout from where its instances are.
    Resume {
        #[arg(value_name = "APP", value_parser = app_arg)]
        app: String,
    },
    /// Re-create every instance under the same spec, by the app's strategy (a new revision
    /// that differs only in the label steward/restartedAt).
    Restart {
        #[arg(value_name = "APP", value_parser = app_arg)]
        app: String,
    },
}

/// namespace/name, both non-empty.
fn app_arg(s: &str) -> Result<String, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => Ok(s.to_string()),
        _ => Err(format!("{s:?} is not an app (namespace/name)")),
    }
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Every job: phase, succeeded of completions, active and failed runs.
    Ls {
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// A job's counts and every run it keeps: instance id, phase, start, end, exit, reason.
    Status {
        /// namespace/name
        #[arg(value_name = "JOB", value_parser = app_arg)]
        job: String,
    },
    /// A run's output (its instance's logs): --run N, else the last failed run, else the last.
    Logs {
        #[arg(value_name = "JOB", value_parser = app_arg)]
        job: String,
        #[arg(long, value_name = "N")]
        run: Option<u32>,
        #[arg(long, default_value_t = 100)]
        tail: usize,
        #[arg(long, value_enum)]
        stream: Option<Stream>,
    },
}

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Every cron job: rule, next and last tick, counts of started, skipped, missed, failed.
    Ls {
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// A cron job's counts and each tick it keeps, with its runs.
    Status {
        #[arg(value_name = "CRONJOB", value_parser = app_arg)]
        cron: String,
    },
    /// Start a tick's runs now, whatever the rule says.
    ///
    /// While an earlier tick's runs go, the cron job's concurrencyPolicy decides, as for a tick
    /// of its rule: Allow runs both, Forbid refuses the trigger (exit code 1, naming the runs
    /// going), Replace stops them before the new runs start. --force starts one whatever the
    /// policy.
    Trigger {
        #[arg(value_name = "CRONJOB", value_parser = app_arg)]
        cron: String,
        /// Start it whatever the concurrencyPolicy says (beside the runs going).
        #[arg(long)]
        force: bool,
    },
    /// Start no new tick (runs going go on).
    Suspend {
        #[arg(value_name = "CRONJOB", value_parser = app_arg)]
        cron: String,
    },
    /// Start ticks again, from now on (ticks while suspended are not made up for).
    Resume {
        #[arg(value_name = "CRONJOB", value_parser = app_arg)]
        cron: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// HookTemplates: the checks a run makes (web or Prometheus metrics and their conditions).
    #[command(subcommand)]
    Template(HookTemplateCommand),
    /// HookRuns: a template run with its args, every measurement recorded.
    #[command(subcommand)]
    Run(HookRunCommand),
}

#[derive(Debug, Subcommand)]
pub enum HookTemplateCommand {
    /// Create or replace the HookTemplate(s) in FILE (JSON, TOML or YAML; `-`: stdin; checked
    /// here first).
    Apply {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// List templates: name, args and metrics.
    Ls {
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// Print a template as stored (JSON).
    Show {
        /// namespace/name
        #[arg(value_name = "TEMPLATE", value_parser = app_arg)]
        template: String,
    },
    /// Remove a template (runs made from it keep their copy).
    Rm {
        #[arg(value_name = "TEMPLATE", value_parser = app_arg)]
        template: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum HookRunCommand {
    /// Run a template: every metric measured as it says, each measurement recorded. With -w,
    /// wait for the verdict: exit 0 when Successful, 6 otherwise.
    Create {
        /// namespace/name of the template
        #[arg(value_name = "TEMPLATE", value_parser = app_arg)]
        template: String,
        /// The run's name (default TEMPLATE-<unix ms>).
        #[arg(long)]
        name: Option<String>,
        /// A value for one of the template's args, as NAME=VALUE; repeatable.
        #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = parse_key_value)]
        args: Vec<(String, String)>,
        #[arg(short = 'w', long)]
        wait: bool,
        /// With -w: give up after this many seconds (exit 6).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// List runs: phase, measurements taken, and why each finished.
    Ls {
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Only runs with this label, as KEY=VALUE (a rollout's runs carry `steward/app`).
        #[arg(short = 'l', long)]
        label: Option<String>,
    },
    /// Show a run: each metric's counts and measurements (value, verdict, what was called and
    /// why). With -w, wait for it to finish: exit 0 when Successful, 6 otherwise.
    Status {
        /// namespace/name
        #[arg(value_name = "RUN", value_parser = app_arg)]
        run: String,
        #[arg(short = 'w', long)]
        wait: bool,
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Stop a run: no more measurements; each metric is decided by what it measured.
    Terminate {
        #[arg(value_name = "RUN", value_parser = app_arg)]
        run: String,
    },
    /// Remove a run (terminated first if it is going).
    Rm {
        #[arg(value_name = "RUN", value_parser = app_arg)]
        run: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ValuesCommand {
    /// Create or replace NAMESPACE/NAME; instances see it at their next (re)start.
    Create {
        /// namespace/name
        id: String,
        /// A key and its value, as KEY=VALUE; repeatable.
        #[arg(long = "from-literal", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        literals: Vec<(String, String)>,
        /// A key whose value is a file's content, as KEY=PATH; repeatable.
        #[arg(long = "from-file", value_name = "KEY=PATH", value_parser = parse_key_value)]
        files: Vec<(String, String)>,
    },
    /// List names and keys (never values).
    Ls {
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Remove NAMESPACE/NAME.
    Rm {
        /// namespace/name
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// List every kept volume here: its app, ordinal, size, and the instance using it.
    Ls {
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Remove ordinal NAMESPACE/NAME/INDEX's kept volume VOLUME and its data (refused while
    /// the instance exists).
    Rm {
        /// namespace/name/index
        instance: String,
        volume: String,
    },
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    if k.is_empty() {
        return Err(format!("{s:?} has an empty key"));
    }
    Ok((k.to_string(), v.to_string()))
}

#[derive(Debug, clap::Args)]
pub struct Targets {
    /// Instance ids (namespace/name/index).
    #[arg(value_name = "ID", required_unless_present = "all", value_parser = instance_arg)]
    pub ids: Vec<String>,
    /// Every instance.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
    /// Seconds to wait for each to finish (0 = do not wait).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

/// What `steward delete` takes: instances, or whole apps.
#[derive(Debug, clap::Args)]
pub struct DeleteTargets {
    /// Instance ids (namespace/name/index), or apps (namespace/name: every instance, then the
    /// app's spec).
    #[arg(value_name = "ID|APP", required_unless_present = "all", value_parser = delete_arg)]
    pub ids: Vec<String>,
    /// Every instance.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
    /// Seconds to wait for each to finish (0 = do not wait).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Apps: delete at once, without their scale-in hook's word (strategy.scaleIn).
    #[arg(long)]
    pub force: bool,
}

impl DeleteTargets {
    /// The apps named (namespace/name), when every argument names one.
    pub fn apps(&self) -> Option<Vec<(String, String)>> {
        let apps: Vec<(String, String)> = self
            .ids
            .iter()
            .filter_map(|a| a.split_once('/').filter(|(_, n)| !n.contains('/')))
            .map(|(ns, n)| (ns.to_string(), n.to_string()))
            .collect();
        (!self.all && !apps.is_empty() && apps.len() == self.ids.len()).then_some(apps)
    }

    pub fn instances(&self) -> Targets {
        Targets { ids: self.ids.clone(), all: self.all, timeout: self.timeout }
    }
}

/// An instance id (namespace/name/index) or an app (namespace/name).
fn delete_arg(s: &str) -> Result<String, String> {
    match s.split('/').collect::<Vec<_>>().as_slice() {
        [ns, name] if !ns.is_empty() && !name.is_empty() => Ok(s.to_string()),
        _ => instance_arg(s).map_err(|e| format!("{e}, nor an app (namespace/name)")),
    }
}

/// An instance id argument (namespace/name/index): a malformed one is a usage error (exit 2),
/// found before anything is asked of the daemon.
/// `namespace/name/index:PATH`, checked here; split by [`split_copy_target`].
fn copy_target_arg(s: &str) -> Result<String, String> {
    split_copy_target(s).map(|_| s.to_string())
}

/// The instance and the path of `INSTANCE:PATH`.
pub fn split_copy_target(s: &str) -> Result<(crate::spec::InstanceId, String), String> {
    let (id, path) =
        s.split_once(':').ok_or_else(|| format!("{s:?} is not INSTANCE:PATH (namespace/name/index:PATH)"))?;
    if path.is_empty() {
        return Err(format!("{s:?} has no PATH after the ':'"));
    }
    Ok((crate::client::parse_instance_id(id)?, path.to_string()))
}

fn instance_arg(s: &str) -> Result<String, String> {
    crate::client::parse_instance_id(s).map(|_| s.to_string())
}

fn parse_port_assignment(s: &str) -> Result<(String, u16), String> {
    let (name, port) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=PORT"))?;
    let port: u16 = port.parse().map_err(|_| format!("{port:?} is not a port number"))?;
    if name.is_empty() || port == 0 {
        return Err(format!("{s:?} is not NAME=PORT with PORT 1-65535"));
    }
    Ok((name.to_string(), port))
}

/// Runs the CLI; returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    // This host's configuration, for the commands that need it: a remote daemon's is its own.
    let config = || Config::load(cli.config.as_deref());
    match cli.command {
        Command::Validate { files, offline } => Ok(validate(&files, &config()?, offline, cli.output)),
        Command::Render { file, instance, hostip, ports } => render(&file, instance, hostip, ports, &config()?),
        Command::Cert { dir, name, dns, ips } => {
            let dns = if dns.is_empty() { vec![name.clone()] } else { dns };
            match crate::tls::generate(&dir, &name, &dns, &ips) {
                Ok(g) => {
                    let files = [("ca", &g.ca), ("caKey", &g.ca_key), ("cert", &g.cert), ("key", &g.key)];
                    match cli.output {
                        Output::Json => {
                            let map: BTreeMap<&str, &Path> = files.iter().map(|(k, p)| (*k, p.as_path())).collect();
                            println!("{}", serde_json::to_string_pretty(&map)?);
                        }
                        Output::Text => {
                            for ((_, path), what) in files.iter().zip(["CA", "CA key", "certificate", "key"]) {
                                println!("{what}: {}", path.display());
                            }
                        }
                    }
                    Ok(exit::OK)
                }
                Err(e) => {
                    eprintln!("steward cert: {e}");
                    Ok(exit::FAILED)
                }
            }
        }
        Command::Completions { .. } | Command::Man { .. } if cli.output == Output::Json => {
            // Their output is a script or roff pages: there is no JSON form to give.
            eprintln!("steward: -o json does not apply to completions or man (they print scripts and pages)");
            Ok(exit::USAGE)
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "steward", &mut std::io::stdout());
            Ok(exit::OK)
        }
        Command::Man { dir, date } => {
            for page in super::man::write_pages(&dir, &date)? {
                println!("{}", page.display());
            }
            Ok(exit::OK)
        }
        other => {
            let endpoint = match &cli.remote {
                Some(url) => {
                    // clap refuses --remote without them already; this keeps the same word.
                    let (Some(token_file), Some(ca)) = (&cli.token_file, &cli.ca) else {
                        eprintln!("steward: --remote needs --token-file FILE and --ca FILE");
                        return Ok(exit::USAGE);
                    };
                    let options = RemoteOptions { url, token_file, ca, server_name: cli.server_name.as_deref() };
                    match Endpoint::remote(options) {
                        Ok(e) => e,
                        Err(e) => {
                            eprintln!("steward: {e}");
                            return Ok(exit::USAGE);
                        }
                    }
                }
                None => {
                    let config = config()?;
                    Endpoint::local(cli.socket.clone().unwrap_or_else(|| config.socket.clone()), config)
                }
            };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(super::commands::run(other, &endpoint, cli.output))
        }
    }
}

#[derive(Serialize)]
struct FileReport<'a> {
    file: &'a Path,
    /// Which of the file's documents (from 1), when it holds several.
    #[serde(skip_serializing_if = "Option::is_none")]
    document: Option<usize>,
    /// How the text output names it: the file, and the document when there are several.
    #[serde(skip)]
    label: String,
    valid: bool,
    /// `namespace/name` of a valid spec (what `steward delete` takes for the whole app).
    #[serde(skip_serializing_if = "Option::is_none")]
    app: Option<String>,
    errors: Vec<spec::SpecError>,
    /// What would likely fail on this host although the spec is valid (a pidfile's directory
    /// its user cannot write).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<spec::SpecError>,
}

/// `steward validate`: every document of every file (`-`: stdin), each reported.
fn validate(files: &[PathBuf], config: &Config, offline: bool, output: Output) -> i32 {
    let mut reports = Vec::new();
    for file in files {
        let source = spec::source::Source::read(file);
        let documents = source
            .as_ref()
            .map_err(|e| SpecErrors(vec![spec::SpecError::new("", e.clone())]))
            .and_then(|s| s.documents());
        let label = source.as_ref().map_or_else(|_| file.display().to_string(), |s| s.name.clone());
        let documents = match documents {
            Ok(d) => d,
            Err(e) => {
                reports.push(FileReport {
                    file,
                    document: None,
                    label,
                    valid: false,
                    app: None,
                    errors: e.0,
                    warnings: Vec::new(),
                });
                continue;
            }
        };
        let several = documents.len() > 1;
        for (i, doc) in documents.iter().enumerate() {
            let (app, errors, warnings) = match check_document(doc, config, offline) {
                Ok((app, warnings)) => (Some(app), Vec::new(), warnings),
                Err(e) => (None, e.0, Vec::new()),
            };
            let document = several.then_some(i + 1);
            reports.push(FileReport {
                file,
                document,
                label: doc.label.clone(),
                valid: app.is_some(),
                app,
                errors,
                warnings,
            });
        }
    }
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&reports).expect("reports serialize")),
        Output::Text => {
            for r in &reports {
                if r.valid {
                    println!("{}: valid", r.label);
                    for w in &r.warnings {
                        eprintln!("{}: warning: {}: {}", r.label, w.path, w.message);
                    }
                } else {
                    eprintln!("{}: {}", r.label, SpecErrors(r.errors.clone()));
                }
            }
        }
    }
    if reports.iter().all(|r| r.valid) {
        exit::OK
    } else {
        exit::INVALID
    }
}

/// One document checked as what its `kind` says: a HookTemplate, else a process spec (its
/// users looked up here unless `offline`). Ok: its `namespace/name` and the warnings.
fn check_document(
    doc: &spec::source::Document,
    config: &Config,
    offline: bool,
) -> Result<(String, Vec<spec::SpecError>), SpecErrors> {
    if doc.value.get("kind").and_then(|k| k.as_str()) == Some("HookTemplate") {
        let t = crate::hooks::template_from_document(&doc.value).map_err(|e| doc.locate(e))?;
        return Ok((format!("{}/{}", t.metadata.namespace, t.metadata.name), Vec::new()));
    }
    let s = doc.spec(&config.roots())?;
    if !offline {
        spec::users_on_this_host(&s).map_err(|e| doc.locate(e))?;
    }
    Ok((format!("{}/{}", s.metadata.namespace, s.metadata.name), pidfile_warnings(&s, config)))
}

/// A pidfile whose directory the process's user could not write, and that Steward would not
/// make writable: Steward makes the directories it creates the user's, and the instance's run
/// directory writable to the user when the pidfile is directly in it, but leaves a directory
/// that exists already (a root, another directory) as it is. Checked against this host's users
/// and directories, for instance 0; a user unknown here is not checked.
fn pidfile_warnings(parsed: &spec::ProcessSpec, config: &Config) -> Vec<spec::SpecError> {
    use crate::runtime::process::{writable_by, ResolvedUser};
    let roots = config.roots();
    let ports = parsed.placeholder_ports();
    let ctx = RenderContext { roots: &roots, host_ip: "127.0.0.1".into(), allocated_ports: &ports };
    let Ok(rendered) = spec::render(parsed, 0, &ctx) else { return Vec::new() };
    let mut warnings = Vec::new();
    for (i, p) in rendered.processes.iter().enumerate() {
        let Some(dir) = p.pid_file.as_ref().and_then(|f| f.parent()) else { continue };
        let Ok(user) = ResolvedUser::lookup(&p.user) else { continue };
        if dir == rendered.run_dir || !dir.exists() {
            continue;
        }
        if let Err(why) = writable_by(dir, &user) {
            warnings.push(spec::SpecError::new(
                format!("spec.template.spec.processes[{i}].pidFile"),
                format!(
                    "{why}, and Steward leaves a directory that exists as it is: the pidfile cannot be written                      (give it a directory Steward makes, e.g. ${{run_base_dir}}/${{namespace}}.${{processname}}.${{instanceid}}/pid/NAME.pid)"
                ),
            ));
        }
    }
    warnings
}

/// `steward render`: one instance of each document in FILE (`-`: stdin), as JSON; several
/// documents print one JSON object each, in order.
fn render(
    file: &Path,
    instance: u32,
    hostip: Option<IpAddr>,
    ports: Vec<(String, u16)>,
    config: &Config,
) -> anyhow::Result<i32> {
    let roots = config.roots();
    let (documents, parsed): (Vec<_>, Vec<_>) =
        match spec::source::read_checked(file, |doc| spec::from_document(doc, &roots)) {
            Ok(d) => d.into_iter().unzip(),
            Err(spec::source::Refused::Unreadable(why)) => {
                eprintln!("steward: {why}");
                return Ok(exit::INVALID);
            }
            Err(refused) => {
                eprintln!("{refused}");
                return Ok(exit::INVALID);
            }
        };
    let allocated: BTreeMap<String, u16> = ports.into_iter().collect();
    // Processes' and pods' containers' ports alike; with several documents, of any of them.
    let declared: Vec<String> = parsed.iter().flat_map(|p| p.port_wants()).map(|w| w.name).collect();
    if let Some(unknown) = allocated.keys().find(|k| !declared.contains(k)) {
        eprintln!(
            "{file}: --port {unknown}: the spec has no such port (ports: {})",
            declared.join(", "),
            file = file.display()
        );
        return Ok(exit::USAGE);
    }
    let ctx = RenderContext {
        roots: &roots,
        host_ip: hostip.unwrap_or_else(|| config.host_ip()).to_string(),
        allocated_ports: &allocated,
    };
    for (doc, parsed) in documents.iter().zip(&parsed) {
        match spec::render(parsed, instance, &ctx) {
            Ok(r) => println!("{}", serde_json::to_string_pretty(&r)?),
            Err(e) => {
                eprintln!("{}: {e}", doc.label);
                if e.0.iter().any(|x| x.message.contains("no port was allocated")) {
                    eprintln!("hint: give random ports with --port NAME=PORT");
                }
                return Ok(exit::INVALID);
            }
        }
    }
    Ok(exit::OK)
}
