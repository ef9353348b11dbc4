"""What each hostile-input case of test_hostile_input.py sends, and how it reads the answer:
frames far larger than frame_max, bad frames mid-message and unknown methods, a truncated
frame then silence, field tables nested 10,000 deep (in method arguments, in a publish's
headers, and a deep-headers message nacked through the proxy), handshakes left unfinished,
and channel.open floods. A case is a function of the port it connects to (the broker's or
the proxy's) returning what came back; the tests hold the assertions."""

import socket
import struct
import time

import faults_support as fs
import rawamqp as raw
from hostile_support import open_client, outcome


def basic_publish(queue):
    return raw.method_frame(1, raw.BASIC_PUBLISH, struct.pack(">H", 0) + raw.shortstr("")
                            + raw.shortstr(queue) + b"\0")


# ---------------------------------------------------------------- oversize frames

def huge_frame_cases(queue):
    """{name: case}: frame lengths far past frame_max, after and before the handshake."""

    def after_handshake(port):
        c = open_client(port)
        return outcome(c, struct.pack(">BHI", raw.FRAME_METHOD, 1, 0xFFFFFFF0) + b"\0" * 64)

    def before_tune(port):
        c = raw.Client(port, timeout=5)
        c.send(raw.PROTOCOL_HEADER)
        c.expect(raw.CONNECTION_START)
        # start-ok announced as 100 MB (frame_max is not even negotiated yet)
        return outcome(c, struct.pack(">BHI", raw.FRAME_METHOD, 0, 100 * 1024 * 1024)
                       + b"\0" * 4096)

    def body_bigger_than_frame_max(port):
        # a complete 1 MiB body frame where frame_max is 128 KiB, inside a real message
        c = open_client(port)
        header = raw.content_header(1, 1 << 20)
        return outcome(c, basic_publish(queue) + header
                       + raw.frame(raw.FRAME_BODY, 1, b"b" * (1 << 20)))

    return {"4 GiB length after the handshake": after_handshake,
            "100 MB start-ok before tune": before_tune,
            "1 MiB body frame, frame_max 128 KiB": body_bigger_than_frame_max}


# ---------------------------------------------------------------- frame-level oddities

def bad_frame_cases(queue):
    """{name: (case, the connection.close codes the proxy may answer with; None: any)}."""
    publish = basic_publish(queue)
    payloads = {
        "bad end octet on a body frame mid-message":
            (publish + raw.content_header(1, 10) + raw.frame(raw.FRAME_BODY, 1, b"12345")
             + raw.frame(raw.FRAME_BODY, 1, b"67890", end=0x00), {501}),
        "basic.publish then a body frame, no header":
            (publish + raw.frame(raw.FRAME_BODY, 1, b"hello"), {505}),
        "unknown class 999 on channel 1":
            (raw.method_frame(1, (999, 1), b"\0\0\0\0"), None),
        "unknown class 999 on channel 0":
            (raw.method_frame(0, (999, 1), b"\0\0\0\0"), None),
        "unknown method 999 of class basic":
            (raw.method_frame(1, (60, 999), b"\0\0\0\0"), None),
        "channel.open on the proxy's reserved channel (offered channel_max + 1)":
            ("reserved", None),
    }

    def case_for(payload):
        def case(port):
            c = open_client(port)
            return outcome(c, raw.channel_open(c.tune[0] + 1) if payload == "reserved"
                           else payload)
        return case

    return {name: (case_for(payload), codes) for name, (payload, codes) in payloads.items()}


def truncated_frame_then_silence(port):
    """Heartbeat 2, then the first 6 bytes of a basic.qos frame; the rest never comes."""
    c = open_client(port, heartbeat=2)
    frame = raw.method_frame(1, raw.BASIC_QOS, struct.pack(">IHB", 0, 10, 0))
    return outcome(c, frame[:6], timeout=10)


# ---------------------------------------------------------------- deep field tables

def deep_argument_cases(deep, queue):
    """{name: case}: a deep table as the arguments of queue.declare and of basic.consume
    (on `queue`)."""

    def declare_deep(port):
        c = open_client(port)
        args = struct.pack(">H", 0) + raw.shortstr(fs.unique_queue("deepdecl")) + b"\0" + deep
        return outcome(c, raw.method_frame(1, raw.QUEUE_DECLARE, args))

    def consume_deep(port):
        c = open_client(port)
        args = (struct.pack(">H", 0) + raw.shortstr(queue) + raw.shortstr("")
                + b"\0" + deep)
        return outcome(c, raw.method_frame(1, raw.BASIC_CONSUME, args))

    return {"queue.declare arguments": declare_deep,
            "basic.consume arguments": consume_deep}


def publish_deep(port, queue, deep, ledger, msg_id, close=False):
    """Publishes `msg_id` with `deep` as its headers table to `queue` through `port`, with
    a confirm; {"confirmed": bool} or {"closed": (code, text)} if the peer closed instead.
    The ledger records the publish, and the confirm if it came. The connection is then
    dropped, or with `close` closed (connection.close)."""
    c = open_client(port)
    c.confirm_select(1)
    ledger.publish(msg_id)
    c.send(raw.publish_frames(1, "", queue, fs.body_for(msg_id, 64), c.frame_max,
                              message_id=msg_id, persistent=True, headers_raw=deep))
    try:
        result = {"confirmed": c.wait_confirms(1, 10) and 1 in c.confirmed}
    except raw.ConnectionClosedByPeer as exc:
        result = {"closed": (exc.code, exc.text[:80])}
    if close and "closed" not in result:
        c.close()
    else:
        c.abort()
    if result.get("confirmed"):
        ledger.confirm(msg_id)
    return result


