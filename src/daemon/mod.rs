//! stewardd as a library function, so tests can run it in-process or as the real binary.
//! Ending the daemon (SIGTERM, SIGINT, a crash) never stops the instances: they run on, and
//! the next daemon re-adopts them.

pub mod memory;
pub mod notify;

use crate::api::{self, auth::Access, AppState, LiveConfig};
use crate::cgroups::CgroupConfig;
use crate::config::{Config, RuntimeMode};
use crate::supervisor::{LogRotation, Supervisor, SupervisorConfig};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, RwLock};
use tokio::signal::unix::{signal, SignalKind};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Supervisor(#[from] crate::supervisor::SupervisorError),
    #[error("socket {path}: {message}")]
    Socket { path: String, message: String },
    #[error("{0}")]
    Remote(#[from] api::remote::RemoteError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl DaemonError {
    /// A mistake in the configuration (a file it names that cannot be used): exit 2, which
    /// systemd's unit does not restart (RestartPreventExitStatus), rather than 1.
    pub fn is_configuration(&self) -> bool {
        matches!(self, DaemonError::Remote(api::remote::RemoteError::Tokens { .. } | api::remote::RemoteError::Tls(_)))
    }
}

/// How the daemon ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// SIGTERM or SIGINT: the process exits.
    Stopped,
    /// SIGUSR2: the caller executes the daemon's binary again ([`reexec`]).
    Restart,
}

/// How long blocking work still under way at the end (a package download, a journal prune)
/// may hold up the exit. Dropping a runtime waits for its blocking threads without a limit;
/// their work is either redone by the next daemon (a fetch) or harmless to cut (a prune).
const BLOCKING_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long requests under way (an action waiting for its instance, an apply) may finish after
/// SIGTERM before the daemon ends anyway: a client that keeps a connection open cannot hold it.
pub const REQUEST_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs the daemon until SIGTERM or SIGINT (or SIGUSR2, a restart in place). `config_path` is
/// re-read on SIGHUP. The end is bounded: [`REQUEST_GRACE`] for requests, then
/// [`BLOCKING_GRACE`] for blocking work, then the store's close (one commit at most).
pub fn run(config: Config, config_path: Option<&Path>) -> Result<Ending, DaemonError> {
    // A hollow host does no work of its own: one thread, so that a thousand fit on a machine.
    let runtime = match config.runtime {
        RuntimeMode::Hollow => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        RuntimeMode::Real => tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?,
    };
    let ending = runtime.block_on(serve(config, config_path));
    runtime.shutdown_timeout(BLOCKING_GRACE);
    ending
}

fn live_config(config: &Config) -> LiveConfig {
    LiveConfig {
        access: Access::from_group(&config.socket_group, config.allow_read_for_all),
        host_ip: config.host_ip().to_string(),
        node: config.node.clone(),
        port_range: (config.port_range_start, config.port_range_end),
        events: config.events.clone(),
    }
}

/// A port range the kernel also gives outgoing connections: said at start (see
/// [`crate::ephemeral_ports`]).
/// Keeps the kernel's ephemeral ports out of `range` (`reserve`), or warns that they may take
/// an instance's port.
fn keep_ephemeral_ports_out(range: (u16, u16), reserve: bool) {
    if reserve {
        match crate::ephemeral_ports::reserve(range) {
            Ok(true) => tracing::info!(
                "reserved port_range_start..port_range_end {}-{} from the kernel's ephemeral ports \
                 (net.ipv4.ip_local_reserved_ports): no outgoing connection takes an instance's port",
                range.0,
                range.1
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!("cannot reserve {}-{} from the kernel's ephemeral ports: {e}", range.0, range.1),
        }
    }
    match crate::ephemeral_ports::Ephemeral::read() {
        Ok(ephemeral) => {
            if let Some(warning) = ephemeral.warning(range) {
                tracing::warn!("{warning}");
            }
        }
        Err(e) => tracing::debug!("the kernel's ephemeral port range is unknown: {e}"),
    }
}

/// Mode 0660 with group `group`, or 0666 when everyone may read (SO_PEERCRED then decides).
fn set_socket_access(path: &Path, group: &str, readable_by_all: bool) -> std::io::Result<()> {
    let mode = if readable_by_all { 0o666 } else { 0o660 };
    let at = |e: std::io::Error| crate::safefs::at(path, e);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(at)?;
    if let Ok(Some(g)) = nix::unistd::Group::from_name(group) {
        nix::unistd::chown(path, None, Some(g.gid)).map_err(|e| at(e.into()))?;
    }
    Ok(())
}

fn status_line(state: &AppState) -> String {
    let list = state.supervisor.list(&Default::default());
    let running = list.iter().filter(|s| s.state.kind() == crate::supervisor::state::Kind::Running).count();
    format!("STATUS={running} of {} instance(s) running", list.len())
}

fn monotonic_usec() -> i64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() * 1_000_000 + t.tv_nsec() / 1000)
        .unwrap_or(0)
}

