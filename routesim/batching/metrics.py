"""The batching model's per-run metrics (token-model.md §7): each variable's units and
meaning, and their compiled computation from a run's request records.

Cohort: requests arriving in ``[warm-up, horizon)``; each is exactly one of completed,
failed, rejected, shed or unfinished (still in the system at the stop: the horizon, or
later while the drain lasts). Metrics of a window keep their window, which ends at the
horizon. Percentiles are nearest rank
(routesim.ranks: ``sorted[ceil(p·n/100) − 1]``), NaN when their set is empty.
"""

import numba as nb
import numpy as np

from ..conf import JIT
from ..ranks import of_selected_nb, of_weighted_nb
from .dtypes import Fate

VARIABLES = {
    # name: (units, description)
    "arrivals": ("requests", "cohort requests: arrivals in [warm-up, horizon)"),
    "completed": ("requests", "cohort requests completed by the stop (the horizon, or later during the drain)"),
    "failed": ("requests", "cohort requests that failed for good (out of attempts or of retry budget)"),
    "rejected": ("requests", "cohort requests turned away at the front door"),
    "shed": ("requests", "cohort requests shed: no eligible replica at a routing decision"),
    "unfinished": ("requests", "cohort requests still in the system at the stop (horizon + drain_s at most)"),
    "ttft_p50": ("ms", "median time to first token of completed cohort requests (nearest rank)"),
    "ttft_p90": ("ms", "90th percentile time to first token of completed cohort requests"),
    "ttft_p99": ("ms", "99th percentile time to first token of completed cohort requests"),
    "tpot_p50": ("ms", "median time per output token after the first, completed cohort requests with O >= 2"),
    "tpot_p90": ("ms", "90th percentile time per output token after the first"),
    "tpot_p99": ("ms", "99th percentile time per output token after the first"),
    "itl_p50": ("ms", "median inter-token gap: consecutive tokens of any attempt, the later one emitted in "
                "(warm-up, horizon] (nearest rank, one sample a gap)"),
    "itl_p90": ("ms", "90th percentile inter-token gap"),
    "itl_p99": ("ms", "99th percentile inter-token gap"),
    "itl_max": ("ms", "largest inter-token gap"),
    "e2e_p50": ("ms", "median end-to-end latency of completed cohort requests"),
    "e2e_p90": ("ms", "90th percentile end-to-end latency of completed cohort requests"),
    "e2e_p99": ("ms", "99th percentile end-to-end latency of completed cohort requests"),
    "e2e_mean": ("ms", "mean end-to-end latency of completed cohort requests"),
    "attainment": ("1", "cohort requests completed within both SLOs (TTFT and TPOT), over cohort arrivals"),
    "goodput": ("requests/s", "cohort requests completed within both SLOs, per second of measurement"),
    "throughput": ("requests/s", "completions of any request in (warm-up, horizon], per second"),
    "token_throughput": ("tokens/s", "output tokens emitted in (warm-up, horizon], per second"),
    "wasted_tokens": ("tokens", "tokens emitted in (warm-up, horizon] by attempts cancelled or failed by the stop"),
    "preemptions": ("count", "preemptions at times in [warm-up, horizon)"),
    "breaker_ejections": ("count", "breaker ejections at times in [warm-up, horizon)"),
    "prefix_hit_rate": ("1", "cached prefix tokens over prompt (and regenerated) tokens of admissions in the window "
                        "(scheduler = \"vllm\": vLLM's metric, new admissions only; NaN without prefix caching)"),
    "preempted_hit_rate": ("1", "scheduler = \"vllm\": cached tokens over prompt and regenerated tokens of "
                           "re-admissions after a preemption in the window (vLLM's preempted_hits over "
                           "preempted_queries); NaN if none"),
    "kv_occupancy": ("1", "time-average referenced KV blocks over the pool, mean over replicas"),
    "backlog_growth": ("requests", "requests in the system (any request) after time horizon minus after time "
                       "warm-up: near 0 in a steady state"),
    "kv_occupancy_first": ("1", "kv_occupancy over the window's first quarter [warm-up, warm-up + measure_s/4]"),
    "kv_occupancy_last": ("1", "kv_occupancy over the window's last quarter [horizon - measure_s/4, horizon]"),
    "attainment_first": ("1", "attainment of the cohort requests arriving in the window's first quarter "
                         "[warm-up, warm-up + measure_s/4) (NaN if none arrived)"),
    "attainment_last": ("1", "attainment of the cohort requests arriving in the window's last quarter "
                        "[horizon - measure_s/4, horizon) (NaN if none arrived)"),
    "batch_mean": ("sequences", "duration-weighted mean sequences per iteration started in the window"),
    "attempts": ("attempts", "attempts routed for cohort requests"),
    "retries": ("attempts", "attempts for cohort requests beyond each one's first"),
    "placement_occupancy": ("1", "mean, over attempts routed in [warm-up, horizon), of the chosen replica's "
                            "referenced KV blocks over its pool just before the placement"),
    "placement_occupancy_high": ("1", "share of the attempts routed in [warm-up, horizon) whose chosen replica's "
                                 "referenced KV blocks were above 0.9 of its pool just before the placement"),
    "assigned": ("requests", "attempts routed to the replica in [warm-up, horizon)"),
    "replica_completed": ("requests", "completions on the replica in (warm-up, horizon]"),
    "replica_tokens": ("tokens", "tokens the replica emitted in (warm-up, horizon]"),
    "replica_max_outstanding": ("requests", "most attempts on the replica (waiting, running, black-holed) "
                                "just after a placement on it in [warm-up, horizon); 0 if none"),
    "replica_ttft_p50": ("ms", "median time to first token of cohort requests completed on the replica"),
    "replica_ttft_p99": ("ms", "99th percentile time to first token of cohort requests completed on the replica"),
    "ttft_excess_p99": ("ms", "TTFT objective scaled to prompt length: 99th percentile over completed cohort "
                        "requests of the TTFT minus the request's own objective (slo_ttft_ms + "
                        "slo_ttft_ms_per_prompt_token × its prompt tokens); <= 0 when at least 99 % of them meet it"),
    "client_wait_p50": ("ms", "closed-loop client: median wait of a cohort request from its intended time to its "
                        "send, over those sent by the stop (nearest rank)"),
    "client_wait_p99": ("ms", "closed-loop client: 99th percentile wait from intended time to send"),
    "client_wait_mean": ("ms", "closed-loop client: mean wait from intended time to send"),
    "ttft_prefill_queue_p50": ("ms", "disaggregation: median wait from routing to admission on the prefill replica, "
                               "completed disaggregated cohort requests"),
    "ttft_prefill_queue_p99": ("ms", "disaggregation: 99th percentile of the same prefill queue"),
    "ttft_prefill_p50": ("ms", "disaggregation: median time from admission on the prefill replica to its "
                         "prefill's end"),
    "ttft_prefill_p99": ("ms", "disaggregation: 99th percentile of the same prefill time"),
    "ttft_transfer_p50": ("ms", "disaggregation: median KV transfer time, its latency included"),
    "ttft_transfer_p99": ("ms", "disaggregation: 99th percentile KV transfer time"),
    "ttft_decode_queue_p50": ("ms", "disaggregation: median rest of the TTFT on the decode replica (waiting "
                              "for blocks, then for the one-token step)"),
    "ttft_decode_queue_p99": ("ms", "disaggregation: 99th percentile of the same decode queue"),
    "transfer_count": ("transfers", "disaggregation: KV transfers ended in (warm-up, horizon]"),
    "transfer_bytes": ("bytes", "disaggregation: bytes of the KV transfers ended in (warm-up, horizon]"),
    "disaggregated_share": ("1", "disaggregation: share of placements in [warm-up, horizon) sent to a pair "
                            "(below 1 with the selective rule)"),
    "link_utilization": ("1", "disaggregation: the replica's link utilisation over the window, "
                         "(bytes/ms out + in) / (2 bandwidth)"),
    "client_waiting": ("requests", "closed-loop client: requests (any) intended before the horizon and not yet "
                       "sent after time horizon"),
}
"""Units and one-line description of every result variable (copied into Dataset attrs)."""

