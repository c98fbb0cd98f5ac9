"""Prefill/decode disaggregation's sweep keys (``[pools]``) and their checks (issue 42,
docs/model.md "Prefill/decode disaggregation").

Each pool may set its own replica settings (its GPUs and engine): ``[pools.prefill_replica]``
and ``[pools.decode_replica]`` take the ``[replica]`` keys of :data:`POOL_KEYS`, flat names
``prefill_<key>`` and ``decode_<key>`` (``prefill_kv_blocks``, ``decode_step_ms_base``);
a key a pool does not set is ``[replica]``'s in the same run (``Param.inherit``). Their
``Param``s are derived from the ``[replica]`` ones (:func:`pool_params`), not written
again. The link's KV bytes per token come from ``kv_bytes_per_token`` or from a model
description (``link.model``, calibrate's ``--model`` file: :func:`model_kv_bytes`).

``[pools] prefill = N_p, decode = N_d`` splits the cluster: replicas ``1 … N_p`` serve in
the prefill pool, the others in the decode pool. ``prefill = 0`` (the default) is the
co-located cluster, and then no other key of the table may be given (it would be
ignored) and no Dataset records them (:func:`unused`), so a co-located stage is what it
was before the table existed. The compiled engine simulates a pair's way with
``scheduler = "reserve"`` (routesim/batching/pd_engine.py); ``scheduler = "vllm"`` with
pools is refused by :func:`check_stage` with one line saying so.
"""

import dataclasses


from .. import step_cost
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
    Param("kv_bytes_per_token", SECTION, ("link", "kv_bytes_per_token"), KV_BYTES_LLAMA_8B, "bytes", "KV bytes of one token sent from the prefill to the decode replica (or link.model)", kind=int, low=1),
    Param("kv_model", SECTION, ("link", "model"), "", "", "model description whose KV bytes per token the link sends (calibrate's --model file, relative to the sweep file's folder: 2 · layers · kv_heads · head_dim · bytes_per_kv); instead of kv_bytes_per_token", kind=str),
)

ROLES = ("prefill", "decode")
"""The pools that may set their own replica settings, in replica order."""

POOL_KEYS = ("waiting_cap", "max_batch", "kv_blocks", "max_batched_tokens", "chunked_prefill",
             *(p.name for p in step_cost.PARAMS), "step_cpu_ms", "step_cpu_ms_per_seq")
"""The ``[replica]`` keys a pool may set for itself: what describes its GPU and engine
(its KV pool, batch limits, chunking, step cost with each form's coefficients, the
engine loop's CPU time). The others stay the run's: ``block_tokens`` (a run's workload
cuts every request's prefix ids in one block size), ``scheduler`` and
``prefix_caching`` (pools need the reserve scheduler, which always caches), the
cold start, readiness and fast-failure times, ingress (refused with pools)."""


def pool_name(role: str, name: str) -> str:
    """The flat name of ``[replica]`` key ``name`` in ``role``'s pool: ``prefill_kv_blocks``."""
    return f"{role}_{name}"


def table(role: str) -> str:
    """The ``[pools]`` sub-table of ``role``'s replica settings: ``prefill_replica``."""
    return f"{role}_replica"


POOL_NAMES = tuple(pool_name(r, n) for r in ROLES for n in POOL_KEYS)
_TOP = {p.name: p.path[0] for p in step_cost.PARAMS}  # a step-cost key's table (step_ms) or itself

NAMES = tuple(p.name for p in PARAMS) + POOL_NAMES
SECTION_KEYS = tuple(dict.fromkeys(p.path[0] for p in PARAMS)) + tuple(table(r) for r in ROLES)
LEAVES = {"link": tuple(p.path[1] for p in PARAMS if p.path[0] == "link"),
          **{table(r): tuple(dict.fromkeys(_TOP.get(n, n) for n in POOL_KEYS)) for r in ROLES}}


def pool_params(replica: dict) -> tuple:
    """The pools' replica keys, derived from ``replica`` (flat name -> the ``[replica]``
    Param): the same kind, bounds, units and help, in ``[pools.<role>_replica]``, used
    with the pool's own step cost, and by default the run's ``[replica]`` value."""
    out = []
    for role in ROLES:
        for name in POOL_KEYS:
            p = replica[name]
            when = (pool_name(role, p.when[0]), p.when[1]) if p.when else ()
            out.append(dataclasses.replace(p, name=pool_name(role, name), section=SECTION,
                                           path=(table(role), *p.path), help=f"the {role} pool's: {p.help}",
                                           when=when, default_when=(), inherit=name))
    return tuple(out)


