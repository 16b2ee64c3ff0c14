//! `steward-sched`: the thin, stateless scheduler plugin that talks to every host's stewardd.

use crate::protocol::sched_answers::PlacedInstance;
use crate::protocol::{Cursors, EventBody, InstanceChange, InstanceEvent, NodeItem, NodeLine, WatchLine};
use crate::sched::ops::SchedOps;
use crate::sched::scheduler::Intent;
use crate::sched::{Cluster, SchedError, Scheduler};
use crate::spec::AppId;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Parser)]
#[command(
    name = "steward-sched",
    version,
    about = "Steward scheduler plugin: places instances across hosts by seed-000 constraints"
)]
pub struct SchedArgs {
    /// Cluster file: every daemon's address, token and CA.
    #[arg(long, value_name = "FILE", env = "STEWARD_CLUSTER", default_value = "/etc/steward/cluster.toml")]
    pub cluster: PathBuf,
    /// The desired-state store shared by several steward-sched: etcd://HOST:PORT[,...]/PREFIX
    /// (overrides the cluster file's `store`). Default: the embedded store in `state_dir`.
    #[arg(long, global = true, value_name = "URL", env = "STEWARD_SCHED_STORE")]
    pub store: Option<String>,
    /// A `steward-sched serve` to ask (`host:port` or `https://host:port`; the cluster file's
    /// `server` otherwise): commands become its clients instead of acting themselves.
    #[arg(long, global = true, value_name = "URL", env = "STEWARD_SCHED_SERVER")]
    pub server: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = SchedOutput::Text)]
    pub output: SchedOutput,
    /// A node that did not answer makes the command fail (exit 1) even when it did what it
    /// could on the others. Without it, such nodes are reported on stderr and the exit is 0.
    #[arg(long, global = true)]
    pub strict: bool,
    #[command(subcommand)]
    pub command: SchedCommand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchedOutput {
    Text,
    /// One JSON document (deploy, status, scale) or one JSON object per line (watch, run).
    Json,
}

