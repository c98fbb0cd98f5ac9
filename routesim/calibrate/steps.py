"""Engine steps reconstructed from the token bursts of a serving log.

Each engine step emits one token for every running sequence that is decoding or
finishes its prefill in it, so the tokens of one step reach the client together, up
to jitter. The reconstruction (docs/calibration.md §2), for a low-load log:

0. **One clock.** A log is one server's run (a ``run`` column or one file per run
   separates several). Two requests in flight together on one server emit their tokens
   in the same steps; two whose tokens keep a fraction of a step apart come from two
   servers whose step clocks interleave: refused (``check_clock``).
1. **Bursts.** Every timestamp of every request, sorted; a gap above the threshold
   ``jitter_ms`` starts a new burst. A burst is a step's end; ``end_ms`` is its mean.
   Two tokens of one request in one burst are an error (threshold too large, or the
   log's timestamps are not per step); so is a request that skips a burst it decodes
   through (threshold too small: the client's jitter split a step's burst into
   pseudo-steps, which would be fitted as steps of a few ms). The threshold is
   estimated from the log (``estimate_jitter``): the smallest at which no request skips
   a burst, if no request then has two tokens in one; ``--jitter-ms`` overrides it.
2. **Decoders.** Request ``r`` with its first token in burst ``f`` and its last in
   ``l`` decodes in every step ``f < k <= l`` (no preemption at low load); there it has
   generated ``k - f`` tokens, so its KV is ``P + k - f`` tokens (VLLM-SCHEDULER.md §4:
   ``K = Σ (c + 1)``). ``n_k``, ``K_k`` follow.
3. **Prefill chunks.** Requests in order of first token (FCFS); request ``r`` computes
   ``u = P - cached`` tokens (no prefix hits unless the log gives ``cached_tokens``)
   in chunks under the budget ``max_batched_tokens``: each step offers ``budget - n_k``
   minus what earlier prefills took, every chunk but the last is a whole offer, and
   the last ends in burst ``f``. The admission step is the one consistent with these
   offers among the steps that began after the send (``place``); when several are (the
   log has the send time, not the engine's arrival) or the prefill may have begun in
   a step no token shows, every step it may have touched is marked unusable; so are a
   later prefill's when those steps are among its candidates (their offers are then
   unknown too). ``U_k = Σ x``,
   ``Q_k = Σ x (m + c + x/2)`` (token-model.md §2.3), ``R_k = Σ (m + c + x)``.
4. **Durations.** A step with a decoder started when the previous burst ended (the
   decoder emitted there, and a busy engine starts its next step at once): ``d_k =
   end_k - end_{k-1}``, *chained*. A step without decoders began at an arrival the log
   does not show (the engine was idle, or only prefill chunks ran): not chained, no
   duration; such a step's request measures the front-end overhead instead.
"""

from dataclasses import dataclass, fields, replace

import numpy as np

from .logs import LogError


@dataclass(frozen=True)
class Steps:
    """Reconstructed steps, all of shape (S,) in burst order: ``end_ms`` (ms), ``d_ms``
    (ms; NaN unless chained), ``U`` (tokens), ``Q`` (token pairs), ``n`` (sequences),
    ``K`` (tokens), ``chained``, ``usable`` (chained and every prefill chunk placed),
    ``size`` (tokens in the burst); ``first`` (R,) each request's first-token burst;
    ``R`` (S,) the KV tokens the prefill chunks attend to, Σ (m + c + x) (the roofline's
    memory time: docs/model.md "The step cost"); ``run`` (S,) the run each step belongs
    to (0 .. runs − 1, :func:`reconstruct_runs`); ``admit`` (R,) each request's admission
    step (its prefill's first chunk), -1 when the reconstruction could not place it."""
    end_ms: np.ndarray
    d_ms: np.ndarray
    U: np.ndarray
    Q: np.ndarray
    n: np.ndarray
    K: np.ndarray
    chained: np.ndarray
    usable: np.ndarray
    size: np.ndarray
    first: np.ndarray
    R: np.ndarray
    run: np.ndarray
    admit: np.ndarray

    @property
    def prefill(self):
        """(S,) True for prefill-bearing steps (U > 0)."""
        return self.U > 0

    def take(self, idx):
        """The steps ``idx`` (M,) (indices, repeats allowed), every (S,) array indexed;
        ``first`` and ``admit`` (per request) are left as they are (a resample's fit does
        not read them)."""
        return replace(self, **{f.name: getattr(self, f.name)[idx] for f in fields(self)
                                if f.name not in PER_REQUEST})


