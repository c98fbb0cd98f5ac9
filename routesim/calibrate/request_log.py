"""Per-request logs (issue 41, items 5 and 6): what most benchmark clients record.

A per-request CSV has a header, then one row a request with the columns
``request_id, send_ms, prompt_tokens, output_tokens, ttft_ms, e2e_ms``: the send time
(ms, any clock shared by the rows), the token counts, and the time to the first and
to the last output token, both from the send (ms). Any of calibrate's per-token logs
(calibrate.logs: ``.csv`` with ``token_ms``, ``.jsonl``, vLLM's benchmark ``.json``)
is read too, and reduced to the same figures (first and last token less the send).

:func:`read` gives a :class:`simfit.Log`; a problem is a :class:`logs.LogError`
naming the file and the row or key.
"""

import csv
from pathlib import Path

import numpy as np

from . import logs
from .simfit import Log

COLUMNS = ("request_id", "send_ms", "prompt_tokens", "output_tokens", "ttft_ms", "e2e_ms")


def _number(path, where, value, whole=False, low=None):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise logs.LogError(path, where, f"expected a number, got {value!r}") from None
    if not np.isfinite(v) or (whole and v != int(v)) or (low is not None and v < low):
        rule = "a whole number" if whole else "a finite number"
        raise logs.LogError(path, where, f"expected {rule}" + (f" >= {low:g}" if low is not None else "")
                            + f", got {value!r}")
    return v


def _per_request(path, text) -> dict:
    rows = list(csv.DictReader(text.splitlines()))
    cols = {c: [] for c in COLUMNS}
    seen = set()
    for i, r in enumerate(rows, 2):
        where = f"row {i}"
        missing = [c for c in COLUMNS if r.get(c) in (None, "")]
        if missing:
            raise logs.LogError(path, where, f"missing {', '.join(missing)}")
        if r["request_id"] in seen:
            raise logs.LogError(path, f"{where}: request_id", f"{r['request_id']} appears twice")
        seen.add(r["request_id"])
        cols["request_id"].append(r["request_id"])
        cols["send_ms"].append(_number(path, f"{where}: send_ms", r["send_ms"]))
        cols["prompt_tokens"].append(_number(path, f"{where}: prompt_tokens", r["prompt_tokens"], True, 1))
        cols["output_tokens"].append(_number(path, f"{where}: output_tokens", r["output_tokens"], True, 1))
        t = _number(path, f"{where}: ttft_ms", r["ttft_ms"], low=0)
        e = _number(path, f"{where}: e2e_ms", r["e2e_ms"], low=0)
        if e < t:
            raise logs.LogError(path, f"{where}: e2e_ms", f"{e:g} is below ttft_ms {t:g}")
        cols["ttft_ms"].append(t)
        cols["e2e_ms"].append(e)
    return cols


def _per_token(path) -> dict:
    recs = logs.read(path)
    return {"request_id": [r.request_id for r in recs], "send_ms": [r.send_ms for r in recs],
            "prompt_tokens": [r.prompt_tokens for r in recs], "output_tokens": [r.output_tokens for r in recs],
            "ttft_ms": [r.token_ms[0] - r.send_ms for r in recs], "e2e_ms": [r.token_ms[-1] - r.send_ms for r in recs]}


def read(path, name=None, max_in_flight=0, cohort_from_s=0.0, cohort_to_s=float("inf")) -> Log:
    """The :class:`Log` of a per-request or per-token log, its requests in send order."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise logs.LogError(path, "file", f"cannot read ({exc.__class__.__name__}: {exc})") from None
    header = text.splitlines()[0].split(",") if text.strip() else []
    if path.suffix.lower() == ".csv" and "ttft_ms" in header:
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise logs.LogError(path, "header", f"missing column(s) {', '.join(missing)}")
        cols = _per_request(path, text)
    else:
        cols = _per_token(path)
    if not cols["send_ms"]:
        raise logs.LogError(path, "file", "no requests")
    order = np.argsort(np.asarray(cols["send_ms"]), kind="stable")
    a = {k: np.asarray(v)[order] for k, v in cols.items()}
    return Log(name or path.stem, a["send_ms"].astype(float), a["prompt_tokens"].astype(np.int64),
               a["output_tokens"].astype(np.int64), a["ttft_ms"].astype(float), a["e2e_ms"].astype(float),
               int(max_in_flight), float(cohort_from_s), float(cohort_to_s))


def write(log: Log, path, ids=None) -> None:
    """``log`` as a per-request CSV (:data:`COLUMNS`), written whole (files.write_text)."""
    from ..files import write_text
    ids = range(len(log.send_ms)) if ids is None else ids
    lines = [",".join(COLUMNS)]
    for i, s, p, o, t, e in zip(ids, log.send_ms, log.prompt, log.output, log.ttft_ms, log.e2e_ms):
        lines.append(f"{i},{s:.3f},{int(p)},{int(o)},{t:.3f},{e:.3f}")
    write_text(path, "\n".join(lines) + "\n")
