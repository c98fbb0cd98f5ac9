"""Fit by simulation (issue 41, item 5): a step cost from per-request times only.

Most benchmark clients log, per request, its send time, prompt and output tokens, time
to first token and end-to-end latency — not per-token timestamps, so no engine step can
be rebuilt from them (calibrate.steps). This module fits the step cost the other way:
it replays the logged requests through routesim's batching engine (open loop at the
logged send times, or closed loop at the run's concurrency cap) under a grid of
candidate parameters, all candidates as one grid of runs (one engine computation, the
candidates a dimension of the grid, as ``routesim.capacity`` evaluates its rates), and
keeps the candidate whose per-request figures are closest to the log's.

**The error minimised** (``ERROR``): the mean, over the fitting runs and over
``FIT_METRICS`` (TTFT p50 and p90, E2E p50, and the median over requests of the mean
inter-token time ``(E2E − TTFT)/(O − 1)``, routesim's ``tpot_p50``), of the absolute
relative error ``|predicted − measured| / measured``. Percentiles are nearest-rank, as
routesim's metrics (ranks.nearest_rank).

**The candidates** (:class:`Axis`): each axis multiplies (``scale = "log"``) or shifts
(``"lin"``) one or more flat parameters together from a start point. The default axes
of the roofline (step_cost/roofline.py) are ``memory`` (``weights`` and
``per_kv_token`` by one factor: the model/hardware description's ratio of KV bytes to
weight bytes is kept, calibrate.hardware), ``compute`` (``per_token`` and
``per_token_pair`` by one factor) and the client's ``client_overhead_ms``. ``base`` is
held at its start: per-request figures see it only in sums (a decode step's ``base +
weights + …``, a first token's overhead ``+ base + …``), so it cannot be separated from
the ``memory`` factor and the overhead; ``axes=`` may add it (the axis ``base``) when
the log has compute-bound steps enough to tell. A parameter of any other flat name
(the engine-loop times of the serving-loop issue, once the engine has them) is an axis
by its name: :func:`axis`.

**The narrowing** (:func:`fit`): round 1 evaluates ``POINTS`` values per axis (the
start, and one step either side: 3^axes candidates), every later round the same around
the best candidate so far: an axis whose best value is at the edge of its range moves
its centre there and keeps its step; an axis whose best is inside halves its step (the
square root of its factor, for a log axis). It stops when every axis's step is at its
resolution (``RESOLUTION``: a factor of 1.02, or 0.5 ms) and the best is inside every
range, or after ``MAX_ROUNDS``. So the best candidate is a local minimum of the error
on a grid of the final step: the truth is within about half a step of it when the
error is smooth and its minimum is the truth's.
"""

import itertools
import math
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .. import step_cost
from ..ranks import nearest_rank
from ..replay import replay_sweep

FIT_METRICS = ("ttft_p50", "ttft_p90", "e2e_p50", "tpot_p50")
"""The per-request figures the fit compares (routesim's metric names)."""
ERROR = ("mean absolute relative error of TTFT p50, TTFT p90, E2E p50 and the median per-request "
         "mean inter-token time, over the fitting runs")
POINTS = 3
MAX_ROUNDS = 16
RESOLUTION = {"log": 1.02, "lin": 0.5}
SHIFT_MS = 1000.0
"""routesim's trace times are the log's (from its first send) plus this: the warm-up
routesim needs (> 0) holds no request."""