def nack_everything(port, queue, seconds=25, max_closes=5, max_deliveries=20):
    """Consumes `queue` through `port` (raw client, prefetch 1) and nacks (requeue) every
    delivery, reconnecting when the connection is closed, until nothing is delivered for
    1.5 s (or `seconds` pass, `max_closes` closes or `max_deliveries` deliveries).
    Returns ([(id, redelivered)], [the closes seen])."""
    deliveries = []
    closes = []
    c = None
    idle_since = time.monotonic()
    deadline = time.monotonic() + seconds
    while (time.monotonic() < deadline and len(closes) <= max_closes
           and len(deliveries) < max_deliveries):
        try:
            if c is None:
                c = open_client(port)
                c.send(raw.basic_qos(1, 1))
                c.expect(raw.BASIC_QOS_OK)
                c.send(raw.basic_consume(1, queue))
                c.expect(raw.BASIC_CONSUME_OK)
            c.pump(0.1)
            for d in c.deliveries:
                if d is not None:
                    deliveries.append((d.id, d.redelivered))
                    c.send(raw.basic_nack(1, d.tag, requeue=True))
                    idle_since = time.monotonic()
            c.deliveries.clear()
            if time.monotonic() - idle_since > 1.5:  # a redelivery takes milliseconds
                break
        except (raw.ConnectionClosedByPeer, raw.PeerClosed, OSError) as exc:
            closes.append(f"{type(exc).__name__}: {exc}"[:120])
            if c is not None:
                c.abort()
            c = None
    if c is not None:
        c.close()
    return deliveries, closes


# ---------------------------------------------------------------- handshake timeouts

def _silent(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    c = raw.Client.__new__(raw.Client)
    c.sock, c.buffer, c.frames = s, bytearray(), []
    return c


def _after_header(port):
    c = raw.Client(port, timeout=10)
    c.send(raw.PROTOCOL_HEADER)
    return c


def _after_start_ok(port):
    c = _after_header(port)
    c.expect(raw.CONNECTION_START)
    c.send(raw.start_ok())
    return c


def _after_tune_ok(port):
    c = _after_start_ok(port)
    tune = c.expect(raw.CONNECTION_TUNE)
    cm, fm, hb = struct.unpack_from(">HIH", tune.args, 0)
    c.send(raw.tune_ok(cm, fm, 0))
    return c


def _timed(stage):
    def run(port):
        t0 = time.monotonic()
        o = outcome(stage(port), None, timeout=8)
        o["seconds"] = round(time.monotonic() - t0, 2)
        return o
    return run


def unfinished_handshake_cases():
    """{name: case}: a connection left at each stage of the handshake, read for 8 s; its
    "seconds" count from the connect."""
    return {name: _timed(stage) for name, stage in (
        ("TCP connect, nothing sent", _silent),
        ("protocol header only", _after_header),
        ("start-ok, no tune-ok", _after_start_ok),
        ("tune-ok, no connection.open", _after_tune_ok))}


# ---------------------------------------------------------------- channel.open floods

def channel_open_flood(port, n=5000, sent=None):
    """channel.open for channels 1..n pipelined on one connection, then reads for up to
    30 s: how many opened, the connection.close if one came, and channel_max. `sent` (an
    Event) is set once the whole flood is written."""
    c = open_client(port, channel=False)
    t0 = time.monotonic()
    c.sock.sendall(b"".join(raw.channel_open(ch) for ch in range(1, n + 1)))
    if sent is not None:
        sent.set()
    opened = 0
    close = None
    deadline = t0 + 30
    try:
        while time.monotonic() < deadline and opened < n:
            f = c.read_frame(max(0.01, deadline - time.monotonic()))
            if f.method == raw.CHANNEL_OPEN_OK:
                opened += 1
            elif f.method == raw.CONNECTION_CLOSE:
                close = raw.parse_close(f)
                c.sock.sendall(raw.connection_close_ok())
                break
    except (raw.PeerClosed, OSError):
        pass
    seconds = time.monotonic() - t0
    c.abort()
    return {"opened": opened, "close": close and (close[0], close[1][:70]),
            "s": round(seconds, 2), "channel_max": c.tune[0]}


def open_close_cycles(port, rounds=5, width=1000):
    """rounds x width channel.open within channel_max: channels 1..width opened and closed,
    pipelined, `rounds` times (a channel may be reopened only after its close-ok); how many
    opened and closed within 30 s."""
    c = open_client(port, channel=False)
    t0 = time.monotonic()
    opened = closed = 0
    close = None
    deadline = t0 + 30
    try:
        for _ in range(rounds):
            c.sock.sendall(b"".join(raw.channel_open(ch) for ch in range(1, width + 1))
                           + b"".join(raw.channel_close(ch) for ch in range(1, width + 1)))
            target = closed + width
            while closed < target and time.monotonic() < deadline:
                f = c.read_frame(max(0.01, deadline - time.monotonic()))
                if f.method == raw.CHANNEL_OPEN_OK:
                    opened += 1
                elif f.method == raw.CHANNEL_CLOSE_OK:
                    closed += 1
                elif f.method == raw.CONNECTION_CLOSE:
                    close = raw.parse_close(f)
                    raise raw.PeerClosed(detail="connection.close")
    except (raw.PeerClosed, OSError, socket.timeout):
        pass
    seconds = time.monotonic() - t0
    c.close()
    return {"opened": opened, "closed": closed, "close": close, "s": round(seconds, 2)}
