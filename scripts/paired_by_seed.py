"""One policy minus another, seed by seed, at every condition of a batching Dataset.

    python scripts/paired_by_seed.py [results/token-routing/counts.nc]
                                     [--var ttft_p99] [--a least_tokens] [--b least_requests]

For a given seed every policy of a stage saw the same requests (common random
numbers), so the fair comparison is the difference within each seed, not the
difference of two means. A difference is a *lead* only when every seed agrees on its
sign. The conditions are whatever else varies in the file (the arrival rate in
counts.nc; signal mode, period and routers in staleness.nc; ...). Prints a summary
per condition, then every seed's difference.
"""

import argparse
import sys
from pathlib import Path

import xarray as xr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default="results/token-routing/counts.nc")
    ap.add_argument("--var", default="ttft_p99", help="a variable with a policy and a seed axis")
    ap.add_argument("--a", default="least_tokens", help="the policy tested")
    ap.add_argument("--b", default="least_requests", help="the baseline")
    args = ap.parse_args(argv)
    if not Path(args.results).is_file():
        sweep = f"sweeps/{Path(args.results).parent.name}.toml"   # results/<sweep name>/<stage>.nc
        print(f"{args.results}: no such file (run python -m routesim.sweep {sweep} first)", file=sys.stderr)
        return 2
    ds = xr.load_dataset(args.results)   # read it all; the file is closed again

    # a - b: xarray lines the two up by label on every other axis (rate, seed, ...).
    var = ds[args.var]
    diff = var.sel(policy=args.a) - var.sel(policy=args.b)
    # Axes holding one value (heterogeneity, scenario, ...) say nothing; drop them, but
    # keep seed. Whatever is left besides seed is a condition: one row of the tables.
    diff = diff.squeeze([d for d in diff.dims if diff.sizes[d] == 1 and d != "seed"], drop=True)
    if diff.ndim == 1:                   # no condition varies: one row
        diff = diff.expand_dims(condition=["all"])
    units = var.attrs.get("units", "")
    if units == "1":                     # a fraction (attainment, hit rate): print percentage points
        diff, units = 100 * diff, "percentage points"

    # Reduce over seeds only. NaN (a run where nothing completed) is skipped by the mean
    # and counts against a lead: NaN < 0 and NaN > 0 are both False.
    below, above = (diff < 0).all("seed"), (diff > 0).all("seed")
    summary = xr.Dataset({
        "mean": diff.mean("seed"), "min": diff.min("seed"), "max": diff.max("seed"),
        "seeds_below": (diff < 0).sum("seed"),
        "lead": xr.where(below, f"{args.a} below", xr.where(above, f"{args.a} above", "none")),
    }).to_dataframe()

    print(f"{args.var} ({units}): {args.a} minus {args.b}, paired by seed over {diff.sizes['seed']} seeds "
          f"({args.results})")
    print(summary.round(2).to_string())
    print(f"\nper seed ({units}):")
    # One row per condition, one column per seed.
    print(diff.to_series().unstack("seed").round(1).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