#[derive(Debug, Subcommand)]
pub enum SchedCommand {
    /// Place and apply an application on the cluster's nodes.
    ///
    /// A change of what runs rolls out node by node. The spec a failed rollout left, deployed
    /// again, retries that rollout (`rollout undo` goes back instead).
    Deploy {
        /// Process spec (JSON, TOML or YAML; `-`: stdin; each document of a YAML stream in order,
        /// all checked first).
        file: PathBuf,
        /// Instances that fit on no node (cpu, memory, ports, constraints) are held Pending
        /// with each node's reason, and placed by the leading `run` once they fit, instead of
        /// the deploy being refused whole.
        #[arg(long)]
        wait_for_room: bool,
        /// Refuse an app that exists already (seed 002's create: NotAllowed) instead of
        /// updating it.
        #[arg(long)]
        create_only: bool,
    },
    /// Show every application's instances across the cluster.
    Status,
    /// Stream every daemon's events, merged, resuming after disconnects.
    Watch {
        /// Where to start: `N` (after event N on every node; 0: everything kept) or per node
        /// `h1=40,h2=12` (sequence numbers are each daemon's own; nodes not named start from
        /// now). Default: from now. A cursor beyond a daemon's journal resyncs to its newest.
        #[arg(long, value_name = "N|NODE=N,...", value_parser = Cursors::parse)]
        since: Option<Cursors>,
    },
    /// Change an application's instance count.
    Scale {
        /// namespace/name
        app: String,
        /// 0 keeps the app (its spec, revision and port names) with nothing running.
        instances: u32,
        /// As for deploy (default: what the app was deployed with).
        #[arg(long)]
        wait_for_room: bool,
    },
    /// Remove an application from every node. A node that does not answer gets the delete when
    /// it answers again (`run`); meanwhile nothing places or revives the app.
    Delete {
        /// namespace/name
        app: String,
    },
    /// Stop an application's instances (or one): they keep their node and are never
    /// rescheduled or started by the scheduler until `start`.
    Stop {
        /// namespace/name
        app: String,
        /// One instance only.
        index: Option<u32>,
        /// One instance only (as INDEX).
        #[arg(long, value_name = "N", conflicts_with = "index")]
        instance: Option<u32>,
    },
    /// Start stopped instances again.
    Start {
        /// namespace/name
        app: String,
        /// One instance only.
        index: Option<u32>,
        /// One instance only (as INDEX).
        #[arg(long, value_name = "N", conflicts_with = "index")]
        instance: Option<u32>,
    },
    /// Restart an application on every host by the rollout rules (its strategy's budget, node
    /// by node; seed 002's restart operation), or one instance in place.
    Restart {
        /// namespace/name
        app: String,
        /// One instance only, restarted on its node.
        #[arg(long, value_name = "N")]
        instance: Option<u32>,
    },
    /// An application's endpoints: per port name, its Ready instances (node address,
    /// port) at a revision that grows at every change; with --watch, every new revision.
    Endpoints {
        /// namespace/name
        app: String,
        /// Print every new revision as it is stored (one JSON document per line with -o json).
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Copy a file into a running instance on whichever node runs it (as `steward cp` there).
    Cp {
        /// The file on this host.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// namespace/name/index:PATH
        #[arg(value_name = "INSTANCE:PATH")]
        target: String,
        /// r: the owner may read it (0400); rw: read and write it (0600).
        #[arg(long, value_enum, default_value_t = super::steward::CopyMode::R)]
        mode: super::steward::CopyMode,
        /// The file's owner: a user name, uid or uid:gid.
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// The process (procName) or container (its name in the spec); default the first.
        #[arg(long, visible_alias = "process", value_name = "NAME")]
        container: Option<String>,
    },
    /// Every node: its state, cpu and memory (admitted of allocatable), instances, cordon and
    /// labels, as its daemon reports them now (seed 002's GET /api/nodes; `node ls` too).
    Nodes,
    /// The scheduler's own settings (seed 002's engine config), read and changed at run time.
    Config {
        #[command(subcommand)]
        command: SchedConfigCommand,
    },
    /// Follow every daemon and act: lost nodes, rescheduling by restart policy, strays on
    /// returning nodes, deletes and stops nodes missed, REMOTE_HTTP / REMOTE_TCP checks,
    /// rollouts a killed deploy left. Prints what it sees and does. Reads the cluster file
    /// again on SIGHUP or when it changes (nodes added, removed or moved).
    Run,
    /// Serve steward-sched's HTTP API (the cluster file's `[serve]`: listen, cert, key,
    /// tokens_file) and lead like `run`: several may share an etcd store (any answers, one
    /// leads). Commands given `--server` (or the cluster file's `server`) are its clients.
    /// The web console is served beside the API at `/ui/` (docs/console.md).
    Serve {
        /// Listen here instead of `[serve] listen`.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// The certificate, key and tokens file instead of `[serve]`'s (with --listen, no
        /// `[serve]` section is needed).
        #[arg(long, value_name = "FILE", requires_all = ["key", "tokens_file", "listen"])]
        cert: Option<PathBuf>,
        #[arg(long, value_name = "FILE", requires = "cert")]
        key: Option<PathBuf>,
        #[arg(long, value_name = "FILE", requires = "cert")]
        tokens_file: Option<PathBuf>,
        /// Answer the API only, without the `run` loop: each request acts as the command
        /// would in this process (on a shared store, a `run` elsewhere leads and applies).
        #[arg(long)]
        no_run: bool,
    },
    /// Seed 002's constraints: nodes whose name is (`--equal`) or is not the value take new
    /// instances; `--soft true` (the default) must hold, `--soft false` only prefers.
    Constraint {
        #[command(subcommand)]
        command: SchedConstraintCommand,
    },
    /// An application's rollout across its nodes (a deploy that changes what runs rolls it out
    /// one node at a time, by the spec's strategy, the budget counted over the whole app).
    Rollout {
        #[command(subcommand)]
        command: SchedRolloutCommand,
    },
    /// Hooks (seed 004): templates kept here and given to every node; runs made on a node.
    Hook {
        #[command(subcommand)]
        command: SchedHookCommand,
    },
    /// Maintenance mode (seed 002): the leading run follows and reports, and changes nothing;
    /// commands that change what runs refuse.
    Maintenance {
        #[command(subcommand)]
        command: SchedMaintenanceCommand,
    },
    /// Node controls: cordon (nothing new placed there), uncordon, drain (move everything off).
    Node {
        #[command(subcommand)]
        command: SchedNodeCommand,
    },
    /// Move instances off a node, one at a time (seed 002: removed, then deployed on the
    /// target); apps labelled steward/stateful="true" move only with --force. Exit 1 when an
    /// instance stayed (each printed with why); nothing to move is exit 0.
    Drift {
        #[arg(long)]
        from: String,
        /// The target node, which must meet the app's constraints, room and cordons as any
        /// placement; default: placed by those rules.
        #[arg(long)]
        to: Option<String>,
        /// Only this app (namespace/name).
        #[arg(long)]
        app: Option<String>,
        /// Only this instance of --app.
        #[arg(long, requires = "app")]
        instance: Option<u32>,
        /// Move stateful apps too.
        #[arg(long)]
        force: bool,
    },
    /// The engine: who leads, the store, maintenance, cordons, nodes that do not answer.
    Engine,
    /// Dependencies (seed 002's dependency pods): apps started beside their dependents, one copy
    /// per host (scope node) or per host and namespace (scope namespace), shared, and removed
    /// a grace period after their last dependent left.
    Depend {
        #[command(subcommand)]
        command: SchedDependCommand,
    },
    /// Notification URLs (seed 002's callbacks): the leading run POSTs JSON there when an
    /// instance exits, goes missing, has no address, or restarts more than 3 times in 5 minutes.
    Notify {
        #[command(subcommand)]
        command: SchedNotifyCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedConstraintCommand {
    /// Every constraint.
    Ls,
    /// Set the constraint of TYPE on VALUE (type `node`: a node's name).
    Set {
        #[arg(long = "type", default_value = "node")]
        kind: String,
        #[arg(long)]
        value: String,
        /// true: only nodes equal to VALUE take new instances; false: all but VALUE.
        #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set)]
        equal: bool,
        /// true: it must hold (seed 002); false: preferred.
        #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
        soft: bool,
    },
    /// Remove the constraints of TYPE (on VALUE only, with --value).
    Rm {
        #[arg(long = "type", default_value = "node")]
        kind: String,
        #[arg(long)]
        value: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedDependCommand {
    /// Store a dependency (a process or pod spec, JSON, TOML or YAML; `-`: stdin); nothing
    /// starts until a dependent instance arrives on a host. Stored again: its copies take the
    /// new spec.
    Apply {
        file: PathBuf,
        /// How long a copy without dependents stays: `300`, `90s`, `5m`, `1h` (default 5m).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration_secs)]
        grace: Option<u64>,
    },
    /// Every dependency with its dependents and copies (REFS: dependent instances beside it).
    Ls,
    /// Remove a dependency; refused while an app declares it, unless --force (its copies are
    /// then removed under their dependents).
    Rm {
        /// namespace/name
        dependency: String,
        #[arg(long)]
        force: bool,
    },
}

/// `300`, `90s`, `5m`, `2h` → seconds.
fn parse_duration_secs(s: &str) -> Result<u64, String> {
    let (digits, unit) = s.trim().split_at(s.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(s.trim().len()));
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a duration (300, 90s, 5m, 1h)"))?;
    match unit {
        "" | "s" => Ok(n),
        "m" => Ok(n * 60),
        "h" => Ok(n * 3600),
        _ => Err(format!("{s:?}: the unit must be s, m or h")),
    }
}

#[derive(Debug, Subcommand)]
pub enum SchedConfigCommand {
    /// Every setting (or KEY's): its value, default, range and meaning.
    Get { key: Option<String> },
    /// Change a setting; `default` puts it back. The leading `run` takes it within a second.
    Set { key: String, value: String },
}

#[derive(Debug, Subcommand)]
pub enum SchedNotifyCommand {
    Add { url: String },
    Rm { url: String },
    Ls,
}

#[derive(Debug, Subcommand)]
pub enum SchedMaintenanceCommand {
    On {
        #[arg(long, default_value = "")]
        reason: String,
    },
    Off,
}

#[derive(Debug, Subcommand)]
pub enum SchedNodeCommand {
    /// Every node: in the cluster file or not, its state as the leading run last recorded it
    /// (up, lost, removed), what its daemon said of itself, its cordon.
    Ls,
    /// Nothing new is placed on NODE (or, --preferred, only when no other node fits); what runs
    /// there stays.
    Cordon {
        node: String,
        /// Preferred, not required: placed there still when no other node fits.
        #[arg(long)]
        preferred: bool,
        /// Seed 002's constraint `soft`: true, the cordon must hold (required); false, preferred.
        #[arg(long, value_name = "BOOL", conflicts_with = "preferred")]
        soft: Option<bool>,
        #[arg(long, default_value = "")]
        reason: String,
    },
    Uncordon {
        node: String,
    },
    /// Cordon NODE (required) and move every instance off it (drift --from NODE).
    Drain {
        node: String,
        /// Move stateful apps too.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedHookCommand {
    /// HookTemplates: kept here, given to every node.
    #[command(subcommand)]
    Template(SchedHookTemplateCommand),
    /// HookRuns: made on a node, which measures and keeps them.
    #[command(subcommand)]
    Run(SchedHookRunCommand),
}

#[derive(Debug, Subcommand)]
pub enum SchedHookTemplateCommand {
    /// Store a HookTemplate (JSON, TOML or YAML; `-`: stdin) and give it to every node (nodes
    /// away get it when `run` hears them again).
    Apply { file: PathBuf },
    /// The stored templates.
    Ls,
    /// Remove a template here and from every node that answers.
    Rm {
        /// namespace/name
        template: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedHookRunCommand {
    /// Run a template on a node (`--node`, or the first that answers, in name order), which
    /// measures and keeps it. With -w, wait for the verdict: exit 0 when Successful, 1 otherwise.
    Create {
        /// namespace/name of the template
        template: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        node: Option<String>,
        /// NAME=VALUE; repeatable.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        #[arg(short = 'w', long)]
        wait: bool,
    },
    /// Every node's runs.
    Ls {
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// A run, wherever it is, with every measurement. With -w, once it has finished.
    Status {
        /// namespace/name
        run: String,
        #[arg(short = 'w', long)]
        wait: bool,
    },
    /// Stop a run, wherever it is.
    Terminate {
        /// namespace/name
        run: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedRolloutCommand {
    /// The rollout: its phase, the nodes done, and each node's progress.
    Status {
        /// namespace/name
        app: String,
    },
    /// Deploy the spec from before the current one again (today's count), rolled out the same way.
    Undo {
        /// namespace/name
        app: String,
    },
    /// No node gets the new spec until resumed; the node rolling pauses.
    Pause {
        /// namespace/name
        app: String,
    },
    /// Go on with a paused rollout, to the end.
    Resume {
        /// namespace/name
        app: String,
    },
}

/// Exit codes: 0 done, 1 the request failed (invalid spec, impossible placement, a node
/// refused), 2 usage, 3 the cluster file, the store or the server cannot be used.
pub fn run(args: SchedArgs) -> anyhow::Result<i32> {
    let cluster = match Cluster::load(&args.cluster) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("steward-sched: {e}");
            return Ok(3);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    if let Some(url) = &args.store {
        if let Err(e) = crate::sched::etcd::parse_url(url) {
            eprintln!("steward-sched: --store: {e}");
            return Ok(3);
        }
    }
    let output = args.output;
    let server = args.server.clone().or_else(|| cluster.server.clone());
    let acts_here = matches!(args.command, SchedCommand::Run | SchedCommand::Serve { .. });
    if let (Some(server), false) = (server, acts_here) {
        let client = match cluster.server_client(&server) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("steward-sched: --server {server}: {e}");
                return Ok(3);
            }
        };
        return runtime.block_on(execute(&client, args.command, output, args.strict));
    }
    let sched = match runtime.block_on(Scheduler::open(cluster, args.store.as_deref())) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("steward-sched: {e}");
            return Ok(3);
        }
    };
    runtime.block_on(async move {
        let result = match args.command {
            SchedCommand::Run => sched.clone().run(Some(args.cluster), move |v| print_line(v, output)).await,
            SchedCommand::Serve { listen, cert, key, tokens_file, no_run } => {
                let given = match (listen, cert, key, tokens_file) {
                    (Some(listen), Some(cert), Some(key), Some(tokens_file)) => {
                        Some(crate::sched::cluster::ServeSection::new(listen, cert, key, tokens_file))
                    }
                    _ => None,
                };
                serve(sched.clone(), args.cluster, (listen, given), no_run, output).await
            }
            command => return execute(&sched, command, output, args.strict).await,
        };
        Ok(finish(result, &sched.unreachable(), args.strict))
    })
}

/// `serve`: the API and the `run` loop, until SIGTERM or SIGINT (or either fails).
async fn serve(
    sched: Arc<Scheduler>,
    cluster_file: PathBuf,
    (listen, given): (Option<std::net::SocketAddr>, Option<crate::sched::cluster::ServeSection>),
    no_run: bool,
    output: SchedOutput,
) -> Result<(), SchedError> {
    use tokio::signal::unix::{signal, SignalKind};
    let Some(section) = given.or_else(|| sched.cluster.serve.clone()) else {
        let message =
            "has no [serve] section (listen, cert, key, tokens_file), and serve was not given them".to_string();
        return Err(SchedError::Cluster { path: cluster_file, message });
    };
    let config = section.remote_config(listen);
    let (lines, _) = tokio::sync::broadcast::channel(1024);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let nodes_watch = no_run.then(|| crate::sched::scheduler::NodesWatch::new(cluster_file.clone()));
    let served =
        Arc::new(crate::sched::api::Served { sched: sched.clone(), lines: lines.clone(), shutdown, nodes_watch });
    let limits = crate::config::ServeLimits {
        header_timeout: std::time::Duration::from_secs(30),
        max_connections: 4096,
        max_connections_per_peer: 1024,
    };
    let api = crate::sched::api::serve(served, &config, limits);
    let leading = async {
        if no_run {
            return std::future::pending().await;
        }
        sched
            .run(Some(cluster_file), move |v| {
                print_line(v, output);
                let _ = lines.send(v.clone());
            })
            .await
    };
    let mut term = signal(SignalKind::terminate()).map_err(|e| SchedError::Store(format!("SIGTERM handler: {e}")))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| SchedError::Store(format!("SIGINT handler: {e}")))?;
    tokio::pin!(api, leading);
    let result = tokio::select! {
        r = &mut api => r.map_err(|e| SchedError::Config(e.to_string())),
        r = &mut leading => r,
        _ = term.recv() => Ok(()),
        _ = int.recv() => Ok(()),
    };
    let _ = stop.send(true);
    result
}

/// What a command's result makes the exit code, every node that did not answer reported first
/// (the operator must know, success or not).
fn finish(
    result: Result<(), SchedError>,
    unreachable: &std::collections::BTreeMap<String, String>,
    strict: bool,
) -> i32 {
    for (node, why) in unreachable {
        eprintln!("steward-sched: node {node} did not answer: {why}");
    }
    match result {
        Ok(()) if strict && !unreachable.is_empty() => {
            eprintln!("steward-sched: --strict: {} node(s) did not answer", unreachable.len());
            1
        }
        Ok(()) => 0,
        Err(e) => {
            eprintln!("steward-sched: {e}");
            match e {
                SchedError::Cluster { .. } | SchedError::Store(_) | SchedError::Tls(_) => 3,
                SchedError::Server { code, .. } if code == "unavailable" => 3,
                _ => 1,
            }
        }
    }
}

/// One command, in this process or asked of a server: the exit code.
async fn execute<S: SchedOps>(
    sched: &S,
    command: SchedCommand,
    output: SchedOutput,
    strict: bool,
) -> anyhow::Result<i32> {
    let result = match command {
        SchedCommand::Deploy { file, wait_for_room, create_only } => {
            deploy(sched, &file, wait_for_room, create_only, output).await
        }
        SchedCommand::Scale { app, instances, wait_for_room } => {
            let wait = wait_for_room.then_some(true);
            sched.scale(&AppId::from_key(&app), instances, wait).await.map(|p| print_placed(&p, output))
        }
        SchedCommand::Status => match sched.status().await {
            Ok(p) => {
                if output == SchedOutput::Text {
                    if let Ok(engine) = sched.engine_status().await {
                        println!("{}", engine_line(&engine));
                    }
                }
                print_placed(&p, output);
                Ok(())
            }
            Err(e) => Err(e),
        },
        SchedCommand::Delete { app } => sched.delete(&AppId::from_key(&app)).await.map(|d| print_deleted(&d, output)),
        SchedCommand::Stop { app, index, instance } => sched
            .set_stopped(&AppId::from_key(&app), index.or(instance), Intent::Stop)
            .await
            .map(|p| print_placed(&p, output)),
        SchedCommand::Start { app, index, instance } => sched
            .set_stopped(&AppId::from_key(&app), index.or(instance), Intent::Start)
            .await
            .map(|p| print_placed(&p, output)),
        SchedCommand::Restart { app, instance } => {
            sched.restart(&AppId::from_key(&app), instance).await.map(|p| print_placed(&p, output))
        }
        SchedCommand::Nodes => sched.node_listing().await.map(|nodes| print_nodes(&nodes, output)),
        SchedCommand::Endpoints { app, watch: false } => {
            sched.stored_endpoints(&AppId::from_key(&app)).await.map(|e| {
                print_endpoints(&app, e.as_ref(), output, false);
            })
        }
        SchedCommand::Endpoints { app, watch: true } => {
            sched.watch_endpoints(&AppId::from_key(&app), |e| print_endpoints(&app, e, output, true)).await
        }
        SchedCommand::Cp { file, target, mode, user, container } => {
            copy_in(sched, (&file, &target), mode, user, container, output).await
        }
        SchedCommand::Config { command } => {
            let entries = match command {
                SchedConfigCommand::Get { key } => sched.config(key.as_deref()).await,
                SchedConfigCommand::Set { key, value } => sched.set_config(&key, &value).await,
            };
            entries.map(|entries| print_config(&entries, output))
        }
        SchedCommand::Engine => sched.engine_status().await.map(|e| print_engine(&e, output)),
        SchedCommand::Depend { command } => depend(sched, command, output).await,
        SchedCommand::Notify { command } => {
            let urls = match command {
                SchedNotifyCommand::Add { url } => sched.set_webhook(&url, true).await,
                SchedNotifyCommand::Rm { url } => sched.set_webhook(&url, false).await,
                SchedNotifyCommand::Ls => sched.webhooks().await,
            };
            urls.map(|urls| match output {
                SchedOutput::Json => println!("{}", serde_json::to_string_pretty(&urls).unwrap_or_default()),
                SchedOutput::Text => urls.iter().for_each(|u| println!("{u}")),
            })
        }
        SchedCommand::Maintenance { command } => {
            let (on, reason) = match command {
                SchedMaintenanceCommand::On { reason } => (true, reason),
                SchedMaintenanceCommand::Off => (false, String::new()),
            };
            sched.set_maintenance(on, &reason).await.map(|e| print_engine(&e, output))
        }
        SchedCommand::Constraint { command } => constraint(sched, command, output).await,
        SchedCommand::Node { command: SchedNodeCommand::Cordon { node, preferred, soft, reason } } => {
            let preferred = cordon_preferred(preferred, soft);
            sched.cordon(&node, Some((preferred, &reason))).await.map(|e| print_engine(&e, output))
        }
        SchedCommand::Node { command: SchedNodeCommand::Ls } => {
            sched.node_listing().await.map(|nodes| print_node_records(&nodes, output))
        }
        SchedCommand::Node { command: SchedNodeCommand::Uncordon { node } } => {
            sched.cordon(&node, None).await.map(|e| print_engine(&e, output))
        }
        SchedCommand::Node { command: SchedNodeCommand::Drain { node, force } } => {
            sched.drain(&node, force).await.and_then(|d| drifted(&node, &d, output))
        }
        SchedCommand::Drift { from, to, app, instance, force } => {
            let req = crate::protocol::DriftRequest { from: from.clone(), to, app, instance, force };
            sched.drift(&req).await.and_then(|d| drifted(&from, &d, output))
        }
        SchedCommand::Watch { since } => {
            sched
                .watch(since, |line| {
                    let heartbeat = matches!(&line, WatchLine::Node(n) if matches!(n.item, NodeItem::Heartbeat { .. }));
                    if !heartbeat {
                        print_line(&line, output);
                    }
                    true
                })
                .await
        }
        SchedCommand::Run | SchedCommand::Serve { .. } => {
            Err(SchedError::Config("run and serve act in this process: give no --server".into()))
        }
        SchedCommand::Rollout { command } => rollout(sched, command, output).await,
        SchedCommand::Hook { command } => match hook(sched, command, output).await {
            Ok(true) => Ok(()),
            Ok(false) => return Ok(1),
            Err(e) => Err(e),
        },
    };
    Ok(finish(result, &sched.unreachable(), strict))
}

/// `deploy FILE`: every document checked here first (each mistake named with its file and
/// line), then deployed in order.
async fn deploy<S: SchedOps>(
    sched: &S,
    file: &std::path::Path,
    wait_for_room: bool,
    create_only: bool,
    output: SchedOutput,
) -> Result<(), SchedError> {
    let mut placed = Vec::new();
    for (doc, spec) in crate::sched::scheduler::checked_documents(file, crate::sched::scheduler::check_spec)? {
        let deployed = sched.deploy(&doc, spec, wait_for_room, create_only).await.map_err(|e| e.in_document(&doc))?;
        deployed.warnings.iter().for_each(|w| print_warning(w, output));
        placed.extend(deployed.instances);
    }
    print_placed(&placed, output);
    Ok(())
}

/// `constraint ls|set|rm`.
async fn constraint<S: SchedOps>(
    sched: &S,
    command: SchedConstraintCommand,
    output: SchedOutput,
) -> Result<(), SchedError> {
    let list = match command {
        SchedConstraintCommand::Ls => sched.constraints().await?,
        SchedConstraintCommand::Set { kind, value, equal, soft } => {
            sched.set_constraint(crate::protocol::Constraint { kind, value, equal, soft, since_ms: 0 }).await?
        }
        SchedConstraintCommand::Rm { kind, value } => sched.remove_constraint(&kind, value.as_deref()).await?,
    };
    match output {
        SchedOutput::Json => println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default()),
        SchedOutput::Text => {
            println!("{:<8} {:<4} {:<16} {:<9} SINCE", "TYPE", "OP", "VALUE", "SOFT");
            for c in list {
                let op = if c.equal { "==" } else { "!=" };
                let soft = if c.soft { "required" } else { "preferred" };
                println!("{:<8} {op:<4} {:<16} {soft:<9} {}", c.kind, c.value, crate::clock::rfc3339_utc(c.since_ms));
            }
        }
    }
    Ok(())
}

fn print_config(entries: &[crate::sched::scheduler::ConfigEntry], output: SchedOutput) {
    if output == SchedOutput::Json {
        println!("{}", serde_json::to_string_pretty(entries).unwrap_or_default());
        return;
    }
    println!("{:<24} {:>7} {:>8} {:<10} ABOUT", "KEY", "VALUE", "DEFAULT", "RANGE");
    for e in entries {
        println!("{:<24} {:>7} {:>8} {:<10} {}", e.key, e.value, e.default, e.range, e.about);
    }
}

fn print_nodes(nodes: &[crate::sched::scheduler::NodeListing], output: SchedOutput) {
    if output == SchedOutput::Json {
        println!("{}", serde_json::to_string_pretty(nodes).unwrap_or_default());
        return;
    }
    // Kubernetes quantities, short: admitted/allocatable/capacity.
    let cpu = |m: u64| if m % 1000 == 0 { (m / 1000).to_string() } else { format!("{m}m") };
    let memory = |b: u64| match b >> 20 {
        mib if mib >= 1024 => format!("{:.1}Gi", b as f64 / (1u64 << 30) as f64),
        mib => format!("{mib}Mi"),
    };
    println!(
        "{:<12} {:<8} {:<14} {:<22} {:<24} {:>9} {:<10} LABELS",
        "NODE", "STATE", "HOSTNAME", "CPU ADMIT/ALLOC/CAP", "MEMORY ADMIT/ALLOC/CAP", "INSTANCES", "CORDON"
    );
    for n in nodes {
        let state = n.record.as_ref().and_then(|r| serde_json::to_value(r.state).ok());
        let state = state.as_ref().and_then(|v| v.as_str()).unwrap_or("unknown").to_string();
        let state = if n.in_cluster_file || state == "removed" { state } else { format!("{state}*") };
        let cordon = n.cordon.as_ref().map_or("-", |c| if c.preferred { "preferred" } else { "required" });
        match &n.live {
            Some(l) => {
                let r = &l.resources;
                let labels: Vec<String> = l.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!(
                    "{:<12} {state:<8} {:<14} {:<22} {:<24} {:>9} {cordon:<10} {}",
                    n.name,
                    l.hostname,
                    format!(
                        "{}/{}/{}",
                        cpu(r.allocated.milli_cpu),
                        cpu(r.allocatable.milli_cpu),
                        cpu(r.capacity.milli_cpu)
                    ),
                    format!(
                        "{}/{}/{}",
                        memory(r.allocated.memory_bytes),
                        memory(r.allocatable.memory_bytes),
                        memory(r.capacity.memory_bytes)
                    ),
                    l.instances,
                    if labels.is_empty() { "-".to_string() } else { labels.join(",") }
                );
            }
            None => {
                let why = n.unreachable.as_deref().unwrap_or("not in this cluster file");
                println!("{:<12} {state:<8} {:<14} unreachable: {why}   cordon {cordon}", n.name, "-");
            }
        }
    }
}

/// `node ls`: the leader's records (since when each node is up, lost or removed).
fn print_node_records(nodes: &[crate::sched::scheduler::NodeListing], output: SchedOutput) {
    if output == SchedOutput::Json {
        println!("{}", serde_json::to_string_pretty(nodes).unwrap_or_default());
        return;
    }
    println!("{:<12} {:<8} {:<25} {:<22} {:<16} CORDON", "NODE", "STATE", "SINCE", "ADDRESS", "HOSTNAME");
    for n in nodes {
        let (state, since, address, hostname) = match &n.record {
            Some(r) => {
                let state = serde_json::to_value(r.state).ok().and_then(|v| v.as_str().map(String::from));
                (
                    state.unwrap_or_default(),
                    crate::clock::rfc3339_utc(r.since_ms),
                    r.address.clone(),
                    r.hostname.clone(),
                )
            }
            None => ("unknown".into(), "-".into(), String::new(), String::new()),
        };
        let state = if n.in_cluster_file || state == "removed" { state } else { format!("{state}*") };
        let cordon = n.cordon.as_ref().map_or("-", |c| if c.preferred { "preferred" } else { "required" });
        println!("{:<12} {state:<8} {since:<25} {address:<22} {hostname:<16} {cordon}", n.name);
    }
}

/// `steward-sched depend ...`.
async fn depend<S: SchedOps>(sched: &S, command: SchedDependCommand, output: SchedOutput) -> Result<(), SchedError> {
    let json = output == SchedOutput::Json;
    match command {
        SchedDependCommand::Apply { file, grace } => {
            for (doc, _) in crate::sched::scheduler::checked_documents(&file, crate::sched::scheduler::check_spec)? {
                let stored = sched.put_dependency(&doc, grace).await.map_err(|e| e.in_document(&doc))?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&stored).unwrap_or_default());
                } else {
                    println!(
                        "dependency {} stored (revision {}, grace {} s); {} cop(ies) running",
                        stored.dependency,
                        stored.revision,
                        stored.grace_secs,
                        stored.copies.len()
                    );
                }
            }
        }
        SchedDependCommand::Ls => {
            let list = sched.dependency_statuses().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default());
                return Ok(());
            }
            println!("{:<28} {:<4} {:<28} {:<10} {:<5} {:<4} IDLE", "DEPENDENCY", "REV", "COPY", "NODE", "REFS", "REV");
            let now = crate::clock::now_ms();
            for d in list {
                if d.copies.is_empty() {
                    println!("{:<28} {:<4} {:<28} (dependents: {})", d.dependency, d.revision, "-", d.dependents.len());
                }
                for c in &d.copies {
                    let idle = c
                        .idle_since_ms
                        .map_or("-".to_string(), |t| format!("{} s of {}", now.saturating_sub(t) / 1000, d.grace_secs));
                    println!(
                        "{:<28} {:<4} {:<28} {:<10} {:<5} {:<4} {idle}",
                        d.dependency, d.revision, c.instance, c.node, c.refs, c.revision
                    );
                }
            }
        }
        SchedDependCommand::Rm { dependency, force } => {
            let away = sched.delete_dependency(&dependency, force).await?;
            println!("dependency {dependency} removed");
            if !away.is_empty() {
                println!("  its copies on {} stay (unreachable): remove them there", away.join(", "));
            }
        }
    }
    Ok(())
}

