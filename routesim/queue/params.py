"""Every sweep key of the queue model (docs/model.md, interface.md) with its default,
units and one line of help, the model's tables, and the checks only it makes: the
config reads this, the grid builds runs from it, the Dataset copies units and help
into attrs and docs/keys.md (:mod:`routesim.keys`) is rendered from it. ``MODEL`` is the model as the pipeline sees it (routesim.schema)."""

from ..schema import TRACE_LEAVES, TRACE_PARAMS, Param, ReplicaModel
from .dtypes import EVENT_NAMES, Policy

PARAMS = (
    Param("dt_ms", "simulation", ("dt_ms",), 0.5, "ms", "time step; 0 = exact event-time mode", low=0),
    Param("warmup_s", "simulation", ("warmup_s",), 3.0, "s", "warm-up before the measured cohort", low=0, low_open=True),
    Param("measure_s", "simulation", ("measure_s",), 12.0, "s", "measurement window after warm-up", low=0, low_open=True),
    Param("slo_ms", "simulation", ("slo_ms",), 50.0, "ms", "end-to-end latency objective", low=0, low_open=True),
    Param("queue_cap", "cluster", ("queue_cap",), 50, "requests", "waiting requests per replica, the one in service not counted (inf: unbounded)", kind=int, low=1, allow_inf=True),
    Param("reference_demand_ms", "cluster", ("reference_demand_ms",), 11.0, "ms", "demand of the reference request", low=0, low_open=True),
    Param("demand", "workload", ("demand",), "tokens", "", "demand distribution: tokens, exponential (mean reference_demand_ms) or constant", kind=str, options=("tokens", "exponential", "constant")),
    Param("prompt_tokens_median", "workload", ("prompt_tokens", "median"), 384.0, "tokens", "median of the prompt-token log-normal", low=0, low_open=True),
    Param("prompt_tokens_sigma", "workload", ("prompt_tokens", "sigma"), 0.8, "1", "sigma of the prompt-token log-normal", low=0),
    Param("prompt_tokens_min", "workload", ("prompt_tokens", "min"), 16, "tokens", "smallest prompt", kind=int, low=0),
    Param("prompt_tokens_max", "workload", ("prompt_tokens", "max"), 4096, "tokens", "largest prompt", kind=int, low=0),
    Param("output_tokens_median", "workload", ("output_tokens", "median"), 88.0, "tokens", "median of the output-token log-normal", low=0, low_open=True),
    Param("output_tokens_sigma", "workload", ("output_tokens", "sigma"), 0.8, "1", "sigma of the output-token log-normal", low=0),
    Param("output_tokens_min", "workload", ("output_tokens", "min"), 4, "tokens", "shortest output", kind=int, low=0),
    Param("output_tokens_max", "workload", ("output_tokens", "max"), 1024, "tokens", "longest output", kind=int, low=0),
    Param("demand_ms_base", "workload", ("demand_ms", "base"), 1.0, "ms", "fixed demand of every request", low=0, when=("demand", ("tokens",))),
    Param("demand_ms_per_prompt_token", "workload", ("demand_ms", "per_prompt_token"), 0.00390625, "ms", "demand per prompt token", low=0, when=("demand", ("tokens",))),
    Param("demand_ms_per_output_token", "workload", ("demand_ms", "per_output_token"), 0.0625, "ms", "demand per output token", low=0, when=("demand", ("tokens",))),
    Param("jitter_min", "workload", ("jitter", "min"), 0.9, "1", "smallest service-time jitter factor", low=0, low_open=True),
    Param("jitter_max", "workload", ("jitter", "max"), 1.1, "1", "largest service-time jitter factor", low=0, low_open=True),
    Param("alpha", "policy", ("alpha",), 0.15, "1", "EWMA weight of every estimate", low=0, low_open=True, high=1),
    Param("exploration", "policy", ("exploration",), 0.35, "1", "adaptive's exploration weight c", low=0, when=("policy", ("adaptive",))),
    Param("reward_ceiling_ms", "policy", ("reward_ceiling_ms",), 100.0, "ms", "adaptive's reward ceiling L", low=0, low_open=True, when=("policy", ("adaptive",))),
    Param("prior_service_ms", "policy", ("prior_service_ms",), 11.0, "ms", "initial service-time estimate ŝ₀", low=0, low_open=True),
    Param("choices", "policy", ("choices",), 2, "replicas", "replicas power_of_two samples per decision", kind=int, low=1, when=("policy", ("power_of_two",))),
)
PARAM = {p.name: p for p in PARAMS}

DEMAND_PARAMETERS = tuple(n for n in PARAM if PARAM[n].section == "workload" or n == "reference_demand_ms")
"""The parameters that set a request's mean demand (:func:`theory.mean_demand_ms`)."""

STANDARD_DIMS = ("policy", "exploration", "rate_rps", "heterogeneity", "scenario", "seed")
"""Dimensions every stage's Dataset has, in this order; swept parameters follow."""

_MIN_MAX = (("prompt_tokens_min", "prompt_tokens_max"), ("output_tokens_min", "output_tokens_max"),
            ("jitter_min", "jitter_max"))
_SECTION_KEYS = {
    "simulation": ("dt_ms", "warmup_s", "measure_s", "slo_ms"),
    "cluster": ("queue_cap", "reference_demand_ms", "heterogeneity"),
    "workload": ("demand", "prompt_tokens", "output_tokens", "demand_ms", "jitter", "source", "trace"),
    "policy": ("alpha", "exploration", "reward_ceiling_ms", "prior_service_ms", "choices"),
}
_WORKLOAD_LEAVES = {"prompt_tokens": ("median", "sigma", "min", "max"),
                    "output_tokens": ("median", "sigma", "min", "max"),
                    "demand_ms": ("base", "per_prompt_token", "per_output_token"),
                    "jitter": ("min", "max"), "trace": TRACE_LEAVES["trace"]}

POLICIES = tuple(p.name.lower() for p in Policy)
"""Policy names, in code order (routesim.queue.policies.NAMES)."""

MODEL = ReplicaModel(
    kind="queue", package=__package__, params=PARAMS + TRACE_PARAMS, section_keys=_SECTION_KEYS,
    leaves=_WORKLOAD_LEAVES, dims=STANDARD_DIMS, policies=POLICIES,
    event_kinds={name: code for code, name in EVENT_NAMES.items()},
    min_max=_MIN_MAX, heterogeneity={"default": (8.0, 11.0, 16.0), "high": (6.0, 11.0, 22.0)},
    help_heterogeneity="mean service times (ms)", block_ids=False, trace_axes=False,
    typed_set_values=False, capacity_latency=("latency_p99", "slo_ms"),
    writes_behind=False)  # (its prange splits a chunk's runs among the threads up front: a writer
                          # thread beside them delays the whole chunk; the study 3.0 -> 3.4 s)


def check_stage(rd, stage, src, replicas):
    """What only a queue stage must satisfy: its time step divides every horizon
    (``replicas``, the cluster's size, is not needed here)."""
    from .engine import grid_end_ms
    v = stage.values
    for dt in v["dt_ms"]:
        if dt == 0:
            continue
        for w in v["warmup_s"]:
            for m in v["measure_s"]:
                h = (w + m) * 1000.0
                if abs(grid_end_ms.py_func(h, dt) - h) > 1e-9 * h:
                    rd.fail(src("dt_ms"), f"a step of {dt:g} ms does not divide the "
                                          f"horizon of {h:g} ms in stage {stage.name!r}")
