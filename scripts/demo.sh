#!/usr/bin/env bash
# The main job: build Steward, run stewardd in the foreground with its embedded default
# configuration (no file needed; /etc/steward/stewardd.toml is read if present), apply the example
# units in units/ (three process apps and, when a Docker Engine can run, a pod) and show their
# status.
# Ctrl-C ends the demo: it deletes the demo's apps, then stops the daemon; a second Ctrl-C
# during that ends it at once and says what was left.
# It installs only what it needs and is missing, without apt's recommended packages.
# The screen is the CLI's: stewardd's own log lines go to a file the demo names
# (/var/log/steward-demo/stewardd.log); apt's output goes to install.log next to it, and
# scripts/dockerd-up.sh's to dockerd-up.log. STEWARD_DEMO_LOGS=DIR puts them in DIR.
# DEMO_ONCE=1 ends it right after showing the status (for scripted runs).
# STEWARD_DEMO_BIN=DIR runs the binaries in DIR instead of building a release (the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

logs=${STEWARD_DEMO_LOGS:-/var/log/steward-demo}
mkdir -p "$logs"
APT_LOG=$logs/install.log bash scripts/install-deps.sh --demo
if [ -n "${STEWARD_DEMO_BIN:-}" ]; then
    bin=$STEWARD_DEMO_BIN
else
    echo "== cargo build --release (a few minutes the first time)"
    cargo build --release --quiet
    bin=target/release
fi

# The example units fetch their package from the default package repository
# (package_repository = file:///usr/share/steward/repository): put gamesvc's there.
repo=/usr/share/steward/repository/examples
mkdir -p "$repo"
tar czf "$repo/gamesvc-1.0.tar.gz" -C units/packages/gamesvc .
steward="$bin/steward"
unset STEWARD_CONFIG STEWARD_SOCKET

log=$logs/stewardd.log
echo "== stewardd (embedded default configuration)"
echo "== stewardd's log: $log"
# In a session of its own: Ctrl-C signals the terminal's foreground process group, and the
# daemon must outlive it to delete the demo's instances (its own SIGINT would stop only itself,
# leaving them running unsupervised). Its output goes to its log, not between the CLI's lines.
setsid "$bin/stewardd" </dev/null >"$log" 2>&1 &
daemon=$!
demo_apps=()      # namespace/name of each app the demo applied
demo_values=()    # "secret demo/x", "hook run demo/y": what the demo created

