#!/bin/sh
# Ask gamesvr to reload: SIGHUP the pid in the pidfile.
#
#   ./reload.sh --pidfile PATH
#
# Exits 1 with a message if the server is not running.
set -eu

usage() {
    echo "usage: $0 --pidfile PATH" >&2
    exit 2
}

pidfile=${pid_file:-}
pidfile=${pidfile%/}

while [ $# -gt 0 ]; do
    case $1 in
        --pidfile) [ $# -ge 2 ] || usage; pidfile=$2; shift 2 ;;
        --pidfile=*) pidfile=${1#*=}; shift ;;
        -h|--help) usage ;;
        *) echo "reload.sh: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$pidfile" ] || pidfile=./gamesvc.pid

if [ ! -f "$pidfile" ]; then
    echo "reload.sh: not running (no pidfile $pidfile)" >&2
    exit 1
fi
pid=$(head -n 1 "$pidfile" 2>/dev/null | tr -d '[:space:]') || pid=
case $pid in
    ''|*[!0-9]*) echo "reload.sh: bad pidfile $pidfile: '$pid'" >&2; exit 1 ;;
esac
if ! kill -HUP "$pid" 2>/dev/null; then
    echo "reload.sh: not running (cannot signal pid $pid from $pidfile)" >&2
    exit 1
fi
echo "reload.sh: sent SIGHUP to pid $pid"