PER_REQUEST = ("first", "admit")
"""The fields of :class:`Steps` that are per request, not per step."""

CLOCK_TOKENS = 8
"""A pair of requests is compared for a shared clock over at least this many tokens each."""
CLOCK_NEIGHBOURS = 8
"""Each request is compared with at most this many of the next requests in flight with it."""
CLOCK_OFFSET = 0.125
"""The median offset (in steps) between two requests' tokens above which they run on two
clocks: one server's are within its jitter (a few per cent of a step), two unrelated
clocks' spread evenly over ±½ step (median ¼)."""


@dataclass(frozen=True)
class Jitter:
    """The burst threshold of one run: ``threshold_ms`` (a gap above it starts a new
    step), ``spread_ms`` (the largest gap inside a burst at that threshold),
    ``separation_ms`` (the smallest gap between two bursts; inf with one burst),
    ``estimated`` (False when ``--jitter-ms`` gave it)."""
    threshold_ms: float
    spread_ms: float
    separation_ms: float
    estimated: bool


class _Timeline:
    """Every timestamp of a run's records, sorted once: the labels at a threshold and the
    two ways a threshold can be wrong (a skipped burst, two tokens in one)."""

    def __init__(self, recs):
        times = np.concatenate([r.token_ms for r in recs])
        self.recs = recs
        self.order = np.argsort(times, kind="stable")
        self.t = times[self.order]
        self.gaps = np.diff(self.t)
        owner = np.repeat(np.arange(len(recs)), [r.token_ms.size for r in recs])
        self.pair = np.flatnonzero(owner[1:] == owner[:-1])          # (i, i + 1): consecutive, one request
        # steps from one timestamp to the next of one request: 1 per token; a chunk of c
        # tokens came c steps after the previous chunk (at most); unknown chunks: no bound
        step = np.concatenate([np.full(r.token_ms.size, np.inf) if r.chunk_tokens is None
                               else r.chunk_tokens.astype(float) for r in recs])
        self.expect = step[self.pair + 1]
        self.owner = owner

    def labels(self, threshold):
        """(N,) the burst of every timestamp (the records' order), (N,) sorted labels."""
        label_sorted = np.cumsum(np.concatenate([[True], self.gaps > threshold])) - 1
        label = np.empty_like(label_sorted)
        label[self.order] = label_sorted
        return label, label_sorted

    def merged(self, label):
        """Indices i of ``pair`` whose two timestamps share a burst."""
        return np.flatnonzero(label[self.pair + 1] == label[self.pair])

    def skipped(self, label):
        """Indices i of ``pair`` whose second timestamp comes more bursts after the first
        than the tokens it carries: the request skipped a burst it decoded through."""
        return np.flatnonzero(label[self.pair + 1] - label[self.pair] > self.expect)

    def where(self, i):
        """(request_id, its token's time) of ``pair[i]``'s second timestamp."""
        k = self.pair[i] + 1
        r = self.recs[self.owner[k]]
        j = k - np.searchsorted(self.owner, self.owner[k])
        return r.request_id, float(r.token_ms[j])


