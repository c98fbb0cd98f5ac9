"""Engine steps reconstructed from the token bursts of a serving log.

Each engine step emits one token for every running sequence that is decoding or
finishes its prefill in it, so the tokens of one step reach the client together, up
to jitter. The reconstruction (docs/calibration.md §2), for a low-load log:

1. **Bursts.** Every timestamp of every request, sorted; a gap above ``jitter_ms``
   starts a new burst. A burst is a step's end; ``end_ms`` is its mean. Two tokens of
   one request in one burst are an error (``jitter_ms`` too large, or the log's
   timestamps are not per step).
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
   a step no token shows, every step it may have touched is marked unusable. ``U_k = Σ x``,
   ``Q_k = Σ x (m + c + x/2)`` (token-model.md §2.3), ``R_k = Σ (m + c + x)``.
4. **Durations.** A step with a decoder started when the previous burst ended (the
   decoder emitted there, and a busy engine starts its next step at once): ``d_k =
   end_k - end_{k-1}``, *chained*. A step without decoders began at an arrival the log
   does not show (the engine was idle, or only prefill chunks ran): not chained, no
   duration; such a step's request measures the front-end overhead instead.
"""

from dataclasses import dataclass

import numpy as np

from .logs import LogError


@dataclass(frozen=True)
class Steps:
    """Reconstructed steps, all of shape (S,) in burst order: ``end_ms`` (ms), ``d_ms``
    (ms; NaN unless chained), ``U`` (tokens), ``Q`` (token pairs), ``n`` (sequences),
    ``K`` (tokens), ``chained``, ``usable`` (chained and every prefill chunk placed),
    ``size`` (tokens in the burst); ``first`` (R,) each request's first-token burst;
    ``R`` (S,) the KV tokens the prefill chunks attend to, Σ (m + c + x) (the roofline's
    memory time: docs/model.md "The step cost")."""
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

    @property
    def prefill(self):
        """(S,) True for prefill-bearing steps (U > 0)."""
        return self.U > 0


def bursts(recs, jitter_ms, path="log"):
    """(burst index of every timestamp, one (C,) array per request; end_ms (S,); size (S,))."""
    times = np.concatenate([r.token_ms for r in recs])
    order = np.argsort(times, kind="stable")
    t = times[order]
    new = np.concatenate([[True], np.diff(t) > jitter_ms])
    label_sorted = np.cumsum(new) - 1
    label = np.empty_like(label_sorted)
    label[order] = label_sorted
    S = int(label_sorted[-1]) + 1
    end = np.bincount(label_sorted, weights=t, minlength=S) / np.bincount(label_sorted, minlength=S)
    size = np.bincount(label_sorted, minlength=S)
    out, at = [], 0
    for i, r in enumerate(recs):
        lab = label[at:at + r.token_ms.size]
        at += r.token_ms.size
        dup = np.flatnonzero(np.diff(lab) == 0)
        if dup.size:
            raise LogError(path, f"request_id {r.request_id}", f"two tokens within jitter_ms = {jitter_ms:g} ms "
                           f"of each other (at {r.token_ms[dup[0]]:.3f} ms): lower --jitter-ms")
        out.append(lab)
    return out, end, size


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
    for i in sorted(range(len(recs)), key=lambda i: (first[i], recs[i].send_ms, i)):
        r, f = recs[i], first[i]
        u = r.prompt_tokens - r.cached_tokens
        chunks, lo = place(u, f, r.send_ms, used, chained, start, max_batched_tokens)
        if chunks is None:
            bad[lo:f + 1] = True                          # where its chunks went is not known
            continue
        done = r.cached_tokens
        for k, x in zip(range(lo, f + 1), chunks):
            U[k] += x
            Q[k] += x * (done + x / 2.0)
            R[k] += done + x
            used[k] += x
            done += x
    d = np.where(chained, end - start, np.nan)
    usable = chained & ~bad
    return Steps(end, d, U, Q, n, K, chained, usable, size, first, R)


def place(u, f, send_ms, used, chained, start, budget):
    """(chunks oldest first, or None; the earliest step the prefill may have touched) for
    a prefill of ``u`` tokens whose first token ends step ``f``.

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
    if len(consistent) != 1 or consistent[0] is None:
        return None, int(np.searchsorted(start, send_ms))   # every step begun after the send
    m = consistent[0] + 1
    chunks = offers[:m][::-1]
    return chunks[:-1] + [u - sum(chunks[:-1])], f - m + 1


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
