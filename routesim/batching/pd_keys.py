"""Prefill/decode disaggregation's sweep keys (``[pools]``) and their checks (issue 42,
docs/model.md "Prefill/decode disaggregation").

``[pools] prefill = N_p, decode = N_d`` splits the cluster: replicas ``1 … N_p`` serve in
the prefill pool, the others in the decode pool. ``prefill = 0`` (the default) is the
co-located cluster, and then no other key of the table may be given (it would be
ignored) and no Dataset records them (:func:`unused`), so a co-located stage is what it
was before the table existed. The compiled engine simulates a pair's way with
``scheduler = "reserve"`` (routesim/batching/pd_engine.py); what it does not simulate
with pools yet (:data:`LATER`; fast-failure events: config/checks.py) is refused by
:func:`check_stage` with one line saying so.
"""

import math


from ..schema import Param
from ..step_cost import linear
from . import policies

SECTION = "pools"

ROUTES = ("independent", "selective", "transfer_aware")
"""Pair-routing rules: both replicas by their pools' policies; a prefill replica only
when the prompt's uncached part on the chosen decode replica is over a threshold
(llm-d's decider); the prefill replica by its queue and the transfer's link shares."""

POLICY_NAMES = ("same", *policies.NAMES)
"""What ``prefill_policy`` and ``decode_policy`` take: "same" (the run's ``policy``) or
a batching policy."""

PER_PREFILL_TOKEN_MS = next(p.default for p in linear.PARAMS if p.name == "step_ms_per_prefill_token")
"""The linear step cost's time per prefill token: the default ``token_ms``."""

KV_BYTES_LLAMA_8B = 2 * 32 * 8 * 128 * 2
"""KV bytes per token of Llama-3.1-8B in 16 bits (2 · layers · kv_heads · head_dim ·
bytes_per_kv, routesim.calibrate.hardware.derive): the default ``kv_bytes_per_token``."""

PARAMS = (
    Param("prefill_replicas", SECTION, ("prefill",), 0, "replicas", "replicas in the prefill pool, the cluster's first (0: every replica co-located)", kind=int, low=0),
    Param("decode_replicas", SECTION, ("decode",), 0, "replicas", "replicas in the decode pool, the cluster's last", kind=int, low=0),
    Param("pair_route", SECTION, ("route",), "independent", "", "how a router picks the (prefill, decode) pair: independent, selective or transfer_aware", kind=str, options=ROUTES),
    Param("prefill_policy", SECTION, ("prefill_policy",), "same", "", "policy choosing the prefill replica (same: the run's policy)", kind=str, options=POLICY_NAMES),
    Param("decode_policy", SECTION, ("decode_policy",), "same", "", "policy choosing the decode replica (same: the run's policy)", kind=str, options=POLICY_NAMES),
    Param("threshold_tokens", SECTION, ("threshold_tokens",), 0, "tokens", "selective: a prompt whose uncached part on the decode replica is at most this is served there whole", kind=int, low=0, when=("pair_route", ("selective",))),
    Param("transfer_token_ms", SECTION, ("token_ms",), PER_PREFILL_TOKEN_MS, "ms/token", "transfer_aware: time a prefill replica takes per token ahead of the prompt", low=0, when=("pair_route", ("transfer_aware",))),
    Param("lease_ms", SECTION, ("lease_ms",), 30000.0, "ms", "time a prefill replica holds a prompt's blocks after its decode side is lost (vLLM's kv_lease_duration)", low=0, low_open=True),
    Param("link_latency_ms", SECTION, ("link", "latency_ms"), 1.0, "ms", "a transfer's fixed delay before its bytes flow", low=0),
    Param("link_bandwidth_gb_s", SECTION, ("link", "bandwidth_gb_s"), 50.0, "GB/s", "each replica's outgoing and incoming link (10^9 bytes/s), shared by its transfers", low=0, low_open=True),
    Param("kv_bytes_per_token", SECTION, ("link", "kv_bytes_per_token"), KV_BYTES_LLAMA_8B, "bytes", "KV bytes of one token sent from the prefill to the decode replica", kind=int, low=1),
)
NAMES = tuple(p.name for p in PARAMS)
SECTION_KEYS = tuple(dict.fromkeys(p.path[0] for p in PARAMS))
LEAVES = {"link": tuple(p.path[1] for p in PARAMS if p.path[0] == "link")}


LATER = (("admission_max_tokens", "the front door"), ("max_in_flight", "a closed-loop client"),
         ("ingress_ms", "an ingress delay"), ("ingress_ms_per_token", "an ingress delay"))
"""Keys whose non-default value the engine does not simulate with pools yet (with what
it would need): the front door, the closed loop, the engine loop's ingress
(docs/model.md "Left for later increments"; the reference refuses them with pools
too)."""


def unused(values) -> set:
    """The keys no run of a stage uses (``values``: parameter -> tuple of values): all
    of them when no run has a prefill pool, so that a co-located stage's Dataset does
    not record them."""
    return set(NAMES) if values["prefill_replicas"] == (0,) else set()


def check_stage(rd, stage, src, replicas):
    """The stage's pools against its cluster of ``replicas`` replicas, then the refusal
    of what the engine does not simulate with pools yet."""
    v, given = stage.values, stage.given
    pooled = [n for n in v["prefill_replicas"] if n > 0]
    if not pooled:
        extra = [n for n in NAMES if n != "prefill_replicas" and n in given]
        if extra:
            rd.fail(src(extra[0]), f"there is no prefill pool in stage {stage.name!r} (prefill = 0: every "
                                   "replica co-located), so this key would be ignored: set [pools] prefill, "
                                   "or leave the key out")
        return
    for p in pooled:  # a run with prefill = 0 is co-located, whatever decode says
        for d in v["decode_replicas"]:
            if d < 1 or p + d != replicas:
                rd.fail(src("decode_replicas"),
                        f"prefill ({p}) and decode ({d}) must both be at least 1 and add up to the cluster's "
                        f"{replicas} replicas in stage {stage.name!r}")
    for name, route in (("threshold_tokens", "selective"), ("transfer_token_ms", "transfer_aware")):
        if name in given and route not in v["pair_route"]:
            rd.fail(src(name), f"this key is used only with route = {route!r}, but route is "
                    f'{" or ".join(repr(r) for r in v["pair_route"])} in stage {stage.name!r}: it would be ignored')
    if "vllm" in v["scheduler"]:
        rd.fail(src("prefill_replicas"), 'pools need scheduler = "reserve" (the vllm mode\'s '
                                         f'WAITING_FOR_REMOTE_KVS is a later increment) in stage {stage.name!r}')
    for name, what in LATER:
        if any(x != 0 and not math.isinf(x) for x in v[name]):
            rd.fail(src(name), f"{what} with prefill/decode pools are not simulated yet (a later increment of "
                               f"issue 42): leave this key out, or set [pools] prefill = 0, in stage {stage.name!r}")
