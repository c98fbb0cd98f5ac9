"""Serving logs: per-request records with per-token (or per-stream-chunk) timestamps.

Three formats (docs/calibration.md §1), chosen by the file's suffix:

- ``.csv``: a header, then one row a request with the columns ``request_id, send_ms,
  prompt_tokens, output_tokens, token_ms`` and optionally ``chunk_tokens`` and
  ``cached_tokens``. ``token_ms`` is a space-separated list of absolute timestamps (ms,
  the clock of ``send_ms``), one per token, or one per stream chunk with
  ``chunk_tokens`` (space-separated counts adding up to ``output_tokens``);
  ``cached_tokens`` is the prompt's prefix-cache hit (default 0); ``run`` names the run
  a request belongs to (default: the file is one run). Each run is one server's clock:
  calibrate reconstructs its steps on their own (calibrate.steps) and never merges two.
- ``.jsonl``: one JSON object a line with the same keys (lists as JSON lists).
- ``.json``: vLLM's benchmark result (``vllm bench serve --save-result
  --save-detailed``): ``start_times`` (s, perf_counter), ``ttfts`` (s), ``itls`` (s,
  gaps between stream chunks), ``input_lens``, ``output_lens``, ``errors``. A request
  whose ``len(itls) + 1`` differs from its output length streamed chunks of several
  tokens: its chunk sizes are unknown (``chunk_tokens = None``).

Any problem is a :class:`LogError` naming the file and the row or key.
"""

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

REQUIRED = ("request_id", "send_ms", "prompt_tokens", "output_tokens", "token_ms")
OPTIONAL = ("chunk_tokens", "cached_tokens", "run")
VLLM_KEYS = ("start_times", "ttfts", "itls", "input_lens", "output_lens")


class LogError(ValueError):
    """A serving log that cannot be read: ``file: where: what``."""

    def __init__(self, path, where, what):
        super().__init__(f"{path}: {where}: {what}")


@dataclass(frozen=True)
class Record:
    """One request: ``token_ms`` (C,) absolute emission times, ms, non-decreasing;
    ``chunk_tokens`` (C,) tokens per timestamp, or None when unknown; ``run`` the
    log's name of the run it belongs to ("" when the file is one run)."""
    request_id: str
    send_ms: float
    prompt_tokens: int
    output_tokens: int
    token_ms: np.ndarray
    chunk_tokens: np.ndarray | None
    cached_tokens: int = 0
    run: str = ""

    @property
    def per_token(self) -> bool:
        return self.chunk_tokens is not None and bool(np.all(self.chunk_tokens == 1))


def _int(path, where, value, low=0):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise LogError(path, where, f"expected a whole number, got {value!r}") from None
    if not np.isfinite(v) or v != int(v) or v < low:
        raise LogError(path, where, f"expected a whole number >= {low}, got {value!r}")
    return int(v)


