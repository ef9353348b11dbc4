"""Scraping nackguard's /metrics: a checking parser of the Prometheus text format 0.0.4 and
plain HTTP helpers. Proxy.metrics() (proxy_process.py) and the operations tests use them.

  parse_metrics()    a parser of the Prometheus text format 0.0.4 that checks what it reads
                     (HELP/TYPE before the samples, one TYPE per family, contiguous families,
                     histogram suffixes, label escapes, no duplicate series) and returns a
                     MetricsPage
  MetricsPage        value(name, **labels), series(name), labels_of(name, label),
                     flat(**only) ({'name{labels}': value}; with only, the series with
                     those labels, keyed without them)
  http_get()         one GET through http.client: (status, content type, body text)
  raw_http()         raw bytes to a port, the whole answer back: (status or None, raw bytes)
"""

import http.client
import math
import re
import socket
import time

# ---------------------------------------------------------------- the text format 0.0.4

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_NAME_RE = re.compile(_NAME)
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_HELP_RE = re.compile(rf"^# HELP ({_NAME})(?: (.*))?$")
_TYPE_RE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)$")
_TYPES_WITH_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"),
                        "summary": ("_sum", "_count")}


class MetricsFormatError(Exception):
    pass


class Family:
    def __init__(self, name):
        self.name = name
        self.help = None
        self.type = None
        self.samples = []  # (sample name, {label: value}, float value)


def _unescape(text, allow_quote, where):
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(text):
            raise MetricsFormatError(f"{where}: a lone backslash at the end")
        n = text[i + 1]
        if n == "\\":
            out.append("\\")
        elif n == "n":
            out.append("\n")
        elif n == '"' and allow_quote:
            out.append('"')
        else:
            raise MetricsFormatError(f"{where}: unknown escape \\{n}")
        i += 2
    return "".join(out)


