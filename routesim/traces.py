"""Request traces: loaders, replay windows and empirical lengths (token-model.md §1.2, §1.3).

Three formats:

- ``azure``: the Azure LLM inference trace CSV, header ``TIMESTAMP,ContextTokens,
  GeneratedTokens``, absolute timestamps with 7 fractional digits. Times become ms
  relative to the first row: ``t_r = 1000·Δs_r + 1000·(f_r − f_0)``, evaluated in that
  order in float64, ``Δs_r`` the whole seconds between the rows' dates and times of day
  and ``f_r`` the fraction read as a decimal (every digit kept). No block ids.
- ``mooncake``: JSON lines ``{"timestamp": ms, "input_length", "output_length",
  "hash_ids": [...]}``; ``hash_ids`` name the prompt's blocks of ``H = 512`` tokens.
- ``csv``: a plain CSV with a header line ``arrival_ms,prompt_tokens,output_tokens``
  and an optional fourth column ``block_ids`` (KV block ids separated by spaces,
  so ``H`` = the block size).

:func:`load_trace` parses a file once per process (cached on the resolved path,
format, modification time and size) into a frozen :class:`Trace` of read-only numpy
arrays. :func:`replay` cuts a window and gives the requests of §1.2 (arrival times,
tokens, keys and KV block ids); :func:`lengths_table` gives every row's token counts
for §1.3; :func:`check_fits` refuses a request larger than the KV pool. Every problem
raises :class:`TraceError` (a ``ValueError``) with the file, the 1-based line number
when there is one, and a one-line message.
"""

import csv
import datetime
import functools
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMATS = ("azure", "mooncake", "csv")
MOONCAKE_HASH_BLOCK_TOKENS = 512
KEY_STEP = 0.6180339887498949          # h_r = frac(r · KEY_STEP)
UNIQUE_BASE = 1 << 40                  # unique id: 2^40 + r·2^16 + q
UNIQUE_REQUEST_STRIDE = 1 << 16
_INT_LIMIT = 1 << 48                   # token counts and ids: no int64 overflow downstream
NO_IDS = 1 << 50                       # block_tokens (and H) of a replay that needs no block ids

_AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_CSV_HEADER = ("arrival_ms", "prompt_tokens", "output_tokens", "block_ids")


class TraceError(ValueError):
    """A trace that cannot be used: ``path``, ``line`` (1-based, or None) and ``message``."""

    def __init__(self, path, line, message):
        self.path = None if path is None else str(path)
        self.line = line
        self.message = message
        where = self.path or "trace"
        if line is not None:
            where += f", line {line}"
        super().__init__(f"{where}: {message}")


def _readonly(a):
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class Trace:
    """A parsed trace file: one entry per request row, in file order.

    ``t_ms`` (float64) are the rows' times in ms (§1.2), ``prompt`` and ``output``
    (int64) their token counts, ``line`` (int64) each row's 1-based line number in the
    file. Row ``j``'s hash ids are ``hash_ids[hash_offsets[j]:hash_offsets[j+1]]``
    (int64; ``hash_offsets`` has ``len + 1`` entries; empty for azure).
    ``hash_block_tokens`` is H: 512 for mooncake, None for csv (its ids are KV block
    ids, H = the block size) and for azure (no ids).
    """

    path: str
    format: str
    t_ms: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    hash_ids: np.ndarray
    hash_offsets: np.ndarray
    hash_block_tokens: int | None
    line: np.ndarray
    replays: dict = field(default_factory=dict, repr=False)
    """The windows :func:`replay` has cut from this trace, by their arguments (a grid's
    checks, memory estimate and build each ask for every window: cut once)."""

    def __len__(self):
        return len(self.t_ms)


@dataclass(frozen=True, eq=False)
class Replay:
    """The requests a replay window keeps (§1.2), request ``r`` 0-based among them.

    ``a_ms`` arrival times (float64, ms from the window's start, divided by the time
    scale), ``prompt``/``output`` tokens (int64), ``key`` h_r = frac(r·0.618…)
    (float64), request ``r``'s KV block ids ``block_ids[block_offsets[r]:
    block_offsets[r+1]]`` (int64, ``floor(P_r/b)`` of them), ``row`` its 0-based row in
    the trace and ``line`` its 1-based line in the file.
    """

    path: str
    a_ms: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    key: np.ndarray
    block_ids: np.ndarray
    block_offsets: np.ndarray
    row: np.ndarray
    line: np.ndarray

    def __len__(self):
        return len(self.a_ms)


# ----------------------------------------------------------------------------- loading

