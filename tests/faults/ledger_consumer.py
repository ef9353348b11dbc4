"""One consumer process of the ledger test (a kill -9 and os._exit target), run by
ledger_workers.ConsumerPool as

    python3 ledger_consumer.py NAME PORT QUEUE EVENTS PREFETCH

It consumes QUEUE through the sidecar on 127.0.0.1:PORT with pika (basic.qos PREFETCH) and
acts by the kind in each message's id (ledger_plan.py): good ones are acked, nack- and
reject- ones are given back with requeue every time, and a crash- one ends the process at once
(os._exit(CRASH_EXIT), holding whatever else pika has prefetched). A lost connection (its
sidecar killed, a node stopped) is reconnected to the same port; SIGTERM closes it cleanly.

It writes its own event log as it goes, one JSON object per line, appended with one unbuffered
os.write each, so that a crash or a kill -9 loses no line it wrote: {"t": wall clock, "c":
NAME, "pid", "ev", ...} with ev
  start / connect / lost (with "why") / stop
  recv    "id", "rd" (the redelivered flag), "h" (the x-nackguard-* headers and the broker's
          x-delivery-count and x-acquired-count), written before anything is done with it
  ack / nack / reject / crash   "id", written before the frame is sent (process, then ack:
          a kill between the two makes a duplicate, never a loss)
"""

import json
import os
import signal
import sys
import time

import pika

from ledger_plan import CRASH, GOOD, NACK, REJECT, kind_of

CRASH_EXIT = 17
_stopping = False
_parent = os.getppid()


def _on_sigterm(signum, frame):
    global _stopping
    _stopping = True


def _should_stop():
    """SIGTERM, or the test process gone (a watchdog's exit): no orphan keeps consuming."""
    return _stopping or os.getppid() != _parent


class EventLog:
    def __init__(self, path, name):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.name = name

    def write(self, ev, **fields):
        record = {"t": round(time.time(), 4), "c": self.name, "pid": os.getpid(), "ev": ev}
        record.update(fields)
        os.write(self.fd, (json.dumps(record, default=_plain) + "\n").encode())


def _plain(value):
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _headers_of(props):
    headers = props.headers or {}
    return {k: v for k, v in headers.items()
            if k.startswith("x-nackguard-") or k in ("x-delivery-count", "x-acquired-count")}


def _connect(port, name):
    # connection_name: the broker's view of the connection (rabbitmqctl, a capture) and the
    # dead letters' x-nackguard-consumer name the consumer process.
    params = pika.ConnectionParameters(
        host="127.0.0.1", port=port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=4, stack_timeout=8, heartbeat=30,
        client_properties={"connection_name": f"ledger {name} pid {os.getpid()}"})
    return pika.BlockingConnection(params)


def _consume(conn, queue, prefetch, log):
    """Consumes until SIGTERM (returns) or a connection error (raises)."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    log.write("connect")
    for method, props, _body in ch.consume(queue, inactivity_timeout=0.2):
        if _should_stop():
            break
        if method is None:
            continue
        msg_id = props.message_id
        log.write("recv", id=msg_id, rd=bool(method.redelivered), h=_headers_of(props))
        kind = kind_of(msg_id)
        if kind == CRASH:
            log.write("crash", id=msg_id)
            os._exit(CRASH_EXIT)
        elif kind == NACK:
            log.write("nack", id=msg_id)
            ch.basic_nack(method.delivery_tag, requeue=True)
        elif kind == REJECT:
            log.write("reject", id=msg_id)
            ch.basic_reject(method.delivery_tag, requeue=True)
        else:
            if kind != GOOD:
                log.write("unknown", id=msg_id)
            log.write("ack", id=msg_id)
            ch.basic_ack(method.delivery_tag)
    try:
        ch.cancel()
    except Exception:
        pass


def main(argv):
    name, port, queue, events_path, prefetch = argv[0], int(argv[1]), argv[2], argv[3], \
        int(argv[4])
    signal.signal(signal.SIGTERM, _on_sigterm)
    log = EventLog(events_path, name)
    log.write("start", port=port)
    failing_since = None
    while not _should_stop():
        conn = None
        try:
            conn = _connect(port, name)
            failing_since = None
            _consume(conn, queue, prefetch, log)
        except Exception as exc:  # pika's errors, OSError, and anything odd: reconnect
            why = f"{type(exc).__name__}: {exc}"[:200]
            if conn is not None:
                log.write("lost", why=why)
            elif failing_since is None:  # one line per outage, not one per attempt
                failing_since = time.time()
                log.write("connect_failed", why=why)
            time.sleep(0.2)
        finally:
            if conn is not None and conn.is_open:
                try:
                    conn.close()
                except Exception:
                    pass
    log.write("stop")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