/// SIGHUP: re-reads the configuration. Access rules and the node's labels and attributes take
/// effect at once; the rest (socket, state, roots, cgroups) needs a restart, which is said.
fn reload(state: &AppState, guard: Option<&api::remote::Guard>, path: Option<&Path>, running: &Config) {
    // systemd 253+ (Type=notify-reload) wants the monotonic time with RELOADING=1.
    notify::notify(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
    match Config::load(path) {
        Ok(new) => {
            let mut needs_restart = Vec::new();
            if new.socket != running.socket {
                needs_restart.push("socket");
            }
            if new.state_dir != running.state_dir {
                needs_restart.push("state_dir");
            }
            if new.roots() != running.roots() {
                needs_restart.push("work_base_dir/run_base_dir/volume_root");
            }
            if (&new.cgroup_parent, &new.cgroup_root, new.cgroup_favor_dynmods)
                != (&running.cgroup_parent, &running.cgroup_root, running.cgroup_favor_dynmods)
            {
                needs_restart.push("cgroups");
            }
            if new.remote != running.remote {
                needs_restart.push("remote (the tokens file is re-read now)");
            }
            let bounds = |e: &crate::config::EventsConfig| (e.retention, e.max_bytes, e.prune_secs);
            if bounds(&new.events) != bounds(&running.events) {
                needs_restart.push("events.retention/events.max_bytes/events.prune_secs");
            }
            if new.host_ip != running.host_ip {
                needs_restart.push("host_ip (${hostip} of running instances)");
            }
            if (&new.package_repository, &new.fetch_cache_dir)
                != (&running.package_repository, &running.fetch_cache_dir)
                || (new.fetch_max_extracted_bytes, new.fetch_max_extracted_files, new.fetch_max_extraction_ratio)
                    != (
                        running.fetch_max_extracted_bytes,
                        running.fetch_max_extracted_files,
                        running.fetch_max_extraction_ratio,
                    )
            {
                needs_restart.push("package_repository/fetch_cache_dir/fetch_max_*");
            }
            if (&new.docker_socket, &new.numa_root) != (&running.docker_socket, &running.numa_root) {
                needs_restart.push("docker_socket/numa_root");
            }
            let cni =
                |c: &Config| (c.network_mode, c.cni_bin_dir.clone(), c.cni_conf_dir.clone(), c.cni_network.clone());
            if cni(&new) != cni(running) {
                needs_restart.push("network_mode/cni_bin_dir/cni_conf_dir/cni_network");
            }
            if (&new.reserved_cpu, &new.reserved_memory) != (&running.reserved_cpu, &running.reserved_memory) {
                needs_restart.push("reserved_cpu/reserved_memory");
            }
            if new.max_instances_per_app != running.max_instances_per_app {
                needs_restart.push("max_instances_per_app");
            }
            if new.revision_history != running.revision_history {
                needs_restart.push("revision_history");
            }
            if new.default_tasks_max != running.default_tasks_max {
                needs_restart.push("default_tasks_max");
            }
            if (new.runtime, &new.hollow) != (running.runtime, &running.hollow) {
                needs_restart.push("runtime/hollow");
            }
            if new.hook_max_response_bytes != running.hook_max_response_bytes {
                needs_restart.push("hook_max_response_bytes");
            }
            if (new.port_range_start, new.port_range_end, new.reserve_port_range)
                != (running.port_range_start, running.port_range_end, running.reserve_port_range)
            {
                needs_restart.push("port_range_start/port_range_end/reserve_port_range");
            }
            if (new.log_max_bytes, new.log_keep, new.log_check_secs)
                != (running.log_max_bytes, running.log_keep, running.log_check_secs)
            {
                needs_restart.push("log_max_bytes/log_keep/log_check_secs");
            }
            // Who may connect at all is the socket file's mode and group: apply it now.
            if let Err(e) = set_socket_access(&running.socket, &new.socket_group, new.allow_read_for_all) {
                tracing::warn!("socket permissions: {e}");
            }
            if let Some(guard) = guard {
                guard.reload_tokens();
            }
            *state.live.write().expect("live config lock") = live_config(&new);
            tracing::info!("configuration reloaded");
            if !needs_restart.is_empty() {
                tracing::warn!("changed settings that take effect after a restart: {}", needs_restart.join(", "));
            }
        }
        Err(e) => tracing::error!("reload failed, keeping the running configuration: {e}"),
    }
    notify::notify(&format!("READY=1\n{}", status_line(state)));
}

/// Restart in place: executes the daemon's binary file again — a package upgrade has replaced
/// it, so `/proc/self/exe` reads "PATH (deleted)" and PATH is the new version — with the same
/// arguments and environment. The pid stays, so whoever started the daemon (an init script, a
/// container's entrypoint, a shell) still has it, and instances that were our children still
/// are. Returns only if the exec failed.
pub fn reexec() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(path) => path,
        Err(e) => return e,
    };
    let exe = match exe.to_str().and_then(|p| p.strip_suffix(" (deleted)")) {
        Some(replaced) => std::path::PathBuf::from(replaced),
        None => exe,
    };
    tracing::info!(binary = %exe.display(), "stewardd restarting in place");
    std::process::Command::new(&exe).args(std::env::args_os().skip(1)).exec()
}

