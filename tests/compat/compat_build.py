#!/usr/bin/env python3
"""Compiles the compatibility suite's compiled clients (Go, Java) into the build tree, from
Debian 12 packages only, offline: never into the source tree, and once: a stamp (the hash of
the source and of the toolchain's version) makes a later call a no-op, and a lock keeps two
tests of a parallel ctest from compiling at once.

  $NACKGUARD_BUILD_DIR/compat-clients/go/go_consumer      amqp091-go, GOPATH mode
  $NACKGUARD_BUILD_DIR/compat-clients/java/*.class        amqp-client 5.0.0

(Not under $NACKGUARD_BUILD_DIR/compat/, which `compat.py clean` removes before each run.)
CTest runs `compat_build.py` as the fixture compat.build; compat_languages.py calls
ensure_built() before starting a compiled client, so a run by hand needs no step of its own.
"""

import hashlib
import os
import subprocess
import sys

from compat_common import CLIENTS_DIR, harness

OUT_DIR = os.path.join(harness.BUILD_DIR, "compat-clients")

# amqp091-go as Debian installs it (golang-github-rabbitmq-amqp091-go-dev), built in GOPATH
# mode: no go.mod, no module proxy, no network.
GOPATH = "/usr/share/gocode"
GO_ENV = {"GO111MODULE": "off", "GOPATH": GOPATH, "GOPROXY": "off", "GOFLAGS": "",
          "GOCACHE": os.path.join(OUT_DIR, "go-cache"), "CGO_ENABLED": "0"}
GO_SOURCE = os.path.join(CLIENTS_DIR, "go_consumer.go")
GO_BINARY = os.path.join(OUT_DIR, "go", "go_consumer")

# The RabbitMQ Java client as Debian installs it (librabbitmq-client-java), with SLF4J's
# simple binding (libslf4j-java) so that the client's own log lines reach stderr.
JAVA_JARS = ["/usr/share/java/amqp-client.jar", "/usr/share/java/slf4j-api.jar",
             "/usr/share/java/slf4j-simple.jar"]
JAVA_SOURCE = os.path.join(CLIENTS_DIR, "JavaConsumer.java")
JAVA_CLASSES = os.path.join(OUT_DIR, "java")
JAVA_CLASSPATH = ":".join([JAVA_CLASSES] + JAVA_JARS)


class BuildError(Exception):
    pass


def _tool_version(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise BuildError(f"{argv[0]}: {exc} (deploy/install-deps.sh installs it)") from exc
    return (out.stdout + out.stderr).strip()


def _compile(what, output, source, toolchain, argv, env=None):
    """Runs `argv` unless `output` exists and was built from this source by this toolchain."""
    stamp_path = output + ".stamp"
    with open(source, "rb") as f:
        stamp = hashlib.sha256(f.read() + toolchain.encode()).hexdigest()
    os.makedirs(OUT_DIR, exist_ok=True)
    with harness.lock_file(os.path.join(OUT_DIR, ".lock"), "another compat_build.py"):
        try:
            with open(stamp_path) as f:
                if f.read().strip() == stamp and os.path.exists(output):
                    return False
        except OSError:
            pass
        os.makedirs(os.path.dirname(output), exist_ok=True)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                                env=dict(os.environ, **(env or {})))
        if result.returncode != 0 or not os.path.exists(output):
            raise BuildError(f"compiling {what} failed ({' '.join(argv)}):\n"
                             f"{result.stdout}{result.stderr}")
        with open(stamp_path, "w") as f:
            f.write(stamp + "\n")
    return True


def build_go():
    toolchain = _tool_version(["go", "version"])
    return _compile("the Go client", GO_BINARY, GO_SOURCE, toolchain,
                    ["go", "build", "-o", GO_BINARY, GO_SOURCE], env=GO_ENV)


def build_java():
    toolchain = _tool_version(["javac", "-version"])
    missing = [jar for jar in JAVA_JARS if not os.path.exists(jar)]
    if missing:
        raise BuildError(f"missing {', '.join(missing)} (Debian librabbitmq-client-java and "
                         "libslf4j-java: deploy/install-deps.sh installs them)")
    return _compile("the Java client", os.path.join(JAVA_CLASSES, "JavaConsumer.class"),
                    JAVA_SOURCE, toolchain,
                    ["javac", "-d", JAVA_CLASSES, "-cp", JAVA_CLASSPATH, "-encoding", "UTF-8",
                     "-nowarn", "-XDignore.symbol.file", JAVA_SOURCE])


BUILDERS = {"go": build_go, "java": build_java}


def ensure_built(language):
    """Compiles `language`'s client unless the build tree already holds it from this source."""
    return BUILDERS[language]()


def main(argv):
    languages = argv or sorted(BUILDERS)
    failed = 0
    for language in languages:
        try:
            built = ensure_built(language)
            print(f"compat_build: {language}: {'compiled' if built else 'up to date'} "
                  f"in {OUT_DIR}")
        except BuildError as exc:
            print(f"compat_build: {language}: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
