"""Fuzz seeds cut out of captured AMQP 0-9-1 byte streams (for capture_corpus.py beside it).

The streams are split into frames, and each distinct frame, method payload, content header
payload and field table is written, under a name that says who sent it and what it is, to the
corpus directory of the targets that take it (tests/fuzz/README.md lists the names). The
synthetic seeds cover the field table type letters nobody on the wire sends.
"""

import hashlib
import os
import re
import struct
import sys

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = 0xCE
MAX_SEED_BYTES = 8 * 1024
MAX_VARIANTS = 3  # distinct frames kept under one name

# Method names and the methods the codec decodes come from the C++ sources, which hold the one
# table of each: proxy/amqp/method_name.cpp's kNames ({method_key(C, M), "name"}) names every
# method, and proxy/amqp/methods.hpp's structs (kKey = mid::NAME, a key of constants.hpp's
# namespace mid) are what the codec decodes, so their payloads go to fuzz_methods. Other
# methods seen on the wire (queue.delete, ...) still go to the frame decoder corpus.
AMQP_SOURCES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "proxy", "amqp")
_NAME_ENTRY = re.compile(r'^ *\{method_key\(([0-9]+), ([0-9]+)\), "([a-z]+\.[a-z-]+)"\},$')
_MID_ENTRY = re.compile(r"^inline constexpr std::uint32_t ([a-z_]+) = method_key\(([0-9]+), "
                        r"([0-9]+)\);$")
_STRUCT_KEY = re.compile(r"^ *static constexpr std::uint32_t kKey = mid::([a-z_]+);$")


def read_entries(file_name, marker, pattern):
    """The groups of `pattern` on every line of proxy/amqp/<file_name> that holds `marker`.
    Exits naming the file when a line with the marker does not match (the C++ changed shape)
    or when there is none."""
    path = os.path.join(AMQP_SOURCES, file_name)
    try:
        with open(path, encoding="utf-8") as source:
            lines = source.read().splitlines()
    except OSError as exc:
        sys.exit(f"capture_corpus.py: cannot read {path}: {exc}")
    entries = []
    for number, line in enumerate(lines, start=1):
        if marker in line:
            match = pattern.match(line)
            if not match:
                sys.exit(f"capture_corpus.py: {path}:{number}: expected {pattern.pattern}, "
                         f"found {line.strip()!r}")
            entries.append(match.groups())
    if not entries:
        sys.exit(f"capture_corpus.py: {path}: no line holds {marker!r}")
    return entries


def method_tables_from_sources():
    """({(class, method): name} of every method, the set of keys the codec decodes)."""
    names = {(int(c), int(m)): name
             for c, m, name in read_entries("method_name.cpp", "{method_key(", _NAME_ENTRY)}
    mid = {name: (int(c), int(m))
           for name, c, m in read_entries("constants.hpp", "= method_key(", _MID_ENTRY)}
    decoded = set()
    for (key_name,) in read_entries("methods.hpp", "kKey = mid::", _STRUCT_KEY):
        if key_name not in mid:
            sys.exit(f"capture_corpus.py: {AMQP_SOURCES}/methods.hpp: kKey = mid::{key_name}, "
                     f"which constants.hpp does not define")
        if mid[key_name] not in names:
            sys.exit("capture_corpus.py: %s/method_name.cpp has no name for %d.%d (mid::%s)"
                     % (AMQP_SOURCES, *mid[key_name], key_name))
        decoded.add(mid[key_name])
    return names, decoded


METHOD_NAMES, DECODED_METHODS = method_tables_from_sources()

TARGETS = ("fuzz_frame_decoder", "fuzz_methods", "fuzz_content_header", "fuzz_field_table")


# ---- frames ----

