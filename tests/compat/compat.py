#!/usr/bin/env python3
"""nackguard's compatibility suite: real AMQP clients, unchanged, consuming through the proxy.

Every client runs the same scenario against its own nackguard process and its own queue
(the clients of a legacy fleet, Go, PHP, Ruby and Java from Debian packages, run it and
scenarios of their own: compat_languages.py, compat_scenarios.py):

  * a policy for "nackguard-compat.*" with max_redeliveries: 3, requeue: immediate, and rate
    limits set out of reach (per_message 1000, min_messages 100000), so that only the count
    acts;
  * 21 messages published straight to the broker: good-00 .. good-19, with "poison" in the
    middle;
  * the client acks every good message and gives the poison back the way that client does on
    a failure (nack or reject with requeue=true; amqp-consume cannot, see its notes).

What each client must show: exactly 4 deliveries of the poison (1 + max_redeliveries), the
poison in <queue>.dlq with x-nackguard-reason and x-nackguard-returns: 4, every good message
processed, nothing left in the queue, no protocol error seen by the client, no fallback in the
proxy's log and one dead-letter in its metrics.

Usage (Debian's /usr/bin/python3; the environment of tests/run.sh, see below):

  compat.py run CLIENT...|all [--update-docs]   run clients, write their results and the report
  compat.py report [--update-docs]              the report from the results already written
  compat.py clean                               forget earlier results
  compat.py list                                the clients

Each run is one variant: the broker the suite is pointed at (its version, from
connection.start) and the queue type it declares. Results go to
$NACKGUARD_BUILD_DIR/compat/rabbitmq-<version>-<queue type>/<client>.json, so the variants do
not overwrite each other; the report, $NACKGUARD_BUILD_DIR/compat-report.md, has a column per
variant found there, and --update-docs copies it to docs/compatibility.md. CTest runs
`clean`, then each client of each variant as its own test (compat.<client>,
compat.<client>.quorum, compat.<client>.rmq40, compat.<client>.rmq40.quorum; the legacy
fleet's clients also compat.<client>.rmq43 and .rmq43.quorum), then `report`.

Environment: NACKGUARD_BIN, NACKGUARD_BUILD_DIR, NACKGUARD_TEST_BROKER_PORT (as for
tests/integration: 21672 is the 3.10 node, 22672 the 4.0 node of tests/run.sh),
NACKGUARD_TEST_QUEUE_TYPE (classic, the default, or quorum: the queue is declared durable
with x-queue-type quorum), NACKGUARD_COMPAT_TIMEOUT (seconds per client, 60),
NACKGUARD_TEST_RABBITMQCTL (the reconnect scenario closes connections with it).
"""

import datetime
import http.client
import os
import shutil
import subprocess
import sys
import time
import uuid

from compat_common import (GOOD, MAX_REDELIVERIES, MESSAGES, POISON, PROTOCOL_ERROR_PATTERNS,
                           QUEUE_ARGUMENTS, QUEUE_PREFIX, QUEUE_TYPE, QUIET_SECONDS, RESULTS_DIR,
                           TIMEOUT, harness)
from compat_clients import BY_NAME, CLIENTS, Run
from compat_report import print_result, write_report, write_result
from metrics_page import MetricsFormatError
from redelivery_support import NO_RATE_LIMITS, Broker, GuardProxy, policy_yaml
import waiting


# ---------------------------------------------------------------- one run


def tally(events):
    out = {"deliveries": {}, "acks": {}, "returns": {}, "fails": {}, "errors": []}
    for words in events:
        kind = words[0]
        if kind == "error":
            out["errors"].append(" ".join(words[1:]))
            continue
        key = {"deliver": "deliveries", "ack": "acks", "return": "returns",
               "fail": "fails"}.get(kind)
        if key and len(words) > 1:
            out[key][words[1]] = out[key].get(words[1], 0) + 1
    return out


def scrape_metrics(proxy, queue):
    """The proxy's metrics for `queue`, {'name{other labels}': value} without the queue label
    or the nackguard_ prefix; {"error": "GET /metrics: ..."} when the scrape fails."""
    try:
        page = proxy.metrics()  # the shared scrape and checking parser (metrics_page.py)
    except (OSError, http.client.HTTPException, AssertionError, MetricsFormatError) as exc:
        return {"error": f"GET /metrics: {exc}"}
    return {key.removeprefix("nackguard_"): value
            for key, value in page.flat(queue=queue).items()}


def queue_types(*names):
    """{name: type} of those of `names` that exist, from rabbitmqctl list_queues; None when
    there is no rabbitmqctl (NACKGUARD_TEST_RABBITMQCTL, which tests/run.sh sets)."""
    if harness.RABBITMQCTL is None:
        return None
    found = {}
    for line in harness.rabbitmqctl("list_queues", "-q", "--no-table-headers", "name",
                                    "type").splitlines():
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) >= 2 and parts[0] in names:
            found[parts[0]] = parts[1]
    return found


