#!/bin/sh
# Stop gamesvr: SIGTERM the pid in the pidfile and wait up to 5 s for it to exit.
#
#   ./stop.sh --pidfile PATH [--timeout SECONDS]
#
# Idempotent: exits 0 when the pidfile is missing or names a dead process.
# Exits 1 if the process is still alive after the timeout (let the supervisor escalate).
set -eu

usage() {
    echo "usage: $0 --pidfile PATH [--timeout SECONDS]" >&2
    exit 2
}

pidfile=${pid_file:-}
pidfile=${pidfile%/}
timeout=5

while [ $# -gt 0 ]; do
    case $1 in
        --pidfile) [ $# -ge 2 ] || usage; pidfile=$2; shift 2 ;;
        --pidfile=*) pidfile=${1#*=}; shift ;;
        --timeout) [ $# -ge 2 ] || usage; timeout=$2; shift 2 ;;
        --timeout=*) timeout=${1#*=}; shift ;;
        -h|--help) usage ;;
        *) echo "stop.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$pidfile" ] || pidfile=./gamesvc.pid
case $timeout in ''|*[!0-9]*) echo "stop.sh: --timeout must be whole seconds" >&2; exit 2 ;; esac

alive() {
    case $1 in ''|*[!0-9]*) return 1 ;; esac
    if [ -r "/proc/$1/stat" ]; then
        state=$(sed 's/^.*) \([A-Za-z]\).*$/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
        [ "$state" != Z ] && [ "$state" != X ]
    else
        kill -0 "$1" 2>/dev/null
    fi
}

if [ ! -f "$pidfile" ]; then
    echo "stop.sh: not running (no pidfile $pidfile)"
    exit 0
fi
pid=$(head -n 1 "$pidfile" 2>/dev/null | tr -d '[:space:]') || pid=
if ! alive "$pid"; then
    echo "stop.sh: not running (pid '${pid}' from $pidfile is gone); removing pidfile"
    rm -f "$pidfile"
    exit 0
fi

kill -TERM "$pid" 2>/dev/null || true
ticks=$((timeout * 10))
while [ "$ticks" -gt 0 ]; do
    if ! alive "$pid"; then
        # the server removes its own pidfile; clean up in case it could not
        [ ! -f "$pidfile" ] || [ "$(head -n 1 "$pidfile" 2>/dev/null | tr -d '[:space:]')" != "$pid" ] \
            || rm -f "$pidfile"
        echo "stop.sh: stopped pid $pid"
        exit 0
    fi
    sleep 0.1
    ticks=$((ticks - 1))
done

echo "stop.sh: pid $pid still running ${timeout}s after SIGTERM" >&2
exit 1
