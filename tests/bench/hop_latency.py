#!/usr/bin/python3
"""Each relay's own share of a message's latency, per hop, from one system-call trace.

tests/bench/hop_latency.sh runs every relay in one paired load (nackguard-bench --targets) and
records the system calls of the relays, the load generator and the broker together
(`perf record -k mono`), then calls this script on the trace:

    perf script --ns -i trace.perf -F pid,tid,time,event,trace > trace.txt
    ss -tnpH > sockets.txt                      # while the load runs
    hop_latency.py trace.txt sockets.txt BENCH_PID BEAM_PID LABEL=PID:PORT...

A hop is the time from the peer's send of a message to the relay's send that forwards it:
- publish: from the load generator's `sendto` of the message's body frame (1,000 bytes or
  more, on its connection to the relay) to the relay's next `sendto` after the `recvfrom`
  that read it from a client connection;
- delivery: from the broker's `writev` of the delivery (1,000 bytes or more, on the relay's
  upstream connection) to the relay's next `sendto` after reading it.

So a hop holds the kernel's wake-up of the relay, the relay's own work and its two system
calls, and nothing of the broker's or the load generator's time: the relays differ in it
alone. Tracing adds about a µs to every system call, to every relay alike. Prints per relay
the p50 of each hop, in µs, one line.
"""

import bisect
import collections
import re
import sys

SENDTO, RECVFROM, WRITEV, EPOLL_WAIT = 44, 45, 20, 232  # x86-64
LINE = re.compile(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+raw_syscalls:(sys_enter|sys_exit):\s+NR (\d+)\s*(.*)")
FDS = re.compile(r"pid=(\d+),fd=(\d+)")
MESSAGE = 1000  # bytes: a 1 KiB message's body frame; acks and confirms are far smaller


def socket_maps(path, relays, bench, beam):
    """Which fds are whose: a relay's client connections, and the load generator's and the
    broker's connections to each relay."""
    rows = [line.split() for line in open(path)]
    client_fd, upstream_port, bench_fd, beam_fd = set(), {}, {}, {}
    for row in rows:
        if len(row) < 5:
            continue
        local, peer = row[3], row[4]
        for pid, fd in ((int(p), int(f)) for p, f in FDS.findall(" ".join(row))):
            if pid in relays:
                label, port = relays[pid]
                if local.endswith(":" + port):
                    client_fd.add((pid, fd))
                else:
                    upstream_port[local.rsplit(":", 1)[1]] = label
            elif pid == bench:
                for label, port in relays.values():
                    if peer.endswith(":" + port):
                        bench_fd[fd] = label
    for row in rows:
        if len(row) < 5:
            continue
        for pid, fd in ((int(p), int(f)) for p, f in FDS.findall(" ".join(row))):
            if pid == beam and row[4].rsplit(":", 1)[1] in upstream_port:
                beam_fd[fd] = upstream_port[row[4].rsplit(":", 1)[1]]
    return client_fd, bench_fd, beam_fd


def hops(trace, relays, bench, beam, client_fd, bench_fd, beam_fd):
    entered = {}  # tid -> (number, time, arguments) of its system call in progress
    sent = collections.defaultdict(list)  # (label, hop) -> the peers' send times
    forwards = collections.defaultdict(list)  # (label, hop) -> (read time, send time)
    read = {}  # relay tid -> (time, fd) of its last read of a message
    for line in open(trace):
        m = LINE.match(line)
        if not m:
            continue
        pid, tid, when, event, number, rest = (int(m[1]), int(m[2]), float(m[3]), m[4],
                                               int(m[5]), m[6])
        if event == "sys_enter":
            entered[tid] = (number, when, rest)
            if pid in relays and number == SENDTO and tid in read:
                read_at, fd = read.pop(tid)
                hop = "publish" if (pid, fd) in client_fd else "delivery"
                forwards[(relays[pid][0], hop)].append((read_at, when))
            continue
        ret = re.search(r"= (-?\d+)", rest)
        size = int(ret[1]) if ret else 0
        start = entered.get(tid)
        if not start or start[0] != number:
            continue
        arg = re.search(r"\(([0-9a-f]+)", start[2])
        fd = int(arg[1], 16) if arg else -1
        if pid == bench and number == SENDTO and size >= MESSAGE and fd in bench_fd:
            sent[(bench_fd[fd], "publish")].append(start[1])
        elif pid == beam and number == WRITEV and size >= MESSAGE and fd in beam_fd:
            sent[(beam_fd[fd], "delivery")].append(start[1])
        elif pid in relays and number == RECVFROM and size > 500:
            read[tid] = (when, fd)
    result = {}
    for key, pairs in forwards.items():
        times = sent[key]
        found = []
        for read_at, send_at in pairs:
            i = bisect.bisect_left(times, read_at) - 1
            if i >= 0 and send_at - times[i] < 0.002:  # a read whose message was sent before
                found.append((send_at - times[i]) * 1e6)
        result[key] = sorted(found)
    return result


def main():
    if len(sys.argv) < 6:
        sys.exit("usage: hop_latency.py TRACE SOCKETS BENCH_PID BEAM_PID LABEL=PID:PORT...")
    trace, sockets, bench, beam = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    relays = {}
    for spec in sys.argv[5:]:
        label, rest = spec.split("=")
        pid, port = rest.split(":")
        relays[int(pid)] = (label, port)
    maps = socket_maps(sockets, relays, bench, beam)
    result = hops(trace, relays, bench, beam, *maps)
    parts = []
    for label, _ in relays.values():
        p50 = {}
        for hop in ("publish", "delivery"):
            times = result.get((label, hop), [])
            p50[hop] = times[len(times) // 2] if times else float("nan")
        parts.append(f"{label}: publish {p50['publish']:.1f} delivery {p50['delivery']:.1f} "
                     f"(n {len(result.get((label, 'delivery'), []))})")
    print(" | ".join(parts))


if __name__ == "__main__":
    main()
