#!/bin/bash
# Health check for gamesvr using only bash's /dev/tcp and coreutils' timeout.
#
#   ./check.sh --port PORT [--host HOST] [--path PATH]
#
# Sends "GET /health HTTP/1.0" to 127.0.0.1:PORT; exits 0 only on a 200 status line
# received within 3 s, 1 otherwise.
set -eu

usage() {
    echo "usage: $0 --port PORT [--host HOST] [--path PATH]" >&2
    exit 2
}

port=${http_port:-}
host=127.0.0.1
path=/health

while [ $# -gt 0 ]; do
    case $1 in
        --port) [ $# -ge 2 ] || usage; port=$2; shift 2 ;;
        --port=*) port=${1#*=}; shift ;;
        --host) [ $# -ge 2 ] || usage; host=$2; shift 2 ;;
        --host=*) host=${1#*=}; shift ;;
        --path) [ $# -ge 2 ] || usage; path=$2; shift 2 ;;
        --path=*) path=${1#*=}; shift ;;
        -h|--help) usage ;;
        *) echo "check.sh: unknown argument: $1" >&2; usage ;;
    esac
done
case $port in
    ''|*[!0-9]*) echo "check.sh: --port PORT is required (a number)" >&2; exit 2 ;;
esac

# shellcheck disable=SC2016 # expanded by the inner bash
status=$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n" "$3" "$1" >&3
    IFS= read -r line <&3 || exit 1
    printf "%s\n" "$line"
' check "$host" "$port" "$path" 2>/dev/null) || status=
status=${status%$'\r'}

case $status in
    "HTTP/1."[01]" 200"|"HTTP/1."[01]" 200 "*)
        echo "check.sh: healthy ($status)"
        exit 0
        ;;
    "")
        echo "check.sh: no answer from $host:$port within 3s" >&2
        exit 1
        ;;
    *)
        echo "check.sh: unhealthy ($status)" >&2
        exit 1
        ;;
esac
