# ctest-variants: rmq40 rmq43 rmq43.quorum
"""`nackguard replay` against a real RabbitMQ: dead letters moved back, and nothing lost.

Environment: NACKGUARD_BIN (the nackguard binary; run as `$NACKGUARD_BIN replay ...`) and
NACKGUARD_TEST_BROKER_PORT (a private RabbitMQ on 127.0.0.1 with guest/guest).

- 10 messages with nackguard's dead-letter headers in Q.dlq are replayed to Q: exactly 10 in
  Q, each with x-nackguard-replays 1 and no x-nackguard-returns / x-delivery-count, every other
  property, header (type-exact, in order) and body unchanged; Q.dlq empty. A 300 KB body
  (several frames) and an empty body come through byte for byte.
- --dry-run moves nothing, changes nothing, and prints the counts by x-nackguard-reason, with
  each group's first and last return. (--group-by, --where, --since and --format json:
  test_replay_triage.)
- --limit 3 moves the first 3 only.
- the --max-replays ceiling leaves messages in Q.dlq, untouched, and lists their ids.
- a second run moves 0; a message dead-lettered again since is moved with replays 2.
- copies the broker nacks (Q full, reject-publish) or returns (Q deleted meanwhile) leave
  their originals in Q.dlq: exit 1.
- --rate spaces the copies; SIGINT stops the run, requeues, and loses nothing (exit 130).
- a percent-encoded vhost ("a%2Fb" is the vhost "a/b"; needs NACKGUARD_TEST_RABBITMQCTL).
- credentials from NACKGUARD_REPLAY_UPSTREAM (USER:PASS, or the whole URL).
- a wrong password, a missing queue, a refused connection: exit 1 and one clear line;
  a wrong command line: exit 2.
- on a terminal (stderr a pty) a progress bar is drawn and erased.
"""

import re
import signal
import time
import unittest
import uuid

import harness
import waiting
from replay_support import (PORT, RUN_TIMEOUT, URL, ReplayCase, dead_letter_headers,
                            properties, replay, start_replay)


