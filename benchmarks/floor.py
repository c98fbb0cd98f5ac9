"""The floor of the batching engine's speed: a minimal compiled loop of comparable work.

``floor_run_nb`` simulates a run of the batching model stripped to its hot path:
arrivals routed by ``least_tokens`` (τ_i = Σ P + A of what is on the replica), a
waiting FIFO per replica, continuous batching with chunked prefill under the token
budget, paged-KV block counts (admission takes ceil(P/b) blocks, a decoding sequence
one more every b tokens, counted by residue as the engine does), a min-heap per
replica of the iterations at which decoding sequences complete, and the step formula
of token-model.md §2. No prefix cache, preemption, failures, signals or metrics: what
is left is work that any engine of the model does at every iteration, so the engine's
time per iteration over this one's says what its features and bookkeeping cost.

Not a model of anything: its counts are not the engine's (its batch is comparable:
the suite prints both means). Used by ``benchmarks.batching.realtime`` only.
"""

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def _heap_push(hj, hs, hn, i, j, s):
    """Push (iteration j, request s) on replica i's min-heap (rows of hj/hs)."""
    k = hn[i]
    hj[i, k] = j
    hs[i, k] = s
    hn[i] = k + 1
    going = True
    while going and k > 0:
        parent = (k - 1) >> 1
        if hj[i, k] < hj[i, parent]:
            hj[i, k], hj[i, parent] = hj[i, parent], hj[i, k]
            hs[i, k], hs[i, parent] = hs[i, parent], hs[i, k]
            k = parent
        else:
            going = False


@nb.njit(cache=True, nogil=True)
def _heap_pop(hj, hs, hn, i):
    """Remove the top of replica i's heap."""
    n = hn[i] - 1
    hj[i, 0] = hj[i, n]
    hs[i, 0] = hs[i, n]
    hn[i] = n
    k = 0
    going = True
    while going and 2 * k + 1 < n:
        c = 2 * k + 1
        if c + 1 < n and hj[i, c + 1] < hj[i, c]:
            c += 1
        if hj[i, c] < hj[i, k]:
            hj[i, k], hj[i, c] = hj[i, c], hj[i, k]
            hs[i, k], hs[i, c] = hs[i, c], hs[i, k]
            k = c
        else:
            going = False