async fn serve(config: Config, config_path: Option<&Path>) -> Result<Ending, DaemonError> {
    // Handlers first: the default action of SIGTERM, SIGHUP and SIGUSR2 ends the process, and a
    // reload or restart in place may be asked as soon as READY=1 is out (or even before, while
    // the store opens); one that arrives early waits in its stream.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    let host_ip = config.host_ip().to_string();
    let nofile = crate::host::raise_open_files_limit();
    let hollow = config.runtime == RuntimeMode::Hollow;
    if hollow {
        tracing::info!(
            "runtime = \"hollow\": instances run nothing; no cgroups, Docker, CNI, node ports, DNS or package fetching"
        );
    }
    if config.cgroup_favor_dynmods && !hollow {
        favor_dynamic_moves(&config.cgroup_root);
    }
    let supervisor = Supervisor::open(SupervisorConfig {
        state_dir: config.state_dir.clone(),
        roots: config.roots(),
        host_ip: host_ip.clone(),
        cgroups: CgroupConfig { mount_root: config.cgroup_root.clone(), parent: config.cgroup_parent.clone() },
        logs: LogRotation {
            max_bytes: config.log_max_bytes,
            keep: config.log_keep,
            every: std::time::Duration::from_secs(config.log_check_secs.max(1)),
        },
        port_range: (config.port_range_start, config.port_range_end),
        revision_history: config.revision_history,
        // The reserve and the hollow capacity were checked when the config was read.
        resources: host_resources(&config),
        cni: crate::supervisor::CniSettings {
            enabled: config.network_mode == crate::config::NetworkModeConfig::Cni,
            bin_dir: config.cni_bin_dir.clone(),
            conf_dir: config.cni_conf_dir.clone(),
            network: config.cni_network.clone(),
        },
        fetch: crate::fetch::FetchOptions {
            repository: config.package_repository.clone(),
            max_extracted_bytes: config.fetch_max_extracted_bytes,
            max_extracted_entries: config.fetch_max_extracted_files,
            max_extraction_ratio: config.fetch_max_extraction_ratio,
            ..crate::fetch::FetchOptions::new(config.fetch_cache_dir.clone())
        },
        docker_socket: config.docker_socket.clone(),
        numa_root: config.numa_root.clone(),
        hook_max_response_bytes: config.hook_max_response_bytes,
        // Checked when the config was read.
        default_tasks_max: crate::cgroups::tasks_max(&config.default_tasks_max).unwrap_or(None),
        own_paths: vec![
            ("state_dir".into(), config.state_dir.clone()),
            ("fetch_cache_dir".into(), config.fetch_cache_dir.clone()),
            ("socket".into(), config.socket.clone()),
        ],
        hollow,
        pod_dns: config.services.pod_dns.map(|server| crate::services::dns::PodResolver {
            server,
            zone: config.services.dns_domain.trim_end_matches('.').to_string(),
        }),
    })
    .await?;
    // A hollow host keeps the endpoints it is handed (the API serves them) and forwards nothing.
    if !hollow {
        forward_services(&config, &supervisor, nofile).await;
    }
    let listener = bind_socket(&config.socket, &config.socket_group, config.allow_read_for_all)?;
    let (stopping, shutdown) = tokio::sync::watch::channel(false);
    let state = Arc::new(AppState {
        supervisor,
        roots: config.roots(),
        host: match hollow {
            true => crate::spec::validate::HostCapacity::hollow(
                host_resources(&config).capacity,
                config.max_instances_per_app,
            ),
            false => crate::spec::validate::HostCapacity::of_this_host(config.max_instances_per_app),
        },
        live: RwLock::new(live_config(&config)),
        shutdown: shutdown.clone(),
        usage: crate::host::UsageSampler::default(),
        streams: api::streams::StreamSlots::new(
            config.connections.max_streams,
            config.connections.max_streams_per_peer,
        ),
        requests: Default::default(),
    });
    let app = api::router(state.clone());
    let limits = config.connections.limits();
    let (incoming, accepting) = api::serve::accept_local(listener, api::serve::ConnectionLimiter::new(limits));
    let remote = match &config.remote.listen {
        Some(addr) => Some(serve_remote(*addr, &config, state.clone(), shutdown.clone()).await?),
        None => None,
    };
    let guard = remote.as_ref().map(|(guard, _)| guard.clone());
    let pruning = tokio::spawn(prune_events(state.clone(), config.events.clone()));
    let trimming = tokio::spawn(memory::trim_after_bursts(state.supervisor.store().clone(), config.release_code_pages));
    tracing::info!(socket = %config.socket.display(), host_ip, remote = ?config.remote.listen, "stewardd ready");
    notify::notify(&format!(
        "READY=1\nSTATUS=supervising {} instance(s)",
        state.supervisor.list(&Default::default()).len()
    ));
    let watchdog = notify::start_watchdog();

    let (ending_tx, ending) = tokio::sync::oneshot::channel();
    let reload_state = state.clone();
    let config_path = config_path.map(Path::to_path_buf);
    let running_config = config.clone();
    let status_state = state.clone();
    let status = tokio::spawn(async move {
        // STATUS= for `systemctl status`, kept current.
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            notify::notify(&status_line(&status_state));
        }
    });
    let socket_path = config.socket.clone();
    let signals = async move {
        let ending = loop {
            tokio::select! {
                _ = term.recv() => break Ending::Stopped,
                _ = int.recv() => break Ending::Stopped,
                _ = usr2.recv() => break Ending::Restart,
                _ = hup.recv() => reload(&reload_state, guard.as_deref(), config_path.as_deref(), &running_config),
            }
        };
        tracing::info!(?ending, "stewardd stopping; instances keep running");
        match ending {
            Ending::Stopped => notify::notify("STOPPING=1"),
            // To systemd a restart in place is a reload of the same main pid: it waits for the
            // new image's READY=1. The watchdog keeps running meanwhile, so ping it once more.
            Ending::Restart => notify::notify(&format!("RELOADING=1\nMONOTONIC_USEC={}\nWATCHDOG=1", monotonic_usec())),
        }
        let _ = stopping.send(true);
        let _ = ending_tx.send(ending);
        // Connections get a moment to finish; a client that keeps one open cannot hold the
        // daemon (systemd would wait out TimeoutStopSec and mark the unit failed).
        tokio::spawn(async move {
            tokio::time::sleep(REQUEST_GRACE).await;
            tracing::warn!("connections still open after {} s; ending anyway", REQUEST_GRACE.as_secs());
            if ending == Ending::Restart {
                let _ = std::fs::remove_file(&socket_path);
                tracing::error!("restart in place failed: {}", reexec());
            }
            std::process::exit(0);
        });
    };
    tokio::spawn(signals);
    api::serve::serve(incoming, app, limits.header_timeout, shutdown.clone()).await;
    accepting.abort();
    if let Some((_, server)) = remote {
        let _ = server.await;
    }
    pruning.abort();
    trimming.abort();
    status.abort();
    drop(watchdog);
    let _ = std::fs::remove_file(&config.socket);
    Ok(ending.await.unwrap_or(Ending::Stopped))
}

