# ctest-variants: rmq43
"""The proxy process at its limits (issue 12, item 7).

1. Out of file descriptors. Three TCP connections that stay in the AMQP handshake (its
   timeout raised to 120 s) hold six of the proxy's descriptors (client and upstream
   sockets); then its RLIMIT_NOFILE is lowered (prlimit) to what it has open, so that no
   descriptor is left and every accept fails with EMFILE, and 20 more TCP connections wait in
   the backlog. The proxy pauses instead of spinning: over 3 s its CPU time (utime + stime
   from /proc/PID/stat) grows by less than 0.5 s (a spinning accept loop burns a core, about
   3 s; 1.2 to 3.9 s measured under ASan with the pause removed); the "accept failed" line is
   logged at most once a second. Once the connections are closed (six descriptors free
   again, under the same limit), the backlog drains, a pika connection through the proxy
   works, and nackguard_accept_failures_total counts at least 20 failures (about 10 a second
   while the limit held: proof that accepting failed during the whole measured window) and
   at most 10 a second.

   Until the descriptors were held first, the window could be empty: the proxy accepted the
   20 connections, their upstream connects failed with EMFILE, and it closed them at once,
   so the backlog drained within 50 ms and the CPU bound held even for a spinning loop.

   The bound holds under AddressSanitizer too: the proxy built with ASan and UBSan used
   0.00-0.02 s of CPU a second in that state. A sanitizer's report is what costs CPU (0.96 s
   in the second of one, its stack trace symbolized in the process), so a report during the
   window fails the bound as well: that is how UBSan's false positive below first showed
   (0.66 s > 0.5 s), not as a spin.

2. Out of descriptors at the upstream connect: one descriptor spare, so that each of five
   connections (one at a time) is accepted and its upstream connect fails with EMFILE. The
   client is closed (it reads EOF), "cannot connect to upstream" is logged once per
   connection with "Too many open files", the proxy stays up, and once the soft limit is
   back a pika connection works. Each relay ends, and is destroyed, while the proxy has at
   most one descriptor free.

Under UndefinedBehaviorSanitizer, a proxy out of descriptors reports valid objects as having
an invalid vptr ("member call on address ... which does not point to an object of type
'SessionObserver'", "<memory cannot be printed>"): the first time the vptr check meets a pair
(vtable, static type) it reads the vtable through IsAccessibleMemoryRange, which writes it
into a pipe(2) (GCC 12's libsanitizer), and the pipe fails with EMFILE. Such a report did not
reliably halt the proxy (halt_on_error=1), and a suppressions file did not help (UBSan reads
it at its first report, when no descriptor is free). So each test first makes one whole pika
connection through its proxy and waits until that relay is destroyed (use_once()): the pairs
a relay meets are known before the limit, and the check runs in full. Each test ends by
finding no sanitizer report in its proxy's log (sanitizer_reports()); without use_once() both
fail so.
"""

import os
import socket
import subprocess
import time
import unittest

import harness
import operations_support as ops
import waiting

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def sanitizer_reports(proxy):
    """The lines of the proxy's log that start an ASan or UBSan report. Out of descriptors a
    UBSan report did not reliably halt the proxy (halt_on_error=1, GCC 12), so the tests look
    for reports instead of counting on the proxy to die."""
    return [line for line in proxy.full_log().splitlines()
            if "runtime error:" in line or "ERROR: AddressSanitizer" in line]


def use_once(proxy):
    """One whole pika connection through the proxy (a queue declared), ended and its relay
    gone, before the proxy runs out of descriptors: a sanitized proxy's UBSan then knows the
    types it meets (see the module's docstring). Returns the descriptors open after it."""
    pid = proxy.process.pid
    idle = settled_fds(pid)
    conn = harness.connect(proxy.port)
    try:
        ok = conn.channel().queue_declare("", exclusive=True)
        assert ok.method.queue
    finally:
        harness.close_connection(conn)
    # The relay lingers after the close (relay.cpp: kLinger, the watchdog's tick); the gauge
    # drops once its run() returned and the relay was destroyed.
    proxy.wait_metric("nackguard_client_connections", 0, timeout=10)
    fds = settled_fds(pid)
    assert fds == idle, f"{fds} descriptors open, {idle} before the connection"
    return fds


