"""tests/rabbitmq-node.sh, the private nodes' own script: a node must not keep what its
caller holds.

A node outlives the command that started it. One started under `flock LOCK tests/run.sh`
inherited the lock's descriptor and held the lock for as long as it ran, so every later
`flock LOCK ...` waited for ever (2026-12-01: 35 minutes of blocked builds). The script now
closes every descriptor above 2 before it starts the node.

Its own node: nackguard-nodescript@localhost, AMQP 28672, distribution 28673, epmd 28369,
data under the build directory.
"""
import os
import subprocess
import unittest

import harness

NODE_SCRIPT = os.path.join(harness.REPO_ROOT, "tests", "rabbitmq-node.sh")
NODE = "nackguard-nodescript@localhost"


class NodeScriptTest(unittest.TestCase):
    def setUp(self):
        build = os.environ.get("NACKGUARD_BUILD_DIR") or os.path.join(harness.REPO_ROOT, "build")
        self.dir = os.path.join(build, "it-tmp", "node-script")
        self.lock = self.dir + ".lock"
        os.makedirs(self.dir, exist_ok=True)
        self.env = dict(os.environ, NACKGUARD_TEST_RABBITMQ_VERSION="3.10",
                        NACKGUARD_TEST_NODE=NODE, NACKGUARD_TEST_BROKER_PORT="28672",
                        NACKGUARD_TEST_DIST_PORT="28673", NACKGUARD_TEST_EPMD_PORT="28369",
                        NACKGUARD_TEST_RABBITMQ_FRESH="1")

    def node(self, *command, timeout=150):
        return subprocess.run(list(command), env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def test_a_node_started_under_a_lock_does_not_hold_it(self):
        self.addCleanup(self.node, "bash", NODE_SCRIPT, "stop", self.dir)
        started = self.node("flock", self.lock, "bash", NODE_SCRIPT, "start", self.dir)
        self.assertEqual(started.returncode, 0, started.stdout + started.stderr)
        self.assertEqual(self.node("bash", NODE_SCRIPT, "status", self.dir).returncode, 0,
                         "the node is not running after its start")
        # The caller is gone; its lock must be free although the node it started runs on.
        free = self.node("flock", "-n", self.lock, "true", timeout=10)
        self.assertEqual(free.returncode, 0,
                         "the lock taken around `rabbitmq-node.sh start` is still held, by "
                         "the node it started")


if __name__ == "__main__":
    unittest.main()