/// What instances may request here: the host's cpus and memory, or a hollow host's configured
/// ones; less the reserve.
fn host_resources(config: &Config) -> crate::resources::HostResources {
    let reserved = config.reserved().unwrap_or_default();
    match config.runtime {
        RuntimeMode::Real => crate::resources::HostResources::detect(reserved),
        RuntimeMode::Hollow => {
            crate::resources::HostResources { capacity: config.hollow.capacity().unwrap_or_default(), reserved }
        }
    }
}

/// The host's side of services: its port range kept from the kernel's ephemeral ports, node
/// ports forwarded (nftables or the userspace proxy), and the DNS responder.
async fn forward_services(config: &Config, supervisor: &Supervisor, nofile: u64) {
    keep_ephemeral_ports_out((config.port_range_start, config.port_range_end), config.reserve_port_range);
    let reaper = supervisor.reaper().clone();
    let node_ports = crate::services::forwarding::resolve(config.services.node_ports, Some(&reaper)).await;
    tracing::info!("node ports: {node_ports:?}");
    let proxy = proxy_limits(&config.services, nofile);
    tokio::spawn(crate::services::forwarding::run(supervisor.endpoints().clone(), node_ports, reaper.clone(), proxy));
    if let Some(address) = config.services.dns {
        let zone = &config.services.dns_domain;
        // The daemon supervises on without it: its instances matter more than their names.
        match crate::services::dns::serve(address, zone, supervisor.endpoints().clone()).await {
            Ok(()) => tracing::info!("dns: answering for {zone} on {address}"),
            Err(e) => tracing::error!("dns: not answering: {e}"),
        }
    }
    if let Some(ip) = config.services.pod_dns {
        let (zone, upstreams) = (&config.services.dns_domain, &config.services.dns_upstream);
        let keeper = supervisor.endpoints().clone();
        // Its ClusterFirst pods start all the same: they resolve once the address answers.
        match crate::services::dns::serve_pods(ip, zone, keeper, upstreams, Some(&reaper)).await {
            Ok(()) => tracing::info!("dns: answering ClusterFirst pods for {zone} on {ip}:53, forwarding the rest"),
            Err(e) => tracing::error!("dns: not answering pods: {e}"),
        }
    }
}