/// `steward-sched hook ...`; false: a run waited for did not succeed.
async fn hook<S: SchedOps>(sched: &S, command: SchedHookCommand, output: SchedOutput) -> Result<bool, SchedError> {
    let json = output == SchedOutput::Json;
    let split = |id: &str| -> Result<(String, String), SchedError> {
        id.split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
            .map(|(ns, name)| (ns.to_string(), name.to_string()))
            .ok_or_else(|| SchedError::Apply { app: id.to_string(), message: "expected namespace/name".into() })
    };
    match command {
        SchedHookCommand::Template(SchedHookTemplateCommand::Apply { file }) => {
            for (doc, _) in crate::sched::scheduler::checked_documents(&file, crate::hooks::template_from_document)? {
                let stored = sched.put_hook_template(&doc).await.map_err(|e| e.in_document(&doc))?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&stored).unwrap_or_default());
                } else {
                    let t = &stored.template;
                    println!("hook template {}/{} stored; given to {}", t.namespace, t.name, stored.nodes.join(", "));
                    for (node, why) in &stored.unreachable {
                        println!("  {node}: not given yet ({why}); `run` gives it when it hears the node");
                    }
                }
            }
        }
        SchedHookCommand::Template(SchedHookTemplateCommand::Ls) => {
            let list = sched.hook_templates().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default());
            } else {
                println!("{:<32} {:<24} METRICS", "TEMPLATE", "ARGS");
                for t in list {
                    println!(
                        "{:<32} {:<24} {}",
                        format!("{}/{}", t.namespace, t.name),
                        t.args.join(","),
                        t.metrics.join(",")
                    );
                }
            }
        }
        SchedHookCommand::Template(SchedHookTemplateCommand::Rm { template }) => {
            let (ns, name) = split(&template)?;
            let away = sched.delete_hook_template(&ns, &name).await?;
            println!("hook template {template} removed");
            if !away.is_empty() {
                println!("  still on {} (unreachable): remove it there when they are back", away.join(", "));
            }
        }
        SchedHookCommand::Run(SchedHookRunCommand::Create { template, name, node, args, wait }) => {
            let (namespace, template) = split(&template)?;
            let mut given = std::collections::BTreeMap::new();
            for a in args {
                let (k, v) = a.split_once('=').ok_or_else(|| SchedError::Apply {
                    app: template.clone(),
                    message: format!("--arg {a:?}: expected NAME=VALUE"),
                })?;
                given.insert(k.to_string(), v.to_string());
            }
            let req =
                crate::hooks::CreateHookRun { template, namespace, name, args: given, labels: Default::default() };
            let (node, run) = sched.create_hook_run(&req, node.as_deref()).await?;
            if !wait {
                if json {
                    println!("{}", serde_json::to_string_pretty(&run).unwrap_or_default());
                } else {
                    println!("hook run {}/{} started on {node}", run.metadata.namespace, run.metadata.name);
                }
                return Ok(true);
            }
            return wait_run(sched, &run.metadata.namespace, &run.metadata.name, json).await;
        }
        SchedHookCommand::Run(SchedHookRunCommand::Ls { namespace }) => {
            let (runs, away) = sched.hook_runs(namespace.as_deref()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&runs).unwrap_or_default());
            } else {
                println!("{:<36} {:<12} {:<20} {:<13} {:>5}  MESSAGE", "RUN", "NODE", "TEMPLATE", "PHASE", "TAKEN");
                for r in runs {
                    let id = format!("{}/{}", r.run.namespace, r.run.name);
                    let phase = format!("{:?}", r.run.phase);
                    println!(
                        "{id:<36} {:<12} {:<20} {phase:<13} {:>5}  {}",
                        r.node, r.run.template, r.run.measurements, r.run.message
                    );
                }
            }
            for (node, why) in away {
                eprintln!("steward-sched: node {node} did not answer: {why}");
            }
        }
        SchedHookCommand::Run(SchedHookRunCommand::Status { run, wait }) => {
            let (ns, name) = split(&run)?;
            if wait {
                return wait_run(sched, &ns, &name, json).await;
            }
            let (node, run) = sched.hook_run(&ns, &name, None).await?;
            if !json {
                println!("on node {node}");
            }
            super::hook::show_run(&run, json);
        }
        SchedHookCommand::Run(SchedHookRunCommand::Terminate { run }) => {
            let (ns, name) = split(&run)?;
            let (node, run) = sched.terminate_hook_run(&ns, &name).await?;
            if !json {
                println!("on node {node}");
            }
            super::hook::show_run(&run, json);
        }
    }
    Ok(true)
}