@nb.njit(cache=True, nogil=True)
def floor_run_nb(t_arr, P, O, nrep, horizon_ms, limit_ms, allowance, b, kv_blocks, max_batch,
                 max_batched_tokens, waiting_cap, c0, c_pf, c_attn, c_dec, c_kv):
    """One run: t_arr (n,) arrival ms, P/O (n,) prompt and output tokens, times in ms.
    Returns (iterations, duration-weighted mean sequences per iteration) over the whole
    run (until every request has completed, or the limit)."""
    n = t_arr.shape[0]
    # per replica
    end_ms = np.full(nrep, np.inf)
    busy = np.zeros(nrep, np.bool_)
    started = np.zeros(nrep, np.int64)
    tau = np.zeros(nrep, np.int64)
    free = np.full(nrep, kv_blocks, np.int64)
    n_dec = np.zeros(nrep, np.int64)
    kv_dec = np.zeros(nrep, np.int64)
    grow = np.zeros((nrep, b), np.int64)
    fifo = np.empty((nrep, n + 1), np.int64)   # waiting FIFO: fifo[i, w_lo[i]:w_hi[i]]
    w_lo = np.zeros(nrep, np.int64)
    w_hi = np.zeros(nrep, np.int64)
    pre = np.empty((nrep, max_batch), np.int64)  # prefilling, in admission order
    n_pre = np.zeros(nrep, np.int64)
    hj = np.empty((nrep, max_batch + 1), np.int64)  # completions due: (iteration, request)
    hs = np.empty((nrep, max_batch + 1), np.int64)
    hn = np.zeros(nrep, np.int64)
    # per request
    c = np.zeros(n, np.int64)      # prompt tokens computed
    x = np.zeros(n, np.int64)      # chunk of the iteration in progress
    kv0 = np.zeros(n, np.int64)    # KV at the start of decoding
    j0 = np.zeros(n, np.int64)     # first decoding iteration
    res = np.zeros(n, np.int64)    # residue of its block crossings
    iterations = 0
    batch_ms = 0.0
    busy_ms = 0.0
    done = 0
    k = 0
    t = 0.0
    while done < n and t <= limit_ms:
        t = t_arr[k] if k < n else np.inf
        for i in range(nrep):
            t = min(t, end_ms[i])
        if t <= limit_ms:
            # iteration ends, replicas in id order
            for i in range(nrep):
                if busy[i] and end_ms[i] == t:
                    busy[i] = False
                    end_ms[i] = np.inf
                    j = started[i] - 1
                    while hn[i] > 0 and hj[i, 0] == j:  # decoding sequences that emit their last token
                        s = hs[i, 0]
                        _heap_pop(hj, hs, hn, i)
                        kv = kv0[s] + (j + 1 - j0[s])
                        free[i] += (kv + b - 1) // b
                        kv_dec[i] -= kv
                        n_dec[i] -= 1
                        grow[i, res[s]] -= 1
                        tau[i] -= P[s] + allowance
                        done += 1
                    keep = 0
                    for q in range(n_pre[i]):
                        s = pre[i, q]
                        c[s] += x[s]
                        x[s] = 0
                        if c[s] >= P[s]:  # its first token
                            if O[s] == 1:
                                free[i] += (P[s] + b - 1) // b
                                tau[i] -= P[s] + allowance
                                done += 1
                            else:
                                kv0[s] = P[s]
                                j0[s] = j + 1
                                res[s] = (j + 1 + (b - P[s] % b) % b) % b
                                grow[i, res[s]] += 1
                                n_dec[i] += 1
                                kv_dec[i] += P[s]
                                _heap_push(hj, hs, hn, i, j + O[s] - 1, s)
                        else:
                            pre[i, keep] = s
                            keep += 1
                    n_pre[i] = keep
            # arrivals at t: least_tokens over replicas with room
            while k < n and t_arr[k] == t:
                best = -1
                for i in range(nrep):
                    if w_hi[i] - w_lo[i] < waiting_cap and (best < 0 or tau[i] < tau[best]):
                        best = i
                if best >= 0:
                    fifo[best, w_hi[best]] = k
                    w_hi[best] += 1
                    tau[best] += P[k] + allowance
                else:
                    done += 1  # shed
                k += 1
            # iteration starts of idle replicas with work
            for i in range(nrep):
                if not busy[i] and (n_dec[i] > 0 or n_pre[i] > 0 or w_hi[i] > w_lo[i]):
                    j = started[i]
                    need = grow[i, j % b]
                    free[i] -= need  # (no preemption: the floor's pool is never short)
                    kv_dec[i] += n_dec[i]
                    budget = max_batched_tokens - n_dec[i]
                    U = 0
                    Q = 0.0
                    chunks = 0
                    q = 0
                    while q < n_pre[i] and budget > 0:
                        s = pre[i, q]
                        x[s] = min(P[s] - c[s], budget)
                        U += x[s]
                        Q += x[s] * (c[s] + x[s] / 2.0)
                        chunks += 1
                        budget -= x[s]
                        q += 1
                    admitting = True
                    while (admitting and budget > 0 and w_hi[i] > w_lo[i]
                           and n_pre[i] + n_dec[i] < max_batch):
                        s = fifo[i, w_lo[i]]
                        blocks = (P[s] + b - 1) // b
                        admitting = blocks <= free[i]
                        if admitting:
                            w_lo[i] += 1
                            free[i] -= blocks
                            pre[i, n_pre[i]] = s
                            n_pre[i] += 1
                            x[s] = min(P[s], budget)
                            U += x[s]
                            Q += x[s] * (x[s] / 2.0)
                            chunks += 1
                            budget -= x[s]
                    d = c0 + c_pf * U + c_attn * Q + c_dec * n_dec[i] + c_kv * kv_dec[i]
                    started[i] += 1
                    busy[i] = True
                    end_ms[i] = t + d
                    iterations += 1
                    batch_ms += (n_dec[i] + chunks) * d
                    busy_ms += d
    return iterations, batch_ms / busy_ms if busy_ms > 0 else np.nan