@dataclass(frozen=True)
class Log:
    """One logged run, per request (R requests): ``send_ms`` (R,) ms on the log's clock,
    ``prompt`` and ``output`` (R,) tokens, ``ttft_ms`` and ``e2e_ms`` (R,) ms from the
    send; ``max_in_flight`` the client's cap (0: open loop); the requests sent in
    ``[cohort_from_s, cohort_to_s)`` (s from the first send) are the ones compared (the
    others load the server all the same). A fit compares routesim's metrics over its
    cohort, which runs to the end of the log: a fitting log's ``cohort_to_s`` is inf."""
    name: str
    send_ms: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    max_in_flight: int = 0
    cohort_from_s: float = 0.0
    cohort_to_s: float = math.inf

    @property
    def rel_ms(self) -> np.ndarray:
        """(R,) send times from the first send, ms."""
        return self.send_ms - self.send_ms.min()

    @property
    def cohort(self) -> np.ndarray:
        """(R,) bool: the requests compared."""
        return (self.rel_ms >= 1000.0 * self.cohort_from_s) & (self.rel_ms < 1000.0 * self.cohort_to_s)

    @property
    def rate_rps(self) -> float:
        """Requests per second over the span of the sends (inf for one instant)."""
        span = float(self.rel_ms.max()) / 1000.0
        return len(self.send_ms) / span if span > 0 else math.inf


def tpot(e2e_ms, ttft_ms, output):
    """(R,) each request's mean inter-token time (E2E − TTFT)/(O − 1), ms; NaN for O < 2."""
    o = np.asarray(output, dtype=float)
    return np.where(o >= 2, (e2e_ms - ttft_ms) / np.maximum(o - 1, 1), np.nan)


def figures(ttft_ms, e2e_ms, output) -> dict:
    """``FIT_METRICS`` of per-request times (ms; nearest rank, as routesim's metrics)."""
    t = tpot(e2e_ms, ttft_ms, output)
    return {"ttft_p50": nearest_rank(np.asarray(ttft_ms, float), 50),
            "ttft_p90": nearest_rank(np.asarray(ttft_ms, float), 90),
            "e2e_p50": nearest_rank(np.asarray(e2e_ms, float), 50),
            "tpot_p50": nearest_rank(t[np.isfinite(t)], 50)}


def measured(log: Log) -> dict:
    """The log's ``FIT_METRICS`` over its cohort."""
    c = log.cohort
    return figures(log.ttft_ms[c], log.e2e_ms[c], log.output[c])


# --- the candidates ---------------------------------------------------------------

@dataclass(frozen=True)
class Axis:
    """One dimension of the candidates: ``targets`` {flat parameter: start value} moved
    together, by a factor (``scale = "log"``: value = start × factor, factor = center ×
    step^k) or a shift (``"lin"``: value = start + center + step·k, floored at 0)."""
    name: str
    targets: dict
    scale: str = "log"
    center: float = 1.0
    step: float = 2.0

    def at(self, k) -> float:
        """The axis's coordinate ``k`` steps from its centre (factor or shift)."""
        if self.scale == "log":
            return self.center * self.step ** k
        return max(0.0, self.center + self.step * k)

    def values(self, coord) -> dict:
        """{flat parameter: value} at coordinate ``coord``."""
        if self.scale == "log":
            return {n: v * coord for n, v in self.targets.items()}
        return {n: max(0.0, v + coord) for n, v in self.targets.items()}

    def narrowed(self, best_k) -> "Axis":
        """The axis of the next round around offset ``best_k`` (see the module docstring)."""
        edge = abs(best_k) == POINTS // 2
        center = self.at(best_k)
        if edge:
            return replace(self, center=center)
        step = math.sqrt(self.step) if self.scale == "log" else self.step / 2.0
        return replace(self, center=center, step=max(step, RESOLUTION[self.scale]))

    @property
    def resolved(self) -> bool:
        return self.step <= RESOLUTION[self.scale] + 1e-12