/// Waits for a run's verdict (a minute per ask); true when Successful.
async fn wait_run<S: SchedOps>(sched: &S, ns: &str, name: &str, json: bool) -> Result<bool, SchedError> {
    loop {
        let (node, run) = sched.hook_run(ns, name, Some(std::time::Duration::from_secs(60))).await?;
        if run.is_done() {
            if !json {
                println!("on node {node}");
            }
            super::hook::show_run(&run, json);
            return Ok(run.status.phase == crate::hooks::MetricPhase::Successful);
        }
    }
}

async fn rollout<S: SchedOps>(sched: &S, command: SchedRolloutCommand, output: SchedOutput) -> Result<(), SchedError> {
    let (app, action) = match command {
        SchedRolloutCommand::Status { app } => {
            print_rollout(&sched.rollout_status(&AppId::from_key(&app)).await?, output);
            return Ok(());
        }
        SchedRolloutCommand::Pause { app } => (app, "pause"),
        SchedRolloutCommand::Resume { app } => (app, "resume"),
        SchedRolloutCommand::Undo { app } => (app, "undo"),
    };
    print_rollout(&sched.rollout_action(&AppId::from_key(&app), action).await?, output);
    Ok(())
}

fn print_rollout(status: &crate::sched::scheduler::SchedRolloutStatus, output: SchedOutput) {
    if output == SchedOutput::Json {
        println!("{}", serde_json::to_string_pretty(status).unwrap_or_default());
        return;
    }
    for line in rollout_lines(status) {
        println!("{line}");
    }
}