def estimate_jitter(recs, path="log") -> Jitter:
    """The burst threshold this run's timestamps support (the module's docstring, 1).

    A request that decodes emits a token in every step (one a chunk's tokens' worth), so
    too small a threshold shows as a skipped burst and too large a one as two tokens of
    one request in one burst; skips only fall and merges only rise with the threshold.
    The threshold is the smallest gap between timestamps at which no request skips (the
    finest reconstruction in which every decoding request is in every step), and must lie
    below the smallest at which two tokens merge. Without a checkable request (no
    per-token or per-chunk counts), the widest relative break in the gaps below the
    first merge. Raises LogError when no threshold works."""
    tl = _Timeline(recs)
    cand = np.unique(np.concatenate([[0.0], tl.gaps]))       # 0: every distinct time a burst

    def first(pred):                                     # smallest i with pred(cand[i]) (monotone)
        lo, hi = 0, cand.size
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(cand[mid]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    hi = first(lambda v: tl.merged(tl.labels(v)[0]).size > 0)
    if np.isfinite(tl.expect).any():
        lo = first(lambda v: tl.skipped(tl.labels(v)[0]).size == 0)
    else:
        below = cand[:hi]
        ratio = below[1:] / np.maximum(below[:-1], 1e-9) if below.size > 1 else np.array([])
        lo = int(np.argmax(ratio)) if ratio.size else 0
    if hi == 0:
        rid, t = tl.where(tl.merged(tl.labels(0.0)[0])[0])
        raise LogError(path, f"request_id {rid}", f"two tokens at the same time ({t:.3f} ms): the timestamps are "
                       "not one per step")
    if lo >= hi:
        at = cand[hi - 1]
        rid, t = tl.where(tl.skipped(tl.labels(at)[0])[0])
        top = f"{cand[hi]:.3g}" if hi < cand.size else "any gap"
        raise LogError(path, f"request_id {rid}",
                       f"no burst threshold separates the engine's steps: up to {at:.3g} ms the request skips a "
                       f"step it decodes through (its token at {t:.3f} ms), from {top} ms two tokens of one "
                       "request share a burst; the timestamps are not one per step (a client that delays tokens "
                       "by more than the gap between steps, or preemptions: calibrate from a low-load log)")
    spread = float(cand[lo])
    return Jitter(spread, spread, float(cand[lo + 1]) if lo + 1 < cand.size else np.inf, True)


def check_clock(recs, path="log"):
    """Raise LogError when the run's requests run on two step clocks (the module's
    docstring, 0): two per-token requests in flight together whose tokens keep a median
    CLOCK_OFFSET of a step or more apart (each compared with its next CLOCK_NEIGHBOURS
    overlapping requests, over at least CLOCK_TOKENS tokens of each)."""
    per = [r for r in recs if r.per_token and r.token_ms.size >= CLOCK_TOKENS]
    per.sort(key=lambda r: r.token_ms[0])
    for i, a in enumerate(per):
        for b in per[i + 1:i + 1 + CLOCK_NEIGHBOURS]:
            lo, hi = b.token_ms[0], min(a.token_ms[-1], b.token_ms[-1])
            if lo >= a.token_ms[-1]:
                break
            ta = a.token_ms[(a.token_ms >= lo) & (a.token_ms <= hi)]
            tb = b.token_ms[(b.token_ms >= lo) & (b.token_ms <= hi)]
            if ta.size < CLOCK_TOKENS or tb.size < CLOCK_TOKENS:
                continue
            j = np.clip(np.searchsorted(tb, ta), 1, tb.size - 1)
            near = np.minimum(np.abs(ta - tb[j - 1]), np.abs(tb[j] - ta))
            step = float(np.median(np.diff(ta)))
            off = float(np.median(near)) / step if step > 0 else 0.0
            if off >= CLOCK_OFFSET:
                raise LogError(path, f"request_id {b.request_id}",
                               f"two step clocks interleave: in flight with request {a.request_id} over "
                               f"{hi - lo:.0f} ms, its tokens stay {off:.2f} of a step from that one's at the median "
                               f"(one server's are within {CLOCK_OFFSET:g}): the log merges runs of different "
                               "servers; give one file per run, or a run column")


def bursts(recs, jitter_ms, path="log"):
    """(burst index of every timestamp, one (C,) array per request; end_ms (S,); size (S,)).

    Raises LogError when ``jitter_ms`` puts two tokens of one request in one burst, or
    splits a burst (a request skips one it decodes through: pseudo-steps)."""
    tl = _Timeline(recs)
    label, label_sorted = tl.labels(jitter_ms)
    S = int(label_sorted[-1]) + 1
    end = np.bincount(label_sorted, weights=tl.t, minlength=S) / np.bincount(label_sorted, minlength=S)
    size = np.bincount(label_sorted, minlength=S)
    if (m := tl.merged(label)).size:
        rid, t = tl.where(m[0])
        raise LogError(path, f"request_id {rid}", f"two tokens within jitter_ms = {jitter_ms:g} ms "
                       f"of each other (at {t:.3f} ms): lower --jitter-ms{_estimate_hint(recs)}")
    if (k := tl.skipped(label)).size:
        rid, t = tl.where(k[0])
        raise LogError(path, f"request_id {rid}", f"skips a step it decodes through (its token at {t:.3f} ms): "
                       f"jitter_ms = {jitter_ms:g} ms splits step bursts into pseudo-steps ({k.size} token"
                       f"{'s' * (k.size > 1)} of decoding requests skip one); raise --jitter-ms{_estimate_hint(recs)}")
    out, at = [], 0
    for r in recs:
        out.append(label[at:at + r.token_ms.size])
        at += r.token_ms.size
    return out, end, size


def _estimate_hint(recs):
    """``" (the log's own estimate: X ms; omit --jitter-ms)"``, or "" when it has none."""
    try:
        j = estimate_jitter(recs)
    except LogError:
        return ""
    return f" (the log's own estimate: {j.threshold_ms:.3g} ms; omit --jitter-ms to use it)"


def reconstruct_runs(runs, max_batched_tokens=8192, jitter_ms=None):
    """The steps of several runs, one after the other: ``runs`` [(label, records)]
    (logs.runs); each run's clock is checked (``check_clock``), its threshold estimated
    (``estimate_jitter``) unless ``jitter_ms`` is given, and its steps reconstructed
    on their own. Returns (Steps with ``run`` and ``first`` offset to the whole, every
    record in run order (R,), isolated (R,) bool (``isolated`` per run), [Jitter] a run)."""
    parts, recs, iso, jit = [], [], [], []
    for label, rs in runs:
        check_clock(rs, label)
        j = estimate_jitter(rs, label) if jitter_ms is None else Jitter(jitter_ms, np.nan, np.nan, False)
        st = reconstruct(rs, max_batched_tokens, j.threshold_ms, path=label)
        parts.append(st)
        recs += rs
        iso.append(isolated(rs, st))
        jit.append(j)
    offset = np.cumsum([0] + [p.end_ms.size for p in parts[:-1]])
    cat = {f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Steps)}
    cat["first"] = np.concatenate([p.first + o for p, o in zip(parts, offset)])
    cat["admit"] = np.concatenate([np.where(p.admit >= 0, p.admit + o, -1) for p, o in zip(parts, offset)])
    cat["run"] = np.concatenate([np.full(p.end_ms.size, i) for i, p in enumerate(parts)])
    return Steps(**cat), recs, np.concatenate(iso), jit