/// The userspace proxy's caps (issue 51 finding 6), within the descriptor limit `nofile`.
fn proxy_limits(services: &crate::config::ServicesConfig, nofile: u64) -> crate::services::proxy::Limits {
    let budget = crate::services::proxy::descriptor_budget(services.proxy_max_connections, nofile);
    tracing::info!(
        "node port proxy: {budget} descriptors of {nofile}, {} connections per port",
        services.proxy_max_connections_per_port
    );
    crate::services::proxy::Limits::new(budget, services.proxy_max_connections_per_port)
}

/// Starts the remote listener (TLS, bearer tokens, rate and size limits) on `addr`; it stops
/// when `shutdown` turns true.
async fn serve_remote(
    addr: std::net::SocketAddr,
    config: &Config,
    state: Arc<AppState>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(Arc<api::remote::Guard>, tokio::task::JoinHandle<()>), DaemonError> {
    let remote = &config.remote;
    let (Some(cert), Some(key)) = (&remote.cert, &remote.key) else {
        unreachable!("Config::parse requires remote.cert and remote.key with remote.listen");
    };
    let tls = crate::tls::server_config(cert, key).map_err(api::remote::RemoteError::from)?;
    let guard = Arc::new(api::remote::Guard::new(remote)?);
    let limits = config.connections.limits();
    let limiter = api::serve::ConnectionLimiter::new(limits);
    let (incoming, accepting) = api::remote::accept_tls(addr, tls, limiter).await?;
    let api = api::router_with_limit(state, remote.max_body_bytes)
        .layer(axum::middleware::from_fn_with_state(guard.clone(), api::remote::guard));
    // The web console for this one host, beside the API (src/console; docs/console.md).
    let app = crate::console::with_console(api, guard.clone());
    tracing::info!(%addr, "remote API listening (TLS, bearer tokens)");
    let server = tokio::spawn(async move {
        api::serve::serve(incoming, app, limits.header_timeout, shutdown).await;
        accepting.abort();
    });
    Ok((guard, server))
}

/// Retention: keeps the newest `events.retention` events and at most `events.max_bytes` of
/// them, pruning every `events.prune_secs`, or at the next 1 s tick once the journal is 10%
/// over a bound: at a crash loop's 800 events/s, a minute is 12 MB of events.
async fn prune_events(state: Arc<AppState>, events: crate::config::EventsConfig) {
    let every = std::time::Duration::from_secs(events.prune_secs.max(1));
    let (retention, max_bytes) = (events.retention, events.max_bytes);
    let mut last = tokio::time::Instant::now() - every;
    loop {
        let store = state.supervisor.store().clone();
        let held = (store.last_seq() + 1).saturating_sub(store.first_seq());
        let over = held > retention + retention / 10 || store.journal_bytes() > max_bytes + max_bytes / 10;
        if over || last.elapsed() >= every {
            last = tokio::time::Instant::now();
            match tokio::task::spawn_blocking(move || store.prune(retention, max_bytes)).await {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::debug!("pruned {n} event(s) beyond the newest {retention} or {max_bytes} bytes"),
                Ok(Err(e)) => tracing::warn!("pruning events: {e}"),
                Err(e) => tracing::warn!("pruning task: {e}"),
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Binds the API socket: refuses to take over a live daemon's socket, replaces a stale one,
/// and sets mode 0660 with group `group` (when it exists), or 0666 when everyone may read
/// (SO_PEERCRED then keeps writes to root and the group).
fn bind_socket(path: &Path, group: &str, readable_by_all: bool) -> Result<tokio::net::UnixListener, DaemonError> {
    let err = |message: String| DaemonError::Socket { path: path.display().to_string(), message };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err(format!("cannot create its directory: {e}")))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(err("another stewardd is listening on it".into()));
        }
        std::fs::remove_file(path).map_err(|e| err(format!("cannot remove the stale socket: {e}")))?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(|e| err(e.to_string()))?;
    set_socket_access(path, group, readable_by_all).map_err(|e| err(e.to_string()))?;
    Ok(listener)
}

/// Logs to journald when systemd runs us (it sets JOURNAL_STREAM), else to stderr: coloured
/// only when stderr is a terminal, so a log file or a pipe gets plain text.
pub fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::new(log_directives(std::env::var("STEWARD_LOG").ok().as_deref()));
    let registry = tracing_subscriber::registry().with(filter);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            let _ = registry.with(journald.with_syslog_identifier("stewardd".into())).try_init();
            return;
        }
    }
    let ansi = std::io::stderr().is_terminal();
    let _ = registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi)).try_init();
}