def rabbitmq_version():
    conn = harness.connect(harness.BROKER_PORT)
    try:
        props = conn._impl.server_properties  # pika keeps connection.start's table here
        version = props.get("version", b"?")
        return version.decode() if isinstance(version, bytes) else str(version)
    finally:
        harness.close_connection(conn)


def wait_for_goal(client, run, broker, dlq):
    """Polls until every good message is acked and the DLQ holds a message (or, for a client
    that never gives the poison back, until the poison is held and nothing moves)."""
    progress = {"since": time.monotonic(), "seen": -1}  # when the deliveries last moved

    def state():
        """"reached" or "failed" once the run is there; None while it goes on."""
        if not client.poll(run):
            return "failed"
        counts = tally(run.events())
        if counts["errors"]:
            return "failed"
        acked = set(counts["acks"])
        goal = getattr(client, "goal_reached", None)  # a scenario's own end (compat_scenarios)
        if goal is not None:
            return "reached" if goal(run, counts) else None
        if client.expect_bounded:
            done = acked >= set(GOOD) and (broker.message_count(dlq) or 0) >= 1
            return "reached" if done else None
        seen = sum(counts["deliveries"].values())
        if seen != progress["seen"]:
            progress.update(since=time.monotonic(), seen=seen)
        quiet = time.monotonic() - progress["since"] > 3.0
        return "reached" if counts["fails"].get(POISON) and quiet else None

    return waiting.poll(state, lambda s: s is not None, TIMEOUT, 0.1) == "reached"


def run_client(client):
    started = time.monotonic()
    queue = f"{QUEUE_PREFIX}{client.name}.{uuid.uuid4().hex[:8]}"
    dlq = f"{queue}.dlq"
    policy = policy_yaml(f"{QUEUE_PREFIX}*", max_redeliveries=MAX_REDELIVERIES,
                         rate=NO_RATE_LIMITS)
    proxy = GuardProxy({"compat.yaml": policy}, name=f"compat-{client.name}")
    broker = Broker()
    result = {"client": client.name, "title": client.title, "version": client.version(),
              "gives_back": client.gives_back, "notes": client.notes,
              "expected_reason": client.expected_reason, "bounded": client.expect_bounded,
              "queue": queue, "started": datetime.datetime.now().isoformat(timespec="seconds"),
              "rabbitmq": rabbitmq_version(), "queue_type": QUEUE_TYPE, "checks": []}
    run = None
    try:
        proxy.start()
        result["nackguard"] = subprocess.run([harness.PROXY_BIN, "--version"],
                                             capture_output=True, text=True).stdout.strip()
        work_dir = os.path.join(proxy.dir, "client")
        os.makedirs(work_dir)
        run = Run(client, proxy, queue, work_dir)
        broker.declare(queue, durable=True, arguments=QUEUE_ARGUMENTS or None)
        client.publish(broker, queue)
        client.start(run)
        reached = wait_for_goal(client, run, broker, dlq)
        if reached:  # not a wait: the window in which the client must stay up and quiet
            waiting.wait_for(lambda: not client.poll(run), QUIET_SECONDS, 0.1)
        client.stop(run)
        result["goal_reached"] = reached
        collect(result, run, broker, proxy, queue, dlq)
    except Exception as exc:
        result["checks"].append({"name": "the run itself", "ok": False,
                                 "detail": f"{type(exc).__name__}: {exc}"})
    finally:
        if run is not None and getattr(client, "process", None) is not None:
            if client.process.poll() is None:
                client.process.kill()
        proxy.stop()
        for name in (queue, dlq):
            try:
                harness.delete_queue(name)
            except Exception as exc:
                print(f"warning: could not delete queue {name}: {exc!r}", file=sys.stderr)
        broker.close()
    result["passed"] = bool(result["checks"]) and all(c["ok"] for c in result["checks"])
    result["seconds"] = round(time.monotonic() - started, 1)
    if not result["passed"]:
        proxy.keep_dir = True
        result["proxy_log"] = proxy.log_text(60)
        if run is not None:
            result["client_log"] = run.log_text()[-6000:]
    else:
        proxy.remove_dir()
    return result


