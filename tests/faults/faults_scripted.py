"""ScriptedBroker: a fake upstream that plays the broker's side of many connections (for
more connections than the private node can take)."""

import collections
import struct
import threading


import rawamqp


class ScriptedBroker:
    """A minimal AMQP 0-9-1 server (asyncio, in its own thread) for connection-count tests
    that a real node cannot take: RabbitMQ's VM here has 1024 file descriptors, so ~830
    connections at once is its ceiling. It plays the server side of the handshake, opens
    and closes channels, answers confirm.select, and confirms every publish after
    recording its id in `received`. Nothing else."""

    def __init__(self):
        import asyncio
        self.asyncio = asyncio
        self.loop = asyncio.new_event_loop()
        self.received = collections.Counter()
        self.connections = 0
        self.open_now = 0
        self.peak_open = 0
        self.errors = []
        self.port = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="scripted-broker")

    def start(self):
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("scripted broker did not start")
        return self

    def _run(self):
        asyncio = self.asyncio
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=4096))
        self.server = server
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()
        self.loop.run_until_complete(server.wait_closed())

    def stop(self):
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    async def _serve(self, reader, writer):
        r = rawamqp
        self.connections += 1
        self.open_now += 1
        self.peak_open = max(self.peak_open, self.open_now)
        conn = r.AsyncConn(reader, writer)
        try:
            header = await reader.readexactly(8)
            if header != r.PROTOCOL_HEADER:
                return
            start = (struct.pack(">BB", 0, 9) + r.table({"product": "scripted broker",
                                                          "capabilities": {
                                                              "publisher_confirms": True}})
                     + r.longstr("PLAIN") + r.longstr("en_US"))
            await conn.send(r.method_frame(0, r.CONNECTION_START, start))
            pending = {}   # channel -> [seq, id, expected size, got]
            seqs = {}
            while True:
                f = await conn.read_frame()
                m = f.method
                if m == r.CONNECTION_START_OK:
                    await conn.send(r.method_frame(0, r.CONNECTION_TUNE,
                                                   struct.pack(">HIH", 2047, 131072, 0)))
                elif m == r.CONNECTION_OPEN:
                    await conn.send(r.method_frame(0, r.CONNECTION_OPEN_OK, r.shortstr("")))
                elif m == r.CHANNEL_OPEN:
                    await conn.send(r.method_frame(f.channel, r.CHANNEL_OPEN_OK,
                                                   r.longstr("")))
                elif m == r.CONFIRM_SELECT:
                    seqs[f.channel] = 0
                    await conn.send(r.method_frame(f.channel, r.CONFIRM_SELECT_OK))
                elif m == r.BASIC_PUBLISH:
                    pending[f.channel] = None  # its content header comes next
                elif f.type == r.FRAME_HEADER and f.channel in pending:
                    size = struct.unpack_from(">Q", f.payload, 4)[0]
                    if size == 0:
                        del pending[f.channel]
                        await self._published(conn, f.channel, b"", seqs)
                    else:
                        pending[f.channel] = (size, bytearray())
                elif f.type == r.FRAME_BODY and pending.get(f.channel) is not None:
                    size, body = pending[f.channel]
                    body += f.payload
                    if len(body) >= size:
                        del pending[f.channel]
                        await self._published(conn, f.channel, body, seqs)
                elif m == r.CHANNEL_CLOSE:
                    await conn.send(r.method_frame(f.channel, r.CHANNEL_CLOSE_OK))
                elif m == r.CONNECTION_CLOSE:
                    await conn.send(r.connection_close_ok())
                    return
                elif m == r.CONNECTION_CLOSE_OK:
                    return
        except (r.PeerClosed, ConnectionError, self.asyncio.IncompleteReadError):
            pass
        except Exception as exc:  # a bug in this script: keep it for the test to show
            self.errors.append(repr(exc))
        finally:
            self.open_now -= 1
            writer.close()

    async def _published(self, conn, channel, body, seqs):
        self.received[rawamqp.message_id_of(body)] += 1
        if channel in seqs:
            seqs[channel] += 1
            await conn.send(rawamqp.basic_ack(channel, seqs[channel]))
