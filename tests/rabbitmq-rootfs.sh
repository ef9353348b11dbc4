#!/usr/bin/env bash
# The Debian root file systems that RabbitMQ 4.x runs in for the tests (Debian 12 has no 4.x
# package, and the newer packages' binaries need their own suite's libc):
#   trixie (Debian 13): rabbitmq-server 4.0.5, for 4.0 nodes (build/rootfs-trixie)
#   sid (Debian unstable): rabbitmq-server 4.3.6, for 4.3 nodes (build/rootfs-sid; Debian 12's
#       debootstrap has a script for sid and none for forky, the testing suite that has 4.3)
# tests/rabbitmq-versions.sh says which version runs in which suite.
#
#   tests/rabbitmq-rootfs.sh ensure ROOTFS [SUITE]  build ROOTFS (of SUITE) unless it is
#                                              complete; complete one built before
#   tests/rabbitmq-rootfs.sh check ROOTFS      exit 0 if ROOTFS is complete
#   tests/rabbitmq-rootfs.sh version ROOTFS    print the rabbitmq-server version installed
#                                              in ROOTFS (e.g. 4.3.6-1)
#   tests/rabbitmq-rootfs.sh mount-proc ROOTFS mount ROOTFS/proc unless it is mounted
#   tests/rabbitmq-rootfs.sh release ROOTFS    unmount ROOTFS/proc if this script mounted it
#                                              and no process runs inside ROOTFS any more
#
# SUITE (trixie or sid) matters only when `ensure` has to build ROOTFS; it defaults to the
# suite in ROOTFS's name (.../rootfs-sid: sid), else trixie.
#
# `ensure` runs `debootstrap --variant=minbase --include=rabbitmq-server SUITE TMP MIRROR`
# into ROOTFS.tmp-PID next to ROOTFS and renames it to ROOTFS only when debootstrap
# succeeded, so a half-built root file system is never used; concurrent `ensure`s (and
# `mount-proc`s) wait for each other (flock on ROOTFS.lock). About 100 s and 370 MB for
# trixie, 2 minutes for sid, the first time; kept between runs. MIRROR is the Debian archive
# the machine's apt sources name (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list),
# or NACKGUARD_TEST_DEBIAN_MIRROR.
#
# A root is built when rabbitmq-server is installed in its dpkg database and it has runuser
# and the rabbitmq user. It is complete when, besides, its /etc/hosts names localhost (a
# minbase root may have none, and the node then stops at boot with "epmd error for host
# localhost: nxdomain") and its rabbitmq user has an Erlang cookie (made before any node
# boots, so the nodes of a cluster sharing the root never race to write different ones).
# `ensure` completes a root that is built but not complete (e.g. one debootstrap'ed by hand),
# without building it again.
set -euo pipefail

usage() {
  echo "usage: $0 ensure ROOTFS [trixie|sid]" >&2
  echo "       $0 check|version|mount-proc|release ROOTFS" >&2
  exit 2
}
[[ $# -eq 2 || ($# -eq 3 && $1 == ensure) ]] || usage
action=$1
case "$action" in ensure | check | version | mount-proc | release) ;; *) usage ;; esac
rootfs=$(realpath -m "$2")
suite=${3:-}
if [[ -z $suite ]]; then
  case "$(basename "$rootfs")" in
    *-sid) suite=sid ;;
    *) suite=trixie ;;
  esac
fi
case "$suite" in trixie | sid) ;; *) usage ;; esac
proc_marker="$rootfs/.nackguard-mounted-proc" # written when this script mounted /proc

say() { echo "rabbitmq-rootfs: $*" >&2; }
die() { say "$*"; exit 1; }

# The version of rabbitmq-server installed in the root's dpkg database ('' if none).
installed_version() {
  awk '/^Package: /{p=$2; ok=0} p=="rabbitmq-server" && $0=="Status: install ok installed"{ok=1}
       p=="rabbitmq-server" && /^Version: /{v=$2} /^$/{if (ok && v != "") {print v; exit} p=""}
       END{if (ok && v != "") print v}' "$rootfs/var/lib/dpkg/status" 2>/dev/null | head -n 1
}

# What debootstrap leaves: rabbitmq-server installed, runuser and the rabbitmq user.
is_built() {
  [[ -x $rootfs/usr/lib/rabbitmq/bin/rabbitmq-server && -x $rootfs/usr/sbin/runuser ]] &&
    grep -qxF 'rabbitmq:x' <(cut -d: -f1,2 "$rootfs/etc/passwd" 2>/dev/null) &&
    [[ -n $(installed_version) ]]
}

hosts_names_localhost() {
  [[ -f $rootfs/etc/hosts ]] && awk '$1 == "127.0.0.1" { for (i = 2; i <= NF; i++) if ($i == "localhost") found = 1 }
       END { exit !found }' "$rootfs/etc/hosts" 2>/dev/null
}