def load_trace(path, format):
    """Parse ``path`` as ``format`` ("azure" | "mooncake" | "csv"), cached per process.

    The cache key is the resolved path, the format and the file's modification time and
    size, so an edited file is read again. Raises :class:`TraceError`.
    """
    if format not in FORMATS:
        raise TraceError(path, None, f"unknown trace format {format!r} "
                                     f"(expected one of {', '.join(map(repr, FORMATS))})")
    p = Path(path)
    try:
        resolved = p.resolve(strict=True)
        st = resolved.stat()
    except OSError as e:
        raise TraceError(path, None, f"cannot read trace file: {e.strerror or e}") from None
    if not resolved.is_file():
        raise TraceError(path, None, "cannot read trace file: not a regular file")
    return _load_cached(str(resolved), format, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=None)
def _load_cached(path, format, mtime_ns, size):
    """The parsed trace; every file a process reads stays cached (a stage's files are read
    by its checks, its memory estimate and its build, in three passes over all of them:
    a bounded cache smaller than a grid's files would miss every time)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            if format == "azure":
                cols = _parse_azure(f, path)
            elif format == "mooncake":
                cols = _parse_mooncake(f, path)
            else:
                cols = _parse_csv(f, path)
    except UnicodeDecodeError as e:
        raise TraceError(path, None, f"not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise TraceError(path, None, f"cannot read trace file: {e.strerror or e}") from None
    t_ms, prompt, output, ids, counts, lines, hbt = cols
    if len(prompt) == 0:
        raise TraceError(path, None, "the trace has no request rows")
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=offsets[1:])
    return Trace(
        path=path, format=format,
        t_ms=_readonly(np.asarray(t_ms, dtype=np.float64)),
        prompt=_readonly(np.asarray(prompt, dtype=np.int64)),
        output=_readonly(np.asarray(output, dtype=np.int64)),
        hash_ids=_readonly(np.asarray(ids, dtype=np.int64)),
        hash_offsets=_readonly(offsets),
        hash_block_tokens=hbt,
        line=_readonly(np.asarray(lines, dtype=np.int64)),
    )


def _int_field(value, path, line, name):
    """A whole number written in decimal digits (an optional sign), else a TraceError."""
    s = value.strip()
    digits = s[1:] if s[:1] in "+-" else s
    if not (digits.isascii() and digits.isdecimal()):
        raise TraceError(path, line, f"{name} is not a whole number: {value!r}")
    v = int(s)
    if abs(v) >= _INT_LIMIT:
        raise TraceError(path, line, f"{name} is too large: {value!r}")
    return v


def _count(value, path, line, name):
    """:func:`_int_field`'s value, read at once when ``value`` is plain ASCII digits short
    enough to be below its limit (14 digits: < 10^14 < 2^48), as trace rows write them."""
    if len(value) < 15 and value.isascii() and value.isdecimal():
        return int(value)
    return _int_field(value, path, line, name)


def _tokens(p, o, path, line, names):
    for v, name in ((p, names[0]), (o, names[1])):
        if v < 0:
            raise TraceError(path, line, f"negative token count: {name} = {v}")
        if v == 0:
            raise TraceError(path, line, f"{name} = 0 (a request has at least one token)")


def _check_order(t, t_prev, path, line, name):
    if t_prev is not None and t < t_prev:
        raise TraceError(path, line, f"times go backwards: {name} = {t!r} after {t_prev!r}")


def _header(reader, path, expected, optional=0):
    """Read and check the header line; returns its fields."""
    for fields in reader:
        if not fields:
            continue
        got = tuple(s.strip() for s in fields)
        n = len(expected)
        if got not in {expected[:n - k] for k in range(optional + 1)}:
            want = ",".join(expected[:n - optional])
            if optional:
                want += "[," + ",".join(expected[n - optional:]) + "]"
            raise TraceError(path, reader.line_num,
                             f"expected the header line {want}, found {','.join(fields)!r}")
        return got
    raise TraceError(path, None, "the file is empty (no header line)")


_PADDED = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", re.ASCII)
"""An Azure TIMESTAMP's whole seconds as the traces write them (zero-padded)."""


def _azure_time(whole):
    """The datetime of an Azure TIMESTAMP's whole seconds, ``YYYY-MM-DD HH:MM:SS``, or None.
    A zero-padded stamp is read by ``datetime.fromisoformat`` (the same datetime as
    ``strptime``'s, 20 times faster); anything else by ``strptime``, which also takes
    unpadded fields."""
    try:
        if _PADDED.fullmatch(whole):
            return datetime.datetime.fromisoformat(whole)
        return datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None


