"""A private RabbitMQ node for a test: tests/rabbitmq-node.sh's variables, and the script run.

Every suite that starts a node of its own (the fault tests, the TLS, metrics-plugin,
consumer-timeout and cluster tests) builds its environment with node_env() and runs the
script with node_script(), so that a node is private in one way: its own directory, name and
loopback ports (AMQP, distribution, epmd). tests/rabbitmq-node.sh documents the variables.
"""

import os
import subprocess

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_SCRIPT = os.path.join(REPO_ROOT, "tests", "rabbitmq-node.sh")
# The RabbitMQ version of the run's variant (tests/CMakeLists.txt: NACKGUARD_TEST40_ENV and
# NACKGUARD_TEST43_ENV set it; unset: 3.10). A suite that starts a node of its own gives each
# version a name, directory and ports of its own (tests/rabbitmq-versions.sh lists those taken).
VERSION = os.environ.get("NACKGUARD_TEST_RABBITMQ_VERSION") or "3.10"


def start_timeout(version=None, at_least=0):
    """Seconds a node of `version` (default: the run's) may take to boot, at least
    `at_least`: tests/rabbitmq-node.sh's default for the version (a fresh 4.3 node's first boot
    took over 90 s)."""
    return max(at_least, {"4.0": 120, "4.3": 300}.get(version or VERSION, 60))


def node_env(name, amqp_port, dist_port, epmd_port, version=None, fresh=None,
             start_timeout=None, base=None, **rabbitmq):
    """The environment for one node, over `base` (default: this process's). `fresh`: True
    rewrites the node's config from these settings, False keeps the one saved in its
    directory; `rabbitmq` sets NACKGUARD_TEST_RABBITMQ_<KEY> (plugins, conf_extra,
    advanced_config)."""
    env = dict(os.environ if base is None else base)
    env.update(NACKGUARD_TEST_NODE=name, NACKGUARD_TEST_BROKER_PORT=str(amqp_port),
               NACKGUARD_TEST_DIST_PORT=str(dist_port), NACKGUARD_TEST_EPMD_PORT=str(epmd_port))
    if version is not None:
        env["NACKGUARD_TEST_RABBITMQ_VERSION"] = version
    if fresh is not None:
        env["NACKGUARD_TEST_RABBITMQ_FRESH"] = "1" if fresh else "0"
    if start_timeout is not None:
        env["NACKGUARD_TEST_START_TIMEOUT"] = str(start_timeout)
    for key, value in rabbitmq.items():
        env["NACKGUARD_TEST_RABBITMQ_" + key.upper()] = value
    return env


def node_script(action, directory, env, timeout=180):
    """Runs `tests/rabbitmq-node.sh ACTION DIRECTORY` (start, stop, status) in `env`; returns
    the CompletedProcess (its output captured as text)."""
    return subprocess.run(["bash", NODE_SCRIPT, action, directory], env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