def reconstruct(recs, max_batched_tokens=8192, jitter_ms=0.5, path="log") -> Steps:
    """The :class:`Steps` of a low-load log (see the module's docstring)."""
    labels, end, size = bursts(recs, jitter_ms, path)
    S = end.size
    first = np.array([lab[0] for lab in labels])
    last = np.array([lab[-1] for lab in labels])
    P = np.array([r.prompt_tokens for r in recs], dtype=float)
    # decoders of step k: first < k <= last (difference arrays)
    cnt = np.zeros(S + 1)
    sum_p = np.zeros(S + 1)
    sum_f = np.zeros(S + 1)
    for f, l, p in zip(first, last, P):
        if l > f:
            cnt[f + 1] += 1
            cnt[l + 1] -= 1
            sum_p[f + 1] += p
            sum_p[l + 1] -= p
            sum_f[f + 1] += f
            sum_f[l + 1] -= f
    n = np.cumsum(cnt)[:S]
    K = np.cumsum(sum_p)[:S] + n * np.arange(S) - np.cumsum(sum_f)[:S]
    start = np.concatenate([[-np.inf], end[:-1]])        # a chained step's start
    chained = n > 0
    used = n.copy()                                       # budget taken so far, per step
    U = np.zeros(S)
    Q = np.zeros(S)
    R = np.zeros(S)
    bad = np.zeros(S, dtype=bool)
    admit = np.full(len(recs), -1, dtype=np.int64)
    for i in sorted(range(len(recs)), key=lambda i: (first[i], recs[i].send_ms, i)):
        r, f = recs[i], first[i]
        u = r.prompt_tokens - r.cached_tokens
        chunks, lo, seen = place(u, f, r.send_ms, used, chained, start, max_batched_tokens)
        if chunks is not None and bad[seen:f + 1].any():  # an earlier prefill's unknown chunks took
            chunks, lo = None, min(seen, lo)              # an unknown share of the offers it weighed
        if chunks is None:
            bad[lo:f + 1] = True                          # where its chunks went is not known
            continue
        admit[i] = lo
        done = r.cached_tokens
        for k, x in zip(range(lo, f + 1), chunks):
            U[k] += x
            Q[k] += x * (done + x / 2.0)
            R[k] += done + x
            used[k] += x
            done += x
    d = np.where(chained, end - start, np.nan)
    usable = chained & ~bad
    return Steps(end, d, U, Q, n, K, chained, usable, size, first, R, np.zeros(S, dtype=np.int64), admit)