def _float(path, where, value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise LogError(path, where, f"expected a number, got {value!r}") from None
    if not np.isfinite(v):
        raise LogError(path, where, f"expected a finite number, got {value!r}")
    return v


def _list(value):
    if isinstance(value, str):
        return value.split()
    return list(value) if isinstance(value, (list, tuple)) else None


def make_record(path, where, raw):
    """A checked :class:`Record` from a mapping of the CSV/JSONL keys."""
    missing = [k for k in REQUIRED if k not in raw or raw[k] in (None, "")]
    if missing:
        raise LogError(path, where, f"missing {', '.join(missing)}")
    P = _int(path, f"{where}: prompt_tokens", raw["prompt_tokens"], low=1)
    O = _int(path, f"{where}: output_tokens", raw["output_tokens"], low=1)
    send = _float(path, f"{where}: send_ms", raw["send_ms"])
    items = _list(raw["token_ms"])
    if items is None:
        raise LogError(path, f"{where}: token_ms", "expected a list of timestamps")
    toks = np.array([_float(path, f"{where}: token_ms", t) for t in items], dtype=float)
    if toks.size == 0:
        raise LogError(path, f"{where}: token_ms", "no timestamps")
    if np.any(np.diff(toks) < 0):
        raise LogError(path, f"{where}: token_ms", "timestamps decrease")
    if toks[0] < send:
        raise LogError(path, f"{where}: token_ms", f"first token at {toks[0]:g} ms, before send_ms {send:g}")
    chunks = raw.get("chunk_tokens")
    if chunks in (None, ""):
        if toks.size != O:
            raise LogError(path, f"{where}: token_ms", f"{toks.size} timestamps for {O} output tokens "
                           "(give chunk_tokens for per-chunk timestamps)")
        chunks = np.ones(O, dtype=np.int64)
    else:
        items = _list(chunks)
        if items is None:
            raise LogError(path, f"{where}: chunk_tokens", "expected a list of counts")
        chunks = np.array([_int(path, f"{where}: chunk_tokens", c, low=1) for c in items], dtype=np.int64)
        if chunks.size != toks.size or int(chunks.sum()) != O:
            raise LogError(path, f"{where}: chunk_tokens", f"{chunks.size} counts adding up to "
                           f"{int(chunks.sum())} for {toks.size} timestamps and {O} output tokens")
    cached = raw.get("cached_tokens")
    cached = 0 if cached in (None, "") else _int(path, f"{where}: cached_tokens", cached)
    if cached >= P:
        raise LogError(path, f"{where}: cached_tokens", f"{cached} >= prompt_tokens {P}")
    run = raw.get("run")
    return Record(str(raw["request_id"]), send, P, O, toks, chunks, cached, "" if run is None else str(run))


def _read_csv(path, text):
    rows = list(csv.DictReader(text.splitlines()))
    header = text.splitlines()[0].split(",") if text.strip() else []
    missing = [k for k in REQUIRED if k not in header]
    if missing:
        raise LogError(path, "header", f"missing column(s) {', '.join(missing)}")
    return [make_record(path, f"row {i}", r) for i, r in enumerate(rows, 2)]


def _read_jsonl(path, text):
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LogError(path, f"line {i}", f"not JSON ({exc.msg})") from None
        if not isinstance(raw, dict):
            raise LogError(path, f"line {i}", "expected a JSON object")
        out.append(make_record(path, f"line {i}", raw))
    return out


def _read_vllm(path, text):
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LogError(path, "file", f"not JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise LogError(path, "file", "expected vLLM's benchmark result object")
    missing = [k for k in VLLM_KEYS if k not in doc]
    if missing:
        raise LogError(path, "keys", f"missing {', '.join(missing)} (run vllm bench serve with "
                       "--save-result --save-detailed)")
    n = len(doc["start_times"])
    for k in VLLM_KEYS:
        if not isinstance(doc[k], list) or len(doc[k]) != n:
            raise LogError(path, k, f"expected a list of {n} entries (one per request)")
    errors = doc.get("errors") or [""] * n
    out = []
    for i in range(n):
        if errors[i]:
            continue                              # a failed request has no tokens
        where = f"request {i}"
        start = 1000.0 * _float(path, f"{where}: start_times", doc["start_times"][i])
        first = start + 1000.0 * _float(path, f"{where}: ttfts", doc["ttfts"][i])
        gaps = [1000.0 * _float(path, f"{where}: itls", g) for g in _list(doc["itls"][i]) or []]
        toks = first + np.concatenate([[0.0], np.cumsum(gaps)])
        O = _int(path, f"{where}: output_lens", doc["output_lens"][i], low=1)
        raw = {"request_id": i, "send_ms": start, "prompt_tokens": doc["input_lens"][i],
               "output_tokens": O, "token_ms": list(toks)}
        if toks.size != O:
            rec = make_record(path, where, {**raw, "chunk_tokens": [1] * (toks.size - 1) + [O - toks.size + 1]})
            rec = replace(rec, chunk_tokens=None)
        else:
            rec = make_record(path, where, raw)
        out.append(rec)
    return out


def read(path) -> list:
    """The :class:`Record` list of a serving log, in file order."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(path, "file", f"cannot read ({exc.__class__.__name__}: {exc})") from None
    suffix = path.suffix.lower()
    if suffix == ".csv":
        recs = _read_csv(path, text)
    elif suffix == ".jsonl":
        recs = _read_jsonl(path, text)
    elif suffix == ".json":
        recs = _read_vllm(path, text)
    else:
        raise LogError(path, "file", f"unknown format {suffix or '(no suffix)'!r}: .csv, .jsonl or "
                       "vLLM's benchmark .json")
    if not recs:
        raise LogError(path, "file", "no requests")
    seen = set()
    for r in recs:
        if (r.run, r.request_id) in seen:
            raise LogError(path, f"request_id {r.request_id}", "appears twice" + (f" in run {r.run}" if r.run else ""))
        seen.add((r.run, r.request_id))
    return recs


def runs(path, recs) -> list:
    """The runs of one file's records, in order of first appearance: [(label, records)],
    ``label`` the file, or ``file run NAME`` when the log has a ``run`` column (what
    a message about one run names)."""
    groups = {}
    for r in recs:
        groups.setdefault(r.run, []).append(r)
    return [(f"{path} run {name}" if name else str(path), rs) for name, rs in groups.items()]


def latencies(recs) -> dict:
    """Client-side latencies (ms): ``ttft`` (R,), ``e2e`` (R,) from each send, and
    ``itl_mean``, the mean gap between consecutive tokens over all requests."""
    ttft = np.array([r.token_ms[0] - r.send_ms for r in recs])
    e2e = np.array([r.token_ms[-1] - r.send_ms for r in recs])
    span = sum(r.token_ms[-1] - r.token_ms[0] for r in recs)
    gaps = sum(r.output_tokens - 1 for r in recs)
    return {"ttft": ttft, "e2e": e2e, "itl_mean": span / gaps if gaps else float("nan")}


def summary(recs) -> dict:
    """TTFT p50/p99, E2E p50 and mean inter-token time (ms), nearest-rank percentiles."""
    lat = latencies(recs)
    q = lambda a, p: float(np.percentile(a, p, method="inverted_cdf"))  # noqa: E731
    return {"ttft_p50": q(lat["ttft"], 50), "ttft_p99": q(lat["ttft"], 99),
            "e2e_p50": q(lat["e2e"], 50), "itl_mean": float(lat["itl_mean"])}
