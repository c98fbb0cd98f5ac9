"""The batching model's synthetic workload (token-model.md §1.1 and §1.3).

Common random numbers: arrival ``k`` consumes row ``k`` of
``Generator(PCG64(seed)).random((n, 8))``, whatever the policy, so every policy of a
grid replays the same requests; logarithms, exponentials, powers and sines come from
routesim.ieee_math, so a seed gives the same bits on every machine. Block ids are kept as segments (at most two a request
here: its group's prefix and its own blocks), not one by one.
"""

from dataclasses import dataclass

import numpy as np

from ..arrivals import draw_arrivals
from ..ieee_math import box_muller, exp_array, log1p_array, power_array

GOLDEN = 0.6180339887498949
"""The key step of a trace request (§1.2) and of the tie hash (§5)."""
GROUP_ID = 2**20   # prefix block j of group g: g·2^20 + j
UNIQUE_ID = 2**40  # any other block j of request k: 2^40 + k·2^16 + j
REQUEST_ID = 2**16
RESPONSE_ID = 2**50  # block j >= floor(P/b) of request k's token sequence (prompt tail, response): 2^50 + k·2^16 + j


@dataclass(frozen=True)
class Lengths:
    """One class's token distributions: log-normal medians and sigmas, clip bounds."""

    prompt_median: float
    prompt_sigma: float
    prompt_min: int
    prompt_max: int
    output_median: float
    output_sigma: float
    output_min: int
    output_max: int


CHAT = Lengths(1000.0, 0.9, 16, 16384, 128.0, 1.0, 1, 2048)
LONG = Lengths(12000.0, 0.5, 2048, 30000, 2000.0, 0.6, 256, 32768)


@dataclass(frozen=True)
class TokenWorkloadParams:
    """§1.1's parameters (defaults: token-model.md)."""

    p_long: float = 0.02
    chat: Lengths = CHAT
    long: Lengths = LONG
    prefix_probability: float = 0.6
    prefix_groups: int = 32
    prefix_zipf: float = 1.1
    prefix_tokens: int = 1536
    context_limit: int = 32768
    block_tokens: int = 16


@dataclass(frozen=True)
class TokenWorkload:
    """Requests in arrival order, each array of shape ``(requests,)``, and their prompt
    blocks as **segments**: request ``k``'s ``floor(P/b)`` block ids are, in prompt order,
    ``seg_key[j] + 0 … seg_len[j] − 1`` for ``j`` in ``seg_off[k]:seg_off[k + 1]``
    (see :func:`segments_of`). ``group`` is the prefix group whose ids the request
    carries (-1: none; for people and tests)."""

    t_ms: np.ndarray     # float64 arrival time (ms)
    prompt: np.ndarray   # int64 P
    output: np.ndarray   # int64 O
    key: np.ndarray      # float64 h in [0, 1)
    group: np.ndarray    # int64 prefix group or -1
    seg_key: np.ndarray  # int64 id of each segment's first block
    seg_len: np.ndarray  # int64 blocks of each segment
    seg_off: np.ndarray  # int64 (requests + 1,) offsets into seg_key / seg_len
    prev: np.ndarray = None   # int64 a conversation's previous turn, -1 for a first turn (None: no conversations)
    think_ms: np.ndarray = None  # float64 a follow-up turn's think time (ms) after ``prev`` completes; 0 otherwise

    def __len__(self) -> int:
        return self.t_ms.size

    def block_ids(self, k: int) -> np.ndarray:
        """Every block id of request ``k`` (``floor(P/b)`` of them), in prompt order."""
        parts = [np.arange(self.seg_key[j], self.seg_key[j] + self.seg_len[j], dtype=np.int64)
                 for j in range(self.seg_off[k], self.seg_off[k + 1])]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def synthetic_segments(prompt, group, block_tokens: int, prefix_blocks: int):
    """Segments of §1.1's block ids: a prefixed request's group blocks
    ``g·2^20 + j`` (j < floor(L/b)), then its own ``2^40 + k·2^16 + j``."""
    n = prompt // block_tokens
    k = np.arange(prompt.size, dtype=np.int64)
    has_group = group >= 0
    own_from = np.where(has_group, np.minimum(prefix_blocks, n), 0)
    has_own = n > own_from
    count = has_group.astype(np.int64) + has_own
    seg_off = np.zeros(prompt.size + 1, np.int64)
    np.cumsum(count, out=seg_off[1:])
    seg_key = np.zeros(seg_off[-1], np.int64)
    seg_len = np.zeros(seg_off[-1], np.int64)
    first = seg_off[:-1]
    seg_key[first[has_group]] = group[has_group] * GROUP_ID
    seg_len[first[has_group]] = np.minimum(prefix_blocks, n[has_group])
    at = first + has_group
    seg_key[at[has_own]] = UNIQUE_ID + k[has_own] * REQUEST_ID + own_from[has_own]
    seg_len[at[has_own]] = (n - own_from)[has_own]
    return seg_key, seg_len, seg_off


