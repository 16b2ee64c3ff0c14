# Shell functions shared by the deb and rpm maintainer scripts. scripts/package.sh puts this file
# in place of the "#STEWARD_COMMON#" line of each script; see docs/packaging.md.

steward_bin=/usr/bin/stewardd

# The group whose members may use the API socket: systemd-sysusers where it exists (it works
# without systemd running), else groupadd.
steward_create_group() {
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers /usr/lib/sysusers.d/steward.conf
    elif ! getent group steward >/dev/null; then
        groupadd --system steward
    fi
}

# The directories of the tmpfiles snippet, with their modes and owners.
steward_create_dirs() {
    if command -v systemd-tmpfiles >/dev/null 2>&1; then
        systemd-tmpfiles --create /usr/lib/tmpfiles.d/steward.conf
    else
        install -d -m 0755 -o root -g steward /run/steward
        install -d -m 0755 /var/lib/steward /var/lib/steward/work /var/lib/steward/run
        install -d -m 0700 /var/lib/steward/state
    fi
}

# Pids of the daemons running this package's binary (before or after it was replaced).
steward_daemon_pids() {
    for exe in /proc/[0-9]*/exe; do
        case "$(readlink "$exe" 2>/dev/null)" in
        "$steward_bin" | "$steward_bin (deleted)")
            pid="${exe#/proc/}"
            echo "${pid%/exe}"
            ;;
        esac
    done
}

# The --config/--socket arguments a running daemon was started with, for the steward CLI.
steward_daemon_cli_args() {
    tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | awk '
        /^--(config|socket)=/ { print; next }
        /^--(config|socket)$/ { flag = $0; next }
        flag != "" { print flag "=" $0; flag = "" }'
}

# After an upgrade: restart every running stewardd in place (SIGUSR2: it shuts down, executes
# the new /usr/bin/stewardd under the same pid, and re-adopts its instances, which keep running
# throughout). Under systemd that pid is the unit's main process, which says RELOADING=1 and
# then READY=1, so the unit stays active. Waits until each answers again; a failure is
# reported, not fatal, since the instances are not affected.
steward_restart_in_place() {
    for pid in $(steward_daemon_pids); do
        case "$(readlink "/proc/$pid/exe" 2>/dev/null)" in
        *" (deleted)") ;;
        *) continue ;; # already runs the installed file
        esac
        echo "stewardd: restarting pid $pid in place with the new version (instances keep running)"
        kill -USR2 "$pid" || continue
        if ! steward_wait_while_alive "$pid" 300 steward_runs_installed "$pid"; then
            echo "stewardd: pid $pid did not restart in place; start $steward_bin again (instances keep running and are re-adopted)" >&2
            continue
        fi
        # The socket answers once every instance is re-adopted.
        if ! steward_wait_while_alive "$pid" 1200 steward_answers "$pid"; then
            echo "stewardd: pid $pid is not answering after its restart; see its log" >&2
            continue
        fi
        echo "stewardd: pid $pid runs the new version"
    done
}

# Whether daemon PID now runs the installed binary.
steward_runs_installed() {
    [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$steward_bin" ]
}

# Whether daemon PID answers on its socket.
steward_answers() {
    args="$(steward_daemon_cli_args "$1")"
    # shellcheck disable=SC2086 # one argument per line, none with spaces
    steward $args node >/dev/null 2>&1
}

# steward_wait_while_alive PID TRIES COMMAND...: runs COMMAND every 0.1 s until it succeeds;
# fails once PID is gone or after TRIES attempts.
steward_wait_while_alive() {
    wait_pid="$1"
    wait_tries="$2"
    shift 2
    tries=0
    until "$@"; do
        tries=$((tries + 1))
        if [ ! -d "/proc/$wait_pid" ] || [ "$tries" -gt "$wait_tries" ]; then
            return 1
        fi
        sleep 0.1
    done
}

# Without systemd: stop every running stewardd (SIGTERM, as systemctl stop would). Only the
# daemon stops; its instances keep running, as with KillMode=process.
steward_stop_daemons() {
    for pid in $(steward_daemon_pids); do
        kill -TERM "$pid" 2>/dev/null || continue
        tries=0
        while [ -d "/proc/$pid" ] && [ "$tries" -lt 300 ]; do
            tries=$((tries + 1))
            sleep 0.1
        done
    done
}

# Reminds the operator that removing the package leaves the instances running.
steward_warn_running_instances() {
    count="$(steward -o json ls 2>/dev/null | grep -c '"pid": [0-9]' || true)"
    if [ "${count:-0}" -gt 0 ]; then
        echo "steward: $count instance process(es) keep running without a supervisor; reinstall to re-adopt them, or 'steward delete --all' first to stop them" >&2
    fi
}
