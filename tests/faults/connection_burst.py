"""Many client connections through one proxy at once (test_process_faults.py): raw asyncio
AMQP clients that each open three channels, publish one confirmed message and stay open
until all are, with the proxy's file descriptors and RSS sampled meanwhile and afterwards."""

import asyncio
import resource
import struct
import time
import unittest

import faults_support as fs
import rawamqp

# How long no new connection may open before the clients stop waiting for the others. A
# 4.0 or 4.3 node pauses its handshakes about 5 s now and then under a burst: 300
# connections straight to the 4.3 node, no nackguard, stalled 5.0 s in 3 runs of 4 here
# (3.10: none). A stall shorter than this is waited out; a longer one fails the test.
STALL_S = 10


def _raise_fd_limit(n_conns):
    """Three fds a connection here (and some to spare); unittest.SkipTest if the hard limit
    does not allow that."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 3 * n_conns + 200:
        if hard < 3 * n_conns + 200:
            raise unittest.SkipTest(f"RLIMIT_NOFILE hard limit {hard} is too low for "
                                    f"{n_conns} connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _run_clients(port, n_conns, queue, prefix, gate_size, ledger, sampler):
    """The clients, on one asyncio loop: (results, held open at once, seconds to that,
    seconds in all)."""
    state = {"open": 0, "peak_open": 0}
    release = None

    async def work(conn, index, opened):
        for ch in (1, 2, 3):
            await conn.send(rawamqp.channel_open(ch))
            await conn.expect(rawamqp.CHANNEL_OPEN_OK, ch)
        await conn.send(rawamqp.confirm_select(1))
        await conn.expect(rawamqp.CONFIRM_SELECT_OK, 1)
        msg_id = f"{prefix}-{index:06d}"
        ledger.publish(msg_id)
        await conn.send(rawamqp.publish_frames(1, "", queue, fs.body_for(msg_id, 128),
                                               conn.frame_max, msg_id, persistent=True))
        ack = await conn.expect(rawamqp.BASIC_ACK, 1)
        if struct.unpack_from(">Q", ack.args, 0)[0] == 1:
            ledger.confirm(msg_id)
        opened()
        state["open"] += 1
        state["peak_open"] = max(state["peak_open"], state["open"])
        await release.wait()
        state["open"] -= 1
        for ch in (2, 3):
            await conn.send(rawamqp.channel_close(ch))
            await conn.expect(rawamqp.CHANNEL_CLOSE_OK, ch)

    async def one(index, gate):
        # at most `gate_size` connections in their handshake at once, to keep the
        # machine responsive; once open, a connection frees its slot and stays open
        await gate.acquire()
        freed = False

        def opened():
            nonlocal freed
            if not freed:
                freed = True
                gate.release()

        try:
            return await asyncio.wait_for(
                rawamqp.async_session(port, lambda c: work(c, index, opened)), 90)
        finally:
            opened()

    async def main():
        nonlocal release
        release = asyncio.Event()
        gate = asyncio.Semaphore(gate_size)
        tasks = [asyncio.ensure_future(one(i, gate)) for i in range(1, n_conns + 1)]
        t0 = time.monotonic()
        last, last_change = -1, time.monotonic()
        while time.monotonic() - t0 < 60:
            if state["open"] != last:
                last, last_change = state["open"], time.monotonic()
            if state["open"] >= n_conns or time.monotonic() - last_change > STALL_S:
                break
            await asyncio.sleep(0.05)
        held = state["open"]
        t_held = time.monotonic()
        held_s = t_held - t0
        # The sampler sees them all: a sample taken after the last one opened (5 s at most).
        while (not (sampler.samples and sampler.samples[-1][0] >= t_held)
               and time.monotonic() - t_held < 5):
            await asyncio.sleep(0.02)
        release.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return results, held, held_s, time.monotonic() - t0

    return asyncio.run(main())


def open_many(proxy, n_conns, queue, prefix, gate_size=100):
    """n_conns raw asyncio clients through `proxy`, all at once: handshake, channels
    1-3, confirm.select and one persistent publish on channel 1 (its confirm awaited),
    then each stays open until all are (or until no more open for STALL_S), closes
    channels 2 and 3 and the connection. Returns (ledger, stats): the proxy's fds and RSS
    before, at their peak and after (fds awaited back at the baseline for 5 s, RSS within
    20 MB of it for 3 s more)."""
    _raise_fd_limit(n_conns)
    ledger = fs.Ledger(prefix)
    fd_base = fs.settled_fd_count(proxy.pid)
    rss_base = proxy.rss_kb()
    conns_base = proxy.metric_sum("nackguard_client_connections")
    sampler = fs.Sampler(proxy.pid, 0.1)
    sampler.start()
    try:
        results, held, held_s, total_s = _run_clients(proxy.port, n_conns, queue, prefix,
                                                       gate_size, ledger, sampler)
        failures = [repr(r) for r in results if isinstance(r, BaseException)]
        t_closed = time.monotonic()
        back = fs.wait_until(lambda: proxy.fds() == fd_base, 5, 0.05)
        fd_back_s = time.monotonic() - t_closed
        fd_after = proxy.fds()
        # The proxy gives freed heap back at most once a second after connections close.
        fs.wait_until(lambda: proxy.rss_kb() - rss_base < 20 * 1024, 3, 0.1)
        rss_after = proxy.rss_kb()
    finally:
        sampler.stop()
    stats = dict(connections=n_conns, failures=len(failures),
                 failure_examples=failures[:3], open_at_once=held,
                 open_phase_s=round(held_s, 1), total_s=round(total_s, 1),
                 fd_baseline=fd_base, fd_peak=sampler.max_fds(), fd_after=fd_after,
                 fd_back=back, fd_back_after_s=round(fd_back_s, 2),
                 rss_kb_baseline=rss_base, rss_kb_peak=sampler.max_rss_kb(),
                 rss_kb_after=rss_after,
                 client_connections_metric=(conns_base,
                                            proxy.metric_sum("nackguard_client_connections")))
    fs.log(f"{n_conns} connections through {proxy.name}: {stats}")
    return ledger, stats