fn rollout_lines(status: &crate::sched::scheduler::SchedRolloutStatus) -> Vec<String> {
    let p = &status.progress;
    let phase = match status.rollout.as_ref().map(|r| &r.phase) {
        None => "never rolled out".to_string(),
        Some(crate::protocol::RolloutPhase::Failed { reason }) => {
            format!("failed: {reason} (deploying the same spec again retries it; rollout undo goes back)")
        }
        Some(phase) => phase.name().to_string(),
    };
    let mut out = vec![format!("{}: {phase}; {} of {} updated, {} ready", status.app, p.updated, p.instances, p.ready)];
    for (node, body) in &status.nodes {
        let done = status.rollout.as_ref().is_some_and(|r| r.done.contains(node));
        match body {
            crate::sched::scheduler::NodeRollout::Answered(b) => {
                let there = b.rollout.as_ref().map_or("-".to_string(), |r| r.phase.name().to_string());
                let mark = if done { " (done)" } else { "" };
                let p = &b.progress;
                // Not reached: its daemon counts its instances against the spec it has.
                let line = match status.rollout.as_ref().is_none_or(|r| r.reached(node, b.revision)) {
                    true => format!("{} of {} updated, {} ready{mark}", p.updated, p.instances, p.ready),
                    false => format!("0 of {} updated (not reached: runs the previous spec)", p.instances),
                };
                // What failed there, kept for its output (`steward logs` on that node).
                let kept: Vec<String> =
                    b.rollout.iter().flat_map(|r| &r.kept).map(|i| format!("{}/{i}", b.app)).collect();
                let kept = match kept.is_empty() {
                    true => String::new(),
                    false => format!("; kept for its logs there: {}", kept.join(", ")),
                };
                out.push(format!("  {node:<12} revision {:<4} {there:<12} {line}{kept}", b.revision));
            }
            crate::sched::scheduler::NodeRollout::Unreachable { unreachable } => {
                out.push(format!("  {node:<12} unreachable: {unreachable}"))
            }
        }
    }
    out
}