_AZURE_ROWS = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(\d+))?,(\d{1,14}),(\d{1,14})\r?$",
                         re.ASCII | re.MULTILINE)
"""An Azure row as the traces write it, one per line: a zero-padded TIMESTAMP, two plain
token counts (14 digits at most, as :func:`_count` reads at once), no spaces, no quotes."""


def _parse_azure(f, path):
    """An Azure file's columns: read at once by :func:`_azure_at_once` when every row is
    written as the traces write them, else row by row with every check
    (:func:`_parse_azure_checked`, which names the first bad line)."""
    text = f.read()
    cols = _azure_at_once(text)
    return cols if cols is not None else _parse_azure_checked(io.StringIO(text, newline=""), path)


def _azure_at_once(text):
    """:func:`_parse_azure_checked`'s columns of ``text`` computed over whole columns, or
    None unless that reading would accept the file and give the same values: line 1 is
    the header, every other line is empty or an :data:`_AZURE_ROWS` row, every stamp a
    real time, counts above 0, times in order."""
    head, _, body = text.partition("\n")
    if head.rstrip("\r") != ",".join(_AZURE_HEADER):
        return None
    rows = _AZURE_ROWS.findall(body)
    lines = [k + 2 for k, line in enumerate(body.split("\n")) if line not in ("", "\r")]
    if not rows or len(rows) != len(lines):        # a line that is not a row: the checked reading
        return None
    stamp, frac, p, o = zip(*rows)
    ds = _azure_seconds(stamp)
    if ds is None:
        return None
    fr = np.array([float("0." + f) if f else 0.0 for f in frac])
    prompt, output = list(map(int, p)), list(map(int, o))
    step = np.diff(ds)
    if min(prompt) == 0 or min(output) == 0 or (step < 0).any() or ((step == 0) & (np.diff(fr) < 0)).any():
        return None
    t_ms = (1000 * ds).astype(np.float64) + 1000.0 * (fr - fr[0])
    return t_ms, prompt, output, [], [0] * len(prompt), lines, None


