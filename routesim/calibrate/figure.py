"""The figure of modelled against measured step times (PNG)."""

import numpy as np

from ..files import replace_atomically

COLORS = {"prefill-bearing": "#d95f02", "decode-only": "#1b9e77"}


def draw(steps, f, path, title=""):
    """Write ``path`` (PNG): left, modelled against measured step time (ms, log-log, one
    point a usable step, the diagonal = a perfect model); right, the relative residual
    (modelled − measured)/measured against the step's scheduled tokens U + n."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    lo, hi = np.inf, 0.0
    for name, mask in (("decode-only", steps.usable & ~steps.prefill),
                       ("prefill-bearing", steps.usable & steps.prefill)):
        y = steps.d_ms[mask]
        m = f.predict(steps.U[mask], steps.Q[mask], steps.n[mask], steps.K[mask], steps.R[mask])
        if not y.size:
            continue
        lo, hi = min(lo, y.min(), m.min()), max(hi, y.max(), m.max())
        kw = dict(s=6 if name == "decode-only" else 14, alpha=0.35 if name == "decode-only" else 0.8,
                  color=COLORS[name], label=f"{name} ({y.size})", linewidths=0)
        a.scatter(y, m, **kw)
        b.scatter(steps.U[mask] + steps.n[mask], 100 * (m - y) / y, **kw)
    a.plot([lo, hi], [lo, hi], color="0.3", lw=0.8)
    a.set(xscale="log", yscale="log", xlabel="measured step time (ms)", ylabel="modelled step time (ms)",
          title="modelled vs measured")
    b.axhline(0, color="0.3", lw=0.8)
    b.set(xscale="log", xlabel="scheduled tokens U + n", ylabel="(modelled − measured) / measured (%)",
          title="relative residual")
    a.legend(loc="upper left", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    replace_atomically(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None}))
    plt.close(fig)
    return path
