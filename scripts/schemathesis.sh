#!/usr/bin/env bash
# Fuzzes a real stewardd through its HTTP API with schemathesis, against docs/openapi.json: no
# server errors, and every response's status code, content type, headers and body as documented.
# Exits non-zero on any finding.
#
# The daemon (target/debug/stewardd, else target/release/stewardd, or $STEWARDD) is built by the
# caller. It runs with its own roots, state, socket and cgroup parent in a temp dir, as
# tests/common does; its unix socket is exposed on 127.0.0.1:<free port> through socat for
# schemathesis. Everything is removed on exit, including processes of instances that fuzzed
# POST /v1/apply bodies (or the documented example) created.
#
# Knobs: MAX_EXAMPLES (per operation, default 50), SEED (reproduce a run), REPORT_DIR, STEWARDD.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

MAX_EXAMPLES=${MAX_EXAMPLES:-50}
# Whole-run bound: schemathesis has no total limit that does not also extend the run.
RUN_LIMIT_SECS=${RUN_LIMIT_SECS:-300}

STEWARDD=${STEWARDD:-}
if [[ -z $STEWARDD ]]; then
    for b in target/debug/stewardd target/release/stewardd; do
        if [[ -x $b ]]; then
            STEWARDD=$REPO/$b
            break
        fi
    done
fi
[[ -n $STEWARDD && -x $STEWARDD ]] || {
    echo "schemathesis.sh: no stewardd binary (cargo build first, or set STEWARDD)" >&2
    exit 2
}

# Tools: schemathesis 4 (its CLI is `schemathesis run SPEC --url URL`), socat, curl.
if ! command -v schemathesis >/dev/null || ! schemathesis --version | grep -q 'version 4\.'; then
    # A Debian python3 refuses system-wide installs (PEP 668): a test tool may go there anyway.
    python3 -m pip install --quiet --disable-pip-version-check 'schemathesis>=4,<5' 2>/dev/null \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages 'schemathesis>=4,<5'
    hash -r
fi
if ! command -v socat >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 -y -q socat >/dev/null
fi
schemathesis --version

TMP=$(mktemp -d /tmp/steward-schemathesis.XXXXXX)
# Workloads run as other users too: they must be able to reach their directories.
chmod 755 "$TMP"
SOCK=$TMP/stewardd.sock
PARENT=steward-schemathesis-$$
DAEMON_PID=
SOCAT_PID=

