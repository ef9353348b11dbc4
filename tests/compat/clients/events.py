"""The events file every Python client of the compatibility suite appends to.

One line per event, written with a single write() so that lines never interleave:
  start                     the client is connected and consuming
  deliver LABEL REDELIVERED the client got a message (REDELIVERED 0, 1, or ? if unknown)
  ack LABEL                 the client processed and acknowledged it
  return LABEL              the client gave it back (nack or reject with requeue=true)
  error TEXT                the client saw a protocol or connection error
  stop                      the client closed its connection cleanly
"""

import os
import sys


class Events:
    def __init__(self, path):
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, *words):
        text = " ".join(str(w) for w in words).replace("\n", " ")
        os.write(self._fd, (text + "\n").encode())

    def close(self):
        os.close(self._fd)

    def failed(self, client, exc):
        """Reports `exc`, a failure of `client` (every failure is the finding): an error
        event, and the same on stderr."""
        self.write("error", f"{type(exc).__name__}: {exc!r}")
        print(f"{client} client: {type(exc).__name__}: {exc!r}", file=sys.stderr)
