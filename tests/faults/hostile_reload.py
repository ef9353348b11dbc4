"""The policy file of test_hostile_input.py's reload test: rewritten corrupt or valid and
reloaded with SIGHUP, and which max_redeliveries is in force, read off the proxy's
dead-letter lines (every message of the test's stream is poison)."""

import json
import os
import time

import faults_support as fs

POLICY_FILE = "reload.yaml"


def corrupt_policies(queue):
    """{name: text}: policy files a reload must refuse."""
    return {
        "garbage": "queue: [unterminated\n\x00\x01 max_redeliveries: {\n",
        "half-written": f"queue: {json.dumps(queue)}\nmax_redel",
        "bad value": f"queue: {json.dumps(queue)}\nmax_redeliveries: -5\n",
        "empty": "",
    }


class PolicyReloads:
    """POLICY_FILE of `proxy`, the policy of `queue`, and the proxy's log about it. A mark
    is a line count of the log: what came after it is what a step caused."""

    def __init__(self, proxy, queue):
        self.proxy = proxy
        self.queue = queue
        self.path = os.path.join(proxy.policies_dir, POLICY_FILE)

    def _lines(self, since_line=0):
        return self.proxy.full_log().splitlines()[since_line:]

    def mark(self):
        return len(self._lines())

    def returns_in_force(self, since_line):
        """The sorted returns= counts of the queue's dead-letter lines after `since_line`."""
        lines = [l for l in self._lines(since_line)
                 if "dead-lettered:" in l and self.queue in l]
        return sorted({int(l.split("returns=")[1].split()[0]) for l in lines})

    def wait_dead_letter(self, since_line, timeout=20):
        return fs.wait_until(lambda: self.returns_in_force(since_line), timeout)

    def reload_refused(self, text, timeout=5):
        """Writes `text` in place (not atomic, on purpose) and sends SIGHUP; whether a
        'reload failed' line followed within `timeout` s."""
        with open(self.path, "w") as f:
            f.write(text)
        mark = self.mark()
        self.proxy.sighup()
        return fs.wait_until(lambda: any("reload failed" in l for l in self._lines(mark)),
                             timeout)

    def storm(self, texts, times=100):
        """Writes racing SIGHUPs: `times` writes of texts[i % len(texts)], each file half
        written when the SIGHUP goes, the other half after it."""
        for i in range(times):
            text = texts[i % len(texts)]
            with open(self.path, "w") as f:
                f.write(text[: len(text) // 2])
                f.flush()
                self.proxy.sighup()
                f.write(text[len(text) // 2:])
            time.sleep(0.01)  # the storm's pace: 100 writes and SIGHUPs a second at most

    def reload_valid(self, text, timeout=5):
        """Replaces the file in one rename and sends SIGHUP; whether a 'policies loaded'
        reload line followed within `timeout` s."""
        self.proxy.write_policy(POLICY_FILE, text)
        mark = self.mark()
        self.proxy.sighup()
        return fs.wait_until(lambda: any("reload:" in l and "policies loaded" in l
                                         for l in self._lines(mark)), timeout)