def _azure_seconds(stamps):
    """Whole seconds (int64, shape (n,)) of each ``YYYY-MM-DD HH:MM:SS`` in ``stamps``
    after the first, as ``datetime`` subtracts them, or None if one is not a real time
    (``datetime.fromisoformat`` would refuse it)."""
    d = np.frombuffer("".join(stamps).encode("ascii"), np.uint8).reshape(-1, 19).astype(np.int64) - 48

    def number(a, b):
        return d[:, a:b] @ 10 ** np.arange(b - a - 1, -1, -1)
    hour, minute, second = number(11, 13), number(14, 16), number(17, 19)
    if (hour > 23).any() or (minute > 59).any() or (second > 59).any():
        return None
    dates, which = np.unique(number(0, 4) * 10_000 + number(5, 7) * 100 + number(8, 10), return_inverse=True)
    try:
        day = np.array([datetime.date(int(x) // 10_000, int(x) // 100 % 100, int(x) % 100).toordinal() for x in dates])
    except ValueError:                              # year 0, month 13, 30 February, ...
        return None
    s = day[which] * 86_400 + hour * 3600 + minute * 60 + second
    return s - s[0]


def _parse_azure_checked(f, path):
    reader = csv.reader(f)
    _header(reader, path, _AZURE_HEADER)
    seconds, fracs, prompt, output, lines = [], [], [], [], []
    t0 = None
    prev = None
    for fields in reader:
        line = reader.line_num
        if not fields:
            continue
        if len(fields) != 3:
            raise TraceError(path, line, f"expected 3 fields, found {len(fields)}")
        stamp = fields[0].strip()
        whole, dot, frac = stamp.partition(".")
        when = _azure_time(whole)
        if when is None or (dot and not (frac.isascii() and frac.isdecimal())):
            raise TraceError(path, line, f"bad TIMESTAMP {fields[0]!r} "
                                         "(expected YYYY-MM-DD HH:MM:SS.fffffff)")
        p = _count(fields[1], path, line, "ContextTokens")
        o = _count(fields[2], path, line, "GeneratedTokens")
        if p <= 0 or o <= 0:
            _tokens(p, o, path, line, ("ContextTokens", "GeneratedTokens"))
        if t0 is None:
            t0 = when
        delta = when - t0
        ds = delta.days * 86400 + delta.seconds     # whole seconds (no microseconds here)
        fr = float("0." + frac) if frac else 0.0    # the decimal fraction, correctly rounded
        key = (ds, fr)
        if prev is not None and key < prev:
            raise TraceError(path, line, f"times go backwards: TIMESTAMP {stamp!r} "
                                         "is before the previous row's")
        prev = key
        seconds.append(ds)
        fracs.append(fr)
        prompt.append(p)
        output.append(o)
        lines.append(line)
    if not seconds:
        return [], [], [], [], [], [], None
    ds = np.asarray(seconds, dtype=np.int64)
    fr = np.asarray(fracs, dtype=np.float64)
    t_ms = (1000 * ds).astype(np.float64) + 1000.0 * (fr - fr[0])
    return t_ms, prompt, output, [], [0] * len(prompt), lines, None


def _json_int(obj, key, path, line, required=True):
    if key not in obj:
        if required:
            raise TraceError(path, line, f"missing field {key!r}")
        return None
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise TraceError(path, line, f"{key} is not a whole number: {v!r}")
    if abs(v) >= _INT_LIMIT:
        raise TraceError(path, line, f"{key} is too large: {v!r}")
    return v


def _parse_mooncake(f, path):
    t_ms, prompt, output, ids, counts, lines = [], [], [], [], [], []
    prev = None
    for line, text in enumerate(f, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(path, line, f"not valid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(path, line, "expected a JSON object")
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            if "timestamp" not in obj:
                raise TraceError(path, line, "missing field 'timestamp'")
            raise TraceError(path, line, f"timestamp is not a finite number: {ts!r}")
        p = _json_int(obj, "input_length", path, line)
        o = _json_int(obj, "output_length", path, line)
        _tokens(p, o, path, line, ("input_length", "output_length"))
        h = obj.get("hash_ids", [])
        if not isinstance(h, list) or any(
                isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < _INT_LIMIT for x in h):
            raise TraceError(path, line, "hash_ids is not a list of non-negative whole numbers")
        ts = float(ts)
        _check_order(ts, prev, path, line, "timestamp")
        prev = ts
        t_ms.append(ts)
        prompt.append(p)
        output.append(o)
        ids.extend(h)
        counts.append(len(h))
        lines.append(line)
    return t_ms, prompt, output, ids, counts, lines, MOONCAKE_HASH_BLOCK_TOKENS


def _parse_csv(f, path):
    reader = csv.reader(f)
    header = _header(reader, path, _CSV_HEADER, optional=1)
    nf = len(header)
    t_ms, prompt, output, ids, counts, lines = [], [], [], [], [], []
    prev = None
    for fields in reader:
        line = reader.line_num
        if not fields:
            continue
        if len(fields) != nf:
            raise TraceError(path, line, f"expected {nf} fields, found {len(fields)}")
        try:
            t = float(fields[0])
        except ValueError:
            t = math.nan
        if not math.isfinite(t):
            raise TraceError(path, line, f"arrival_ms is not a finite number: {fields[0]!r}")
        p = _int_field(fields[1], path, line, "prompt_tokens")
        o = _int_field(fields[2], path, line, "output_tokens")
        _tokens(p, o, path, line, ("prompt_tokens", "output_tokens"))
        _check_order(t, prev, path, line, "arrival_ms")
        prev = t
        row_ids = []
        if nf == 4:
            for s in fields[3].split():
                v = _int_field(s, path, line, "a block id")
                if v < 0:
                    raise TraceError(path, line, f"negative block id {v}")
                row_ids.append(v)
        t_ms.append(t)
        prompt.append(p)
        output.append(o)
        ids.extend(row_ids)
        counts.append(len(row_ids))
        lines.append(line)
    return t_ms, prompt, output, ids, counts, lines, None


# ----------------------------------------------------------------------------- replay

def replay(trace, *, block_tokens, start_s=0.0, duration_s=math.inf, time_scale=1.0,
           horizon_ms=math.inf, hash_block_tokens=None):
    """The requests of ``trace`` that §1.2 keeps, as a :class:`Replay`.

    Rows with ``1000·start_s ≤ t_r < 1000·(start_s + duration_s)`` are kept in file
    order; request ``r`` (0-based among them) arrives at
    ``a_r = (t_r − 1000·start_s) / time_scale``; arrivals at or after ``horizon_ms``
    are dropped. Its key is ``frac(r · 0.6180339887498949)`` and its prompt block
    ``q < floor(P_r / b)`` gets the id ``hash_ids[floor(q·b/H)]·(H/b) + (q mod H/b)``,
    or ``2^40 + r·2^16 + q`` without ids or past the row's last id.
    ``hash_block_tokens`` overrides the trace's H (None: the trace's own, and for a
    trace without one, H = b). Raises :class:`TraceError` if H is not a multiple of
    ``block_tokens`` or no request is left. The same arguments give the same Replay, its
    arrays read-only: it is cut once per trace and kept with it.
    """
    b = int(block_tokens)
    if b < 1:
        raise TraceError(trace.path, None, f"block_tokens must be >= 1, got {block_tokens!r}")
    H = hash_block_tokens if hash_block_tokens is not None else trace.hash_block_tokens
    H = b if H is None else int(H)
    if H < 1 or H % b:
        raise TraceError(trace.path, None, f"hash_block_tokens = {H} is not a multiple of "
                                           f"the block size block_tokens = {b}")
    if not time_scale > 0 or not math.isfinite(time_scale):
        raise TraceError(trace.path, None, f"time_scale must be a finite number > 0, "
                                           f"got {time_scale!r}")
    if not duration_s > 0:
        raise TraceError(trace.path, None, f"duration_s must be > 0, got {duration_s!r}")
    if not math.isfinite(start_s):
        raise TraceError(trace.path, None, f"start_s must be finite, got {start_s!r}")
    args = (b, H, float(start_s), float(duration_s), float(time_scale), float(horizon_ms))
    if args not in trace.replays:
        trace.replays[args] = _cut(trace, *args)
    return trace.replays[args]


def _cut(trace, b, H, start_s, duration_s, time_scale, horizon_ms):
    """:func:`replay`'s window of ``trace``, its arguments checked; its arrays read-only
    (the window is shared by every caller that asks for it)."""
    lo = 1000.0 * start_s
    hi = 1000.0 * (start_s + duration_s)
    t = trace.t_ms
    keep = (lo <= t) & (t < hi)
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise TraceError(trace.path, None,
                         f"empty window: no request has a time in [{lo!r}, {hi!r}) ms "
                         f"(start_s = {start_s}, duration_s = {duration_s}; the trace's "
                         f"times run from {t[0]!r} to {t[-1]!r} ms)")
    a = (t[rows] - lo) / time_scale
    before = a < horizon_ms
    rows = rows[before]
    a = a[before]
    if len(rows) == 0:
        raise TraceError(trace.path, None,
                         f"empty window: no request arrives before the horizon "
                         f"({horizon_ms!r} ms)")
    n = len(rows)
    prompt = trace.prompt[rows].copy()
    output = trace.output[rows].copy()
    key = np.arange(n, dtype=np.float64) * KEY_STEP
    key -= np.floor(key)

    nb = prompt // b
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nb, out=offsets[1:])
    total = int(offsets[-1])
    r = np.repeat(np.arange(n, dtype=np.int64), nb)
    q = np.arange(total, dtype=np.int64) - offsets[:-1][r]
    per = H // b
    k = q // per                                   # = floor(q·b / H)
    h_start = trace.hash_offsets[rows]
    h_count = trace.hash_offsets[rows + 1] - h_start
    has = k < h_count[r]
    ids = UNIQUE_BASE + r * UNIQUE_REQUEST_STRIDE + q
    if trace.hash_ids.size:
        src = (h_start[r] + k)[has]
        ids[has] = trace.hash_ids[src] * per + q[has] % per
    return Replay(path=trace.path, a_ms=_readonly(a), prompt=_readonly(prompt), output=_readonly(output),
                  key=_readonly(key), block_ids=_readonly(ids), block_offsets=_readonly(offsets),
                  row=_readonly(rows.astype(np.int64)), line=_readonly(trace.line[rows].copy()))


def lengths_table(trace):
    """(P, O): every row's prompt and output tokens in file order (§1.3), int64 copies."""
    return trace.prompt.copy(), trace.output.copy()


def check_fits(P, O, kv_tokens, *, lines=None, path=None):
    """Refuse the first request with ``P + O > kv_tokens`` (``kv_blocks · b``).

    ``lines`` (e.g. ``Replay.line`` or ``Trace.line``) maps each entry to its line in
    the file, which the error names; without it the 1-based entry number is named.
    """
    P = np.asarray(P, dtype=np.int64)
    O = np.asarray(O, dtype=np.int64)
    bad = np.flatnonzero(P + O > kv_tokens)
    if len(bad):
        i = int(bad[0])
        msg = (f"request too large for the KV pool: {int(P[i])} prompt + {int(O[i])} "
               f"output tokens > {int(kv_tokens)} (kv_blocks × block_tokens)")
        if lines is not None:
            raise TraceError(path, int(lines[i]), msg)
        raise TraceError(path, None, f"row {i + 1}: {msg}")