def split_frames(stream, from_client):
    """Returns [(type, channel, payload, raw)]; a client stream starts with the protocol header."""
    pos = 0
    if from_client:
        if not stream.startswith(PROTOCOL_HEADER):
            raise RuntimeError("client stream does not start with the AMQP 0-9-1 header")
        pos = len(PROTOCOL_HEADER)
    frames = []
    while len(stream) - pos >= 7:
        frame_type, channel, size = struct.unpack_from(">BHI", stream, pos)
        end = pos + 7 + size + 1
        if end > len(stream):
            break
        if stream[end - 1] != FRAME_END:
            raise RuntimeError("frame without its end octet at offset %d" % pos)
        frames.append((frame_type, channel, stream[pos + 7:end - 1], stream[pos:end]))
        pos = end
    return frames


def short_string(payload, pos):
    length = payload[pos]
    return pos + 1 + length


def table_at(payload, pos):
    (length,) = struct.unpack_from(">I", payload, pos)
    return payload[pos:pos + 4 + length]


def method_tables(key, payload):
    """The field tables inside a method payload, as {field name: table bytes}."""
    if key == (10, 10):
        return {"server-properties": table_at(payload, 6)}
    if key == (10, 11):
        return {"client-properties": table_at(payload, 4)}
    if key == (50, 10):
        pos = short_string(payload, 4 + 2)
        return {"arguments": table_at(payload, pos + 1)}
    if key == (60, 20):
        pos = short_string(payload, short_string(payload, 4 + 2))
        return {"arguments": table_at(payload, pos + 1)}
    return {}


def header_table(payload):
    """The headers table of a content header payload, or None."""
    (flags,) = struct.unpack_from(">H", payload, 12)
    if not flags & 0x2000:
        return None
    pos = 14
    if flags & 0x8000:
        pos = short_string(payload, pos)
    if flags & 0x4000:
        pos = short_string(payload, pos)
    return table_at(payload, pos)


class Corpus:
    """Writes distinct seeds under descriptive names, at most MAX_VARIANTS per name."""

    def __init__(self, root):
        self.root = root
        self.seen = {target: set() for target in TARGETS}
        self.variants = {}
        self.written = {target: 0 for target in TARGETS}
        self.skipped_large = 0

    def reset(self):
        for target in TARGETS:
            directory = os.path.join(self.root, target)
            os.makedirs(directory, exist_ok=True)
            for name in os.listdir(directory):
                if name.startswith(("broker-", "client-", "synthetic-")):
                    os.remove(os.path.join(directory, name))

    def add(self, target, name, data):
        data = bytes(data)
        if len(data) > MAX_SEED_BYTES:
            self.skipped_large += 1
            return
        digest = hashlib.sha256(data).digest()
        if digest in self.seen[target]:
            return
        count = self.variants.get((target, name), 0) + 1
        if count > MAX_VARIANTS:
            return
        self.seen[target].add(digest)
        self.variants[(target, name)] = count
        file_name = name + (".bin" if count == 1 else "-%d.bin" % count)
        with open(os.path.join(self.root, target, file_name), "wb") as out:
            out.write(data)
        self.written[target] += 1


def method_name(key):
    return METHOD_NAMES.get(key) or "method-%d-%d" % key


def add_stream(corpus, side, frames):
    """Seeds for one direction of one connection."""
    last_method = {}  # per channel: the method a content header or body belongs to
    for frame_type, channel, payload, raw in frames:
        if frame_type == 1:
            key = struct.unpack_from(">HH", payload)
            name = method_name(key)
            last_method[channel] = name
            corpus.add("fuzz_frame_decoder", "%s-%s" % (side, name), raw)
            if key in DECODED_METHODS:
                corpus.add("fuzz_methods", "%s-%s" % (side, name), payload)
            for field, table in method_tables(key, payload).items():
                corpus.add("fuzz_field_table", "%s-%s.%s" % (side, name, field), table)
        elif frame_type == 2:
            name = "%s-%s.content-header" % (side, last_method.get(channel, "unknown"))
            corpus.add("fuzz_frame_decoder", name, raw)
            corpus.add("fuzz_content_header", name, payload)
            table = header_table(payload)
            if table is not None:
                corpus.add("fuzz_field_table",
                           "%s-%s.headers" % (side, last_method.get(channel, "unknown")), table)
        elif frame_type == 3:
            corpus.add("fuzz_frame_decoder",
                       "%s-%s.body" % (side, last_method.get(channel, "unknown")), raw)
        elif frame_type == 8:
            corpus.add("fuzz_frame_decoder", "%s-heartbeat" % side, raw)