/// A warning on stderr: with `-o json` a JSON line (`{"warning": {"path", "message"}}`), so
/// stdout keeps the command's own document.
fn print_warning(w: &crate::spec::SpecError, output: SchedOutput) {
    match output {
        SchedOutput::Json => eprintln!("{}", serde_json::json!({ "warning": w })),
        SchedOutput::Text => eprintln!("steward-sched: warning: {w}"),
    }
}

fn print_placed(list: &[PlacedInstance], output: SchedOutput) {
    match output {
        SchedOutput::Json => println!("{}", serde_json::to_string_pretty(list).unwrap_or_default()),
        SchedOutput::Text => {
            println!(
                "{:<28} {:<12} {:<10} {:<12} {:<5} {:<8} MESSAGE",
                "INSTANCE", "NODE", "PLACEMENT", "STATE", "READY", "RESTARTS"
            );
            for p in list {
                use crate::sched::store::PlacementState;
                let placement = match &p.placement {
                    PlacementState::Placed => "Placed".to_string(),
                    PlacementState::Lost => "Lost".to_string(),
                    PlacementState::Failed => "Failed".to_string(),
                    PlacementState::Stray => "Stray".to_string(),
                    PlacementState::Deleting => "Deleting".to_string(),
                    PlacementState::Pending { reason } if reason == "applying" => "Applying".to_string(),
                    PlacementState::Pending { reason } => format!("Pending ({reason})"),
                };
                let ready = if p.state == "Running" {
                    if p.ready {
                        "yes"
                    } else {
                        "no"
                    }
                } else {
                    "-"
                };
                println!(
                    "{:<28} {:<12} {:<10} {:<12} {:<5} {:<8} {}",
                    p.instance, p.node, placement, p.state, ready, p.restarts, p.message
                );
            }
        }
    }
}