# What is left of the demo (a second Ctrl-C cut the cleanup short), then the daemon stops.
abandon() {
    trap - INT TERM EXIT
    echo
    echo "== interrupted again: stopping stewardd without deleting the rest"
    $steward ls 2>/dev/null | sed 's/^/   left: /' || true
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    echo "   the instances above keep running; the next stewardd re-adopts them"
    echo "   (or delete them: stewardd & steward delete --all); stewardd's log: $log"
    exit 130
}
# The last lines of stewardd's log, when something went wrong.
show_log() {
    echo "== the last lines of stewardd's log ($log):"
    tail -n 20 "$log" | sed 's/^/   /'
}
cleanup() { # cleanup STATUS: the demo's status so far (0 after Ctrl-C)
    trap - EXIT
    trap abandon INT TERM
    echo
    if [ "$1" != 0 ]; then
        echo "== the demo failed (exit $1)"
        show_log
    fi
    if ((${#demo_apps[@]})); then
        echo "== removing the demo's apps (${demo_apps[*]}) and stopping stewardd"
        # --force: at once, not at units/world.json's scale-in hook's word.
        $steward delete "${demo_apps[@]}" --force --timeout 20 || true
    fi
    # The kept volumes of the demo's apps (units/world.json's, units/mysql*.json's): theirs to
    # remove once the apps are gone.
    $steward volume ls --namespace demo 2>/dev/null | awk 'NR > 1 {print $1 "/" $2 "/" $3, $4}' |
        while read -r ordinal volume; do $steward volume rm "$ordinal" "$volume" >/dev/null 2>&1 || true; done
    # The named Static volume units/mysql*.json share (Steward never removes a Static one: the
    # host's), below the default volume_root.
    rm -rf /var/lib/steward/volumes/demo/.static/db-volume
    for v in "${demo_values[@]}"; do   # "secret demo/x": steward secret rm demo/x
        read -ra words <<<"$v"             # "hook run demo/y": steward hook run rm demo/y
        $steward "${words[@]:0:${#words[@]}-1}" rm "${words[-1]}" >/dev/null 2>&1 || true
    done
    trap - INT TERM
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    echo "== stewardd stopped; nothing of the demo is left (its log: $log)"
}
trap 'cleanup 0; exit 0' INT TERM
trap 'cleanup "$?"' EXIT

for _ in $(seq 1 200); do
    $steward ls >/dev/null 2>&1 && break
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.05
done
if ! kill -0 "$daemon" 2>/dev/null; then
    echo "== stewardd exited before it answered"
    exit 1
elif ! $steward ls >/dev/null 2>&1; then
    echo "== stewardd did not answer on its socket within 10 s"
    exit 1
fi

# units/vault.toml reads a configmap and a secret: they must exist before it is applied.
echo "== steward configmap create demo/vault-config; steward secret create demo/vault-creds"
$steward configmap create demo/vault-config --from-literal greeting="hello from a configmap"
$steward secret create demo/vault-creds --from-literal password=change-me
demo_values+=("configmap demo/vault-config" "secret demo/vault-creds")

units=(units/ticker.toml units/gamesvc.json units/vault.toml units/backup.toml units/rotate.toml units/mysql-proc.json)
# The example pod needs a Docker Engine and its busybox image (made locally, nothing is pulled).
if bash scripts/dockerd-up.sh >"$logs/dockerd-up.log" 2>&1; then
    units+=(units/webpod.json units/cnipod.json units/webapp.yaml units/world.json units/mysql.json)
else
    echo "== no Docker Engine could be started: the example pods (units/webpod.json, units/cnipod.json, units/webapp.yaml, units/world.json, units/mysql.json) are skipped"
    echo "   (why: $logs/dockerd-up.log)"
fi

# units/world.json's scale-in hook asks this template.
$steward hook template apply units/hooks/players-gone.toml >/dev/null || true
demo_values+=("hook template demo/players-gone")

# Instances from an earlier run, or other work on this state directory, are named first.
earlier=$($steward ls 2>/dev/null | tail -n +2 || true)
if [ -n "$earlier" ]; then
    echo "== instances from an earlier run or other work are here already (Ctrl-C leaves them):"
    echo "$earlier" | sed 's/^/   /'
fi

for unit in "${units[@]}"; do
    echo
    echo "== steward apply -f $unit --wait"
    app=$($steward validate -o json "$unit" | sed -n 's/.*"app": *"\([^"]*\)".*/\1/p' | head -n 1)
    demo_apps+=("$app")
    $steward apply -f "$unit" --wait --timeout 20 || true
done

echo
echo "== steward ls   (READY: readiness probes; units/gamesvc.json's asks its /check)"
$steward ls
echo
echo "== steward rollout restart demo/gamesvc; steward rollout status demo/gamesvc -w"
echo "   (a change rolls out a few at a time by the spec's strategy, as new instances become ready)"
$steward rollout restart demo/gamesvc || true
$steward rollout status demo/gamesvc -w --timeout 60 || true
echo
echo "== steward rollout history demo/gamesvc   (every applied change is a revision; undo goes back)"
$steward rollout history demo/gamesvc || true
echo
echo "== units/gamesvc.json's disconnect.stopAfterSecs 30: under steward-sched, a host cut off from every"
echo "   scheduler stops gamesvc itself after 30 s, and it runs elsewhere only after that (docs/remote.md)"
echo
echo "== steward apply -f units/gamesvc-v2-broken.json --wait   (a v2 whose readiness route does not exist)"
echo "   (its rollout fails at the progress deadline, its surge instance deleted; autoRollback goes back to"
echo "    the last good revision; --wait exits 6 and says which revision runs now; history shows outcomes)"
$steward apply -f units/gamesvc-v2-broken.json --wait --timeout 60 || true
$steward rollout history demo/gamesvc || true
echo
echo "== steward hook template apply units/hooks/gamesvc-check.toml; steward hook run create demo/gamesvc-check -w"
echo "   (seed 004: a check run a number of times, every measurement recorded; rollout steps can wait on one)"
$steward hook template apply units/hooks/gamesvc-check.toml || true
demo_values+=("hook template demo/gamesvc-check")
gamesvc_port=$($steward -o json status demo/gamesvc/0 | sed -n 's/.*"http_port": *\([0-9]*\).*/\1/p' | head -n 1)
$steward hook run create demo/gamesvc-check --name demo-check --arg "port=${gamesvc_port:-0}" -w --timeout 30 || true
demo_values+=("hook run demo/demo-check")
echo
echo "== steward node   (requests: what the apps here ask of the host; units/gamesvc.json asks 100m and 32Mi an instance)"
$steward node || true
echo
echo "== units/gamesvc.json schedule   (seed 003: steward-sched spreads it over hosts, prefers hosts without a gpu,"
echo "   and may use a host under a preferred cordon; a daemon on its own reads only its labels)"
sed -n '/"schedule"/,/^  },$/p' units/gamesvc.json
echo
echo "== units/gamesvc.json services   (seed 003: steward-sched keeps the Ready instances as endpoints and"
echo "   hands them to every daemon; a NodePort answers on every host, in nftables or in userspace; each"
echo "   service gets a cluster IP on every host, and [services] dns answers gamesvc.demo.steward: A, SRV)"
sed -n '/"services"/,$p' units/gamesvc.json
echo
echo "== the fleet: \`bash scripts/fleet-demo.sh\` runs three such hosts in network namespaces, an etcd and two"
echo "   steward-sched serve on this machine, and deploys, rolls out, fails over and cuts a host off (docs/remote.md)"
echo
echo "== steward job status demo/backup   (units/backup.toml: a job, 3 runs to succeed, 2 at a time)"
sleep 3
$steward job status demo/backup || true
echo
echo "== steward cron ls   (units/rotate.toml: a cron job, a run every 10 s)"
$steward cron ls || true
echo
echo "== steward status demo/ticker/0   (tasks: its processes and threads against the limit units/ticker.toml sets)"
$steward status demo/ticker/0
echo
echo "== steward logs demo/ticker/0 --tail 2   (its init step, units/ticker.toml, ran first)"
$steward logs demo/ticker/0 --tail 2 || true
echo
echo "== steward cp units/ticker.toml demo/ticker/0:incoming/ticker.toml --mode r"
echo "   (seed 001's local file: into a running instance's own workPath, owned by its user)"
$steward cp units/ticker.toml demo/ticker/0:incoming/ticker.toml --mode r || true
echo
echo "== steward logs demo/mysql-proc/2 --tail 1; ls /var/lib/steward/volumes/demo/.static/db-volume"
echo "   (units/mysql-proc.json: seed 003's StatefulSet, 3 processes, each ordinal's data in its Dynamic volume"
echo "    (\$VOLUME_DB_DATA, owned by its user), each writing its line into the Static one they share; the pod"
echo "    twin units/mysql.json writes beside them; both keep their data across restarts, rollouts and scale)"
$steward logs demo/mysql-proc/2 --tail 1 || true
ls /var/lib/steward/volumes/demo/.static/db-volume 2>/dev/null || true
if [[ " ${units[*]} " == *" units/webpod.json "* ]]; then
    echo
    echo "== steward status demo/webpod/0"
    $steward status demo/webpod/0 || true
    echo
    echo "== steward logs demo/webpod/0 --container server --timestamps --tail 3"
    $steward logs demo/webpod/0 --container server --timestamps --tail 3 || true
    echo
    echo "== steward logs demo/webpod/0 --container prepare   (its init container, run before the others)"
    $steward logs demo/webpod/0 --container prepare || true
    echo
    echo "== steward logs demo/webpod/0 --container poller --tail 2"
    echo "   (seed 003 volumes: the page the init container wrote into the Temp volume \"www\", served by"
    echo "   the server, kept by the poller in its 8 MiB Memory volume)"
    $steward logs demo/webpod/0 --container poller --tail 2 || true
    echo
    echo "== steward logs demo/cnipod/0 --container client --tail 1"
    echo "   (units/cnipod.json: with network_mode = \"cni\" in stewardd.toml its HOST is the address the"
    echo "   CNI plugins gave it, given back when it ends (docs/cni.md); here, Docker's networking)"
    $steward logs demo/cnipod/0 --container client --tail 1 || true
    echo
    echo "== units/webapp.yaml: written as seed 003's chart values are (YAML; command/args lists, a port's"
    echo "   \`port\`, env[].from the configmap demo/vault-config, unavailable/surge/ready); steward validate:"
    $steward validate units/webapp.yaml || true
    $steward ls --name webapp || true
    echo
    echo "== steward logs demo/world/1 --tail 1; steward volume ls --namespace demo"
    echo "   (units/world.json: a stateful set whose ordinals keep their data in an Isolated volume (seed 003),"
    echo "    found again after a restart, a scale in and out, a delete and a deploy again; steward volume rm removes it)"
    $steward logs demo/world/1 --tail 1 || true
    $steward volume ls --namespace demo || true
    echo
    echo "== 3 players on demo/world/1 (steward cp a players file into it); world scaled 2 -> 1"
    echo "   (its strategy.scaleIn hook, units/hooks/players-gone.toml, asks each world to go how many play:"
    echo "    world 1 is kept while it has players; steward rollout status says why)"
    printf '{"players": 3}\n' >"$logs/players"
    $steward cp "$logs/players" demo/world/1:/www/players || true
    sed 's/"instance": 2/"instance": 1/' units/world.json >"$logs/world-1.json"
    $steward apply -f "$logs/world-1.json" || true
    sleep 4
    $steward rollout status demo/world || true
    echo
    echo "== its players gone (players 0), steward rollout resume demo/world: its hook asks again, and it goes"
    printf '{"players": 0}\n' >"$logs/players"
    $steward cp "$logs/players" demo/world/1:/www/players || true
    $steward rollout resume demo/world || true
    for _ in $(seq 1 100); do
        $steward status demo/world/1 >/dev/null 2>&1 || break
        sleep 0.2
    done
    $steward ls --name world || true
fi

if [ "${DEMO_ONCE:-0}" = 1 ]; then
    exit 0
fi
echo
echo "stewardd runs in the foreground; try \`$bin/steward events -f\` in another terminal"
echo "(its own log: tail -f $log)."
echo "Ctrl-C ends the demo."
wait "$daemon"
