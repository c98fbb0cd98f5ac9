"""The batching model's synthetic workload (token-model.md §1.1 and §1.3).

Common random numbers: arrival ``k`` consumes row ``k`` of
``Generator(PCG64(seed)).random((n, 8))``, whatever the policy, so every policy of a
grid replays the same requests. Block ids are not stored for synthetic requests: the
engine derives block ``j`` of request ``k`` from its prefix group (:func:`block_id`).
"""

from dataclasses import dataclass

import numpy as np

from ..workload import draw_arrivals

GOLDEN = 0.6180339887498949
"""The key step of a trace request (§1.2) and of the tie hash (§5)."""
GROUP_ID = 2**20   # prefix block j of group g: g·2^20 + j
UNIQUE_ID = 2**40  # any other block j of request k: 2^40 + k·2^16 + j
REQUEST_ID = 2**16


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
    """Requests in arrival order, each array of shape ``(requests,)``.

    ``group`` is the prefix group whose ids the request's first ``prefix_blocks`` blocks
    carry (-1: none). ``ids``/``id_off`` give explicit block ids (a trace's; request
    ``r`` has ``ids[id_off[r]:id_off[r + 1]]`` for its first blocks), empty for a
    synthetic workload; past them a block's id follows :func:`block_id`.
    """

    t_ms: np.ndarray     # float64 arrival time (ms)
    prompt: np.ndarray   # int64 P
    output: np.ndarray   # int64 O
    key: np.ndarray      # float64 h in [0, 1)
    group: np.ndarray    # int64 prefix group or -1
    prefix_blocks: int   # floor(L / b): id'd group blocks of a prefixed request
    ids: np.ndarray      # int64 explicit block ids, flat
    id_off: np.ndarray   # int64 (requests + 1,) offsets into ids

    def __len__(self) -> int:
        return self.t_ms.size

    def block_ids(self, k: int) -> np.ndarray:
        """Every block id of request ``k`` (``floor(P/b)`` of them), for tests and people."""
        b = self.block_tokens
        n = int(self.prompt[k]) // b
        out = np.array([block_id(k, j, int(self.group[k]), self.prefix_blocks) for j in range(n)],
                       dtype=np.int64)
        lo, hi = self.id_off[k], self.id_off[k + 1]
        m = min(n, hi - lo)
        out[:m] = self.ids[lo:lo + m]
        return out

    block_tokens: int = 16


def block_id(k: int, j: int, group: int, prefix_blocks: int) -> int:
    """The id of prompt block ``j`` of request ``k`` without explicit ids (§1.1)."""
    if group >= 0 and j < prefix_blocks:
        return group * GROUP_ID + j
    return UNIQUE_ID + k * REQUEST_ID + j


def zipf_group(u: np.ndarray, groups: int, s: float) -> np.ndarray:
    """The smallest g with Σ_{j≤g} w_j ≥ u·Σ_j w_j, w_j = (j+1)^(-s) (inversion)."""
    w = np.arange(1, groups + 1, dtype=np.float64) ** (-s)
    cum = np.cumsum(w)
    g = np.searchsorted(cum, u * cum[-1], side="left")
    return np.minimum(g, groups - 1)


def _lengths(c: Lengths, z1, z2):
    prompt = np.clip(np.rint(c.prompt_median * np.exp(c.prompt_sigma * z1)), c.prompt_min, c.prompt_max)
    output = np.clip(np.rint(c.output_median * np.exp(c.output_sigma * z2)), c.output_min, c.output_max)
    return prompt.astype(np.int64), output.astype(np.int64)


def generate(seed: int, rate_rps: float, rate_events, horizon_ms: float,
             params: TokenWorkloadParams = TokenWorkloadParams(), lengths=None) -> TokenWorkload:
    """Draw the requests arriving in ``[0, horizon_ms)`` of one (seed, rate profile).

    ``lengths``: None for §1.1's classes, or ``(P, O)`` arrays of a trace's rows for
    §1.3's empirical lengths (row ``floor(U[k,7]·rows)``).
    """
    p = params
    t_ms, u = draw_arrivals(seed, rate_rps, rate_events, horizon_ms, 8)
    n = t_ms.size
    prefixed = u[:, 4] < p.prefix_probability
    group = np.where(prefixed, zipf_group(u[:, 5], p.prefix_groups, p.prefix_zipf), -1).astype(np.int64)
    L = p.prefix_tokens
    if lengths is None:
        radius = np.sqrt(-2.0 * np.log1p(-u[:, 2]))
        z1 = radius * np.cos(2.0 * np.pi * u[:, 3])
        z2 = radius * np.sin(2.0 * np.pi * u[:, 3])
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
    return TokenWorkload(t_ms=t_ms, prompt=prompt.astype(np.int64), output=output.astype(np.int64),
                         key=u[:, 6].copy(), group=group, prefix_blocks=L // p.block_tokens,
                         ids=np.zeros(0, np.int64), id_off=np.zeros(n + 1, np.int64),
                         block_tokens=p.block_tokens)
