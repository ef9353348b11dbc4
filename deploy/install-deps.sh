#!/usr/bin/env bash
# Installs every Debian 12 package needed to build, run and test nackguard.
# Idempotent: apt is only called when a package is missing.
set -euo pipefail

packages=(
  # Toolchain and build system (CMakeLists.txt needs CMake >= 3.25, C++20).
  cmake g++ make pkg-config git ca-certificates
  # Libraries the proxy links against: Boost.Asio/program_options, OpenSSL
  # (TLS listener and upstream), yaml-cpp (config), spdlog (logging), xxHash
  # (message fingerprints), rabbitmq-c (the AMQP client of `nackguard replay`; also the
  # load generator's).
  libboost1.81-all-dev libssl-dev libyaml-cpp-dev libspdlog-dev libxxhash-dev librabbitmq-dev
  # Unit tests and micro-benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev
  # libFuzzer builds (-DNACKGUARD_FUZZ=ON): clang plus its fuzzer runtime.
  clang libclang-rt-14-dev
  # Integration tests: a private RabbitMQ node (tests/rabbitmq-node.sh) and
  # Debian's python3 with pika as the test client.
  rabbitmq-server python3 python3-pika
  # The /status page test (tests/integration/test_status_page.py) drives Debian's Chromium
  # headless through selenium and chromedriver.
  chromium chromium-driver python3-selenium
  # RabbitMQ 4.0.5 and 4.3.6 for the broker matrix: tests/rabbitmq-rootfs.sh builds a Debian
  # 13 (trixie) and a Debian unstable (sid) root file system with their rabbitmq-server (Debian
  # 12 has no 4.x), and the nodes run in them.
  debootstrap
  # Benchmarks (tests/bench/): compare.sh measures haproxy (mode tcp, its own config,
  # never the system service) beside nackguard, the relay its goal is set against;
  # compare.sh --perf counts system calls with perf, and -DNACKGUARD_IO_URING=ON builds on
  # liburing.
  haproxy linux-perf liburing-dev
  # Used by the scripts: runuser/setsid (util-linux), ps/pgrep (procps),
  # openssl to make test certificates.
  util-linux procps openssl
  # Deployment checks (tests/deploy): promtool for the alert rules (package prometheus; its
  # service is not started by the tests), PyYAML to read the manifests.
  prometheus python3-yaml
  # Compatibility suite (tests/compat): the clients run through the proxy. Node.js for
  # amqplib (installed from npm by tests/compat/setup.sh, which also installs Debian's npm
  # if the nodejs package in use does not bring its own).
  python3-celery python3-aiormq amqp-tools nodejs
  # ... and the clients legacy fleets run, all from Debian (nothing from a language's own
  # registry; tests/compat/compat_build.py compiles the Go and Java ones offline into the
  # build tree): Go's amqp091-go (built in GOPATH mode from /usr/share/gocode), PHP's
  # php-amqplib and php-amqp extension, Ruby's Bunny, and the RabbitMQ Java client with
  # SLF4J (its logging API; slf4j-simple prints the client's log lines) and a JDK for javac.
  golang-go golang-github-rabbitmq-amqp091-go-dev php-cli php-amqplib php-amqp ruby
  ruby-bunny default-jdk-headless librabbitmq-client-java libslf4j-java
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || {
    echo "install-deps: not root and no sudo; install as root: ${missing[*]}" >&2
    exit 1
  }
  sudo=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