class ReplayTest(ReplayCase):

    # ------------------------------------------------------------------ moving

    def test_replays_ten_messages_intact(self):
        with self.queues() as (q, dlq):
            sent = self.dead_letter(dlq, 10)
            result = replay("--upstream", URL, "--from", dlq, "--to", q)
            self.assertExit(result, 0)
            self.assertIn("moved: 10\n", result[1])
            self.assertIn("failed: 0\n", result[1])
            self.assertIn("\n  max_redeliveries: moved 5, first return 2024-05-01T12:00:00Z, "
                          "last return 2024-05-01T12:05:08Z\n", result[1])
            self.assertIn("\n  crash_loop: moved 5, first return 2024-05-01T12:00:01Z, "
                          "last return 2024-05-01T12:05:09Z\n", result[1])
            self.assertEqual(self.count(dlq), 0)
            self.assertCopiesIntact(sent, self.take_all(q))

    def test_large_and_empty_bodies(self):
        with self.queues() as (q, dlq):
            large = bytes(range(256)) * 1200  # 300 KB: more than one 128 KB frame
            for i, body in enumerate([large, b""]):
                self.channel.basic_publish("", dlq, body, properties(
                    i, dead_letter_headers(i, "max_redeliveries")))
            self.assertExit(replay("--upstream", URL, "--from", dlq, "--to", q), 0)
            copies = self.take_all(q)
            self.assertEqual([body for _, body in copies], [large, b""])

    def test_dry_run_moves_nothing_and_counts_by_reason(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 6, reasons=["max_redeliveries", "max_redeliveries",
                                              "crash_loop"])
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--dry-run")
            self.assertExit(result, 0)
            out = result[1]
            self.assertIn("dry run: nothing was moved", out)
            self.assertIn("would move: 6\n", out)
            self.assertIn("\nby reason:\n", out)
            self.assertIn("\n  max_redeliveries: would move 4, first return 2024-05-01T12:00:00Z, "
                          "last return 2024-05-01T12:05:04Z\n", out)
            self.assertIn("\n  crash_loop: would move 2, first return 2024-05-01T12:00:02Z, "
                          "last return 2024-05-01T12:05:05Z\n", out)
            self.assertEqual(self.count(q), 0)
            left = self.take_all(dlq)
            self.assertEqual([p.message_id for p, _ in left], [f"m-{i}" for i in range(6)])
            for props, _ in left:
                self.assertNotIn("x-nackguard-replays", props.headers)
                self.assertEqual(props.headers["x-nackguard-returns"], 6)

    def test_limit_moves_the_first_n(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 10)
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--limit", "3")
            self.assertExit(result, 0)
            self.assertIn("moved: 3\n", result[1])
            self.assertIn("stopped: --limit reached", result[1])
            self.assertEqual([p.message_id for p, _ in self.take_all(q)], ["m-0", "m-1", "m-2"])
            self.assertEqual(self.count(dlq), 7)

    def test_ceiling_leaves_messages_and_reports_them(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 2, replays=3, start=0)   # m-0, m-1: at the ceiling of 3
            self.dead_letter(dlq, 2, start=2)              # m-2, m-3: never replayed
            self.dead_letter(dlq, 1, replays=5, start=4)   # m-4: beyond it
            result = replay("--upstream", URL, "--from", dlq, "--to", q)
            self.assertExit(result, 0)
            out = result[1]
            self.assertIn("moved: 2\n", out)
            self.assertIn("left at ceiling (x-nackguard-replays >= 3): 3\n", out)
            self.assertIn("  ids: m-0, m-1, m-4\n", out)
            self.assertEqual(sorted(p.message_id for p, _ in self.take_all(q)), ["m-2", "m-3"])
            left = self.take_all(dlq)
            self.assertEqual([p.message_id for p, _ in left], ["m-0", "m-1", "m-4"])
            self.assertEqual([p.headers["x-nackguard-replays"] for p, _ in left], [3, 3, 5])
            self.assertTrue(all("x-nackguard-returns" in p.headers for p, _ in left))

    def test_max_replays_option_raises_the_ceiling(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 2, replays=3)
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--max-replays", "4")
            self.assertExit(result, 0)
            self.assertIn("moved: 2\n", result[1])
            self.assertEqual([p.headers["x-nackguard-replays"] for p, _ in self.take_all(q)],
                             [4, 4])

    def test_second_run_moves_nothing_then_only_what_came_back(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 4)
            self.assertExit(replay("--upstream", URL, "--from", dlq, "--to", q), 0)
            second = replay("--upstream", URL, "--from", dlq, "--to", q)
            self.assertExit(second, 0)
            self.assertIn("moved: 0\n", second[1])
            self.assertEqual(self.count(q), 4)

            # The consumer fails one of them again; nackguard dead-letters it once more.
            method, props, body = self.channel.basic_get(q, auto_ack=True)
            props.headers["x-nackguard-returns"] = 6
            self.channel.basic_publish("", dlq, body, props)
            third = replay("--upstream", URL, "--from", dlq, "--to", q)
            self.assertExit(third, 0)
            self.assertIn("moved: 1\n", third[1])
            replays = sorted(p.headers["x-nackguard-replays"] for p, _ in self.take_all(q))
            self.assertEqual(replays, [1, 1, 1, 2])

    def test_nacked_copies_leave_their_originals(self):
        # Q takes 2 messages and then refuses publishes: the broker nacks the copies. Q is a
        # classic queue in every variant: a quorum queue applies its limit only once a
        # publish is in its log, and let 1 to 4 of the 4 copies in here (4.3.6).
        with self.queues(to_arguments={"x-max-length": 2, "x-overflow": "reject-publish"},
                         to_type="classic") as (q, dlq):
            self.dead_letter(dlq, 4)
            result = replay("--upstream", URL, "--from", dlq, "--to", q)
            self.assertExit(result, 1)
            self.assertIn("moved: 2\n", result[1])
            self.assertIn("failed: 2\n", result[1])
            self.assertIn("  m-2: the broker nacked the copy\n", result[1])
            self.assertEqual(self.count(q), 2)
            self.assertEqual(sorted(p.message_id for p, _ in self.take_all(dlq)), ["m-2", "m-3"])

    def test_returned_copies_leave_their_originals(self):
        # Q is deleted while the run goes on: later copies are routed nowhere (basic.return).
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 6)
            process = start_replay("--upstream", URL, "--from", dlq, "--to", q, "--rate", "5")
            # Q goes once the first copy is in it: a fixed 0.3 s could pass before a slow start
            # (AddressSanitizer) had moved anything.
            self.wait_first_copy(q, process)
            harness.delete_queue(q)
            out, err = process.communicate(timeout=RUN_TIMEOUT)
            self.assertEqual(process.returncode, 1, f"{out}\n{err}")
            self.assertRegex(out, r"(?m)^moved: \d+$", err)
            moved = int(re.search(r"^moved: (\d+)$", out, re.M).group(1))
            failed = int(re.search(r"^failed: (\d+)$", out, re.M).group(1))
            self.assertEqual(moved + failed, 6, out)
            self.assertGreaterEqual(failed, 1, out)
            self.assertIn(": the broker returned the copy: 312 NO_ROUTE\n", out)
            # The originals the run gave back are ready again: on a quorum queue a moment after
            # the run's connection closed (4.3: 0 of 5 at once, once).
            self.assertEqual(waiting.poll(lambda: self.count(dlq), lambda n: n == failed, 10),
                             failed)

    def test_progress_bar_on_a_terminal(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 3)
            status, out, err = replay("--upstream", URL, "--from", dlq, "--to", q,
                                      stderr_tty=True)
            self.assertEqual(status, 0, err)
            self.assertRegex(err, r"\r\x1b\[K\[#*-*\] \d+/3  moved \d+")
            self.assertTrue(err.endswith("\r\x1b[K"), repr(err))
            self.assertIn("moved: 3\n", out)

    def test_rate_spaces_the_copies(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 6)
            started = time.monotonic()
            result = replay("--upstream", URL, "--from", dlq, "--to", q, "--rate", "10")
            elapsed = time.monotonic() - started
            self.assertExit(result, 0)
            self.assertIn("moved: 6\n", result[1])
            self.assertGreaterEqual(elapsed, 0.45)  # 6 copies, 0.1 s apart

    def wait_first_copy(self, q, process, timeout=10):
        """Returns once a copy is in Q (or the run has ended, or `timeout` s passed)."""
        waiting.wait_for(lambda: self.count(q) >= 1 or process.poll() is not None, timeout, 0.02)

    def test_interrupt_requeues_and_loses_nothing(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 10)
            process = start_replay("--upstream", URL, "--from", dlq, "--to", q, "--rate", "4")
            self.wait_first_copy(q, process)  # 0.25 s a copy: 9 more to go
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=RUN_TIMEOUT)
            self.assertEqual(process.returncode, 130, f"{out}\n{err}")
            self.assertIn("stopped: interrupted", out)
            moved = int(re.search(r"^moved: (\d+)$", out, re.M).group(1))
            self.assertTrue(0 < moved < 10, out)
            self.assertEqual(harness.wait_message_count(self.channel, q, moved), moved)
            self.assertEqual(harness.wait_message_count(self.channel, dlq, 10 - moved),
                             10 - moved)

    def test_percent_encoded_vhost(self):
        vhost = "nackguard-it/replay-" + uuid.uuid4().hex[:8]
        harness.rabbitmqctl("add_vhost", vhost)
        try:
            harness.rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
            conn = harness.connect(PORT, virtual_host=vhost)
            try:
                channel = conn.channel()
                channel.queue_declare("q")
                channel.queue_declare("q.dlq")
                channel.basic_publish("", "q.dlq", b"x", properties(
                    0, dead_letter_headers(0, "crash_loop")))
                encoded = vhost.replace("/", "%2F")
                result = replay("--upstream", f"amqp://guest:guest@127.0.0.1:{PORT}/{encoded}",
                                "--from", "q.dlq", "--to", "q")
                self.assertExit(result, 0)
                self.assertIn(f"vhost '{vhost}'", result[1])
                self.assertIn("moved: 1\n", result[1])
                self.assertEqual(harness.wait_message_count(channel, "q", 1), 1)
            finally:
                harness.close_connection(conn)
        finally:
            harness.rabbitmqctl("delete_vhost", vhost)

    # ------------------------------------------------------------------ credentials

    def test_credentials_from_the_environment(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 2)
            address_only = f"amqp://127.0.0.1:{PORT}/%2F"
            result = replay("--upstream", address_only, "--from", dlq, "--to", q, "--limit", "1",
                            env_upstream="guest:guest")
            self.assertExit(result, 0)
            self.assertIn("moved: 1\n", result[1])
            result = replay("--from", dlq, "--to", q, env_upstream=URL)
            self.assertExit(result, 0)
            self.assertIn("moved: 1\n", result[1])
            self.assertEqual(self.count(q), 2)

    def test_wrong_password_is_one_line_and_exit_1(self):
        with self.queues() as (q, dlq):
            self.dead_letter(dlq, 1)
            status, out, err = replay("--upstream", f"amqp://guest:wrong@127.0.0.1:{PORT}/",
                                      "--from", dlq, "--to", q)
            self.assertEqual(status, 1, err)
            self.assertOneLine(err, f"127.0.0.1:{PORT} refused the login of user 'guest'",
                               "check the user name and password", "403")
            self.assertNotIn("wrong", err)
            self.assertEqual(self.count(dlq), 1)

    def test_wrong_password_from_the_environment(self):
        with self.queues() as (q, dlq):
            status, _, err = replay("--upstream", f"amqp://127.0.0.1:{PORT}/", "--from", dlq,
                                    "--to", q, env_upstream="guest:wrong")
            self.assertEqual(status, 1, err)
            self.assertOneLine(err, "refused the login of user 'guest'")

    # ------------------------------------------------------------------ other errors

    def test_missing_queue(self):
        with self.queues() as (q, dlq):
            status, _, err = replay("--upstream", URL, "--from", dlq + ".nope", "--to", q)
            self.assertEqual(status, 1, err)
            self.assertOneLine(err, f"no queue '{dlq}.nope' in vhost '/'", "404", "--from")
            status, _, err = replay("--upstream", URL, "--from", dlq, "--to", q + ".nope")
            self.assertEqual(status, 1, err)
            self.assertOneLine(err, f"no queue '{q}.nope'", "--to")

    def test_unknown_vhost(self):
        status, _, err = replay("--upstream", f"amqp://guest:guest@127.0.0.1:{PORT}/no-such",
                                "--from", "a.dlq", "--to", "a")
        self.assertEqual(status, 1, err)
        self.assertOneLine(err, "refused vhost 'no-such'")

    def test_refused_connection_names_host_and_port(self):
        port = harness.free_port()
        status, _, err = replay("--upstream", f"amqp://guest:guest@127.0.0.1:{port}/",
                                "--from", "a.dlq", "--to", "a")
        self.assertEqual(status, 1, err)
        self.assertOneLine(err, f"cannot connect to 127.0.0.1:{port}", "refused")

    def test_bad_url_is_exit_1_without_echoing_it(self):
        status, _, err = replay("--upstream", "amqp://guest:s3cret@host:99999/", "--from",
                                "a.dlq", "--to", "a")
        self.assertEqual(status, 1, err)
        self.assertOneLine(err, "bad --upstream URL", "port")
        self.assertNotIn("s3cret", err)

    def test_usage_errors_exit_2(self):
        for args in (["--from", "a.dlq", "--to", "a"],            # no broker
                     ["--upstream", URL, "--to", "a"],            # no --from
                     ["--upstream", URL, "--from", "a", "--to", "a"],
                     ["--upstream", URL, "--from", "a.dlq", "--to", "a", "--limit", "0"],
                     ["--upstream", URL, "--from", "a.dlq", "--to", "a", "--rate", "-1"],
                     ["--upstream", URL, "--from", "a.dlq", "--to", "a", "--bogus"]):
            status, _, err = replay(*args)
            self.assertEqual(status, 2, f"{args}: {err}")
            self.assertOneLine(err, "see nackguard replay --help")

    def test_help(self):
        status, out, _ = replay("--help")
        self.assertEqual(status, 0)
        self.assertIn("--max-replays", out)
        self.assertIn("NACKGUARD_REPLAY_UPSTREAM", out)


if __name__ == "__main__":
    unittest.main()
