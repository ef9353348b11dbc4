#!/usr/bin/python3
"""The time from each read to its send, per forward, in one relay's system-call trace.

Record the relay's system calls while a load runs, and note which of its sockets are client
connections (those whose local port is the relay's listening port):

    perf record -e raw_syscalls:sys_enter,raw_syscalls:sys_exit -p PID -o trace.perf &
    ss -tnp | grep "pid=PID," > sockets.txt       # while the load runs
    ...load..., then kill -INT the perf record
    perf script --ns -i trace.perf -F tid,time,event,trace \\
        | /usr/bin/python3 tests/bench/read_to_send.py sockets.txt 31680

For every `recvfrom` that brought bytes, the time to the start of the same thread's next
`sendto` is one forward. Forwards are named by direction and size (over 500 bytes read: a
message): publish and ack go to the broker, delivery and confirm to the client. Prints the
p50 and mean per kind, in µs (docs/performance.md, run RS).
"""

import collections
import re
import statistics
import sys

SENDTO, RECVFROM = 44, 45  # x86-64
LINE = re.compile(r"\s*(\d+)\s+([\d.]+):\s+raw_syscalls:(sys_enter|sys_exit):\s+NR (\d+)\s*(.*)")
KINDS = {("client", True): "delivery", ("client", False): "confirm",
         ("broker", True): "publish", ("broker", False): "ack"}


def client_fds(sockets_file, listen_port):
    fds = set()
    with open(sockets_file) as f:
        for line in f:
            fields = line.split()
            if len(fields) > 3 and fields[3].endswith(":" + listen_port):
                fds.update(int(fd) for fd in re.findall(r"fd=(\d+)", line))
    return fds


def forwards(lines, clients):
    reading_fd = {}  # tid -> the fd of its recvfrom in progress
    last_read = {}   # tid -> (time, bytes) of its last recvfrom that brought bytes
    found = collections.defaultdict(list)
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        tid, when, event, number, rest = int(m[1]), float(m[2]), m[3], int(m[4]), m[5]
        if event == "sys_enter" and number in (SENDTO, RECVFROM):
            arg = re.search(r"\(([0-9a-fx]+)", rest)
            fd = int(arg[1], 16) if arg else -1
            if number == RECVFROM:
                reading_fd[tid] = fd
            elif tid in last_read:
                read_at, size = last_read.pop(tid)
                to = "client" if fd in clients else "broker"
                found[KINDS[(to, size > 500)]].append((when - read_at) * 1e6)
        elif event == "sys_exit" and number == RECVFROM:
            ret = re.search(r"= (-?\d+)", rest)
            if ret and int(ret[1]) > 0:
                last_read[tid] = (when, int(ret[1]))
    return found


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: perf script ... | read_to_send.py SOCKETS_FILE LISTEN_PORT")
    found = forwards(sys.stdin, client_fds(sys.argv[1], sys.argv[2]))
    for kind in ("publish", "confirm", "delivery", "ack"):
        times = sorted(found.get(kind, []))
        if not times:
            print(f"{kind}: none")
            continue
        print(f"{kind}: {len(times)} forwards, p50 {times[len(times) // 2]:.2f} µs, "
              f"mean {statistics.mean(times):.2f} µs")


if __name__ == "__main__":
    main()
