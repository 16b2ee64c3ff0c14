#!/usr/bin/env bash
# Fuzzes a real `steward-sched serve` through its HTTP API with schemathesis, against
# docs/sched-openapi.json: no server errors, and every response's status code, content type,
# headers and body as documented. Exits non-zero on any finding.
#
# The server leads over one hollow stewardd (runtime = "hollow": its API, store and events are
# real, its instances run nothing), both on loopback with their own certificates, tokens and
# state in a temp dir, all removed on exit. schemathesis presents a write token over TLS checked
# against the test CA.
#
# Knobs: MAX_EXAMPLES (per operation, default 30), SEED, RUN_LIMIT_SECS, REPORT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
MAX_EXAMPLES=${MAX_EXAMPLES:-30}
RUN_LIMIT_SECS=${RUN_LIMIT_SECS:-300}
BIN=$REPO/target/debug
for b in stewardd steward steward-sched; do
    [[ -x $BIN/$b ]] || { echo "schemathesis-sched.sh: no $BIN/$b (cargo build first)" >&2; exit 2; }
done
if ! command -v schemathesis >/dev/null || ! schemathesis --version | grep -q 'version 4\.'; then
    python3 -m pip install --quiet --disable-pip-version-check 'schemathesis>=4,<5' 2>/dev/null \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages 'schemathesis>=4,<5'
    hash -r
fi

TMP=$(mktemp -d /tmp/steward-sched-schemathesis.XXXXXX)
DAEMON_PID=
SERVE_PID=
cleanup() {
    local rc=$?
    set +e
    for p in $SERVE_PID $DAEMON_PID; do
        kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    if ((rc != 0)); then
        for log in stewardd serve; do
            [[ -f $TMP/$log.log ]] && { echo "--- $log log (last 30 lines) ---" >&2; tail -n 30 "$TMP/$log.log" >&2; }
        done
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
NODE_PORT=$(free_port)
SERVE_PORT=$(free_port)
TOKEN=sched-schemathesis-write-0123456789
"$BIN/steward" cert --dir "$TMP" --name node --ip 127.0.0.1 >/dev/null
"$BIN/steward" cert --dir "$TMP" --name sched --ip 127.0.0.1 >/dev/null
printf '%s write\nsched-schemathesis-read-012345678 read\n' "$TOKEN" >"$TMP/tokens"
chmod 600 "$TMP/tokens"
printf '%s\n' "$TOKEN" >"$TMP/token"

cat >"$TMP/stewardd.toml" <<EOF
work_base_dir = "$TMP/work"
run_base_dir = "$TMP/run"
state_dir = "$TMP/state"
socket = "$TMP/stewardd.sock"
host_ip = "127.0.0.1"
runtime = "hollow"
[remote]
listen = "127.0.0.1:$NODE_PORT"
cert = "$TMP/node.pem"
key = "$TMP/node-key.pem"
tokens_file = "$TMP/tokens"
rate_per_sec = 100000.0
rate_burst = 100000
[events]
heartbeat_secs = 1
EOF
STEWARD_LOG=info "$BIN/stewardd" --config "$TMP/stewardd.toml" </dev/null >"$TMP/stewardd.log" 2>&1 &
DAEMON_PID=$!

cat >"$TMP/cluster.toml" <<EOF
state_dir = "$TMP/sched"
ca = "$TMP/ca.pem"
token_file = "$TMP/token"
heartbeat_timeout_secs = 5
[serve]
listen = "127.0.0.1:$SERVE_PORT"
cert = "$TMP/sched.pem"
key = "$TMP/sched-key.pem"
tokens_file = "$TMP/tokens"
rate_per_sec = 100000.0
rate_burst = 100000
[[node]]
name = "h1"
address = "127.0.0.1:$NODE_PORT"
EOF
STEWARD_LOG=warn "$BIN/steward-sched" --cluster "$TMP/cluster.toml" -o json serve </dev/null >"$TMP/serve.log" 2>&1 &
SERVE_PID=$!
URL=https://127.0.0.1:$SERVE_PORT
for _ in $(seq 1 400); do
    curl -sf --cacert "$TMP/ca.pem" -H "Authorization: Bearer $TOKEN" "$URL/v1/health" >/dev/null 2>&1 && break
    kill -0 "$SERVE_PID" 2>/dev/null || { echo "steward-sched serve exited at start" >&2; exit 1; }
    sleep 0.05
done
curl -sf --cacert "$TMP/ca.pem" -H "Authorization: Bearer $TOKEN" "$URL/v1/health" >/dev/null

# Streams end when the client goes: the merged event stream is read without following (each
# node's backlog, then the end), an app's endpoints without watching, a run without waiting.
cat >"$TMP/schemathesis.toml" <<'EOF'
[[operations]]
include-operation-id = "events"
parameters = { "query.follow" = "false" }

[[operations]]
include-operation-id = "getEndpoints"
parameters = { "query.watch" = "false" }

[[operations]]
include-operation-id = "getHookRun"
parameters = { "query.wait" = "0" }
EOF
args=(
    --url "$URL"
    --tls-verify "$TMP/ca.pem"
    --header "Authorization: Bearer $TOKEN"
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
    --max-examples "$MAX_EXAMPLES"
    --request-timeout 20
    --workers 1
    --generation-database none
    --no-color
)
[[ -n ${SEED:-} ]] && args+=(--seed "$SEED")
[[ -n ${REPORT_DIR:-} ]] && args+=(--report vcr,junit --report-dir "$(mkdir -p "$REPORT_DIR" && cd "$REPORT_DIR" && pwd)")
start=$(date +%s)
(cd "$TMP" && timeout --signal=INT "$RUN_LIMIT_SECS" \
    schemathesis --config-file "$TMP/schemathesis.toml" run "$REPO/docs/sched-openapi.json" "${args[@]}")
echo "schemathesis (steward-sched serve): passed in $(($(date +%s) - start)) s"
