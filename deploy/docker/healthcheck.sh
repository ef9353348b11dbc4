#!/bin/bash
# The container's HEALTHCHECK: GET a path of nackguard's metrics endpoint on 127.0.0.1 and
# succeed on HTTP 200. Uses bash's /dev/tcp only, so the image needs no curl or wget.
#
#   nackguard-healthcheck [PATH]     PATH: /healthz (default) or /readyz
#
# Environment: NACKGUARD_METRICS_PORT (default 9464), the port of metrics.port.
set -uo pipefail

path=${1:-/healthz}
port=${NACKGUARD_METRICS_PORT:-9464}

{ exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || {
  echo "nackguard-healthcheck: nothing listens on 127.0.0.1:$port" >&2
  exit 1
}
printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$path" >&3
status=''
IFS= read -r -t 5 status <&3
status=${status%$'\r'}
exec 3<&-
if [[ $status =~ ^HTTP/1\.[01]\ 200 ]]; then
  exit 0
fi
echo "nackguard-healthcheck: GET $path on 127.0.0.1:$port answered '${status:-nothing}'" >&2
exit 1