/// The log filter: STEWARD_LOG's directives (default `info`), with the DNS library's own
/// per-query lines at debug unless STEWARD_LOG names it: a query flood from a workload must
/// not flood the journal (the responder logs a summary instead).
fn log_directives(env: Option<&str>) -> String {
    let base = env.map(str::trim).filter(|s| !s.is_empty()).unwrap_or("info");
    if base.contains("hickory") {
        return base.to_string();
    }
    let quiet = if base.split(',').any(|d| matches!(d.trim(), "debug" | "trace")) { "debug" } else { "warn" };
    format!("{base},hickory_server={quiet},hickory_proto={quiet}")
}

/// `cgroup_favor_dynmods`: a start's move into its cgroup need not wait for an RCU grace period.
fn favor_dynamic_moves(root: &Path) {
    use crate::cgroups::DynMods;
    match crate::cgroups::favor_dynamic_moves(root) {
        DynMods::AlreadyOn(at) => tracing::debug!("cgroup: favordynmods already set on {}", at.display()),
        DynMods::TurnedOn(at) => tracing::info!(
            "cgroup: favordynmods set on {} (a process's move into its cgroup no longer waits for an RCU grace \
             period; cgroup_favor_dynmods = false leaves the host as it is)",
            at.display()
        ),
        DynMods::NoUnifiedMount => {
            tracing::debug!("cgroup: no cgroup2 mount below {} to set favordynmods on", root.display())
        }
        DynMods::Refused(at, why) => {
            tracing::warn!("cgroup: favordynmods could not be set on {}: {why} (starts still work)", at.display())
        }
    }
}