CLIENT_VARIABLES = ("client_wait_p50", "client_wait_p99", "client_wait_mean", "client_waiting")
"""Variables of a closed-loop client: in a Dataset only when a run has ``max_in_flight > 0``."""

PER_REPLICA = {"assigned": "assigned", "replica_completed": "completed", "replica_tokens": "tokens",
               "replica_max_outstanding": "max_out", "replica_ttft_p50": "ttft_p50",
               "replica_ttft_p99": "ttft_p99"}
"""Dataset variable <- REPLICA field."""

PD_VARIABLES = ("ttft_prefill_queue_p50", "ttft_prefill_queue_p99", "ttft_prefill_p50", "ttft_prefill_p99",
                "ttft_transfer_p50", "ttft_transfer_p99", "ttft_decode_queue_p50", "ttft_decode_queue_p99",
                "transfer_count", "transfer_bytes", "disaggregated_share")
"""Variables of prefill/decode disaggregation (docs/model.md "Prefill/decode
disaggregation", routesim/batching/pd_engine.py): in a Dataset only when a run has a
prefill pool (NaN or 0 in the co-located runs)."""

PD_PER_REPLICA = {"link_utilization": "link_util"}
"""Per-replica variables of disaggregation (Dataset variable <- REPLICA field), only then too."""

