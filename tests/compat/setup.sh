#!/usr/bin/env bash
# Installs the compatibility suite's Node.js client (amqplib, pinned in node/package-lock.json)
# into tests/compat/node/node_modules with `npm ci`. Idempotent: does nothing when
# node_modules already holds exactly what the lock file pins. Called by the compat CTest
# fixture (compat.setup); run it by hand after changing node/package.json:
#
#   (cd tests/compat/node && npm install --package-lock-only) && tests/compat/setup.sh
#
# node and npm: the ones on PATH (deploy/install-deps.sh installs nodejs). Debian's own
# nodejs package comes without npm; then Debian's npm package is installed here.
set -euo pipefail

node_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/node" && pwd)
lock="$node_dir/package-lock.json"
stamp="$node_dir/node_modules/.nackguard-lock.sha256"

say() { echo "tests/compat/setup.sh: $*" >&2; }

command -v node >/dev/null || { say "node is not installed: run deploy/install-deps.sh"; exit 1; }
if ! command -v npm >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { say "npm is missing; install Debian's npm package as root"; exit 1; }
  say "npm is missing; installing Debian's npm package"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm
fi

want=$(sha256sum "$lock" | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -d $node_dir/node_modules/amqplib ]]; then
  say "node_modules is up to date with package-lock.json (node $(node --version))"
  exit 0
fi

say "npm ci in $node_dir (node $(node --version), npm $(npm --version))"
cd "$node_dir"
npm ci --no-audit --no-fund --loglevel=error
echo "$want" >"$stamp"
version=$(node -p 'JSON.parse(require("fs").readFileSync("node_modules/amqplib/package.json")).version')
say "installed amqplib $version"