# Every cgroup directory of the daemon's parent, in each mounted hierarchy (v1 controllers,
# the v2 unified tree, or a pure v2 mount), deepest first.
parent_dirs() {
    local d
    for d in /sys/fs/cgroup/"$PARENT" /sys/fs/cgroup/*/"$PARENT"; do
        [[ -d $d ]] && find "$d" -depth -type d
    done
    return 0
}

cleanup() {
    local rc=$?
    set +e
    [[ -n $SOCAT_PID ]] && kill "$SOCAT_PID" 2>/dev/null && wait "$SOCAT_PID" 2>/dev/null
    if [[ -n $DAEMON_PID ]]; then
        kill -9 "$DAEMON_PID" 2>/dev/null
        wait "$DAEMON_PID" 2>/dev/null
    fi
    # The daemon leaves instances running by design: kill them through their cgroups (every
    # hierarchy, so nothing that left one controller's group survives), until all are empty.
    local round dir pids left
    for round in $(seq 1 50); do
        left=0
        while read -r dir; do
            [[ -f $dir/cgroup.procs ]] || continue
            pids=$(cat "$dir/cgroup.procs" 2>/dev/null)
            if [[ -n $pids ]]; then
                left=1
                # shellcheck disable=SC2086
                kill -9 $pids 2>/dev/null
            fi
        done < <(parent_dirs)
        ((left)) || break
        sleep 0.1
    done
    while read -r dir; do
        rmdir "$dir" 2>/dev/null || echo "schemathesis.sh: could not remove cgroup $dir" >&2
    done < <(parent_dirs)
    if ((rc != 0)) && [[ -f $TMP/stewardd.log ]]; then
        echo "--- stewardd log (last 40 lines) ---" >&2
        tail -n 40 "$TMP/stewardd.log" >&2
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$TMP/stewardd.toml" <<EOF
work_base_dir = "$TMP/work"
run_base_dir = "$TMP/run"
state_dir = "$TMP/state"
socket = "$SOCK"
cgroup_parent = "$PARENT"
host_ip = "127.0.0.1"
log_max_bytes = 65536
log_keep = 2
EOF
STEWARD_LOG=info "$STEWARDD" --config "$TMP/stewardd.toml" </dev/null >"$TMP/stewardd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 400); do
    curl -sf --unix-socket "$SOCK" http://localhost/v1/health >/dev/null 2>&1 && break
    kill -0 "$DAEMON_PID" 2>/dev/null || { echo "stewardd exited at start" >&2; exit 1; }
    sleep 0.05
done

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# (socat's complaints about clients that hang up early go to a log, not the report.)
socat TCP-LISTEN:"$PORT",bind=127.0.0.1,reuseaddr,fork UNIX-CONNECT:"$SOCK" 2>"$TMP/socat.log" &
SOCAT_PID=$!
for _ in $(seq 1 200); do
    curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null 2>&1 && break
    sleep 0.05
done
curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null

# The document's examples name instance demo/web/0 (the ProcessSpec example): apply it first,
# so the instance operations also run against an instance that exists, not only answer 404.
python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["components"]["schemas"]["ProcessSpec"]["example"]))' \
    docs/openapi.json |
    curl -sf --unix-socket "$SOCK" -H 'content-type: application/json' --data-binary @- http://localhost/v1/apply >/dev/null

# GET /v1/events streams for ever when follow is true, and true is its default: a request that
# left follow out (or set it true) would only end at the request timeout and be reported as a
# failure of the API. So that one operation runs with follow fixed to false (the backlog, then
# the end of the response), and every other parameter fuzzed as usual; the configured value
# overrides what schemathesis generates for follow in every phase and mode. GET
# /v1/endpoints/{namespace}/{name} is a long poll (30 s by default with `after`): its timeout is
# fixed to 0.1 s the same way. Nothing else is excluded.
cat >"$TMP/schemathesis.toml" <<'EOF'
[[operations]]
include-operation-id = "events"
parameters = { "query.follow" = "false" }

[[operations]]
include-operation-id = "getEndpoints"
parameters = { "query.timeout" = "0.1" }
EOF
# schemathesis has no serializer for application/toml (POST /v1/apply's second body type): send
# the generated string as it is, as for text/plain. (It cannot validate NDJSON either: its
# warning about GET /v1/events stays; tests/openapi.rs checks each event line instead.)
cat >"$TMP/steward_schemathesis_hooks.py" <<'EOF'
import schemathesis

schemathesis.serializer.alias("application/toml", "text/plain")
EOF

args=(
    --url "http://127.0.0.1:$PORT"
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
    --max-examples "$MAX_EXAMPLES"
    --request-timeout 10
    # One worker: with several, hypothesis's lambda descriptions run ast.parse in threads, which
    # CPython 3.11 does not survive ("AST constructor recursion depth mismatch").
    --workers 1
    --generation-database none
    --no-color
)
[[ -n ${SEED:-} ]] && args+=(--seed "$SEED")
# REPORT_DIR=dir keeps every request and response (a VCR cassette) and a JUnit report there.
[[ -n ${REPORT_DIR:-} ]] && args+=(--report vcr,junit --report-dir "$(mkdir -p "$REPORT_DIR" && cd "$REPORT_DIR" && pwd)")
start=$(date +%s)
# From the temp dir: nothing (reports, caches) lands in the repository.
(cd "$TMP" && PYTHONPATH=$TMP SCHEMATHESIS_HOOKS=steward_schemathesis_hooks timeout --signal=INT "$RUN_LIMIT_SECS" \
    schemathesis --config-file "$TMP/schemathesis.toml" run "$REPO/docs/openapi.json" "${args[@]}")
echo "schemathesis: passed in $(($(date +%s) - start)) s"