def cpu_seconds(pid):
    """utime + stime of the process, in seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def settled_fds(pid, timeout=5.0):
    """open_fds(pid) once two counts 0.3 s apart agree."""
    counts = []

    def two_agree():
        counts.append(open_fds(pid))
        return len(counts) >= 2 and counts[-1] == counts[-2]

    waiting.wait_for(two_agree, timeout, 0.3)
    return counts[-1]


class OutOfDescriptors(ops.OpsTest):

    def test_accept_backs_off_on_emfile_and_accepts_again(self):
        proxy = self.start_ops(config={"timeouts": {"handshake": "120s"}})
        pid = proxy.process.pid
        idle_fds = use_once(proxy)

        sockets = []
        self.addCleanup(lambda: [each.close() for each in sockets])
        holders = [socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
                   for _ in range(3)]
        sockets.extend(holders)
        opened = waiting.poll(lambda: open_fds(pid),  # each accepted and connected upstream
                              lambda count: count >= idle_fds + 6, 10)
        self.assertGreaterEqual(opened, idle_fds + 6,
                                f"{opened} descriptors open, {idle_fds} before 3 connections")
        limit = settled_fds(pid)
        self.assertEqual(limit, idle_fds + 6)
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:{limit}"], check=True)
        limited_at = time.monotonic()

        for _ in range(20):
            sockets.append(socket.create_connection(("127.0.0.1", proxy.port), timeout=5))
        time.sleep(1.0)  # not a wait: a warm-up, so that the window measures the steady state
        before = cpu_seconds(pid)
        time.sleep(3.0)  # not a wait: the CPU-measurement window itself
        used = cpu_seconds(pid) - before
        self.assertLess(used, 0.5, f"the proxy used {used:.2f} s of CPU in 3 s: it spins")
        self.assertTrue(proxy.alive())
        self.assertEqual(open_fds(pid), limit, "a connection was accepted without a descriptor")

        for s in sockets:
            s.close()
        sockets.clear()

        # The descriptors are free again: the backlog drains, and a client gets through.
        def connect():  # the connection, or the exception of the attempt
            try:
                return harness.connect(proxy.port)
            except Exception as exc:
                return exc

        conn = waiting.poll(connect, lambda outcome: not isinstance(outcome, Exception), 10, 0.2)
        if isinstance(conn, Exception):
            raise conn
        try:
            ch = conn.channel()
            ok = ch.queue_declare("", exclusive=True)
            self.assertTrue(ok.method.queue)
        finally:
            harness.close_connection(conn)
        page = proxy.wait_metric("nackguard_accept_failures_total", lambda v: v and v > 0)
        failures = page.value("nackguard_accept_failures_total")
        elapsed = time.monotonic() - limited_at
        # Accepting failed from the limit on until the sockets were closed (over 4 s), each
        # failure followed by a 100 ms pause: about 10 a second, and never more.
        self.assertGreaterEqual(failures, 20, f"{failures} failures in {elapsed:.1f} s")
        self.assertLessEqual(failures, 10 * elapsed + 5, f"{failures} failures in {elapsed:.1f} s")

        lines = proxy.log_lines("accept failed")
        self.assertGreaterEqual(len(lines), 1, proxy.log_text())
        self.assertLessEqual(len(lines), int(elapsed) + 1,
                             f"more than one 'accept failed' line a second in {elapsed:.1f} s")
        self.assertIn("raise the open-files limit", lines[0])
        self.assertEqual(sanitizer_reports(proxy), [])

    def test_upstream_connect_failing_with_emfile_closes_the_client(self):
        proxy = self.start_ops()
        pid = proxy.process.pid
        idle_fds = use_once(proxy)
        soft = subprocess.run(["prlimit", f"--pid={pid}", "--nofile", "--raw", "--noheadings",
                               "-o", "SOFT"], check=True, capture_output=True, text=True)
        original_soft = soft.stdout.strip()
        limit = idle_fds + 1  # room for the accept, none for the upstream socket
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:"], check=True)

        for i in range(5):
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
                self.assertEqual(client.recv(1), b"", f"connection {i + 1} was not closed")
        self.assertTrue(proxy.alive())
        lines = proxy.log_lines("cannot connect to upstream")
        self.assertEqual(len(lines), 5, proxy.log_text())
        for line in lines:
            self.assertIn("Too many open files", line)

        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={original_soft}:"], check=True)
        conn = harness.connect(proxy.port)
        try:
            ok = conn.channel().queue_declare("", exclusive=True)
            self.assertTrue(ok.method.queue)
        finally:
            harness.close_connection(conn)
        self.assertEqual(sanitizer_reports(proxy), [])


if __name__ == "__main__":
    unittest.main()