def add_multi_frame_streams(corpus, client_stream, broker_stream):
    """Short runs of consecutive frames, so the frame decoder starts from real sequences: the
    handshake of each side (the client's with its protocol header) and a whole delivery."""
    def cut(prefix, frames, first, count):
        data = bytearray(prefix)
        for _, _, _, raw in frames[first:first + count]:
            if len(data) + len(raw) > MAX_SEED_BYTES:
                break
            data += raw
        return data

    client_frames = split_frames(client_stream, True)
    broker_frames = split_frames(broker_stream, False)
    corpus.add("fuzz_frame_decoder", "client-stream-handshake",
               cut(PROTOCOL_HEADER, client_frames, 0, 4))
    corpus.add("fuzz_frame_decoder", "broker-stream-handshake", cut(b"", broker_frames, 0, 4))
    for index, (frame_type, _, payload, _) in enumerate(broker_frames):
        if frame_type == 1 and struct.unpack_from(">HH", payload) == (60, 60):
            (body_size,) = struct.unpack_from(">Q", broker_frames[index + 1][2], 4)
            if body_size > 4096:  # the delivery whose body spans several frames
                corpus.add("fuzz_frame_decoder", "broker-stream-deliver-multi-body",
                           cut(b"", broker_frames, index, 5))
                break


# ---- synthetic seeds: the type letters nobody on the wire sends ----

def synthetic_every_letter_table():
    def entry(name, letter, value=b""):
        return bytes([len(name)]) + name + letter + value

    nested = entry(b"deep", b"S", struct.pack(">I", 2) + b"er")
    nested_table = struct.pack(">I", len(nested)) + nested
    items = b"I" + struct.pack(">i", -1) + b"S" + struct.pack(">I", 0) + b"F" + nested_table
    body = b"".join([
        entry(b"t", b"t", b"\x01"), entry(b"b", b"b", struct.pack(">b", -128)),
        entry(b"B", b"B", b"\xff"), entry(b"s", b"s", struct.pack(">h", -2)),
        entry(b"u", b"u", struct.pack(">H", 65535)), entry(b"I", b"I", struct.pack(">i", -2**31)),
        entry(b"i", b"i", struct.pack(">I", 2**32 - 1)), entry(b"l", b"l", struct.pack(">q", -5)),
        entry(b"f", b"f", struct.pack(">f", 1.5)), entry(b"d", b"d", struct.pack(">d", -0.25)),
        entry(b"D", b"D", struct.pack(">BI", 2, 12345)),
        entry(b"S", b"S", struct.pack(">I", 4) + b"text"),
        entry(b"A", b"A", struct.pack(">I", len(items)) + items),
        entry(b"T", b"T", struct.pack(">Q", 1700000000)), entry(b"F", b"F", nested_table),
        entry(b"V", b"V"), entry(b"x", b"x", struct.pack(">I", 2) + b"\x00\xff"),
    ])
    return struct.pack(">I", len(body)) + body


def add_synthetic(corpus):
    table = synthetic_every_letter_table()
    corpus.add("fuzz_field_table", "synthetic-every-letter", table)
    header = struct.pack(">HHQH", 60, 0, 3, 0x2000) + table
    corpus.add("fuzz_content_header", "synthetic-headers-every-letter", header)
    declare = struct.pack(">HHH", 50, 10, 0) + b"\x01q" + b"\x02" + table
    corpus.add("fuzz_methods", "synthetic-queue.declare-every-letter", declare)
    frame = struct.pack(">BHI", 1, 1, len(declare)) + declare + bytes([FRAME_END])
    corpus.add("fuzz_frame_decoder", "synthetic-queue.declare-every-letter", frame)

