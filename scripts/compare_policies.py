"""Compare routing policies scenario by scenario.

    python scripts/compare_policies.py [results/exploration/validation.nc]

Prints, per scenario and policy, the mean attainment (%) and the median p99 (ms) over
every run of that scenario (all rates, heterogeneity settings and seeds), then the
paired difference of each policy from the best one, seed by seed.
"""

import sys
from pathlib import Path

import xarray as xr


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else "results/exploration/validation.nc"
    if not Path(path).is_file():
        sweep = f"sweeps/{Path(path).parent.name}.toml"   # results/<sweep name>/<stage>.nc
        print(f"{path}: no such file (run python -m routesim.sweep {sweep} first)", file=sys.stderr)
        return 2
    ds = xr.load_dataset(path)   # read it all; the file is closed again

    # Every dimension except policy and scenario is averaged over: rates, heterogeneity
    # settings, seeds (and the length-1 exploration axis). Each run counts once.
    others = [d for d in ds.attainment.dims if d not in ("policy", "scenario")]
    attainment = 100 * ds.attainment.mean(others)        # (policy, scenario)
    p99 = ds.latency_p99.median(others)                  # NaN runs (nothing completed) are skipped
    print("mean attainment (%), scenario × policy")
    print(attainment.transpose("scenario", "policy").to_pandas().round(2).to_string())
    print("\nmedian p99 (ms), scenario × policy")
    print(p99.transpose("scenario", "policy").to_pandas().round(1).to_string())

    # Common random numbers: for a given seed every policy saw the same requests, so
    # compare seed by seed. Each seed's value is its mean over the conditions.
    per_seed = 100 * ds.attainment.mean([d for d in others if d != "seed"])   # (policy, scenario, seed)
    best = attainment.idxmax("policy")                   # the best policy of each scenario
    lead = per_seed - per_seed.sel(policy=best)          # each policy minus the scenario's best
    print("\nattainment minus the scenario's best policy, per seed (pp): min .. max")
    for scenario in ds.scenario.values:
        row = lead.sel(scenario=scenario)
        cells = [f"{p}: {float(row.sel(policy=p).min()):+.2f} .. {float(row.sel(policy=p).max()):+.2f}"
                 for p in ds.policy.values if p != best.sel(scenario=scenario)]
        print(f"{scenario:>10} (best {str(best.sel(scenario=scenario).values)}): " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
