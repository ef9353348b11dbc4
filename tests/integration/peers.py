"""Scripted network peers for the integration tests: a fake AMQP broker and a TCP relay.

FakeBroker  listens on a free loopback port and runs a script (a function of the
            accepted socket) for every connection, in its own thread.  Connections
            that close before sending the 8-byte protocol header (such as the
            harness's readiness probe of a proxy) are recorded as probes and ignored.
TcpRelay    forwards loopback TCP connections to a target port and can cut every
            pair's target-side socket on demand, then close the accepting side with
            a FIN or a RST, as if that connection to the broker had died.
"""

import select
import socket
import struct
import threading
import time

import amqp_wire as wire
import wire_reader


def listening_socket():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.05)  # accept loops poll a stop flag (close() does not wake accept())
    return sock


def accepted_sockets(listener, stopping):
    """The sockets `listener` accepts, in blocking mode, until stopping() or it is closed."""
    while not stopping():
        try:
            sock, _ = listener.accept()
        except socket.timeout:
            continue
        except OSError:
            return
        sock.settimeout(None)
        yield sock


def quietly(action, *args):
    """action(*args), an OSError ignored: closing a socket the other end may have closed."""
    try:
        action(*args)
    except OSError:
        pass


class ScriptedConnection:
    """What one accepted connection did; filled in by the script's thread."""

    def __init__(self, sock, index):
        self.sock = sock
        self.index = index
        self.reader = wire_reader.FrameReader(sock)
        self.events = []  # (monotonic time, name, detail)
        self.error = None  # exception text if the script failed unexpectedly
        self.done = threading.Event()

    def event(self, name, detail=None):
        self.events.append((time.monotonic(), name, detail))

    def has(self, name):
        return any(e[1] == name for e in self.events)

    def detail(self, name):
        for _, n, d in self.events:
            if n == name:
                return d
        return None

    def read_protocol_header(self, timeout=10.0):
        """Reads the 8-byte header; False (a probe) if the peer closed first."""
        try:
            header = self.reader.read_exact(8, timeout)
        except wire.PeerClosed:
            self.event("probe")
            return False
        self.event("protocol_header", header)
        return True


class FakeBroker:
    def __init__(self, script):
        self._script = script
        self._listener = listening_socket()
        self.port = self._listener.getsockname()[1]
        self.connections = []
        self._lock = threading.Lock()
        self._stopping = False
        self._threads = []
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    def _accept_loop(self):
        for sock in accepted_sockets(self._listener, lambda: self._stopping):
            with self._lock:
                conn = ScriptedConnection(sock, len(self.connections))
                self.connections.append(conn)
            thread = threading.Thread(target=self._run, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self, conn):
        try:
            self._script(conn)
        except Exception as exc:  # recorded; the test asserts on it
            if not self._stopping:
                conn.error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.done.set()
            quietly(conn.sock.close)

    def amqp_connections(self):
        """Connections that sent a protocol header (not readiness probes)."""
        with self._lock:
            return [c for c in self.connections if c.has("protocol_header")]

    def stop(self):
        self._stopping = True
        self._acceptor.join(2)
        quietly(self._listener.close)
        with self._lock:
            conns = list(self.connections)
        for conn in conns:
            quietly(conn.sock.shutdown, socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(5)


def play_server_handshake(conn, channel_max=2047, frame_max=131072, heartbeat=0):
    """The broker side of a correct handshake (after the protocol header)."""
    conn.sock.sendall(wire.connection_start(mechanisms="PLAIN"))
    start_ok = conn.reader.read_method(wire.CONNECTION_START_OK, 10)
    conn.event("start_ok", start_ok.args)
    conn.sock.sendall(wire.connection_tune(channel_max, frame_max, heartbeat))
    tune_ok = conn.reader.read_method(wire.CONNECTION_TUNE_OK, 10)
    conn.event("tune_ok", wire.parse_tune(tune_ok))
    open_ = conn.reader.read_method(wire.CONNECTION_OPEN, 10)
    conn.event("open", open_.args)
    conn.sock.sendall(wire.connection_open_ok())
    conn.event("open_ok_sent")


class TcpRelay:
    """A loopback TCP relay to target_port whose target side can be cut on demand."""

    def __init__(self, target_port, target_host="127.0.0.1"):
        self._target = (target_host, target_port)
        self._listener = listening_socket()
        self.port = self._listener.getsockname()[1]
        self._pairs = []  # [accepted socket, target socket, [pump threads], cut event]
        self._lock = threading.Lock()
        self._cut_pairs = []
        self._stopping = threading.Event()
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    def _accept_loop(self):
        for accepted in accepted_sockets(self._listener, self._stopping.is_set):
            try:
                target = socket.create_connection(self._target, timeout=5)
            except OSError:
                accepted.close()
                continue
            target.settimeout(None)
            cut = threading.Event()
            pair = [accepted, target, [], cut]
            for src, dst in ((accepted, target), (target, accepted)):
                t = threading.Thread(target=self._pump, args=(src, dst, cut), daemon=True)
                pair[2].append(t)
            with self._lock:
                self._pairs.append(pair)
            for t in pair[2]:
                t.start()

    def _pump(self, src, dst, cut):
        while not (cut.is_set() or self._stopping.is_set()):
            try:
                readable, _, _ = select.select([src], [], [], 0.05)
                if not readable:
                    continue
                data = src.recv(65536)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return

    def connection_count(self):
        """Relayed connections not yet cut."""
        with self._lock:
            return len(self._pairs)

    def cut(self, reset=False):
        """Kills the target side (the broker socket) of every relayed connection so far.

        The accepted side (the proxy's upstream socket) then sees a RST when
        `reset`, else a FIN.
        """
        with self._lock:
            pairs, self._pairs = list(self._pairs), []
            self._cut_pairs.extend(pairs)
        for _, _, _, cut in pairs:
            cut.set()
        for accepted, target, threads, _ in pairs:
            for t in threads:
                t.join(2)
            target.close()
            if reset:
                accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
            else:
                quietly(accepted.shutdown, socket.SHUT_RDWR)
            accepted.close()

    def stop(self):
        self._stopping.set()
        self._acceptor.join(2)
        quietly(self._listener.close)
        with self._lock:
            pairs = list(self._pairs)
        for accepted, target, threads, _ in pairs:
            for t in threads:
                t.join(2)
            for s in (accepted, target):
                quietly(s.close)
