#!/usr/bin/env bash
# Builds Steward's deb (cargo-deb) and rpm (cargo-generate-rpm) from one release build.
#
#   scripts/package.sh [--deb-version VERSION] [--rpm-release N] [--no-rpm] [--no-deb] [--out DIR]
#                      [--profile PROFILE] [--fast]
#
# Steps: installs cargo-deb and cargo-generate-rpm when missing (cargo install --locked, kept in
# ~/.cargo/bin for the next run); builds the release binaries (incremental: a second run with
# nothing changed only packs); generates under target/package/ what the packages ship besides
# the repository's files — the stripped binaries, the man pages of man/ gzip'd, bash/zsh/fish
# completions, the example package, the maintainer scripts; then packs. Prints the paths of the
# packages it wrote (default DIR: target/package/out).
#
# --profile packs another cargo profile's binaries (default release). The package test packs the
# dev build the suite has already made: packing, installing and upgrading do not depend on how
# the binaries were optimised, and a clean release build (fat LTO, one codegen unit) is ~13 min
# on 2 cores. What ships is always built with the default. --fast compresses faster into larger
# packages (cargo-deb --fast, a gzip'd rpm payload): the dev build's ~136 MB of binaries took
# 2.5 min a pack at the defaults (xz, zstd), 20 s with it.
#
# --deb-version sets the deb's full version (e.g. 0.1.0-2), --rpm-release the rpm's release
# (e.g. 2): the same build as a higher version, which is how the upgrade tests make one.
# See docs/packaging.md.
set -euo pipefail
cd "$(dirname "$0")/.."

deb_version=""
rpm_release=""
rpm=true
deb=true
out=target/package/out
profile=release
fast=false
while [ $# -gt 0 ]; do
    case "$1" in
    --deb-version) deb_version="$2"; shift 2 ;;
    --rpm-release) rpm_release="$2"; shift 2 ;;
    --no-rpm) rpm=false; shift ;;
    --no-deb) deb=false; shift ;;
    --out) out="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --fast) fast=true; shift ;;
    *) echo "package.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done

say() { echo "package.sh: $*" >&2; }

# The packaging tools, pinned by their own lockfiles.
for tool in cargo-deb cargo-generate-rpm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        say "installing $tool (cargo install --locked)"
        cargo install --locked --quiet "$tool"
    fi
done

say "building the $profile binaries"
cargo build --profile "$profile" --locked --quiet --bins
# cargo's own name for the dev profile's directory.
built="target/$([ "$profile" = dev ] && echo debug || echo "$profile")"

stage=target/package
rm -rf "${stage:?}"/{man,completions,deb-scripts,rpm-scripts,bin}
mkdir -p "$stage/man/man1" "$stage/man/man5" "$stage/man/man8" "$stage/completions" \
    "$stage/deb-scripts" "$stage/rpm-scripts" "$stage/bin" "$out"

# Both packages take their binaries from here, stripped (cargo-generate-rpm packs files as they
# are, and cargo-deb strips only the targets of its own profile).
for bin in stewardd steward steward-sched; do
    strip --strip-unneeded -o "$stage/bin/$bin" "$built/$bin"
done

# Man pages, all from man/: the hand-written section 5 pages and the ones `steward man`
# generates from the CLI (committed; tests/man_pages.rs keeps them equal to the binaries'); all
# gzip'd without a timestamp.
for page in man/*.[1-8]; do
    section="${page##*.}"
    gzip -9n <"$page" >"$stage/man/man$section/$(basename "$page").gz"
done

"$stage/bin/steward" completions bash >"$stage/completions/steward.bash"
"$stage/bin/steward" completions zsh >"$stage/completions/_steward"
"$stage/bin/steward" completions fish >"$stage/completions/steward.fish"

# The example units' package, in the default package repository, so that
# /usr/share/doc/steward/examples/*.{json,toml} run as installed.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@0" -czf "$stage/gamesvc-1.0.tar.gz" \
    -C units/packages/gamesvc .

# Maintainer scripts: each with the shared functions put in place of its #STEWARD_COMMON# line.
render_script() { # render_script SOURCE DEST
    awk -v common=packaging/maint/common.sh '
        $0 == "#STEWARD_COMMON#" { while ((getline line < common) > 0) print line; next }
        { print }' "$1" >"$2"
}
for script in postinst prerm postrm; do
    render_script "packaging/maint/deb/$script" "$stage/deb-scripts/$script"
    chmod 755 "$stage/deb-scripts/$script"
done
for script in post preun postun; do
    render_script "packaging/maint/rpm/$script" "$stage/rpm-scripts/$script"
done

deb_args=(--no-build --locked --output "$out")
if [ -n "$deb_version" ]; then
    deb_args+=(--deb-version "$deb_version")
fi
if $fast; then
    deb_args+=(--fast)
fi
if $deb; then
    say "packing the deb"
    cargo deb "${deb_args[@]}" # prints the deb's path
fi

if $rpm; then
    rpm_args=(--output "$out")
    if [ -n "$rpm_release" ]; then
        rpm_args+=(--set-metadata "release = \"$rpm_release\"")
    fi
    if $fast; then
        rpm_args+=(--payload-compress gzip)
    fi
    say "packing the rpm"
    cargo generate-rpm "${rpm_args[@]}" >&2
    version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
    rpm_file="$out/steward-$version-${rpm_release:-1}.$(uname -m).rpm"
    [ -f "$rpm_file" ] || { say "cargo generate-rpm did not write $rpm_file"; exit 1; }
    echo "$rpm_file"
fi
