"""A claim's check in ten lines: claim 3 of the least-outstanding-routing study.

    python scripts/claim_check.py [results/token-routing-staleness] [--period 100]

The seed says every signal is stale: the global minimum (least_tokens) herds onto the
replica that looked emptiest one signal period ago, and power of two choices
(power_of_d) degrades less at equal staleness. The check, at one period: TTFT p99 under
periodic signals (periodic.nc) against fresh ones (fresh.nc), per seed, and the study's
rule (docs/least-outstanding-routing.md, "The verdict rule"): a lead is a paired 95 %
bootstrap interval that excludes 0 with a mean effect of at least 5 %. It holds when
least_tokens degrades (a lead up) and power_of_d's stale/fresh ratio is below
least_tokens' (a lead down); with qualification when one is a lead and the other no lead
either way. (The study applies the same two comparisons at every period, and adds
periodic_local.)
"""

import argparse
import sys
from pathlib import Path

import xarray as xr

from routesim.studies.least_outstanding.common import compare, show, verdict_of


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default="results/token-routing-staleness", type=Path)
    ap.add_argument("--period", type=float, default=100, help="the stale period, ms (default 100)")
    args = ap.parse_args(argv)
    missing = [p for p in (args.results / "fresh.nc", args.results / "periodic.nc") if not p.is_file()]
    if missing:
        print(f"{missing[0]}: no such file (run python -m routesim.sweep sweeps/{args.results.name}.toml first)",
              file=sys.stderr)
        return 2
    fresh, periodic = (xr.load_dataset(args.results / f"{s}.nc").ttft_p99 for s in ("fresh", "periodic"))
    if args.period not in periodic.period_ms.values:
        print(f"{args.results / 'periodic.nc'}: no period_ms = {args.period:g} "
              f"(it has {', '.join(f'{p:g}' for p in periodic.period_ms.values)})", file=sys.stderr)
        return 2

    # The ten lines. Every array below is per seed (the axes holding one value dropped).
    one = lambda x: x.squeeze([d for d in x.dims if x.sizes[d] == 1 and d != "seed"], drop=True)  # noqa: E731
    stale, fresh = one(periodic.sel(period_ms=args.period, drop=True)), one(fresh)
    ratio = stale / fresh                                                  # per policy and seed
    g, p = ratio.sel(policy="least_tokens", drop=True), ratio.sel(policy="power_of_d", drop=True)
    herds = compare(stale.sel(policy="least_tokens"), fresh.sel(policy="least_tokens"))  # stale vs fresh, %
    less = compare(p, g)                                                   # power of two's rise vs the minimum's
    verdict = verdict_of([herds[3], less[3]], [+1, -1])

    table = xr.Dataset({"least_tokens rise %": 100 * (g - 1), "power_of_d rise %": 100 * (p - 1)})
    print(f"claim 3, every signal is stale: TTFT p99 at {args.period:g} ms against fresh, "
          f"periodic signals ({args.results})")
    print(table.to_dataframe().round(1).to_string())
    print(f"least_tokens stale vs fresh: {show(herds, 1, '%')} (lead {herds[3]:+d}, predicted +1); "
          f"power_of_d's stale/fresh vs least_tokens': {show(less, 1, '%')} (lead {less[3]:+d}, predicted -1)")
    print(f"verdict: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
