"""The proxy process at its limits (issue 12, item 7).

1. Out of file descriptors: the proxy's RLIMIT_NOFILE is lowered (prlimit) to a few more than
   it has open, and 20 TCP connections are opened to it. Accepting fails with EMFILE; the
   proxy pauses instead of spinning: over 3 s its CPU time (utime + stime from
   /proc/PID/stat) grows by less than 0.5 s (a spinning accept loop burns a core, about 3 s);
   the "accept failed" line is logged at most once a second; once the connections are
   closed, nackguard_accept_failures_total counts the failures and a pika connection through
   the proxy works again, under the same limit.
"""

import os
import socket
import subprocess
import time
import unittest

import harness
import operations_support as ops

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of the process, in seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class OutOfDescriptors(ops.OpsTest):

    def test_accept_backs_off_on_emfile_and_accepts_again(self):
        proxy = self.start_ops()
        pid = proxy.process.pid
        limit = open_fds(pid) + 6
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:{limit}"], check=True)
        limited_at = time.monotonic()

        clients = []
        self.addCleanup(lambda: [c.close() for c in clients])
        for _ in range(20):
            clients.append(socket.create_connection(("127.0.0.1", proxy.port), timeout=5))
        time.sleep(1.0)  # the accepts that fit are done; the rest fail with EMFILE
        before = cpu_seconds(pid)
        time.sleep(3.0)
        used = cpu_seconds(pid) - before
        self.assertLess(used, 0.5, f"the proxy used {used:.2f} s of CPU in 3 s: it spins")
        self.assertTrue(proxy.alive())

        for c in clients:
            c.close()
        clients.clear()
        lines = proxy.log_lines("accept failed")
        self.assertGreaterEqual(len(lines), 1, proxy.log_text())
        self.assertLessEqual(len(lines), 6, "more than one 'accept failed' line a second")
        self.assertIn("raise the open-files limit", lines[0])

        # The descriptors are free again: the backlog drains, and a client gets through.
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = harness.connect(proxy.port)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            ch = conn.channel()
            ok = ch.queue_declare("", exclusive=True)
            self.assertTrue(ok.method.queue)
        finally:
            harness.close_connection(conn)
        page = proxy.wait_metric("nackguard_accept_failures_total", lambda v: v and v > 0)
        failures = page.value("nackguard_accept_failures_total")
        self.assertGreater(failures, 0)
        # Each failure pauses accepting for 100 ms: at most 10 a second.
        elapsed = time.monotonic() - limited_at
        self.assertLessEqual(failures, 10 * elapsed + 5, f"{failures} failures in {elapsed:.1f} s")


if __name__ == "__main__":
    unittest.main()