# The Erlang cookie of the root's rabbitmq user (its home is /var/lib/rabbitmq).
cookie_file() { echo "$rootfs/var/lib/rabbitmq/.erlang.cookie"; }

is_complete() {
  is_built && hosts_names_localhost && [[ -s $(cookie_file) ]]
}

# Makes a built root complete: /etc/hosts naming localhost, the rabbitmq user's cookie.
finish_root() {
  if ! hosts_names_localhost; then
    # Not the host's /etc/hosts: its other names mean nothing inside the root, and a node
    # needs only localhost (its name is NAME@localhost, on loopback).
    if [[ -L $rootfs/etc/hosts ]]; then rm -f "$rootfs/etc/hosts"; fi
    printf '%s\n' "# Written by tests/rabbitmq-rootfs.sh: RabbitMQ nodes are NAME@localhost." \
      "127.0.0.1 localhost" "::1 localhost ip6-localhost ip6-loopback" >>"$rootfs/etc/hosts"
    chmod 0644 "$rootfs/etc/hosts"
    say "wrote localhost into $rootfs/etc/hosts"
  fi
  local cookie owner
  cookie=$(cookie_file)
  if [[ ! -s $cookie ]]; then
    owner=$(awk -F: '$1 == "rabbitmq" {print $3 ":" $4}' "$rootfs/etc/passwd")
    mkdir -p "$(dirname "$cookie")"
    # 20 capital letters, as RabbitMQ makes them (od reads a fixed count: no SIGPIPE).
    (umask 077 && od -An -N20 -tu1 /dev/urandom |
      awk '{ for (i = 1; i <= NF; i++) printf "%c", 65 + $i % 26 }' >"$cookie")
    chown "$owner" "$cookie"
    chmod 0400 "$cookie"
    say "made an Erlang cookie for $rootfs's rabbitmq user"
  fi
}

# Takes ROOTFS.lock (fd 8), waiting for another holder with a message.
take_lock() {
  mkdir -p "$(dirname "$rootfs")"
  exec 8>"$rootfs.lock"
  if ! flock -n 8; then
    say "another run is building or mounting $rootfs; waiting for it"
    flock 8
  fi
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
  take_lock
  is_complete && return 0
  if is_built; then
    finish_root
    is_complete || die "could not complete $rootfs (/etc/hosts, the rabbitmq user's cookie)"
    return 0
  fi
  command -v debootstrap >/dev/null ||
    die "debootstrap is missing: run deploy/install-deps.sh (Debian package debootstrap)"
  [[ ! -e $rootfs ]] || die "$rootfs exists but is not a Debian root with rabbitmq-server" \
    "(an interrupted build?); remove it (after umount $rootfs/proc if mounted) and run again"
  local mirror tmp t0=$SECONDS status=0
  mirror=$(pick_mirror)
  tmp="$rootfs.tmp-$$"
  say "building $rootfs ($suite) with debootstrap from $mirror (about 2 minutes; log $rootfs.log)"
  debootstrap --variant=minbase --include=rabbitmq-server "$suite" "$tmp" "$mirror" \
    >"$rootfs.log" 2>&1 || status=$?
  if ((status != 0)); then
    tail -n 20 "$rootfs.log" >&2
    if unmount_below "$tmp"; then
      rm -rf --one-file-system "$tmp"
    else
      say "could not unmount everything below $tmp; left it in place"
    fi
    die "debootstrap failed (exit $status; log $rootfs.log): check that $mirror is reachable" \
      "and serves $suite, or set NACKGUARD_TEST_DEBIAN_MIRROR"
  fi
  unmount_below "$tmp" || die "debootstrap left mounts below $tmp; unmount them and run again"
  mv -T "$tmp" "$rootfs"
  is_built || die "debootstrap succeeded but $rootfs has no rabbitmq-server (log $rootfs.log)"
  finish_root
  say "built $rootfs (rabbitmq-server $(installed_version)) in $((SECONDS - t0))s"
}

do_mount_proc() {
  is_complete || die "$rootfs is not a complete root (tests/rabbitmq-rootfs.sh ensure)"
  if mountpoint -q "$rootfs/proc"; then
    return 0
  fi
  # The nodes of a cluster start at once: one mount, not one each.
  take_lock
  mountpoint -q "$rootfs/proc" && return 0
  mount -t proc proc "$rootfs/proc" ||
    die "could not mount $rootfs/proc (a 4.x node needs root and CAP_SYS_ADMIN)"
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
  take_lock # not while another node's mount-proc runs
  if rootfs_in_use; then
    say "processes still run inside $rootfs; leaving $rootfs/proc mounted"
    return 0
  fi
  umount "$rootfs/proc" && rm -f "$proc_marker"
}

case "$action" in
  ensure) do_ensure ;;
  check) is_complete ;;
  version) is_built && installed_version ;;
  mount-proc) do_mount_proc ;;
  release) do_release ;;
esac
