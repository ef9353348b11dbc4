# shellcheck shell=bash disable=SC2154  # uses tests/rabbitmq-node-env.sh's variables
# A 4.x node's root file system, for tests/rabbitmq-node.sh (sourced by it, after
# tests/rabbitmq-node-env.sh): DIR bind-mounted into ROOTFS before the node starts, and
# released once it is gone (tests/rabbitmq-rootfs.sh builds ROOTFS and mounts its /proc).

# 4.x: builds (or completes) the root file system, checks its RabbitMQ is $version, mounts
# its /proc and bind-mounts DIR at the same path inside it (the node's data stays in DIR,
# private to this node).
enter_rootfs() {
  [[ $(id -u) -eq 0 ]] || die "a RabbitMQ $version node needs root (chroot and mount); run as root"
  "$rootfs_script" ensure "$rootfs" "$suite"
  local installed
  installed=$("$rootfs_script" version "$rootfs")
  [[ $installed == "$version".* ]] || die "$rootfs has rabbitmq-server $installed, not $version:" \
    "NACKGUARD_TEST_ROOTFS names the root of another version (4.0: rootfs-trixie, 4.3: rootfs-sid)"
  prepare # chown DIR's mnesia and log to the root file system's rabbitmq user
  "$rootfs_script" mount-proc "$rootfs"
  local inside="$rootfs$dir"
  if ! mountpoint -q "$inside"; then
    mkdir -p "$inside"
    mount --bind "$dir" "$inside" || die "could not bind-mount $dir at $inside"
  fi
  "${as_user[@]}" test -w "$mnesia_dir" ||
    die "user rabbitmq of $rootfs cannot write to $mnesia_dir (bind-mounted at $inside)"
}

# 4.x, after the node's processes are gone: unmounts DIR from the root file system, and its
# /proc if nothing else runs inside it.
leave_rootfs() {
  local inside="$rootfs$dir"
  if mountpoint -q "$inside" 2>/dev/null; then
    umount "$inside" 2>/dev/null || umount -l "$inside" ||
      say "could not unmount $inside; unmount it by hand"
  fi
  "$rootfs_script" release "$rootfs" || true
}