SCALED_SLO_VARIABLES = ("ttft_excess_p99",)
"""Variables of a TTFT objective scaled to prompt length: in a Dataset only when a run has
``slo_ttft_ms_per_prompt_token > 0`` (NaN in the other runs: not computed there)."""

VLLM_VARIABLES = ("preempted_hit_rate",)
"""Variables of ``scheduler = "vllm"`` alone: in a Dataset only when a run has it (NaN in
the other runs)."""

ACCUMULATORS = ("hit_tokens", "admit_tokens", "preempted_hit_tokens", "preempted_tokens", "busy_ms", "batch_ms", "done_any", "tokens_window",
                "iterations", "entered", "entered_cohort", "left", "left_cohort", "preempted_emitting")
"""METRICS fields that only feed the rates above (not Dataset variables)."""

P50_P90_P99 = np.array([50, 90, 99], np.int64)
"""The nearest ranks of a latency's ``_p50``, ``_p90`` and ``_p99``."""

P99 = np.array([99], np.int64)
"""The nearest rank of ``ttft_excess_p99``."""

P50_P99 = np.array([50, 99], np.int64)
"""The nearest ranks of a replica's TTFT (``ttft_p50``, ``ttft_p99``) and of the client's wait."""

ITL_RANKS = np.array([50, 90, 99, 100], np.int64)
"""The nearest ranks of ``itl_p50``, ``itl_p90``, ``itl_p99`` and ``itl_max`` (rank 100: the largest)."""


@nb.njit(**JIT)
def _per_replica_ttft(rep, ttft, where):
    """Each replica's TTFT p50 and p99 over the completed cohort requests that completed
    on it: ttft (n,) ms, where (n,) 0-based replica; buckets by replica, then selection
    in each."""
    nrep = rep.shape[0]
    start = np.zeros(nrep + 1, np.int64)
    for k in range(where.shape[0]):
        start[where[k] + 1] += 1
    for i in range(nrep):
        start[i + 1] += start[i]
    fill = start[:nrep].copy()
    bucket = np.empty(ttft.shape[0])
    for k in range(ttft.shape[0]):
        i = where[k]
        bucket[fill[i]] = ttft[k]
        fill[i] += 1
    for i in range(nrep):
        r = of_selected_nb(bucket[start[i]:start[i + 1]], P50_P99)
        rep[i].ttft_p50 = r[0]
        rep[i].ttft_p99 = r[1]


@nb.njit(**JIT)
def _count_quarter(p, t, quarter, what):
    """Count a cohort request arriving at ``t`` ms in ``quarter`` (4,): index ``what``
    (0 an arrival, 1 one within the SLO) for the window's first quarter, ``2 + what``
    for its last (``attainment_first``/``_last``)."""
    if t < p.warmup_ms + p.quarter_ms:
        quarter[what] += 1
    if t >= p.horizon_ms - p.quarter_ms:
        quarter[2 + what] += 1


