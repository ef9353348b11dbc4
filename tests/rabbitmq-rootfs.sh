#!/usr/bin/env bash
# The Debian 13 (trixie) root file system that RabbitMQ 4.0.5 runs in for the tests
# (Debian 12 has no 4.x package, and trixie's binaries need trixie's libc).
#
#   tests/rabbitmq-rootfs.sh ensure ROOTFS     build ROOTFS unless it is complete
#   tests/rabbitmq-rootfs.sh check ROOTFS      exit 0 if ROOTFS is complete
#   tests/rabbitmq-rootfs.sh mount-proc ROOTFS mount ROOTFS/proc unless it is mounted
#   tests/rabbitmq-rootfs.sh release ROOTFS    unmount ROOTFS/proc if this script mounted it
#                                              and no process runs inside ROOTFS any more
#
# `ensure` runs `debootstrap --variant=minbase --include=rabbitmq-server trixie TMP MIRROR`
# into ROOTFS.tmp-PID next to ROOTFS and renames it to ROOTFS only when debootstrap
# succeeded, so a half-built root file system is never used; concurrent `ensure`s wait for
# each other (flock on ROOTFS.lock). About 100 s and 370 MB the first time; kept between
# runs. MIRROR is the Debian archive the machine's apt sources name
# (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list), or NACKGUARD_TEST_DEBIAN_MIRROR.
# A complete ROOTFS has rabbitmq-server installed in its dpkg database and runuser.
set -euo pipefail

usage() {
  echo "usage: $0 ensure|check|mount-proc|release ROOTFS" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
action=$1
case "$action" in ensure | check | mount-proc | release) ;; *) usage ;; esac
rootfs=$(realpath -m "$2")
proc_marker="$rootfs/.nackguard-mounted-proc" # written when this script mounted /proc

say() { echo "rabbitmq-rootfs: $*" >&2; }
die() { say "$*"; exit 1; }

is_complete() {
  [[ -x $rootfs/usr/lib/rabbitmq/bin/rabbitmq-server && -x $rootfs/usr/sbin/runuser ]] &&
    grep -qxF 'rabbitmq:x' <(cut -d: -f1,2 "$rootfs/etc/passwd" 2>/dev/null) &&
    awk '/^Package: /{p=$2} /^Status: /{if (p=="rabbitmq-server" && $0=="Status: install ok installed") ok=1} END{exit !ok}' \
      "$rootfs/var/lib/dpkg/status" 2>/dev/null
}

# The URIs of the Debian archive (not debian-security) in the apt sources, one per line:
# deb822 entries (URIs:, Suites:, Types: deb) and one-line "deb [opts] URI suite ..." entries.
apt_mirrors() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk '
      function flush() { if (deb && uris != "") { n = split(uris, u, " ");
                           for (i = 1; i <= n; i++) print u[i] } deb = 0; uris = "" }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
      tolower($1) == "uris:" { for (i = 2; i <= NF; i++) uris = uris " " $i }
      END { flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } print $i }' "$f"
  done
}

pick_mirror() {
  if [[ -n ${NACKGUARD_TEST_DEBIAN_MIRROR:-} ]]; then
    echo "$NACKGUARD_TEST_DEBIAN_MIRROR"
    return 0
  fi
  local uri
  while read -r uri; do
    uri=${uri%/}
    case "$uri" in
      *-security | *-security/* | *debian-ports*) continue ;;
      http://*/debian | https://*/debian | http://*/debian/* | https://*/debian/* | file:/*)
        echo "$uri"
        return 0
        ;;
    esac
  done < <(apt_mirrors)
  die "no Debian archive found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list;" \
    "set NACKGUARD_TEST_DEBIAN_MIRROR to its URL (e.g. http://deb.debian.org/debian)"
}

# Unmounts whatever is mounted at or below $1 (debootstrap mounts /proc and /sys into its
# target, and leaves them behind when it fails).
unmount_below() {
  local m
  while read -r m; do
    [[ -n $m ]] || continue
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk -v top="$1" '$2 == top || index($2, top "/") == 1 {print $2}' /proc/self/mounts |
    sort -r)
  ! awk -v top="$1" '$2 == top || index($2, top "/") == 1 {found=1} END{exit !found}' \
    /proc/self/mounts
}

do_ensure() {
  is_complete && return 0
  command -v debootstrap >/dev/null ||
    die "debootstrap is missing: run deploy/install-deps.sh (Debian package debootstrap)"
  mkdir -p "$(dirname "$rootfs")"
  exec 8>"$rootfs.lock"
  if ! flock -n 8; then
    say "another run is building $rootfs; waiting for it"
    flock 8
  fi
  is_complete && return 0
  [[ ! -e $rootfs ]] || die "$rootfs exists but is not a complete Debian 13 root with" \
    "rabbitmq-server (an interrupted build?); remove it (after umount $rootfs/proc if mounted)" \
    "and run again"
  local mirror tmp t0=$SECONDS status=0
  mirror=$(pick_mirror)
  tmp="$rootfs.tmp-$$"
  say "building $rootfs with debootstrap from $mirror (about 2 minutes; log $rootfs.log)"
  debootstrap --variant=minbase --include=rabbitmq-server trixie "$tmp" "$mirror" \
    >"$rootfs.log" 2>&1 || status=$?
  if ((status != 0)); then
    tail -n 20 "$rootfs.log" >&2
    if unmount_below "$tmp"; then
      rm -rf --one-file-system "$tmp"
    else
      say "could not unmount everything below $tmp; left it in place"
    fi
    die "debootstrap failed (exit $status; log $rootfs.log): check that $mirror is reachable" \
      "and serves trixie, or set NACKGUARD_TEST_DEBIAN_MIRROR"
  fi
  unmount_below "$tmp" || die "debootstrap left mounts below $tmp; unmount them and run again"
  mv -T "$tmp" "$rootfs"
  is_complete || die "debootstrap succeeded but $rootfs has no rabbitmq-server (log $rootfs.log)"
  say "built $rootfs in $((SECONDS - t0))s"
}

do_mount_proc() {
  is_complete || die "$rootfs is not a complete Debian 13 root (tests/rabbitmq-rootfs.sh ensure)"
  if mountpoint -q "$rootfs/proc"; then
    return 0
  fi
  mount -t proc proc "$rootfs/proc" ||
    die "could not mount $rootfs/proc (the 4.0 node needs root and CAP_SYS_ADMIN)"
  : >"$proc_marker"
}

# True if any process other than this script's has its root directory in ROOTFS.
rootfs_in_use() {
  local p r
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" || ${p#/proc/} == "$BASHPID" ]] && continue
    r=$(readlink "$p/root" 2>/dev/null) || continue
    [[ $r == "$rootfs" || $r == "$rootfs"/* ]] && return 0
  done
  return 1
}

do_release() {
  [[ -e $proc_marker ]] || return 0
  if ! mountpoint -q "$rootfs/proc"; then
    rm -f "$proc_marker"
    return 0
  fi
  if rootfs_in_use; then
    say "processes still run inside $rootfs; leaving $rootfs/proc mounted"
    return 0
  fi
  umount "$rootfs/proc" && rm -f "$proc_marker"
}

case "$action" in
  ensure) do_ensure ;;
  check) is_complete ;;
  mount-proc) do_mount_proc ;;
  release) do_release ;;
esac