def pool_value(values, given, role: str, name: str) -> tuple:
    """The values of ``[replica]`` key ``name`` in ``role``'s pool over a stage's runs
    (``values``: parameter -> tuple of values; ``given``: the names the file sets): the
    pool's own when the file sets it, else ``[replica]``'s."""
    own = pool_name(role, name)
    return values[own] if own in given else values[name]


def link_bytes(flat: dict, sweep_path) -> dict:
    """One run's values (``flat``) with ``kv_bytes_per_token`` derived from its
    ``link.model`` description when it names one (relative to the sweep file's folder,
    ``sweep_path``; checked when the sweep was read: :func:`check_stage`)."""
    if not flat.get("kv_model"):
        return flat
    from ..config.checks import trace_file
    return dict(flat, kv_bytes_per_token=model_kv_bytes(trace_file(sweep_path, flat["kv_model"])))


def model_kv_bytes(path) -> int:
    """KV bytes per token of the model description at ``path`` (calibrate's ``--model``
    file: routesim.calibrate.hardware's ``read`` and ``derive``). Raises
    routesim.calibrate.logs.LogError for a bad file."""
    from ..calibrate import hardware
    return int(round(hardware.derive(hardware.read(path))["kv_bytes_per_token"]))


def unused(values) -> set:
    """The keys no run of a stage uses (``values``: parameter -> tuple of values): all
    of them when no run has a prefill pool, so that a co-located stage's Dataset does
    not record them; of the link's bytes, ``kv_bytes_per_token`` when they come from
    ``link.model``, else ``link.model``."""
    if values["prefill_replicas"] == (0,):
        return set(NAMES)
    return {"kv_bytes_per_token"} if values["kv_model"] != ("",) else {"kv_model"}


def forms(values, given) -> set:
    """The step costs the pools of a stage's runs use (their own ``step_cost``, or
    ``[replica]``'s), none when no run has a prefill pool (``values``, ``given``: as
    :func:`pool_value`'s)."""
    if values["prefill_replicas"] == (0,):
        return set()
    return {f for r in ROLES for f in pool_value(values, given, r, "step_cost")}


def check_stage(rd, stage, src, replicas):
    """The stage's pools against its cluster of ``replicas`` replicas, then the refusal
    of what the engine does not simulate with pools yet (the vllm mode)."""
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
    _check_pool_costs(rd, stage, src)
    _check_kv_model(rd, stage, src)
    if "vllm" in v["scheduler"]:
        rd.fail(src("prefill_replicas"), 'pools need scheduler = "reserve" (the vllm mode\'s '
                                         f'WAITING_FOR_REMOTE_KVS is a later increment) in stage {stage.name!r}')


def _check_pool_costs(rd, stage, src):
    """A pool's coefficient table of a step cost the pool never uses (its own
    ``step_cost``, or ``[replica]``'s) is refused: it would be ignored."""
    for role in ROLES:
        used = pool_value(stage.values, stage.given, role, "step_cost")
        for form, names in step_cost.KEYS.items():
            given = [pool_name(role, n) for n in names if form not in used and pool_name(role, n) in stage.given]
            if given:
                tab = f"{table(role)}.{step_cost.BY_NAME[form].TABLE}"
                rd.fail(src(given[0]), f"{tab} is the {form} step cost's, but the {role} pool's step_cost is "
                        f'{" or ".join(repr(c) for c in used)} in stage {stage.name!r}: set '
                        f'[pools.{table(role)}] step_cost = "{form}", or leave {tab} out')


def _check_kv_model(rd, stage, src):
    """``link.model`` and ``link.kv_bytes_per_token`` say the same thing: one at most;
    each model description is read and its KV bytes derived now, so that a bad file is
    one line naming the key."""
    from ..calibrate.logs import LogError
    from ..config.checks import trace_file
    models = [m for m in stage.values["kv_model"] if m]
    if not models:
        return
    if "kv_bytes_per_token" in stage.given:
        rd.fail(src("kv_model"), "give the link's KV bytes per token once: link.model or link.kv_bytes_per_token, "
                                 f"not both, in stage {stage.name!r}")
    for m in models:
        try:
            model_kv_bytes(trace_file(rd.path, m))
        except LogError as exc:
            rd.fail(src("kv_model"), f"model description: {exc}")