@nb.njit(**JIT)
def finish_metrics_nb(p, rep, req, t_arr, sent, mt, gap_ms, gap_n):
    """§7 from the per-request records and the run's accumulators: t_arr (n,) ms each
    request's arrival (its intended time: the cohort's), sent (n,) ms its send (NaN if
    never sent; = t_arr in an open loop), from which latencies run; TTFT and E2E add
    ``client_overhead_ms`` (as the client measures them); ``gap_ms`` (k,) inter-token
    gaps of the window, each ``gap_n`` (k,) times."""
    n = req.shape[0]
    measure_s = (p.horizon_ms - p.warmup_ms) / 1000.0
    ttft = np.empty(n)
    ttft_rep = np.empty(n, np.int64)
    tpot = np.empty(n)
    e2e = np.empty(n)
    scaled = p.slo_ttft_ms_per_token > 0  # a TTFT objective per request (ttft_excess_p99)
    excess = np.empty(n if scaled else 0)
    nt = 0
    np_ = 0
    good = 0
    quarter = np.zeros(4, np.int64)  # arrivals, good: first quarter; arrivals, good: last quarter
    e2e_sum = 0.0
    wait = np.empty(n if p.max_in_flight > 0 else 0)
    nw = 0
    wait_sum = 0.0
    ovh = p.client_overhead_ms
    for k in range(n):
        q = req[k]
        if not q.cohort:  # intended (a follow-up turn's: sent) in [warm-up, horizon)
            continue
        mt.arrivals += 1
        a_k = sent[k] if np.isinf(t_arr[k]) else t_arr[k]  # a follow-up turn's intended time: its send
        _count_quarter(p, a_k, quarter, np.int64(0))
        mt.attempts += q.attempts
        mt.retries += q.retries
        o = q.outcome
        if wait.shape[0] > 0 and not np.isnan(sent[k]):
            wait[nw] = sent[k] - t_arr[k]
            wait_sum += wait[nw]
            nw += 1
        if o == Fate.COMPLETED:
            mt.completed += 1
            a = (q.first_ms - sent[k]) + ovh
            e = (q.done_ms - sent[k]) + ovh
            ttft[nt] = a
            ttft_rep[nt] = q.done_rep
            e2e[nt] = e
            target = p.slo_ttft_ms + p.slo_ttft_ms_per_token * q.P  # = slo_ttft_ms when the allowance is 0
            if scaled:
                excess[nt] = a - target
            nt += 1
            e2e_sum += e
            ok = a <= target
            if q.O >= 2:
                tp = (q.done_ms - q.first_ms) / (q.O - 1)
                tpot[np_] = tp
                np_ += 1
                ok = ok and tp <= p.slo_tpot_ms
            if ok:
                good += 1
                _count_quarter(p, a_k, quarter, np.int64(1))
        elif o == Fate.FAILED:
            mt.failed += 1
        elif o == Fate.REJECTED:
            mt.rejected += 1
        elif o == Fate.SHED:
            mt.shed += 1
        else:
            mt.unfinished += 1
    _per_replica_ttft(rep, ttft[:nt], ttft_rep[:nt])
    a = of_selected_nb(ttft[:nt], P50_P90_P99)  # (after _per_replica_ttft: selection reorders ttft)
    mt.ttft_p50, mt.ttft_p90, mt.ttft_p99 = a[0], a[1], a[2]
    mt.ttft_excess_p99 = of_selected_nb(excess[:nt], P99)[0] if scaled else np.nan
    a = of_selected_nb(tpot[:np_], P50_P90_P99)
    mt.tpot_p50, mt.tpot_p90, mt.tpot_p99 = a[0], a[1], a[2]
    a = of_selected_nb(e2e[:nt], P50_P90_P99)
    mt.e2e_p50, mt.e2e_p90, mt.e2e_p99 = a[0], a[1], a[2]
    mt.e2e_mean = e2e_sum / nt if nt > 0 else np.nan
    a = of_selected_nb(wait[:nw], P50_P99)
    mt.client_wait_p50, mt.client_wait_p99 = a[0], a[1]
    mt.client_wait_mean = wait_sum / nw if nw > 0 else np.nan
    itl = of_weighted_nb(gap_ms, gap_n, ITL_RANKS)
    mt.itl_p50, mt.itl_p90, mt.itl_p99, mt.itl_max = itl[0], itl[1], itl[2], itl[3]
    mt.attainment = good / mt.arrivals if mt.arrivals > 0 else np.nan
    mt.attainment_first = quarter[1] / quarter[0] if quarter[0] > 0 else np.nan
    mt.attainment_last = quarter[3] / quarter[2] if quarter[2] > 0 else np.nan
    mt.goodput = good / measure_s
    mt.throughput = mt.done_any / measure_s
    mt.token_throughput = mt.tokens_window / measure_s
    mt.prefix_hit_rate = mt.hit_tokens / mt.admit_tokens if mt.admit_tokens > 0 else np.nan
    mt.preempted_hit_rate = mt.preempted_hit_tokens / mt.preempted_tokens if mt.preempted_tokens > 0 else np.nan
    mt.batch_mean = mt.batch_ms / mt.busy_ms if mt.busy_ms > 0 else np.nan
    area = 0.0
    first = 0.0
    last = 0.0
    occ = 0.0
    high = 0
    placed = 0
    k0 = rep[0].kv_blocks  # each replica's block-ms in units of replica 0's pool: its share of its own pool
    for i in range(rep.shape[0]):
        scale = k0 / rep[i].kv_blocks  # (1.0 when the pools are alike: the sums as they were)
        area += rep[i].area * scale
        first += rep[i].area_first * scale
        last += rep[i].area_last * scale
        occ += rep[i].occ_sum
        high += rep[i].occ_high
        placed += rep[i].assigned
    mt.placement_occupancy = occ / placed if placed > 0 else np.nan
    mt.placement_occupancy_high = high / placed if placed > 0 else np.nan
    mt.kv_occupancy = area / k0 / rep.shape[0] / (p.horizon_ms - p.warmup_ms)
    mt.kv_occupancy_first = first / k0 / rep.shape[0] / p.quarter_ms
    mt.kv_occupancy_last = last / k0 / rep.shape[0] / p.quarter_ms
