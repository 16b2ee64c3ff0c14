//! stewardd as a library function, so tests can run it in-process or as the real binary.
//! Ending the daemon (SIGTERM, SIGINT, a crash) never stops the instances: they run on, and
//! the next daemon re-adopts them.

pub mod notify;

use crate::api::{self, auth::Access, AppState, LiveConfig};
use crate::cgroups::CgroupConfig;
use crate::config::Config;
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
    Io(#[from] std::io::Error),
}

/// Runs the daemon until SIGTERM or SIGINT. `config_path` is re-read on SIGHUP.
pub fn run(config: Config, config_path: Option<&Path>) -> Result<(), DaemonError> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(serve(config, config_path))
}

fn live_config(config: &Config) -> LiveConfig {
    LiveConfig {
        access: Access::from_group(&config.socket_group, config.allow_read_for_all),
        host_ip: config.host_ip().to_string(),
        node: config.node.clone(),
        port_range: (config.port_range_start, config.port_range_end),
    }
}

/// Mode 0660 with group `group`, or 0666 when everyone may read (SO_PEERCRED then decides).
fn set_socket_access(path: &Path, group: &str, readable_by_all: bool) -> std::io::Result<()> {
    let mode = if readable_by_all { 0o666 } else { 0o660 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if let Ok(Some(g)) = nix::unistd::Group::from_name(group) {
        nix::unistd::chown(path, None, Some(g.gid))?;
    }
    Ok(())
}

fn status_line(state: &AppState) -> String {
    let list = state.supervisor.list(&Default::default());
    let running = list.iter().filter(|s| s.state.kind() == crate::supervisor::state::Kind::Running).count();
    format!("STATUS={running} of {} instance(s) running", list.len())
}

/// SIGHUP: re-reads the configuration. Access rules and the node's labels and attributes take
/// effect at once; the rest (socket, state, roots, cgroups) needs a restart, which is said.
fn reload(state: &AppState, path: Option<&Path>, running: &Config) {
    // systemd 253+ (Type=notify-reload) wants the monotonic time with RELOADING=1.
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() * 1_000_000 + t.tv_nsec() / 1000);
    notify::notify(&format!("RELOADING=1\nMONOTONIC_USEC={}", now.unwrap_or(0)));
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
                needs_restart.push("work_base_dir/run_base_dir");
            }
            if new.cgroup_parent != running.cgroup_parent || new.cgroup_root != running.cgroup_root {
                needs_restart.push("cgroups");
            }
            if new.host_ip != running.host_ip {
                needs_restart.push("host_ip (${hostip} of running instances)");
            }
            if (&new.package_repository, &new.fetch_cache_dir)
                != (&running.package_repository, &running.fetch_cache_dir)
            {
                needs_restart.push("package_repository/fetch_cache_dir");
            }
            if (&new.docker_socket, &new.numa_root) != (&running.docker_socket, &running.numa_root) {
                needs_restart.push("docker_socket/numa_root");
            }
            if (new.port_range_start, new.port_range_end) != (running.port_range_start, running.port_range_end) {
                needs_restart.push("port_range_start/port_range_end");
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

async fn serve(config: Config, config_path: Option<&Path>) -> Result<(), DaemonError> {
    let host_ip = config.host_ip().to_string();
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
        fetch: crate::fetch::FetchOptions {
            repository: config.package_repository.clone(),
            ..crate::fetch::FetchOptions::new(config.fetch_cache_dir.clone())
        },
        docker_socket: config.docker_socket.clone(),
        numa_root: config.numa_root.clone(),
    })
    .await?;
    let listener = bind_socket(&config.socket, &config.socket_group, config.allow_read_for_all)?;
    let (stopping, shutdown) = tokio::sync::watch::channel(false);
    let state =
        Arc::new(AppState { supervisor, roots: config.roots(), live: RwLock::new(live_config(&config)), shutdown });
    let app = api::router(state.clone()).into_make_service_with_connect_info::<api::auth::Caller>();
    tracing::info!(socket = %config.socket.display(), host_ip, "stewardd ready");
    notify::notify(&format!(
        "READY=1\nSTATUS=supervising {} instance(s)",
        state.supervisor.list(&Default::default()).len()
    ));
    let watchdog = notify::start_watchdog();

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
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
    let shutdown = async move {
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => reload(&reload_state, config_path.as_deref(), &running_config),
            }
        }
        tracing::info!("stewardd stopping; instances keep running");
        notify::notify("STOPPING=1");
        let _ = stopping.send(true);
        // Connections get a moment to finish; a client that keeps one open cannot hold the
        // daemon (systemd would wait out TimeoutStopSec and mark the unit failed).
        tokio::spawn(async {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            tracing::warn!("connections still open after 5 s; exiting anyway");
            std::process::exit(0);
        });
    };
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await?;
    status.abort();
    drop(watchdog);
    let _ = std::fs::remove_file(&config.socket);
    Ok(())
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

/// Logs to journald when systemd runs us (it sets JOURNAL_STREAM), else to stderr.
pub fn init_logging() {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_env("STEWARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            let _ = registry.with(journald.with_syslog_identifier("stewardd".into())).try_init();
            return;
        }
    }
    let _ = registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)).try_init();
}
