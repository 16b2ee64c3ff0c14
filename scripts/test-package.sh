#!/usr/bin/env bash
# The package test (run by scripts/test.sh, root only). On this machine, for real:
#   1. scripts/package.sh packs the deb and the rpm from the dev build scripts/test.sh has made
#      (--profile dev --fast: what is tested is the packing, not the optimiser or the
#      compressor), and the same build again as a higher deb version (0.1.0-2) for the upgrade;
#   2. lintian reports no error on the deb; dpkg-deb and rpm -qlp/-qcp/--scripts list the
#      expected files, conffile and maintainer scripts; every man page renders with
#      `man --warnings -l` without a warning;
#   3. dpkg -i: group, directories and the enabled (not started) unit; the installed
#      /usr/bin/stewardd, started here in the background with the installed
#      /etc/steward/stewardd.toml (systemd is not PID 1 here), runs the installed example units;
#   4. upgrade: dpkg -i of the higher version restarts the running daemon in place (SIGUSR2 from
#      the postinst): same daemon pid, new binary, every instance re-adopted with the same pid;
#   5. dpkg -r stops the daemon only and keeps the state: reinstalled, the daemon finds the same
#      instances with the same pids; dpkg -P deletes the state;
#   6. the rpm's scriptlets, run for real by Debian's rpm (--nodeps: its database knows none of
#      the system's packages): install enables and creates, an upgrade to release 2 restarts the
#      daemon in place keeping every instance, erase stops the daemon and keeps the state.
# The machine is left as found: instances deleted, package purged, and the steward group and
# cgroups removed if this test made them. See docs/packaging.md.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" -eq 0 ] || { echo "test-package: needs root (it installs the deb)" >&2; exit 1; }

passed=0
ok() {
    passed=$((passed + 1))
    echo "test-package: ok: $*"
}
fail() {
    echo "test-package: FAIL: $*" >&2
    exit 1
}

unset STEWARD_CONFIG STEWARD_SOCKET
export MANWIDTH=80
work="$(mktemp -d)"
daemon=""
# Processes running the installed daemon binary (also after dpkg replaced or removed it).
installed_daemons() {
    for exe in /proc/[0-9]*/exe; do
        case "$(readlink "$exe" 2>/dev/null)" in
        /usr/bin/stewardd | "/usr/bin/stewardd (deleted)") exe="${exe#/proc/}" && echo "${exe%/exe}" ;;
        esac
    done
}

[ -z "$(installed_daemons)" ] || fail "a /usr/bin/stewardd is already running (pids $(installed_daemons | xargs))"
if /usr/bin/env steward --socket /run/steward/stewardd.sock node >/dev/null 2>&1; then
    fail "a stewardd (the demo?) already answers on /run/steward/stewardd.sock"
fi
if dpkg-query -W -f='${Status}' steward 2>/dev/null | grep -q ' installed$'; then
    echo "test-package: purging the steward package left by an earlier run"
    dpkg -P steward >/dev/null
fi
group_existed=false
getent group steward >/dev/null && group_existed=true
cgroups_before="$(ls -d /sys/fs/cgroup/steward /sys/fs/cgroup/*/steward 2>/dev/null || true)"
rpmdb_before="$(ls -A /var/lib/rpm 2>/dev/null || true)"