def zipf_group(u: np.ndarray, groups: int, s: float) -> np.ndarray:
    """The smallest g with Σ_{j≤g} w_j ≥ u·Σ_j w_j, w_j = (j+1)^(-s) (inversion)."""
    w = power_array(np.arange(1, groups + 1, dtype=np.float64), -s)
    cum = np.cumsum(w)
    g = np.searchsorted(cum, u * cum[-1], side="left")
    return np.minimum(g, groups - 1)


def _lengths(c: Lengths, z1, z2):
    prompt = np.clip(np.rint(c.prompt_median * exp_array(c.prompt_sigma * z1)), c.prompt_min, c.prompt_max)
    output = np.clip(np.rint(c.output_median * exp_array(c.output_sigma * z2)), c.output_min, c.output_max)
    return prompt.astype(np.int64), output.astype(np.int64)


def generate(seed: int, rate_rps: float, rate_events, horizon_ms: float,
             params: TokenWorkloadParams = TokenWorkloadParams(), lengths=None) -> TokenWorkload:
    """Draw the requests arriving in ``[0, horizon_ms)`` of one (seed, rate profile).

    ``lengths``: None for §1.1's classes, or ``(P, O)`` arrays of a trace's rows for
    §1.3's empirical lengths (row ``floor(U[k,7]·rows)``).
    """
    p = params
    t_ms, u = draw_arrivals(seed, rate_rps, rate_events, horizon_ms, 8)
    prefixed = u[:, 4] < p.prefix_probability
    group = np.where(prefixed, zipf_group(u[:, 5], p.prefix_groups, p.prefix_zipf), -1).astype(np.int64)
    L = p.prefix_tokens
    if lengths is None:
        z1, z2 = box_muller(u, 2, 3)
        is_long = u[:, 1] < p.p_long
        cp, co = _lengths(p.chat, z1, z2)
        lp, lo = _lengths(p.long, z1, z2)
        own = np.where(is_long, lp, cp)
        output = np.where(is_long, lo, co)
        prompt = np.where(prefixed, L + own, own)
        output = np.minimum(output, p.context_limit - prompt)
    else:
        rows_p, rows_o = (np.asarray(a, dtype=np.int64) for a in lengths)
        j = np.floor(u[:, 7] * rows_p.size).astype(np.int64)
        prompt, output = rows_p[j], rows_o[j]
        group = np.where(prompt > L, group, -1)
    prompt = prompt.astype(np.int64)
    seg_key, seg_len, seg_off = synthetic_segments(prompt, group, p.block_tokens, L // p.block_tokens)
    return TokenWorkload(t_ms=t_ms, prompt=prompt, output=output.astype(np.int64), key=u[:, 6].copy(),
                         group=group, seg_key=seg_key, seg_len=seg_len, seg_off=seg_off)


def segments_from_ids(ids, offsets):
    """Segments of explicit block ids (a trace's, token-model.md §1.2).

    Prompt ``k``'s ids are ``ids[offsets[k]:offsets[k + 1]]`` in prompt order. Each
    prompt's ids are first split into **runs** of consecutive ids at consecutive
    positions; then every run is split again at every id where any prompt's run
    (this one's or another's) starts or ends. Returns ``(seg_key, seg_len, seg_off)``
    as :class:`TokenWorkload` holds them; concatenating prompt ``k``'s segments gives
    back its ids.

    Why the second split: the engine keeps a resident segment as one record (its
    resident length, one refcount and one ``last_use``; see routesim/batching/blocks.py),
    which is exact only if every prompt that holds any block of a segment holds the
    whole segment, in order. Two prompts may share a run only in part: a Mooncake
    prompt whose last 512-token hash block is partial holds the first few ids of a hash
    block that a longer prompt holds whole, and consecutive hash ids make consecutive
    KV ids across hash blocks, so one prompt's run can begin in the middle of
    another's. With every run boundary of every prompt a segment boundary, no segment
    has a run boundary inside it, so a run that contains one block of a segment
    contains all of them: if ``[a, c)`` is a run and ``[s, e)`` a segment with a block
    in it, then ``a ≤ s`` and ``e ≤ c`` because ``a`` and ``c`` are boundaries.
    """
    ids = np.asarray(ids, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = offsets.size - 1
    if ids.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(n + 1, np.int64)
    run_start = _run_starts(ids, offsets)
    starts = np.flatnonzero(run_start)
    first = ids[starts]
    order = np.argsort(first, kind="stable")
    last = first + np.diff(np.append(starts, ids.size)) - 1
    if (first[order[1:]] <= last[order[:-1]]).any():   # runs overlap (shared ids): split them
        starts = np.flatnonzero(run_start | _on_bounds(ids, run_start))
    # else no run has another's start or end inside it: every run is one segment
    return _segments_at(ids, offsets, starts)


def _run_starts(ids, offsets):
    """(bool, shape ids.shape): where a run of consecutive ids at consecutive positions
    of one prompt starts."""
    run_start = np.zeros(ids.size, bool)
    run_start[offsets[:-1][offsets[:-1] < offsets[1:]]] = True
    run_start[1:] |= ids[1:] != ids[:-1] + 1
    return run_start


def _on_bounds(ids, run_start):
    """(bool, shape ids.shape): the ids at which some run starts or just past some run's
    end: :func:`segments_from_ids`' second split."""
    run_end = np.zeros(ids.size, bool)             # the last block of a run
    run_end[:-1] = run_start[1:]
    run_end[-1] = True
    bounds = np.unique(np.concatenate((ids[run_start], ids[run_end] + 1)))
    at = np.searchsorted(bounds, ids)
    return bounds[np.minimum(at, bounds.size - 1)] == ids


def _segments_at(ids, offsets, starts):
    """(seg_key, seg_len, seg_off) of segments starting at positions ``starts`` of ``ids``
    (ascending; every prompt's first block among them)."""
    n = offsets.size - 1
    seg_key = ids[starts]
    ends = np.append(starts[1:], ids.size)
    # a segment never crosses a prompt's end: every prompt's first block starts one
    seg_len = ends - starts
    prompt_of = np.searchsorted(offsets, starts, side="right") - 1
    seg_off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(prompt_of, minlength=n), out=seg_off[1:])
    return seg_key, seg_len.astype(np.int64), seg_off


segments = segments_from_ids
"""The name routesim/batching/blocks.py's docstring uses."""


def from_replay(rp, ids=None) -> TokenWorkload:
    """A trace window's requests (``routesim.traces.Replay``, §1.2) as a TokenWorkload:
    its arrivals, tokens and keys as they are, its explicit block ids (or ``ids``, laid
    out as ``rp.block_ids``: :func:`trace_chains`') as segments."""
    seg_key, seg_len, seg_off = segments_from_ids(rp.block_ids if ids is None else ids, rp.block_offsets)
    n = len(rp)
    return TokenWorkload(t_ms=np.asarray(rp.a_ms, np.float64).copy(),
                         prompt=np.asarray(rp.prompt, np.int64).copy(),
                         output=np.asarray(rp.output, np.int64).copy(),
                         key=np.asarray(rp.key, np.float64).copy(), group=np.full(n, -1, np.int64),
                         seg_key=seg_key, seg_len=seg_len, seg_off=seg_off)


@dataclass(frozen=True)
class ConversationParams:
    """The synthetic session model (docs/model.md "Conversations"): a session's turns
    ``T = min(turns_max, G)`` with ``G`` geometric of mean ``turns_mean`` (1: no
    follow-up turns); a follow-up is sent ``think_ms`` (exponential, mean) after the
    previous turn's response completes; its new user text has log-normal tokens
    (``text_median``, ``text_sigma``, clipped to ``[1, context_limit]``) and its output
    the chat class's distribution."""

    turns_mean: float = 1.0
    turns_max: int = 8
    think_ms: float = 10000.0
    text_median: float = 200.0
    text_sigma: float = 1.0


def response_ids(k: int, lo: int, hi: int) -> np.ndarray:
    """The ids of blocks ``lo … hi − 1`` of request ``k``'s token sequence past its
    prompt's ids (its prompt's partial last block, then its response): what a later turn
    of the same conversation holds at those positions."""
    return RESPONSE_ID + k * REQUEST_ID + np.arange(lo, hi, dtype=np.int64)


def is_response_id(bid) -> bool:
    return bid >= RESPONSE_ID


def split_response_id(bid) -> tuple[int, int]:
    """(request, block position) of a response id."""
    x = bid - RESPONSE_ID
    return x // REQUEST_ID, x % REQUEST_ID


def follow_up_segments(prev_segs, P_prev: int, O_prev: int, prev_k: int, P: int, k: int, b: int):
    """A follow-up turn's prompt segments (``[(first id, blocks), ...]``): its prompt is
    the previous turn's prompt (``P_prev`` tokens), its response (``O_prev``) and new
    text, ``P`` tokens in all. Block ``j`` holds tokens ``j·b … (j+1)·b − 1``, so

    - ``j < floor(P_prev/b)``: the previous prompt's block, its id (``prev_segs``);
    - ``floor(P_prev/b) ≤ j < floor((P_prev + O_prev)/b)``: previous prompt's tail and
      response tokens only: the previous request's own block ``j``
      (:func:`response_ids`), the same tokens vLLM hashed when it generated them;
    - ``j ≥ floor((P_prev + O_prev)/b)``: new text in it, an id of its own
      (``2^40 + k·2^16 + j``).

    Only full blocks get ids (``floor(P/b)``)."""
    n = P // b
    a = P_prev // b
    c = min((P_prev + O_prev) // b, n)
    out = list(prev_segs)
    if c > a:
        out.append((RESPONSE_ID + prev_k * REQUEST_ID + a, c - a))
    if n > c:
        out.append((UNIQUE_ID + k * REQUEST_ID + c, n - c))
    return out


def conversations(first: TokenWorkload, seed: int, cp: ConversationParams,
                  params: TokenWorkloadParams = TokenWorkloadParams()) -> TokenWorkload:
    """The requests of ``first``'s sessions: request ``k < F`` is session ``k``'s first
    turn (``first``'s request ``k`` as it is), then every session's follow-up turns,
    session by session, turn by turn (indices ``F …``). A follow-up's ``t_ms`` is +inf
    (its send time comes from the run: ``think_ms`` after ``prev`` completes).

    Random numbers: ``V = Generator(PCG64(SeedSequence(seed).spawn(2)[1])).random((F,
    turns_max − 1, 4))``: session k's follow-up j (j = 0, 1, ...) goes on if
    ``V[k,j,0] < 1 − 1/turns_mean`` (geometric turns), thinks ``−think_ms·log1p(−V[k,j,1])``,
    and takes its text and output from Box–Muller of ``V[k,j,2]``, ``V[k,j,3]`` (z1: text,
    z2: output, the chat class's output). A turn whose prompt reaches ``context_limit``
    is not made (its session ends)."""
    F = len(first)
    b = params.block_tokens
    prev = np.full(F, -1, np.int64)
    think = np.zeros(F)
    if cp.turns_max <= 1 or cp.turns_mean <= 1.0 or F == 0:
        return _with_turns(first, prev, think)
    from numpy.random import PCG64, Generator, SeedSequence
    V = Generator(PCG64(SeedSequence(seed).spawn(2)[1])).random((F, cp.turns_max - 1, 4))
    go_on = 1.0 - 1.0 / cp.turns_mean
    flat = V.reshape(-1, 4)
    z1, z2 = box_muller(flat, 2, 3)
    think_all = (-cp.think_ms * log1p_array(-np.ascontiguousarray(flat[:, 1]))).reshape(F, -1)
    text = np.clip(np.rint(cp.text_median * exp_array(cp.text_sigma * z1)), 1,
                   params.context_limit).astype(np.int64).reshape(F, -1)
    out = np.clip(np.rint(params.chat.output_median * exp_array(params.chat.output_sigma * z2)),
                  params.chat.output_min, params.chat.output_max).astype(np.int64).reshape(F, -1)
    P = list(first.prompt)
    O = list(first.output)
    key = list(first.key)
    group = list(first.group)
    segs = [[(int(first.seg_key[j]), int(first.seg_len[j])) for j in range(first.seg_off[k], first.seg_off[k + 1])]
            for k in range(F)]
    prev_l, think_l = list(prev), list(think)
    for s in range(F):
        q = s
        for j in range(cp.turns_max - 1):
            if not V[s, j, 0] < go_on:
                break
            Pn = P[q] + O[q] + int(text[s, j])
            if Pn >= params.context_limit:
                break
            k = len(P)
            segs.append(follow_up_segments(segs[q], P[q], O[q], q, Pn, k, b))
            P.append(Pn)
            O.append(int(min(out[s, j], params.context_limit - Pn)))
            key.append(first.key[s])  # a session's turns share its key (routers, ties)
            group.append(first.group[s])
            prev_l.append(q)
            think_l.append(float(think_all[s, j]))
            q = k
    n = len(P)
    seg_off = np.zeros(n + 1, np.int64)
    np.cumsum([len(x) for x in segs], out=seg_off[1:])
    flat = [x for sg in segs for x in sg]
    t = np.concatenate((first.t_ms, np.full(n - F, np.inf)))
    return TokenWorkload(t_ms=t, prompt=np.array(P, np.int64), output=np.array(O, np.int64),
                         key=np.array(key, np.float64), group=np.array(group, np.int64),
                         seg_key=np.array([x[0] for x in flat], np.int64).reshape(-1),
                         seg_len=np.array([x[1] for x in flat], np.int64).reshape(-1), seg_off=seg_off,
                         prev=np.array(prev_l, np.int64), think_ms=np.array(think_l, np.float64))


def _with_turns(w: TokenWorkload, prev, think) -> TokenWorkload:
    from dataclasses import replace
    return replace(w, prev=prev, think_ms=think)


def trace_chains(rp, trace, block_tokens: int, hash_block_tokens: int):
    """Conversation chains of a trace window (docs/model.md "Conversations", traces):
    request ``r``'s **parent** is the earlier request ``a`` of the window whose full hash
    blocks (``floor(P_a/H)``, at least 2: one shared block may be a system prompt) are
    all the first hash ids of ``r`` — the longest such, then the latest — if ``P_r ≥ P_a
    + O_a`` (r's prompt can hold a's prompt and response). Then r's KV blocks ``q <
    floor(P_a/b)`` take a's ids (a's partial last hash block included: the same prompt
    tokens), and ``floor(P_a/b) ≤ q < floor((P_a + O_a)/b)`` a's response ids, as a
    synthetic follow-up's (:func:`follow_up_segments`); the rest keep the trace's. A
    trace gives no think time: every row keeps its time.

    ``rp`` a ``routesim.traces.Replay`` of ``trace``; returns (block ids, parent of each
    request: -1 none) with ``rp.block_offsets``'s layout."""
    b, H = int(block_tokens), int(hash_block_tokens)
    ids = np.array(rp.block_ids, dtype=np.int64)
    off = rp.block_offsets
    n = len(rp)
    parent = np.full(n, -1, np.int64)
    seen = {}  # a tuple of leading hash ids -> the latest request whose full hash blocks they are
    for r in range(n):
        row = int(rp.row[r])
        h = tuple(int(x) for x in trace.hash_ids[trace.hash_offsets[row]:trace.hash_offsets[row + 1]])
        P, O = int(rp.prompt[r]), int(rp.output[r])
        for L in range(len(h), 1, -1):
            a = seen.get(h[:L])
            if a is not None and P >= int(rp.prompt[a]) + int(rp.output[a]):
                parent[r] = a
                break
        a = parent[r]
        if a >= 0:
            Pa, Oa = int(rp.prompt[a]), int(rp.output[a])
            lo, mid, hi = off[r], Pa // b, min((Pa + Oa) // b, off[r + 1] - off[r])
            ids[lo:lo + mid] = ids[off[a]:off[a] + mid]
            ids[lo + mid:lo + hi] = response_ids(int(a), mid, hi)
        full = P // H
        if full >= 2 and len(h) >= full:
            seen[h[:full]] = r
    return ids, parent