def collect(result, run, broker, proxy, queue, dlq):
    counts = tally(run.events())
    dead = broker.get_all(dlq)
    poison_deliveries = counts["deliveries"].get(POISON, 0)
    good_acked = sorted(label for label in counts["acks"] if label in GOOD)
    good_deliveries = sum(n for label, n in counts["deliveries"].items() if label in GOOD)
    left = broker.message_count(queue)
    log = run.log_text()
    protocol_lines = [line.strip() for line in log.splitlines()
                      if PROTOCOL_ERROR_PATTERNS.search(line)]
    client_errors = run.errors + counts["errors"] + protocol_lines[:5]
    metrics = scrape_metrics(proxy, queue)
    types = queue_types(queue, dlq)
    fallbacks = proxy.log_lines("fallback")
    headers = dict(dead[0][1].headers or {}) if dead else {}
    for key, value in list(headers.items()):
        if isinstance(value, bytes):
            headers[key] = value.decode(errors="replace")
    result.update(
        poison_deliveries=poison_deliveries,
        poison_returns_sent=counts["returns"].get(POISON, 0),
        poison_failures=counts["fails"].get(POISON, 0),
        good_processed=len(good_acked), good_deliveries=good_deliveries,
        dead_letters=[run.client.label_of(body) for _, _, body in dead],
        dead_letter_headers={k: v for k, v in headers.items() if k.startswith("x-nackguard")},
        left_in_queue=left, client_errors=client_errors, client_processes=run.processes,
        client_exit_codes=sorted(set(run.exit_codes)), metrics=metrics, queue_types=types,
        proxy_fallbacks=fallbacks, proxy_exit_code=proxy.stop())

    def check(name, ok, detail):
        result["checks"].append({"name": name, "ok": bool(ok), "detail": detail})

    want = MAX_REDELIVERIES + 1
    check("no protocol error on the client", not client_errors,
          "; ".join(client_errors) or "none")
    check("proxy: exits 0, no fallback", result["proxy_exit_code"] == 0 and not fallbacks,
          f"exit code {result['proxy_exit_code']}, {len(fallbacks)} fallback lines")
    if types is not None:
        # The DLQ, when the proxy declared one, takes the queue's type.
        check("the queue and its DLQ are of the variant's queue type",
              types.get(queue) == QUEUE_TYPE and all(t == QUEUE_TYPE for t in types.values()),
              ", ".join(f"{name}: {kind}" for name, kind in sorted(types.items())))
    client = run.client
    # A client with checks of its own (compat_scenarios.py) gets them after these; one that
    # neither bounds nor holds a poison (expect_bounded False, its own checks) only those.
    own_checks = getattr(client, "check_run", None)
    if client.expect_bounded:
        ok, expected = client.poison_deliveries_ok(poison_deliveries)
        check(f"poison delivered {expected} times", ok, f"{poison_deliveries} deliveries")
        reason, returns = headers.get("x-nackguard-reason"), headers.get("x-nackguard-returns")
        check(f"poison in `<queue>.dlq` (reason {client.expected_reason}, returns {want})",
              result["dead_letters"] == [POISON] and reason == client.expected_reason
              and returns == want and headers.get("x-nackguard-queue") == queue,
              f"DLQ bodies {result['dead_letters']}, x-nackguard-reason={reason}, "
              f"x-nackguard-returns={returns}")
        check("every good message processed, nothing left in the queue",
              len(good_acked) == len(GOOD) and left == 0,
              f"{len(good_acked)}/{len(GOOD)} acked ({good_deliveries} deliveries), "
              f"{left} left in the queue")
        dead_count = metrics.get('dead_letters_total{reason="%s"}' % client.expected_reason)
        check("metrics: one dead-letter counted", dead_count == 1,
              metrics.get("error") or f"nackguard_dead_letters_total = {dead_count}")
    elif own_checks is None:
        check("poison delivered once and held (never given back)", poison_deliveries == 1,
              f"{poison_deliveries} deliveries")
        check("nothing dead-lettered", not dead, f"DLQ bodies {result['dead_letters']}")
        behind = len(GOOD) - GOOD.index(MESSAGES[MESSAGES.index(POISON) + 1])
        # The broker requeues what the killed process held once the proxy has closed the
        # upstream connection too: give that a moment.
        if left != behind + 1:
            left = waiting.poll(lambda: broker.message_count(queue), lambda n: n == behind + 1,
                                5, 0.1)
        result["left_in_queue"] = left
        check("consumer stalled behind the poison (prefetch 1)",
              len(good_acked) == len(GOOD) - behind,
              f"{len(good_acked)}/{len(GOOD)} good messages processed")
        check("after the process ends, the poison and the rest are back in the queue",
              left == behind + 1, f"{left} messages in the queue")
    if own_checks is not None:
        own_checks(result, run, broker, counts, check)


# ---------------------------------------------------------------- command line


def main(argv):
    update_docs = "--update-docs" in argv
    args = [a for a in argv if a != "--update-docs"]
    if not args or args[0] not in ("run", "report", "clean", "list"):
        print(__doc__, file=sys.stderr)
        return 2
    command, names = args[0], args[1:]
    if command == "list":
        for c in CLIENTS:
            print(f"{c.name:20} {c.title}")
        return 0
    if command == "clean":
        shutil.rmtree(RESULTS_DIR, ignore_errors=True)
        print(f"compat: removed {RESULTS_DIR}")
        return 0
    if command == "report":
        results = write_report(update_docs)
        print(f"{sum(r['passed'] for r in results)} passed, "
              f"{sum(not r['passed'] for r in results)} failed")
        return 0
    if names == ["all"]:
        names = [c.name for c in CLIENTS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        print(f"compat: unknown client(s) {unknown}; clients: {', '.join(BY_NAME)}",
              file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        result = run_client(BY_NAME[name])
        write_result(result)
        print_result(result)
        failed += not result["passed"]
    if update_docs or len(names) > 1:
        write_report(update_docs)
    print(f"{len(names) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