def _escape(value):
    """A label value as the text format writes it (the inverse of _unescape)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _parse_value(text, where):
    if text in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    try:
        return float(text)
    except ValueError:
        raise MetricsFormatError(f"{where}: not a number: {text!r}") from None


def _parse_labels(text, pos, where):
    """Parses `{a="x",b="y"}` starting at text[pos] == '{'; returns (labels, next pos)."""
    labels = {}
    pos += 1
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == "}":
            return labels, pos + 1
        m = _LABEL_NAME_RE.match(text, pos)
        if not m:
            raise MetricsFormatError(f"{where}: expected a label name at column {pos + 1}")
        name = m.group(0)
        pos = m.end()
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if text[pos:pos + 2] != '="':
            raise MetricsFormatError(f"{where}: expected =\" after label {name}")
        pos += 2
        start = pos
        while pos < len(text) and text[pos] != '"':
            pos += 2 if text[pos] == "\\" else 1
        if pos >= len(text):
            raise MetricsFormatError(f"{where}: unterminated value of label {name}")
        if name in labels:
            raise MetricsFormatError(f"{where}: label {name} given twice")
        labels[name] = _unescape(text[start:pos], True, where)
        pos += 1
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        if pos < len(text) and text[pos] == "}":
            return labels, pos + 1
        raise MetricsFormatError(f"{where}: expected , or }} after label {name}")


def _family_of(sample_name, families):
    """The family a sample belongs to: its own name, or the name without a histogram or
    summary suffix when such a family was declared."""
    if sample_name in families and families[sample_name].type not in _TYPES_WITH_SUFFIXES:
        return sample_name
    for base_type, suffixes in _TYPES_WITH_SUFFIXES.items():
        for suffix in suffixes:
            if sample_name.endswith(suffix):
                base = sample_name[:-len(suffix)]
                if base in families and families[base].type == base_type:
                    return base
    return sample_name


class MetricsPage:
    """A parsed /metrics page: `families` by name, in page order."""

    def __init__(self, text, families):
        self.text = text
        self.families = families

    def names(self):
        return list(self.families)

    def series(self, name):
        """[(labels, value)] of every sample named exactly `name` (e.g. "x_bucket")."""
        family = self.families.get(_family_of(name, self.families))
        if family is None:
            return []
        return [(labels, value) for sample, labels, value in family.samples if sample == name]

    def value(self, name, **labels):
        """The value of the sample `name` with exactly these labels; None if absent."""
        for sample_labels, value in self.series(name):
            if sample_labels == labels:
                return value
        return None

    def labels_of(self, name, label):
        """The values of `label` over the samples named `name`, as a set."""
        return {labels[label] for labels, _ in self.series(name) if label in labels}

    def flat(self, **only):
        """{'name{label="value",...}': value} of every sample, its labels in page order and
        escaped as the page has them. With `only` (label=value, ...): the samples carrying
        those labels, which their keys leave out (flat(queue="q") gives "x_total" for
        x_total{queue="q"})."""
        out = {}
        for family in self.families.values():
            for sample, labels, value in family.samples:
                if any(labels.get(k) != v for k, v in only.items()):
                    continue
                rest = [(k, v) for k, v in labels.items() if k not in only]
                key = sample
                if rest:
                    key += "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in rest) + "}"
                out[key] = value
        return out

    def counters(self):
        """{(sample name, sorted label items): value} of every counter and histogram sample."""
        out = {}
        for family in self.families.values():
            if family.type in ("counter", "histogram"):
                for sample, labels, value in family.samples:
                    out[(sample, tuple(sorted(labels.items())))] = value
        return out


def parse_metrics(text):
    """Parses and checks a page in the Prometheus text format 0.0.4.

    Raises MetricsFormatError naming the line for: a malformed line, a HELP or TYPE given
    twice, a TYPE after the family's first sample, a family whose samples are not
    contiguous, a histogram sample without its suffix (or a _bucket without le), a
    duplicate series, a page not ending in a newline.
    """
    if text and not text.endswith("\n"):
        raise MetricsFormatError("the page does not end with a newline")
    families = {}
    order = []  # family names in the order their samples appear
    seen_series = set()
    for number, line in enumerate(text.split("\n")[:-1] if text else [], start=1):
        where = f"line {number} ({line[:120]!r})"
        if not line.strip():
            continue
        if line.startswith("#"):
            m = _HELP_RE.match(line)
            if m:
                family = families.setdefault(m.group(1), Family(m.group(1)))
                if family.help is not None:
                    raise MetricsFormatError(f"{where}: second HELP for {m.group(1)}")
                family.help = _unescape(m.group(2) or "", False, where)
                continue
            if line.startswith("# TYPE "):
                m = _TYPE_RE.match(line)
                if not m:
                    raise MetricsFormatError(f"{where}: malformed TYPE line")
                family = families.setdefault(m.group(1), Family(m.group(1)))
                if family.type is not None:
                    raise MetricsFormatError(f"{where}: second TYPE for {m.group(1)}")
                if family.samples:
                    raise MetricsFormatError(f"{where}: TYPE after samples of {m.group(1)}")
                family.type = m.group(2)
                continue
            if line.startswith("# HELP"):
                raise MetricsFormatError(f"{where}: malformed HELP line")
            continue  # a comment
        m = _NAME_RE.match(line)
        if not m:
            raise MetricsFormatError(f"{where}: expected a metric name")
        sample_name = m.group(0)
        pos = m.end()
        labels = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = _parse_labels(line, pos, where)
        rest = line[pos:]
        if not rest.startswith((" ", "\t")):
            raise MetricsFormatError(f"{where}: expected a space before the value")
        fields = rest.split()
        if len(fields) not in (1, 2):
            raise MetricsFormatError(f"{where}: expected a value and an optional timestamp")
        value = _parse_value(fields[0], where)
        if len(fields) == 2 and not re.fullmatch(r"-?[0-9]+", fields[1]):
            raise MetricsFormatError(f"{where}: bad timestamp {fields[1]!r}")
        base = _family_of(sample_name, families)
        family = families.setdefault(base, Family(base))
        if family.type in _TYPES_WITH_SUFFIXES:
            if sample_name == base:
                raise MetricsFormatError(f"{where}: {family.type} sample without a suffix")
            if sample_name.endswith("_bucket") and "le" not in labels:
                raise MetricsFormatError(f"{where}: _bucket sample without le")
        if order and order[-1] != base:
            if base in order:
                raise MetricsFormatError(f"{where}: samples of {base} are not contiguous")
        if not order or order[-1] != base:
            order.append(base)
        key = (sample_name, tuple(sorted(labels.items())))
        if key in seen_series:
            raise MetricsFormatError(f"{where}: duplicate series")
        seen_series.add(key)
        family.samples.append((sample_name, labels, value))
    return MetricsPage(text, families)


def check_histogram(page, name):
    """Checks the invariants of a histogram without labels beyond le: buckets cumulative and
    sorted, a +Inf bucket equal to _count. Returns {le: count}."""
    buckets = page.series(f"{name}_bucket")
    if not buckets:
        raise MetricsFormatError(f"{name}: no buckets")
    bounds = [(_parse_value(labels["le"], name), value) for labels, value in buckets]
    if [b for b, _ in bounds] != sorted(b for b, _ in bounds):
        raise MetricsFormatError(f"{name}: buckets not in increasing order of le")
    if not math.isinf(bounds[-1][0]):
        raise MetricsFormatError(f"{name}: no +Inf bucket")
    counts = [v for _, v in bounds]
    if counts != sorted(counts):
        raise MetricsFormatError(f"{name}: bucket counts not cumulative: {counts}")
    if page.value(f"{name}_count") != counts[-1]:
        raise MetricsFormatError(f"{name}: _count {page.value(f'{name}_count')} != +Inf bucket "
                                 f"{counts[-1]}")
    return {labels["le"]: value for labels, value in buckets}


# ---------------------------------------------------------------- HTTP

def http_get(port, path, timeout=5.0, host="127.0.0.1"):
    """GET http://host:port/path; returns (status, content type, body as text)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read().decode("utf-8", errors="replace")
        return response.status, response.getheader("Content-Type"), body
    finally:
        conn.close()


def raw_http(port, data, timeout=5.0, host="127.0.0.1"):
    """Sends `data` on a fresh connection and reads until the server closes (or `timeout`
    passes). Returns (status code or None, everything received)."""
    received = b""
    with socket.create_connection((host, port), timeout=timeout) as s:
        deadline = time.monotonic() + timeout
        try:
            s.sendall(data)
        except OSError:
            pass  # the server may answer and close before taking all of it
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                break
            if not chunk:
                break
            received += chunk
    m = re.match(rb"HTTP/1\.[01] ([0-9]{3}) ", received)
    return (int(m.group(1)) if m else None), received


# ---------------------------------------------------------------- the proxy