/// `engine: leader h-42; store …; maintenance off; cordoned h2 (hard)`.
fn engine_line(e: &crate::sched::scheduler::EngineStatus) -> String {
    let leader = e.leader.clone().unwrap_or_else(|| "none (no steward-sched run leads)".into());
    let maintenance = match &e.maintenance {
        Some(m) if m.reason.is_empty() => "ON".to_string(),
        Some(m) => format!("ON ({})", m.reason),
        None => "off".to_string(),
    };
    let mut line = format!("engine: leader {leader}; store {}; maintenance {maintenance}", e.store);
    if !e.cordons.is_empty() {
        let cordons: Vec<String> = e
            .cordons
            .iter()
            .map(|(n, c)| format!("{n} ({})", if c.preferred { "preferred" } else { "required" }))
            .collect();
        line.push_str(&format!("; cordoned {}", cordons.join(", ")));
    }
    line
}

/// Whether a cordon is preferred: `--preferred`, or seed 002's `--soft false` (its `soft`
/// means enforced, DESIGN § 7: `--soft true` is required).
fn cordon_preferred(preferred: bool, soft: Option<bool>) -> bool {
    soft.map_or(preferred, |soft| !soft)
}

fn print_engine(e: &crate::sched::scheduler::EngineStatus, output: SchedOutput) {
    match output {
        SchedOutput::Json => println!("{}", serde_json::to_string_pretty(e).unwrap_or_default()),
        SchedOutput::Text => println!("{}", engine_line(e)),
    }
}

/// Prints a drift's moves; an instance it was asked to move that stayed makes it fail (exit
/// 1), each named above with why. Nothing to move off `from` is done (exit 0).
fn drifted(from: &str, list: &[crate::sched::scheduler::Drifted], output: SchedOutput) -> Result<(), SchedError> {
    if output == SchedOutput::Json {
        println!("{}", serde_json::to_string_pretty(list).unwrap_or_default());
    } else if list.is_empty() {
        println!("nothing to move off {from}");
    }
    for d in list.iter().filter(|_| output == SchedOutput::Text) {
        match &d.to {
            Some(to) => println!("{} {} -> {to}", d.instance, d.from),
            None => println!("{} stays on {}: {}", d.instance, d.from, d.reason),
        }
    }
    match list.iter().filter(|d| d.to.is_none()).count() {
        0 => Ok(()),
        stayed => Err(SchedError::Node {
            node: from.into(),
            message: format!("{stayed} of {} instance(s) stayed (each said above, with why)", list.len()),
        }),
    }
}

fn print_deleted(d: &crate::sched::scheduler::Deleted, output: SchedOutput) {
    if output == SchedOutput::Json {
        println!("{}", serde_json::to_string_pretty(d).unwrap_or_default());
        return;
    }
    println!("deleted {}: {} instance(s) removed", d.app, d.removed);
    if !d.pending.is_empty() {
        let nodes: Vec<&str> = d.pending.keys().map(String::as_str).collect();
        println!(
            "  {} did not answer: kept as deleting; each gets the delete when it answers again \
             (`steward-sched run`), and nothing places the app meanwhile",
            nodes.join(", ")
        );
    }
}

