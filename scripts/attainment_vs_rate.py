"""Attainment and tail latency against the arrival rate, per policy.

    python scripts/attainment_vs_rate.py [results/load-curve/load-curve.nc] [--scenario S] [--plot FILE.png]

Works on any results file with several rates (the load curve, or the study's
validation stage). Prints mean attainment and median p99 per rate and policy, for
each heterogeneity setting; --plot draws attainment against rate.
"""

import argparse
import sys
from pathlib import Path

import xarray as xr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default="results/load-curve/load-curve.nc")
    ap.add_argument("--scenario", default=None, help="one scenario (default: every scenario of the file, pooled)")
    ap.add_argument("--plot", default=None, metavar="FILE.png")
    args = ap.parse_args(argv)
    if not Path(args.results).is_file():
        sweep = f"sweeps/{Path(args.results).parent.name}.toml"   # results/<sweep name>/<stage>.nc
        print(f"{args.results}: no such file (run python -m routesim.sweep {sweep} first)", file=sys.stderr)
        return 2
    ds = xr.load_dataset(args.results)   # read it all; the file is closed again
    if args.scenario:
        ds = ds.sel(scenario=[args.scenario])

    # Pool everything but policy, rate and heterogeneity: seeds, scenarios, exploration.
    pooled = [d for d in ds.attainment.dims if d not in ("policy", "rate_rps", "heterogeneity")]
    attainment = 100 * ds.attainment.mean(pooled)
    p99 = ds.latency_p99.median(pooled)
    for h in ds.heterogeneity.values:
        print(f"heterogeneity {h}: mean attainment (%), rate × policy")
        print(attainment.sel(heterogeneity=h).transpose("rate_rps", "policy").to_pandas().round(2).to_string())
        print(f"heterogeneity {h}: median p99 (ms), rate × policy")
        print(p99.sel(heterogeneity=h).transpose("rate_rps", "policy").to_pandas().round(1).to_string())
        print()

    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
        from routesim.studies.serving.figures import colour, label   # the project's one colour per policy

        fig = Figure(figsize=(4 * ds.sizes["heterogeneity"], 3), layout="constrained")
        axes = fig.subplots(1, ds.sizes["heterogeneity"], squeeze=False)[0]
        for ax, h in zip(axes, ds.heterogeneity.values):
            for p in ds.policy.values:
                line = attainment.sel(heterogeneity=h, policy=p)
                ax.plot(line.rate_rps, line, marker="o", color=colour(str(p)), label=label(str(p)))
            ax.set(title=f"heterogeneity {h}", xlabel="arrival rate (req/s)", ylabel="mean attainment (%)")
        axes[0].legend()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
