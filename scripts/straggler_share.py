"""The straggler's share of routing decisions before, during and after its slowdown.

    python scripts/straggler_share.py [results/exploration/validation.nc] [--rate R] [--seeds N]

Traces the straggler scenario from the compiled engine for every policy of the
results file (routesim.trace reads the sweep and the selected exploration weight
from the Dataset's attrs), then splits each replica's assignments by period.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import xarray as xr

import routesim


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default="results/exploration/validation.nc")
    ap.add_argument("--scenario", default="straggler")
    ap.add_argument("--rate", type=float, default=None, help="default: the highest rate of the file")
    ap.add_argument("--heterogeneity", default="default")
    ap.add_argument("--seeds", type=int, default=4, help="how many of the file's seeds to trace")
    args = ap.parse_args(argv)
    if not Path(args.results).is_file():
        sweep = f"sweeps/{Path(args.results).parent.name}.toml"   # results/<sweep name>/<stage>.nc
        print(f"{args.results}: no such file (run python -m routesim.sweep {sweep} first)", file=sys.stderr)
        return 2
    ds = xr.load_dataset(args.results)   # read it all; the file is closed again

    rate = args.rate or float(ds.rate_rps.max())
    seeds = [int(s) for s in ds.seed.values[: args.seeds]]
    # One Dataset over (policy, seed, time, replica); the condition is fixed.
    tl = routesim.trace(ds, scenario=args.scenario, rate_rps=rate, heterogeneity=args.heterogeneity, seed=seeds)

    # The scenario's events are in the trace: the first slowdown above 1 and the next
    # slowdown event of the same replica (its recovery).
    slow = int(np.flatnonzero((tl.event_kind == "slowdown").values & (tl.event_value > 1).values)[0])
    replica = int(tl.event_replica[slow])
    onset = float(tl.event_time[slow])
    later = (tl.event_kind == "slowdown") & (tl.event_replica == replica) & (tl.event_time > onset)
    recovery = float(tl.event_time.where(later).min())   # NaN when it never recovers

    # `assignments` counts the decisions of each 10 ms interval (t - 10 ms, t]. Label
    # every sample with its period, skip the warm-up, and sum per period with groupby.
    warmup = float(tl.attrs["warmup_s"])
    period = xr.where(tl.time <= onset, "1 before", xr.where(tl.time <= recovery, "2 during", "3 after"))
    measured = tl.assignments.where(tl.time > warmup, 0)
    by_period = measured.groupby(period.rename("period")).sum("time")           # (policy, seed, replica, period)
    share = 100 * by_period.sel(replica=replica) / by_period.sum("replica")

    print(f"{args.scenario}: {rate:g} req/s, heterogeneity {args.heterogeneity}, seeds {seeds}; "
          f"replica {replica} slows at {onset:g} s, recovers at {recovery:g} s")
    print(f"share of assignments to replica {replica} (%), median over seeds [min, max]:")
    med, lo, hi = share.median("seed"), share.min("seed"), share.max("seed")
    for p in share.policy.values:
        cells = [f"{float(med.sel(policy=p, period=k)):6.2f} [{float(lo.sel(policy=p, period=k)):.2f}, "
                 f"{float(hi.sel(policy=p, period=k)):.2f}]" for k in share.period.values]
        print(f"  {p:>14}: " + "   ".join(f"{k[2:]} {c}" for k, c in zip(share.period.values, cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