def roofline_axes(start: dict, overhead_ms: float, names=("memory", "compute", "client_overhead_ms")) -> list:
    """The roofline's axes (module docstring) from ``start`` {roofline key: ms} and the
    start overhead (ms)."""
    flat = lambda k: f"roofline_ms_{k}"  # noqa: E731
    known = {
        "memory": Axis("memory", {flat("weights"): start["weights"], flat("per_kv_token"): start["per_kv_token"]}),
        "compute": Axis("compute", {flat("per_token"): start["per_token"],
                                    flat("per_token_pair"): start["per_token_pair"]}),
        "base": Axis("base", {flat("base"): start["base"]}),
        "client_overhead_ms": Axis("client_overhead_ms", {"client_overhead_ms": 0.0}, "lin",
                                   center=float(overhead_ms), step=8.0),
    }
    return [known[n] if n in known else axis(n, 0.0) for n in names]


def axis(name, start, step=8.0) -> Axis:
    """A shift axis of one flat parameter in ms (an engine-loop time, say) from ``start``."""
    return Axis(name, {name: 0.0}, "lin", center=float(start), step=step)


def candidates(axes) -> tuple:
    """(offsets (K, A) ints, values {flat parameter: (K,)}) of the round's 3^A candidates,
    the last axis fastest."""
    half = POINTS // 2
    offs = np.array(list(itertools.product(range(-half, half + 1), repeat=len(axes))), dtype=np.int64)
    vals = {}
    for j, a in enumerate(axes):
        for k_row, k in enumerate(offs[:, j]):
            for n, v in a.values(a.at(int(k))).items():
                vals.setdefault(n, np.empty(len(offs)))[k_row] = v
    return offs, vals


# --- one round: every candidate on every log, as grids of runs ------------------------

def trace_text(log: Log) -> str:
    """routesim's ``csv`` trace of a log (docs/traces.md): no block ids, so no prefix hits."""
    lines = ["arrival_ms,prompt_tokens,output_tokens"]
    for t, p, o in zip(log.rel_ms + SHIFT_MS, log.prompt, log.output):
        lines.append(f"{t:.3f},{int(p)},{int(o)}")
    return "\n".join(lines) + "\n"


def horizon_s(log: Log) -> float:
    """A horizon past every completion a plausible candidate gives: the sends' span plus
    twenty times the log's longest E2E, plus a minute (s)."""
    return float(log.rel_ms.max() + 20.0 * log.e2e_ms.max()) / 1000.0 + 60.0


def sweep_text(log: Log, replica: dict, trace_name: str) -> str:
    """A one-stage sweep replaying ``trace_name`` on one replica with ``replica``'s
    [replica] keys; the cohort starts at ``cohort_from_s``; ``client_overhead_ms`` is a
    two-valued axis, a placeholder the candidates replace (:func:`evaluate`)."""
    return replay_sweep(
        "simfit", {"kind": token_model().kind, "waiting_cap": 1000000, **replica},
        {"dt_ms": 0, "warmup_s": SHIFT_MS / 1000.0 + log.cohort_from_s, "measure_s": horizon_s(log), "drain_s": 0},
        {"trace": {"path": trace_name, "format": "csv"}, "max_in_flight": int(log.max_in_flight),
         "client_overhead_ms": [0.0, 1.0]})


def token_model():
    """The replica model with step costs (the one whose engine replays requests token by
    token), reached through the model registry."""
    from .. import models
    return next(m for m in models.every() if "step_cost" in m.param)


def grid_of(log: Log, replica: dict, values: dict, folder):
    """The batching grid of ``log`` under every candidate (``values`` {flat: (K,)}): K
    runs, run k candidate k. Parameters of the step cost go into each run's cost
    vector, any other into its own PARAMS field."""
    import routesim
    from .. import grid as grid_mod

    folder = Path(folder)
    (folder / "log.csv").write_text(trace_text(log))
    (folder / "simfit.toml").write_text(sweep_text(log, replica, "log.csv"))
    sweep = routesim.load_sweep(str(folder / "simfit.toml"))
    stage = sweep.stages[0]
    K = len(next(iter(values.values())))
    vals = dict(stage.values)
    vals["client_overhead_ms"] = tuple(float(k) for k in range(K))    # the candidate index
    g = grid_mod.build(sweep, replace(stage, values=vals), {})
    form = step_cost.BY_NAME[str(replica.get("step_cost", "linear"))]
    names = [p.name for p in form.PARAMS]
    for n, v in values.items():
        if n in names:
            g.params["cost"][:, names.index(n)] = v
        elif n in g.params.dtype.names:
            g.params[n] = v
        else:
            raise ValueError(f"{n}: not a parameter of the step cost {form.NAME!r} nor of a run")
    if "client_overhead_ms" not in values:
        g.params["client_overhead_ms"] = float(replica.get("client_overhead_ms", 0.0))
    return g


