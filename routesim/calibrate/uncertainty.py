"""How far a fit's coefficients would move on another log: resampled standard errors and
the coefficients the log cannot separate.

**Resampled standard errors.** The regression's ``s² (XᵀWX)⁻¹`` (calibrate.fit) assumes
every step's error independent of every other's; a real server's steps are not (a run
runs warm or cold, the load drifts), and a user who calibrates on another run sees the
spread between runs. So the fit is repeated on ``REPLICATES`` block-bootstrap resamples
of its usable steps (a deterministic generator seeded with ``SEED``): the units are the
runs when the log has at least ``MIN_RUNS`` of them, else ``BLOCKS`` blocks of
consecutive steps (each run cut into blocks in proportion to its steps), drawn with
replacement as many as there are; each resample is refitted with the ties (and, for the
roofline, its alternation between bounds) of the fit itself, and the standard error is
the s.d. of the resampled coefficients (N − 1). A resample the fit refuses (too few
steps of a kind) is dropped and counted.

**Inseparable coefficients.** Two free coefficients whose estimates correlate beyond
``CORRELATION`` (the regression's covariance), one of them known no better than
``REL_SE`` of its value (the larger of the two standard errors), are determined only as
a combination: the log moves one at the other's expense. (A strong correlation alone is
no defect: an exact log correlates its estimates as much, and pins both.) Ties
(calibrate.fit, calibrate.roofline) handle the pairs a model/hardware description
relates; the rest are reported.
"""

import numpy as np

MIN_RUNS = 4
BLOCKS = 20
REPLICATES = 200
SEED = 41
CORRELATION = 0.9
REL_SE = 0.1


def units(steps):
    """(list of index arrays into ``steps``, one a resampling unit; "runs" or "time
    blocks"): the usable steps by run, or in consecutive blocks (module docstring)."""
    use = np.flatnonzero(steps.usable)
    runs = [use[steps.run[use] == r] for r in np.unique(steps.run[use])]
    if len(runs) >= MIN_RUNS:
        return runs, "runs"
    out = []
    for idx in runs:
        k = max(1, int(round(BLOCKS * idx.size / use.size)))
        out += [b for b in np.array_split(idx, k) if b.size]
    return out, "time blocks"


def bootstrap(steps, refit, keys, replicates=REPLICATES, seed=SEED) -> dict:
    """Resample ``steps`` (calibrate.steps.Steps) by units and refit: ``refit(steps) ->
    {key: coefficient}`` (raises ValueError when it cannot fit). Returns ``se`` {key:
    s.d. of the resampled coefficients (ms per unit)}, ``corr`` (p, p) their
    correlations (keys' order), ``kind``, ``units`` (how many), ``replicates`` (fitted),
    ``failed`` (refused)."""
    blocks, kind = units(steps)
    rng = np.random.default_rng(seed)
    coefs, failed = [], 0
    for _ in range(replicates):
        pick = rng.integers(0, len(blocks), len(blocks))
        try:
            c = refit(steps.take(np.concatenate([blocks[i] for i in pick])))
        except ValueError:
            failed += 1
            continue
        coefs.append([c[k] for k in keys])
    C = np.array(coefs).reshape(-1, len(keys))
    se = C.std(axis=0, ddof=1) if len(C) > 1 else np.full(len(keys), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.corrcoef(C, rowvar=False) if len(C) > 2 else np.full((len(keys), len(keys)), np.nan)
    return {"se": dict(zip(keys, se.tolist())), "corr": np.atleast_2d(corr), "kind": kind,
            "units": len(blocks), "replicates": len(C), "failed": failed}


def correlations(cov):
    """(p, p) correlations of a covariance (NaN where a variance is 0 or NaN)."""
    sd = np.sqrt(np.diag(cov))
    with np.errstate(invalid="ignore", divide="ignore"):
        return cov / np.outer(sd, sd)


def inseparable(f, keys, tied_partners=(), resampled_se=None) -> list:
    """[(key a, key b, correlation)] of the fit's free coefficients (not at a bound, not
    a tied partner) whose regression estimates correlate beyond CORRELATION, one of them
    with a standard error (the regression's or ``resampled_se``'s {key: s.e.}, the
    larger) above REL_SE of its value."""
    r = correlations(f.cov)
    free = [i for i, k in enumerate(keys) if k not in f.bound and k not in tied_partners]

    def loose(k):
        se = max(f.se[k], (resampled_se or {}).get(k, 0.0))
        return not se <= REL_SE * abs(f.coef[k])

    return [(keys[i], keys[j], float(r[i, j])) for n, i in enumerate(free) for j in free[n + 1:]
            if abs(r[i, j]) > CORRELATION and (loose(keys[i]) or loose(keys[j]))]
