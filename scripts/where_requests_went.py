"""Where the requests went: every arrival's outcome, per policy and condition.

    python scripts/where_requests_went.py [results/token-routing-retry/crash-a.nc]

In the batching model each request of the measured cohort ends exactly one way:
completed, failed (out of attempts or of retry budget), rejected (front door), shed
(no eligible replica) or unfinished (still in flight at the horizon), so that
arrivals = completed + failed + rejected + shed + unfinished on every run. Prints the
arrivals summed over seeds and each outcome's share of them, one row per policy and
condition (whatever else varies: scenario and retry budget in crash-a.nc, rate in
results/batching/policies.nc, ...), then checks the identity run by run: exit 1 if it
fails anywhere.
"""

import argparse
import sys
from pathlib import Path

import xarray as xr

OUTCOMES = ["completed", "failed", "rejected", "shed", "unfinished"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default="results/token-routing-retry/crash-a.nc")
    args = ap.parse_args(argv)
    if not Path(args.results).is_file():
        sweep = f"sweeps/{Path(args.results).parent.name}.toml"   # results/<sweep name>/<stage>.nc
        print(f"{args.results}: no such file (run python -m routesim.sweep {sweep} first)", file=sys.stderr)
        return 2
    ds = xr.load_dataset(args.results)

    # One Dataset of the six counts; the axes holding one value (heterogeneity,
    # scenario, ...) are dropped, but policy is kept: one row per policy at least.
    counts = ds[["arrivals", *OUTCOMES]]
    counts = counts.squeeze([d for d in counts.dims if counts.sizes[d] == 1 and d not in ("policy", "seed")],
                            drop=True)

    # Pool the seeds: sum the counts, then each outcome as a percentage of arrivals.
    total = counts.sum("seed")
    table = xr.Dataset({"arrivals": total.arrivals,
                        **{f"{k} %": 100 * total[k] / total.arrivals for k in OUTCOMES}})
    print(f"where the requests went, summed over {counts.sizes['seed']} seeds ({args.results})")
    print(table.to_dataframe().round(2).to_string())

    # The identity, run by run (before summing, so no error can hide in a total).
    missing = (counts.arrivals - sum(counts[k] for k in OUTCOMES)).to_series()   # one value per run
    wrong = missing[missing != 0]
    if wrong.empty:
        print(f"arrivals = {' + '.join(OUTCOMES)} on all {missing.size} runs")
        return 0
    print(f"arrivals != {' + '.join(OUTCOMES)} on {wrong.size} of {missing.size} runs "
          "(arrivals minus the outcomes, per run):")
    print(wrong.to_string())
    return 1


if __name__ == "__main__":
    sys.exit(main())