def place(u, f, send_ms, used, chained, start, budget):
    """(chunks oldest first, or None; the earliest step the prefill may have touched; the
    earliest step whose offer it weighed) for a prefill of ``u`` tokens whose first token
    ends step ``f``.

    A request admitted at step ``a`` gets every step's whole offer (budget left after the
    decoders and earlier prefills) until the rest fits, so ``a`` is consistent iff the
    offers of ``a .. f-1`` fall short of ``u`` and those of ``a .. f`` do not. Candidates
    go back from ``f`` over steps that began after the send; a step that is not chained
    began at an unseen time, so the request may also have been admitted in a step no
    token shows (such a step has no decoder, so it offers the whole budget). Placed only when exactly one admission is consistent (the send time is
    not the engine's arrival time, so an earlier step cannot be ruled in)."""
    offers, k, unseen = [], f, False
    while True:
        if chained[k] and start[k] < send_ms:          # began before the request was sent
            k += 1
            break
        offers.append(max(0.0, budget - used[k]))
        if not chained[k] or k == 0:                   # what came before is not seen
            unseen = True
            break
        k -= 1
    total = np.cumsum(offers)                          # offers of f, f-1 .. down to a
    consistent = [i for i in range(len(offers)) if total[i] - offers[0] < u <= total[i]]
    if unseen and u > budget + total[-1] - offers[0]:   # unseen steps offer the whole budget
        consistent.append(None)
    seen = f - len(offers) + 1
    if len(consistent) != 1 or consistent[0] is None:
        # every step begun after the send, and those it weighed (an unchained step began unseen)
        return None, min(int(np.searchsorted(start, send_ms)), seen), seen
    m = consistent[0] + 1
    chunks = offers[:m][::-1]
    return chunks[:-1] + [u - sum(chunks[:-1])], f - m + 1, seen


def isolated(recs, steps: Steps) -> np.ndarray:
    """(R,) True for requests sent to an idle engine whose first step ran alone: no
    other request was in flight at the send, none was sent before the first token,
    and the first-token burst holds only this request's token."""
    send = np.array([r.send_ms for r in recs])
    lo = np.array([r.token_ms[0] for r in recs])
    hi = np.array([r.token_ms[-1] for r in recs])
    order = np.argsort(send, kind="stable")
    out = np.zeros(len(recs), dtype=bool)
    for j, i in enumerate(order):
        busy = np.any((send[order[:j]] <= send[i]) & (hi[order[:j]] >= send[i]))
        crowd = j + 1 < len(order) and send[order[j + 1]] <= lo[i]
        out[i] = not busy and not crowd and steps.size[steps.first[i]] == 1 and not steps.chained[steps.first[i]]
    return out
