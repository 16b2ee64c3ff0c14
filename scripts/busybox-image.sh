#!/usr/bin/env bash
# Builds the test image from busybox-static: nothing is pulled. The rootfs holds busybox and its
# applets (sh, httpd, wget, sleep, ...); the image has no entrypoint and no CMD, so a pod must give
# command.value (seed 001).
#
#   scripts/busybox-image.sh [SOCKET] [TAG]
set -euo pipefail
socket=${1:-/var/run/docker.sock}
tag=${2:-steward-busybox:test}
busybox=/bin/busybox
[ -x "$busybox" ] || { echo "busybox-image: $busybox missing (apt-get install busybox-static)" >&2; exit 1; }
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs"/{bin,etc,tmp,proc,sys,dev,www,root}
cp "$busybox" "$rootfs/bin/busybox"
chroot "$rootfs" /bin/busybox --install -s /bin
chmod 1777 "$rootfs/tmp"
echo 'root:x:0:0:root:/root:/bin/sh' >"$rootfs/etc/passwd"
echo 'root:x:0:' >"$rootfs/etc/group"
tar -C "$rootfs" -c . | docker -H "unix://$socket" import - "$tag" >/dev/null
echo "busybox-image: built $tag" >&2