cleanup() {
    status=$?
    set +e
    if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
        /usr/bin/steward delete --all --timeout 20 >/dev/null 2>&1
        kill -TERM "$daemon"
        wait "$daemon" 2>/dev/null
    fi
    if dpkg-query -W -f='${Status}' steward 2>/dev/null | grep -qv 'not-installed'; then
        dpkg -P steward >/dev/null 2>&1
    fi
    if rpm -q steward >/dev/null 2>&1; then
        rpm -e --nodeps steward >/dev/null 2>&1
        rm -rf /var/lib/steward /run/steward /etc/steward
    fi
    $group_existed || groupdel steward 2>/dev/null
    # Debian's rpm had an empty database before: leave none behind.
    [ -z "$rpmdb_before" ] && [ -d /var/lib/rpm ] && find /var/lib/rpm -mindepth 1 -delete
    for cg in /sys/fs/cgroup/steward /sys/fs/cgroup/*/steward; do
        [ -d "$cg" ] && ! grep -qxF "$cg" <<<"$cgroups_before" && rmdir "$cg" 2>/dev/null
    done
    if [ "$status" -ne 0 ] && [ -f "$work/stewardd.log" ]; then
        echo "---- stewardd log" >&2
        tail -n 40 "$work/stewardd.log" >&2
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# ---- 1. build ------------------------------------------------------------------------------
bash scripts/package.sh --profile dev --fast --out "$work/v1" >"$work/built"
deb1="$(grep '\.deb$' "$work/built")"
rpm1="$(grep '\.rpm$' "$work/built")"
deb2="$(bash scripts/package.sh --profile dev --fast --no-rpm --deb-version 0.1.0-2 --out "$work/v2" | grep '\.deb$')"
[ -f "$deb1" ] && [ -f "$rpm1" ] && [ -f "$deb2" ] || fail "package.sh did not build all three packages"
ok "built $(basename "$deb1"), $(basename "$rpm1") and $(basename "$deb2")"

# ---- 2. inspect ----------------------------------------------------------------------------
lintian --fail-on error --tag-display-limit 0 "$deb1" >"$work/lintian" 2>&1 || {
    cat "$work/lintian" >&2
    fail "lintian reports errors on $(basename "$deb1")"
}
sed 's/^/  lintian: /' "$work/lintian"
ok "lintian: no errors ($(grep -c '^W:' "$work/lintian" || true) warnings)"

common_files=(
    /usr/bin/stewardd /usr/bin/steward /usr/bin/steward-sched
    /usr/lib/systemd/system/stewardd.service /usr/lib/tmpfiles.d/steward.conf /usr/lib/sysusers.d/steward.conf
    /etc/steward/stewardd.toml
    /usr/share/man/man8/stewardd.8.gz /usr/share/man/man1/steward.1.gz /usr/share/man/man1/steward-apply.1.gz
    /usr/share/man/man1/steward-sched.1.gz /usr/share/man/man5/stewardd.toml.5.gz /usr/share/man/man5/steward-spec.5.gz
    /usr/share/bash-completion/completions/steward /usr/share/fish/vendor_completions.d/steward.fish
    /usr/share/doc/steward/examples/ticker.toml /usr/share/doc/steward/examples/gamesvc.json
    /usr/share/steward/repository/examples/gamesvc-1.0.tar.gz
)
dpkg-deb -c "$deb1" | awk '{ print $6 }' | sed 's|^\.||' >"$work/deb-files"
for f in "${common_files[@]}" /usr/share/zsh/vendor-completions/_steward /usr/share/doc/steward/copyright; do
    grep -qxF "$f" "$work/deb-files" || fail "the deb lacks $f"
done
dpkg-deb -I "$deb1" conffiles | grep -qxF /etc/steward/stewardd.toml || fail "the deb's conffiles lack stewardd.toml"
for script in postinst prerm postrm; do
    dpkg-deb -I "$deb1" "$script" | grep -q steward || fail "the deb lacks its $script"
done
ok "the deb holds the $(wc -l <"$work/deb-files") expected paths, the conffile and postinst/prerm/postrm"

rpm -qlp "$rpm1" >"$work/rpm-files" 2>/dev/null
for f in "${common_files[@]}" /usr/share/zsh/site-functions/_steward; do
    grep -qxF "$f" "$work/rpm-files" || fail "the rpm lacks $f"
done
rpm -qcp "$rpm1" 2>/dev/null | grep -qxF /etc/steward/stewardd.toml || fail "the rpm's config files lack stewardd.toml"
rpm -qp --scripts "$rpm1" >"$work/rpm-scripts" 2>/dev/null
for want in 'postinstall scriptlet' 'preuninstall scriptlet' 'postuninstall scriptlet' \
    'systemctl enable stewardd.service' 'steward_restart_in_place' \
    'steward_stop_daemons' 'systemd-sysusers /usr/lib/sysusers.d/steward.conf'; do
    grep -qF "$want" "$work/rpm-scripts" || fail "rpm -qp --scripts lacks '$want'"
done
# The rpm's scripts are not run here (no rpm-based system): at least they must parse.
for script in target/package/rpm-scripts/* target/package/deb-scripts/*; do
    sh -n "$script" || fail "$script does not parse"
done
ok "rpm -qlp lists the $(wc -l <"$work/rpm-files") expected files, -qcp the config, --scripts post/preun/postun"

mkdir "$work/root"
dpkg-deb -x "$deb1" "$work/root"
pages=0
for page in "$work"/root/usr/share/man/man*/*; do
    warnings="$(man --warnings -l "$page" 2>&1 >/dev/null)"
    [ -z "$warnings" ] || fail "man -l $(basename "$page") warns: $warnings"
    [ "$(man -l "$page" 2>/dev/null | wc -l)" -gt 10 ] || fail "man -l $(basename "$page") renders almost nothing"
    pages=$((pages + 1))
done
ok "all $pages man pages render with man --warnings -l without a warning"

# ---- 3. install and run the example units --------------------------------------------------
dpkg -i "$deb1" >"$work/dpkg-i.log" 2>&1 || { cat "$work/dpkg-i.log" >&2; fail "dpkg -i $(basename "$deb1")"; }
getent group steward >/dev/null || fail "the postinst did not create group steward"
[ "$(stat -c '%a %G' /run/steward)" = "755 steward" ] || fail "/run/steward is $(stat -c '%a %G' /run/steward)"
[ "$(stat -c %a /var/lib/steward/state)" = 700 ] || fail "/var/lib/steward/state is not mode 0700"
if command -v deb-systemd-helper >/dev/null; then
    [ -L /etc/systemd/system/multi-user.target.wants/stewardd.service ] || fail "the unit was not enabled"
fi
[ -z "$(installed_daemons)" ] || fail "installing started stewardd (it must only be enabled)"
dpkg-query -W -f='${Conffiles}' steward | grep -q /etc/steward/stewardd.toml || fail "stewardd.toml is not a conffile"
bash -c 'source /usr/share/bash-completion/completions/steward && complete -p steward' >/dev/null ||
    fail "the bash completion does not load"
man -w stewardd.toml >/dev/null 2>&1 || fail "man -w stewardd.toml finds no installed page"
ok "dpkg -i: group steward, /run/steward and /var/lib/steward/state, unit enabled not started, conffile, completions, man"

start_daemon() {
    # As the unit does: /usr/bin/stewardd without arguments reads /etc/steward/stewardd.toml.
    /usr/bin/stewardd >>"$work/stewardd.log" 2>&1 &
    daemon=$!
    for _ in $(seq 1 400); do
        /usr/bin/steward node >/dev/null 2>&1 && return 0
        kill -0 "$daemon" 2>/dev/null || fail "the installed stewardd exited"
        sleep 0.05
    done
    fail "the installed stewardd did not answer on /run/steward/stewardd.sock"
}
# "ns/name/id pid state restarts" per instance, sorted. A cron job's runs are left out: they
# come and go on their own ticks (the example's every 10 s), upgrade or not.
instances() {
    /usr/bin/steward -o json cron ls >"$work/crons.json"
    /usr/bin/steward -o json ls | python3 -c '
import json, sys
crons = {c["app"] for c in json.load(open(sys.argv[1]))}
for s in json.load(sys.stdin):
    i = s["id"]
    if "%s/%s" % (i["namespace"], i["name"]) in crons:
        continue
    print("%s/%s/%s" % (i["namespace"], i["name"], i["index"]), s["pid"], s["state"]["state"], s["restarts"])' "$work/crons.json" | sort
}
start_daemon
for unit in ticker.toml gamesvc.json; do
    /usr/bin/steward apply -f "/usr/share/doc/steward/examples/$unit" --wait --timeout 60 >/dev/null ||
        fail "steward apply -f /usr/share/doc/steward/examples/$unit"
done
instances >"$work/before"
[ "$(grep -c ' Running ' "$work/before")" = 3 ] || { cat "$work/before" >&2; fail "the example units are not all Running"; }
port="$(/usr/bin/steward -o json status demo/gamesvc/0 | python3 -c 'import json,sys; print(list(json.load(sys.stdin)["ports"].values())[0])')"
curl -fsS --max-time 5 "http://127.0.0.1:$port/" >/dev/null || fail "gamesvc does not answer on its port $port"
ok "installed stewardd + installed config run the examples: $(awk '{ printf "%s (pid %s) ", $1, $2 }' "$work/before")"

# ---- 4. upgrade in place -------------------------------------------------------------------
inode_before="$(stat -c %i /usr/bin/stewardd)"
dpkg -i "$deb2" >"$work/dpkg-upgrade.log" 2>&1 || { cat "$work/dpkg-upgrade.log" >&2; fail "dpkg -i $(basename "$deb2")"; }
sed 's/^/  dpkg: /' "$work/dpkg-upgrade.log" | grep stewardd || true
[ "$(dpkg-query -W -f='${Version}' steward)" = 0.1.0-2 ] || fail "the upgrade did not install 0.1.0-2"
kill -0 "$daemon" 2>/dev/null || fail "the daemon (pid $daemon) is gone after the upgrade"
[ "$(readlink "/proc/$daemon/exe")" = /usr/bin/stewardd ] || fail "pid $daemon still runs $(readlink "/proc/$daemon/exe")"
[ "$(stat -c %i /usr/bin/stewardd)" != "$inode_before" ] || fail "the upgrade did not replace /usr/bin/stewardd"
grep -q "restarting in place" "$work/stewardd.log" || fail "the daemon did not restart in place"
[ "$(grep -c 'stewardd ready' "$work/stewardd.log")" = 2 ] || fail "the daemon did not start twice"
instances >"$work/after"
diff "$work/before" "$work/after" >&2 || fail "instances changed across the upgrade (before < > after)"
ok "upgrade to 0.1.0-2: daemon pid $daemon restarted in place on the new binary; the 3 instances kept their pids, 0 restarts"

# ---- 5. remove keeps the state, purge deletes it -------------------------------------------
dpkg -r steward >"$work/dpkg-r.log" 2>&1 || { cat "$work/dpkg-r.log" >&2; fail "dpkg -r steward"; }
for _ in $(seq 1 100); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
kill -0 "$daemon" 2>/dev/null && fail "dpkg -r did not stop the daemon"
wait "$daemon" || fail "the daemon exited with status $? on dpkg -r"
daemon=""
[ ! -e /usr/bin/stewardd ] || fail "dpkg -r left /usr/bin/stewardd"
[ -d /var/lib/steward/state ] && [ -n "$(ls -A /var/lib/steward/state)" ] || fail "dpkg -r deleted the state"
[ -f /etc/steward/stewardd.toml ] || fail "dpkg -r deleted the conffile"
while read -r id pid _; do
    kill -0 "$pid" 2>/dev/null || fail "instance $id (pid $pid) did not survive dpkg -r"
done <"$work/before"
grep -q "keep running without a supervisor" "$work/dpkg-r.log" || fail "dpkg -r did not say that instances keep running"
dpkg -i "$deb2" >"$work/dpkg-i2.log" 2>&1 || { cat "$work/dpkg-i2.log" >&2; fail "reinstalling $(basename "$deb2")"; }
start_daemon
instances >"$work/again"
diff "$work/before" "$work/again" >&2 || fail "after dpkg -r and reinstalling, the daemon lost instances"
ok "dpkg -r stopped the daemon only, kept state and conffile; reinstalled, it re-adopted the 3 instances"

/usr/bin/steward delete --all --timeout 30 >/dev/null || fail "steward delete --all"
kill -TERM "$daemon"
wait "$daemon" || true
daemon=""
dpkg -P steward >"$work/dpkg-p.log" 2>&1 || { cat "$work/dpkg-p.log" >&2; fail "dpkg -P steward"; }
for gone in /var/lib/steward /etc/steward /run/steward /usr/lib/systemd/system/stewardd.service \
    /etc/systemd/system/multi-user.target.wants/stewardd.service /etc/systemd/system/stewardd.service; do
    [ ! -e "$gone" ] && [ ! -L "$gone" ] || fail "dpkg -P left $gone"
done
dpkg-query -W -f='${Status}' steward 2>/dev/null | grep -q 'not-installed' ||
    [ -z "$(dpkg-query -W -f='${Status}' steward 2>/dev/null)" ] || fail "steward is still known to dpkg"
ok "dpkg -P removed /var/lib/steward, /etc/steward, /run/steward and the unit's symlinks"

# ---- 6. the rpm's scriptlets ---------------------------------------------------------------
rpm2="$(bash scripts/package.sh --profile dev --fast --no-deb --rpm-release 2 --out "$work/rpm2" | grep '\.rpm$')"
run_rpm() { # Debian's rpm warns that alien is the way; --nodeps: its database is empty
    rpm --nodeps "$@" >"$work/rpm.log" 2>&1 || { cat "$work/rpm.log" >&2; fail "rpm $*"; }
}
run_rpm -i "$rpm1"
getent group steward >/dev/null || fail "%post did not create group steward"
[ "$(stat -c %a /var/lib/steward/state)" = 700 ] || fail "%post did not create /var/lib/steward/state"
if command -v systemctl >/dev/null; then
    [ -L /etc/systemd/system/multi-user.target.wants/stewardd.service ] || fail "%post did not enable the unit"
fi
[ -z "$(installed_daemons)" ] || fail "rpm -i started stewardd (it must only be enabled)"
start_daemon
/usr/bin/steward apply -f /usr/share/doc/steward/examples/ticker.toml --wait --timeout 60 >/dev/null ||
    fail "steward apply (rpm install)"
instances >"$work/rpm-before"
rpm_daemon="$daemon"
run_rpm -U "$rpm2"
grep -q "restarting pid $daemon in place" "$work/rpm.log" || { cat "$work/rpm.log" >&2; fail "%post (upgrade) did not restart the daemon"; }
[ "$(rpm -q --qf '%{RELEASE}' steward)" = 2 ] || fail "rpm -U did not install release 2"
[ "$(readlink "/proc/$daemon/exe")" = /usr/bin/stewardd ] || fail "pid $daemon does not run the new /usr/bin/stewardd"
instances >"$work/rpm-after"
diff "$work/rpm-before" "$work/rpm-after" >&2 || fail "instances changed across rpm -U"
/usr/bin/steward delete --all --timeout 30 >/dev/null || fail "steward delete --all (rpm)"
run_rpm -e steward
for _ in $(seq 1 100); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
kill -0 "$daemon" 2>/dev/null && fail "rpm -e did not stop the daemon"
wait "$daemon" || fail "the daemon exited with status $? on rpm -e"
daemon=""
[ ! -e /usr/bin/stewardd ] || fail "rpm -e left /usr/bin/stewardd"
[ -n "$(ls -A /var/lib/steward/state)" ] || fail "rpm -e deleted the state"
[ ! -L /etc/systemd/system/multi-user.target.wants/stewardd.service ] || fail "rpm -e left the unit enabled"
rm -rf /var/lib/steward /run/steward /etc/steward # rpm has no purge
ok "rpm: %post enabled and created, upgrade to release 2 restarted pid $rpm_daemon in place keeping the instance's pid, erase stopped it and kept the state"

echo "test-package: $passed passed, 0 failed"
