"""What test_broker_faults.py watches and runs beside its steady stream: the errors a client
may see when the broker fails under it (CLEAN_ERRORS), when a client first saw an error or
reconnected after a moment, and Flood, raw publishers that push big messages through the
proxy while the broker stalls."""

import socket
import threading
import time

import faults_support as fs
import rawamqp

# A clean end of a client's connection (a close, a refusal, a lost stream), not a hang.
CLEAN_ERRORS = ("ConnectionClosedByBroker", "StreamLostError", "AMQPConnectionError",
                "ConnectionClosed", "IncompatibleProtocolError", "ConnectionResetError",
                "ConnectionRefusedError", "ChannelWrongStateError", "AMQPHeartbeatTimeout",
                "ChannelClosedByBroker")


def first_error_after(client, since, timeout):
    """Seconds from `since` to the first connection error of `client` (a Publisher or
    Consumer), waiting up to `timeout` s for one; None if none came."""
    ok = fs.wait_until(lambda: client.events.since(since, "error"), timeout, 0.05)
    if not ok:
        return None
    return client.events.since(since, "error")[0][0] - since


def reconnected_after(client, since, timeout):
    """Seconds from `since` to `client`'s first connect after it (up to `timeout` s); None
    if it did not reconnect."""
    ok = fs.wait_until(lambda: client.events.since(since, "connected"), timeout, 0.1)
    return client.events.since(since, "connected")[0][0] - since if ok else None


class Flood:
    """`count` raw clients through `port`, each pushing 64 KiB messages (50 a second) into
    `queue`, which start() declares directly with x-max-length 50. Heartbeat 0: the proxy
    cannot tell such a connection is stuck, so it stays open through a broker stall,
    pushing until TCP stops taking the messages. Blocking sends: a send cut short would
    corrupt the stream."""

    def __init__(self, port, queue, count=6):
        self.port = port
        self.queue = queue
        self.sent = [0] * count
        self.clients = []
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._push, args=(i,), daemon=True)
                        for i in range(count)]

    def start(self):
        conn = fs.connect(fs.BROKER_PORT)
        conn.channel().queue_declare(self.queue, arguments={"x-max-length": 50})
        fs.close_quietly(conn)
        for t in self.threads:
            t.start()
        return self

    def _push(self, i):
        try:
            c = rawamqp.Client(self.port, timeout=5.0)
            c.handshake(heartbeat=0)
            c.open_channel(1)
            c.sock.settimeout(None)
            self.clients.append(c)
            body = b"f" * 65536
            while not self._stop.is_set():
                c.publish(1, self.queue, body, persistent=False)
                self.sent[i] += 1
                time.sleep(0.02)  # deliberate: the flood's pace, 50 messages a second
        except (OSError, rawamqp.PeerClosed, rawamqp.ConnectionClosedByPeer):
            pass

    def pushing(self):
        """Every client is connected and has published."""
        return all(self.sent)

    def stop(self):
        """Ends the pushing: the sockets shut down, so that a blocked send returns."""
        self._stop.set()
        for c in self.clients:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.abort()

    def join(self, timeout=10):
        for t in self.threads:
            t.join(timeout)
