"""A claim's check in ten lines: claim 3 of the least-outstanding-routing study.

    python scripts/claim_check.py [results/token-routing-staleness/staleness.nc] [--period 100]

The seed says every signal is stale: the global minimum (least_tokens) herds onto the
replica that looked emptiest one signal period ago, and power of two choices
(power_of_d) degrades less at equal staleness. The check: with one router and plain
periodic signals, TTFT p99 at --period ms against period 0 (fresh), per seed. The same
rule as the study's document (docs/least-outstanding-routing.md): it holds when the
global minimum degrades on every seed, power of two degrades less on average, and
power of two is below the global minimum on every seed; with qualification when only
the first two.
"""

import argparse
import sys
from pathlib import Path

import xarray as xr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default="results/token-routing-staleness/staleness.nc")
    ap.add_argument("--period", type=float, default=100, help="the stale period, ms (default 100)")
    args = ap.parse_args(argv)
    if not Path(args.results).is_file():
        sweep = f"sweeps/{Path(args.results).parent.name}.toml"   # results/<sweep name>/<stage>.nc
        print(f"{args.results}: no such file (run python -m routesim.sweep {sweep} first)", file=sys.stderr)
        return 2
    ds = xr.load_dataset(args.results)

    # The ten lines. Every reduction below runs over seeds (and axes holding one value).
    t = ds.ttft_p99.sel(signal_mode="periodic", routers=1, drop=True)  # one router, periodic signals
    stale, fresh = t.sel(period_ms=args.period, drop=True), t.sel(period_ms=0, drop=True)
    rise = 100 * (stale / fresh - 1)                                   # % per policy and seed
    g, p = rise.sel(policy="least_tokens", drop=True), rise.sel(policy="power_of_d", drop=True)
    gap = stale.sel(policy="power_of_d", drop=True) - stale.sel(policy="least_tokens", drop=True)  # ms
    herds = bool((g > 0).all())                       # the global minimum degrades on every seed
    less = float(p.mean()) < float(g.mean())          # power of two degrades less, on average
    beats = bool((gap < 0).all())                     # power of two is lower on every seed
    verdict = ("holds" if herds and less and beats else
               "holds with qualification" if herds and less else "does not hold in this model")

    # Print it per seed (the axes holding one value dropped, seed kept).
    table = xr.Dataset({"least_tokens rise %": g, "power_of_d rise %": p, "power_of_d - least_tokens ms": gap})
    table = table.squeeze([d for d in table.dims if table.sizes[d] == 1 and d != "seed"], drop=True)
    print(f"claim 3, every signal is stale: TTFT p99 at {args.period:g} ms against fresh, "
          f"one router, periodic ({args.results})")
    print(table.to_dataframe().round(1).to_string())
    print(f"global minimum degrades on every seed: {herds}; power of two degrades less on average: "
          f"{less} ({float(p.mean()):+.1f} % against {float(g.mean()):+.1f} %); "
          f"power of two lower on every seed: {beats}")
    print(f"verdict: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
