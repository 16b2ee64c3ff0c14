#!/bin/sh
# Start gamesvr in the background, detached, like a classic forking game server.
#
#   ./start.sh --port PORT [--pidfile PATH] [--address ADDR]
#
# --service-port is accepted as an alias of --port (the seed spec's startCmd uses it).
# Without --pidfile, $pid_file (trailing "/" dropped) is used, else ./gamesvc.pid.
# The server writes its own pid to the pidfile ~0.3 s after startup; this script does
# not wait for it. Output is appended to ./gamesvr.log in the current directory.
set -eu

usage() {
    echo "usage: $0 --port PORT [--pidfile PATH] [--address ADDR]" >&2
    exit 2
}

port=${http_port:-}
address=0.0.0.0
pidfile=${pid_file:-}
pidfile=${pidfile%/}

while [ $# -gt 0 ]; do
    case $1 in
        --port|--service-port) [ $# -ge 2 ] || usage; port=$2; shift 2 ;;
        --port=*|--service-port=*) port=${1#*=}; shift ;;
        --pidfile) [ $# -ge 2 ] || usage; pidfile=$2; shift 2 ;;
        --pidfile=*) pidfile=${1#*=}; shift ;;
        --address) [ $# -ge 2 ] || usage; address=$2; shift 2 ;;
        --address=*) address=${1#*=}; shift ;;
        -h|--help) usage ;;
        *) echo "start.sh: unknown argument: $1" >&2; usage ;;
    esac
done

case $port in
    ''|*[!0-9]*) echo "start.sh: --port PORT is required (a number)" >&2; exit 2 ;;
esac
[ -n "$pidfile" ] || pidfile=./gamesvc.pid

# Is PID a live (non-zombie) process?
alive() {
    case $1 in ''|*[!0-9]*) return 1 ;; esac
    if [ -r "/proc/$1/stat" ]; then
        # state is the field after "(comm)"
        state=$(sed 's/^.*) \([A-Za-z]\).*$/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
        [ "$state" != Z ] && [ "$state" != X ]
    else
        kill -0 "$1" 2>/dev/null
    fi
}

if [ -f "$pidfile" ]; then
    oldpid=$(head -n 1 "$pidfile" 2>/dev/null | tr -d '[:space:]') || oldpid=
    if alive "$oldpid"; then
        echo "start.sh: already running: pid $oldpid (pidfile $pidfile)" >&2
        exit 1
    fi
    echo "start.sh: removing stale pidfile $pidfile" >&2
    rm -f "$pidfile"
fi

mkdir -p "$(dirname -- "$pidfile")"
server=$(dirname -- "$0")/server.pl

if command -v setsid >/dev/null 2>&1; then
    setsid perl "$server" --port "$port" --address "$address" --pidfile "$pidfile" \
        </dev/null >>./gamesvr.log 2>&1 &
else
    perl "$server" --port "$port" --address "$address" --pidfile "$pidfile" \
        </dev/null >>./gamesvr.log 2>&1 &
fi

echo "start.sh: gamesvr starting on $address:$port (pidfile $pidfile, log ./gamesvr.log)"
exit 0