def simulate(logs, replica: dict, values: dict):
    """Metrics (L, K) METRICS of every log under every candidate: one grid per log."""
    from .. import batch
    out = []
    with tempfile.TemporaryDirectory() as d:
        for i, log in enumerate(logs):
            sub = Path(d) / str(i)
            sub.mkdir()
            out.append(batch.simulate(grid_of(log, replica, values, sub)).metrics)
    return np.stack(out)


def errors(logs, metrics) -> np.ndarray:
    """(K,) the fit's error (``ERROR``) of each candidate from ``metrics`` (L, K); inf
    where a candidate left a cohort request unfinished."""
    err = np.zeros(metrics.shape[1])
    for i, log in enumerate(logs):
        if log.cohort_to_s != math.inf:
            raise ValueError(f"{log.name}: a fitting log's cohort runs to its end (cohort_to_s = inf)")
        m = measured(log)
        done = metrics[i]["completed"] == int(log.cohort.sum())
        for name in FIT_METRICS:
            err += np.abs(metrics[i][name] - m[name]) / m[name]
        err[~done] = np.inf
    return err / (len(logs) * len(FIT_METRICS))


@dataclass
class Result:
    """The fit: ``values`` {flat: value} of the best candidate, its ``error``, the
    ``axes`` at the end (their centres are the best coordinates), the ``rounds``, the
    ``candidates`` evaluated (each on every log), the runs simulated, the wall time, and
    whether it ``converged`` (False: ``max_rounds`` ran out before every step reached its
    resolution with the best inside)."""
    values: dict
    error: float
    axes: list
    rounds: int
    candidates: int
    runs: int
    seconds: float
    converged: bool = True
    history: list = field(default_factory=list)

    @property
    def per_second(self) -> float:
        """Candidates evaluated per second (each on every fitting log)."""
        return self.candidates / self.seconds if self.seconds > 0 else math.inf


def fit(logs, replica: dict, axes, max_rounds=MAX_ROUNDS, progress=None) -> Result:
    """Narrow ``axes`` around the best candidate (module docstring) on ``logs`` replayed
    under ``replica`` ([replica] keys: the scheduler, pools and the step cost's start)."""
    t0 = time.perf_counter()
    n_cand = runs = 0
    history = []
    best_err, best_vals = math.inf, None
    for rnd in range(1, max_rounds + 1):
        offs, vals = candidates(axes)
        metrics = simulate(logs, replica, vals)
        err = errors(logs, metrics)
        n_cand += len(offs)
        runs += len(offs) * len(logs)
        k = int(np.argmin(err))          # ties: the first (deterministic)
        history.append((rnd, [a.at(0) for a in axes], [a.step for a in axes], float(err[k])))
        if progress is not None:
            progress(rnd, axes, float(err[k]))
        if err[k] <= best_err:
            best_err, best_vals = float(err[k]), {n: float(v[k]) for n, v in vals.items()}
        done = all(abs(int(o)) < POINTS // 2 for o in offs[k]) and all(a.resolved for a in axes)
        axes = [a.narrowed(int(o)) for a, o in zip(axes, offs[k])]
        if done:
            break
    return Result(best_vals, best_err, axes, rnd, n_cand, runs, time.perf_counter() - t0, done, history)
