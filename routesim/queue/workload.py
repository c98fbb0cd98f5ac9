"""The common-random-number workload of model.md §2.

A run's workload depends only on its seed, its rate profile and the workload
parameters, never on the policy: every policy of a grid replays the same arrivals.
Arrival ``k`` consumes row ``k`` of ``Generator(PCG64(seed)).random((n, 4))``.
Logarithms, exponentials and sines come from routesim.ieee_math, so the same seed
gives the same bits on every machine.
"""

from dataclasses import dataclass

import numpy as np

from ..arrivals import draw_arrivals
from ..ieee_math import box_muller, exp_array, log1p_array


@dataclass(frozen=True)
class WorkloadParams:
    """Token and demand distributions (defaults: model.md §2)."""

    prompt_median: float = 384.0
    prompt_sigma: float = 0.8
    prompt_min: int = 16
    prompt_max: int = 4096
    output_median: float = 88.0
    output_sigma: float = 0.8
    output_min: int = 4
    output_max: int = 1024
    demand_base: float = 1.0           # ms
    demand_per_prompt: float = 1 / 256  # ms per prompt token
    demand_per_output: float = 1 / 16   # ms per output token
    jitter_min: float = 0.9
    jitter_max: float = 1.1
    demand: str = "tokens"              # "tokens", "exponential" or "constant"
    reference_demand_ms: float = 11.0   # mean (exponential) or value (constant)


@dataclass(frozen=True)
class Workload:
    """One workload: arrays of shape ``(arrivals,)`` in arrival order."""

    t_ms: np.ndarray       # float64, arrival time (ms)
    prompt: np.ndarray     # int32, prompt tokens
    output: np.ndarray     # int32, output tokens
    jitter: np.ndarray     # float64, service-time multiplier
    demand_ms: np.ndarray  # float64, demand of the request (ms)

    def __len__(self) -> int:
        return self.t_ms.size


def generate(seed: int, rate_rps: float, rate_events, horizon_ms: float,
             params: WorkloadParams = WorkloadParams()) -> Workload:
    """Draw the arrivals in ``[0, horizon_ms)`` of one (seed, rate profile)."""
    t_ms, u = draw_arrivals(seed, rate_rps, rate_events, horizon_ms, 4)

    z1, z2 = box_muller(u, 1, 2)
    p = params
    prompt = np.clip(np.rint(p.prompt_median * exp_array(p.prompt_sigma * z1)), p.prompt_min, p.prompt_max)
    output = np.clip(np.rint(p.output_median * exp_array(p.output_sigma * z2)), p.output_min, p.output_max)
    jitter = p.jitter_min + (p.jitter_max - p.jitter_min) * u[:, 3]
    if p.demand == "tokens":
        demand = p.demand_base + prompt * p.demand_per_prompt + output * p.demand_per_output
    elif p.demand == "exponential":  # inverse transform of U[k,1]
        demand = -p.reference_demand_ms * log1p_array(-u[:, 1])
    elif p.demand == "constant":
        demand = np.full(len(t_ms), float(p.reference_demand_ms))
    else:
        raise ValueError(f"unknown demand distribution {p.demand!r}")
    return Workload(t_ms=t_ms, prompt=prompt.astype(np.int32), output=output.astype(np.int32),
                    jitter=jitter, demand_ms=demand)


def from_trace(seed: int, t_ms, prompt, output, params: WorkloadParams = WorkloadParams()) -> Workload:
    """A trace window's requests (``routesim.traces.Replay``'s arrivals and tokens) as
    the queue model's workload: demand by model.md §2's token formula,
    ``base + P·per_prompt + O·per_output``; jitter as for synthetic requests, request
    ``k``'s from ``U[k,3]`` of ``Generator(PCG64(seed)).random((n, 4))`` (the same for
    every policy; ``jitter = { min = 1, max = 1 }`` replays the demands exactly).
    """
    p = params
    if p.demand != "tokens":
        raise ValueError(f"a trace's demand comes from its token counts, not {p.demand!r}")
    t_ms = np.asarray(t_ms, dtype=np.float64)
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    u = np.random.Generator(np.random.PCG64(seed)).random((t_ms.size, 4))
    jitter = p.jitter_min + (p.jitter_max - p.jitter_min) * u[:, 3]
    demand = p.demand_base + prompt * p.demand_per_prompt + output * p.demand_per_output
    return Workload(t_ms=t_ms.copy(), prompt=prompt.astype(np.int32), output=output.astype(np.int32),
                    jitter=jitter, demand_ms=demand)