/// One followed item: JSON, or `NODE #SEQ what happened`.
fn print_line(line: &WatchLine, output: SchedOutput) {
    use std::io::Write;
    let text = match output {
        SchedOutput::Json => serde_json::to_string(line).unwrap_or_default(),
        // Daemons' events carry workload text: escaped for the terminal.
        SchedOutput::Text => super::safe_text::safe_line(&text_line(line)).into_owned(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// A line for people: `TIME NODE what happened (why)`, the time the event's own (the
/// daemon's or the scheduler's), else when it was received.
fn text_line(line: &WatchLine) -> String {
    let (at_ms, text) = match line {
        WatchLine::Node(NodeLine { node, item }) => match item {
            NodeItem::Disconnected { disconnected: d } => {
                (None, format!("{node} stream interrupted ({}); resuming after #{}", d.reason, d.resume_after))
            }
            NodeItem::Resync { resync } => (
                None,
                format!(
                    "{node} resync: its journal is behind the cursor #{} (a new state directory?); \
                     following from #{} and applying its apps again",
                    resync.was, resync.last_seq
                ),
            ),
            NodeItem::Gap { gap } => {
                (None, format!("{node} events #{} to #{} were pruned before they could be read", gap.from, gap.to))
            }
            NodeItem::Heartbeat { heartbeat } => (None, format!("{node} heartbeat (newest #{})", heartbeat.last_seq)),
            NodeItem::Event(e) => {
                let kind = e.body.kind();
                let what = if kind.is_empty() { "event".to_string() } else { kind };
                let subject = e.body.instance_id().or(e.body.app()).unwrap_or("");
                let extra = match &e.body {
                    EventBody::Instance(InstanceEvent { change: InstanceChange::Transition(t), .. }) => {
                        let why = t.reason.as_deref().or(t.message.as_deref()).filter(|w| !w.is_empty());
                        match why {
                            Some(why) => format!(" {} -> {} ({why})", t.from, t.to),
                            None => format!(" {} -> {}", t.from, t.to),
                        }
                    }
                    _ => String::new(),
                };
                (Some(e.at_ms), format!("{node} #{} {what} {subject}{extra}", e.seq))
            }
        },
        WatchLine::Sched(l) => {
            let detail = l.body.detail();
            let detail = if detail.is_empty() { detail } else { format!(": {detail}") };
            (Some(l.at_ms), format!("{} {} {}{detail}", l.node, l.body.kind(), l.body.subject()))
        }
    };
    format!("{} {text}", stamp(at_ms.unwrap_or_else(crate::clock::now_ms)))
}

/// `2026-11-25T18:02:11.123Z`.
fn stamp(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// An app's endpoints: a line per port name (or the JSON document); true to go on watching.
fn print_endpoints(app: &str, e: Option<&crate::protocol::AppEndpoints>, output: SchedOutput, watching: bool) -> bool {
    use std::io::Write;
    match (output, e) {
        (SchedOutput::Json, Some(e)) if watching => println!("{}", serde_json::to_string(e).unwrap_or_default()),
        (SchedOutput::Json, Some(e)) => println!("{}", serde_json::to_string_pretty(e).unwrap_or_default()),
        (SchedOutput::Json, None) => println!("null"),
        (SchedOutput::Text, None) => println!("{app}: no endpoints yet (no instance has been ready)"),
        (SchedOutput::Text, Some(e)) => super::services::print_text(e),
    }
    let _ = std::io::stdout().flush();
    true
}

/// `steward-sched cp FILE INSTANCE:PATH`.
async fn copy_in<S: SchedOps>(
    sched: &S,
    (file, target): (&std::path::Path, &str),
    mode: super::steward::CopyMode,
    user: Option<String>,
    container: Option<String>,
    output: SchedOutput,
) -> Result<(), SchedError> {
    let refuse = |message: String| SchedError::Apply { app: target.to_string(), message };
    let (id, path) = super::steward::split_copy_target(target).map_err(refuse)?;
    let data = super::cp::read(file).map_err(refuse)?;
    let key = format!("{}/{}", id.namespace, id.name);
    let writable = mode == super::steward::CopyMode::Rw;
    let (node, copied) = sched
        .copy_in(&AppId::from_key(&key), id.index, &path, data, (writable, user.as_deref(), container.as_deref()))
        .await?;
    match output {
        SchedOutput::Json => println!("{}", serde_json::to_string_pretty(&copied).unwrap_or_default()),
        SchedOutput::Text => println!("{id} on {node}: {}", super::cp::describe(&copied)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Event, Kind, SchedLine, Transition};

    /// Issue 43, item 10: a node the rollout has not reached runs the previous spec: none of
    /// its instances is updated, though its daemon counts them up to date with what it has.
    #[test]
    fn a_node_not_reached_shows_none_updated() {
        let rollout: crate::sched::store::SchedRollout = serde_json::from_value(serde_json::json!({
            "phase": "progressing", "startedMs": 1, "updatedMs": 1, "applied": {"h1": 4}, "done": []
        }))
        .unwrap();
        let body = |revision| {
            crate::sched::scheduler::NodeRollout::Answered(Box::new(crate::protocol::RolloutBody {
                app: "ns/web".into(),
                revision,
                rollout: None,
                progress: crate::protocol::RolloutProgress { instances: 3, updated: 3, ready: 3, spares: 0 },
                scale_in: Vec::new(),
            }))
        };
        let status = crate::sched::scheduler::SchedRolloutStatus {
            app: "ns/web".into(),
            rollout: Some(rollout),
            progress: crate::protocol::RolloutProgress { instances: 6, updated: 3, ready: 3, spares: 0 },
            nodes: std::collections::BTreeMap::from([("h1".to_string(), body(4)), ("h2".to_string(), body(2))]),
        };
        let lines = rollout_lines(&status);
        assert!(lines[1].starts_with("  h1") && lines[1].contains("3 of 3 updated"), "{lines:#?}");
        assert!(lines[2].starts_with("  h2") && lines[2].contains("0 of 3 updated"), "{lines:#?}");
        assert!(lines[2].contains("not reached"), "{lines:#?}");
    }

    /// Issue 43: a failed rollout says how to retry it, and where the instance that failed
    /// it keeps its output.
    #[test]
    fn a_failed_rollout_says_how_to_retry_and_where_its_output_is() {
        let rollout: crate::sched::store::SchedRollout = serde_json::from_value(serde_json::json!({
            "phase": "failed", "reason": "h1: instance 3 of revision 2: it exited", "startedMs": 1,
            "updatedMs": 1, "applied": {"h1": 2}, "done": []
        }))
        .unwrap();
        let on_h1: crate::protocol::RolloutBody = serde_json::from_value(serde_json::json!({
            "app": "ns/web", "revision": 2,
            "rollout": {"target": 2, "from": 1, "phase": "failed", "reason": "instance 3 of revision 2: it exited",
                        "startedMs": 1, "updatedMs": 1, "steps": 2, "kept": [3]},
            "progress": {"instances": 1, "updated": 0, "ready": 1, "spares": 0}
        }))
        .unwrap();
        let status = crate::sched::scheduler::SchedRolloutStatus {
            app: "ns/web".into(),
            rollout: Some(rollout),
            progress: crate::protocol::RolloutProgress { instances: 1, updated: 0, ready: 1, spares: 0 },
            nodes: std::collections::BTreeMap::from([(
                "h1".to_string(),
                crate::sched::scheduler::NodeRollout::Answered(Box::new(on_h1)),
            )]),
        };
        let lines = rollout_lines(&status);
        assert!(lines[0].contains("deploying the same spec again retries it"), "{lines:#?}");
        assert!(lines[1].ends_with("; kept for its logs there: ns/web/3"), "{lines:#?}");
    }

    /// Issue 43, item 9: seed 002's constraint `soft` means "enforced: if it cannot be met, the
    /// container is not deployed" (DESIGN § 7), so `--soft true` is a required cordon and
    /// `--soft false` a preferred one; a record spelled with `soft` reads the same way.
    #[test]
    fn a_soft_constraint_must_hold() {
        let cordon = |args: &[&str]| -> bool {
            let argv = [&["steward-sched", "node", "cordon", "h3"], args].concat();
            match SchedArgs::try_parse_from(argv).unwrap().command {
                SchedCommand::Node { command: SchedNodeCommand::Cordon { preferred, soft, .. } } => {
                    cordon_preferred(preferred, soft)
                }
                _ => unreachable!(),
            }
        };
        assert!(!cordon(&["--soft", "true"]), "soft: true must hold (required)");
        assert!(cordon(&["--soft", "false"]));
        assert!(cordon(&["--preferred"]) && !cordon(&[]));
        assert!(SchedArgs::try_parse_from(["steward-sched", "node", "cordon", "h3", "--soft", "true", "--preferred"])
            .is_err());
        let stored: crate::sched::store::Cordon =
            serde_json::from_value(serde_json::json!({"soft": true, "sinceMs": 1})).unwrap();
        assert!(!stored.preferred, "{stored:?}");
    }

    /// Every printed line says when, and what it was about and why: a transition its reason, the
    /// scheduler's lines their node, verdict or error (issue 29).
    #[test]
    fn run_lines_carry_the_time_and_the_reason() {
        let at = 1_795_310_198_172;
        let failed = crate::protocol::State::Failed { reason: "x".into() };
        let t =
            Transition::new(Kind::Running, &failed, "health check failed 3 times in a row: refused", "", vec![], &[]);
        let body = EventBody::instance("ns/web/0", InstanceChange::Transition(t));
        let line =
            WatchLine::Node(NodeLine { node: "h1".into(), item: NodeItem::Event(Event { seq: 7, at_ms: at, body }) });
        let text = text_line(&line);
        assert!(text.starts_with(&stamp(at)) && stamp(at).ends_with('Z') && stamp(at).contains('T'), "{text}");
        assert!(
            text.ends_with(
                "h1 #7 transition ns/web/0 Running -> Failed (health check failed 3 times in a row: refused)"
            ),
            "{text}"
        );
        let sched = |body| text_line(&WatchLine::Sched(SchedLine { node: "sched".into(), at_ms: at, body }));
        let health = sched(crate::protocol::SchedEvent::RemoteHealth {
            instance: "ns/web/0".into(),
            node: "h2".into(),
            healthy: Some(false),
            message: "HTTP 404".into(),
        });
        assert!(health.ends_with("sched remoteHealth ns/web/0: on h2: unhealthy: HTTP 404"), "{health}");
        let failed = sched(crate::protocol::SchedEvent::RescheduleFailed {
            app: "ns/grp".into(),
            from: "h3".into(),
            error: "cannot place ns/grp/1: no node".into(),
        });
        assert!(failed.ends_with("sched rescheduleFailed ns/grp: from h3: cannot place ns/grp/1: no node"), "{failed}");
    }
}
