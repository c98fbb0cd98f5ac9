"""Calibrate a replica's step cost from a serving log (issue 25; docs/calibration.md).

``logs`` reads the log formats (and its runs), ``steps`` reconstructs each run's engine
steps from its token bursts (the burst threshold estimated from the run, merged clocks
refused), ``hardware`` reads the model/hardware description that ties coefficients the
data cannot separate, ``fit`` fits token-model.md §2.3's linear step cost and the
front-end overhead, ``roofline`` the roofline, ``uncertainty`` resamples a fit over runs
or time blocks and names the pairs a log cannot separate, ``ingress`` fits the engine
loop's ingress from the step boundary each request joined (``--ingress``), ``figure`` draws modelled
against measured step times, and ``__main__`` is ``python -m routesim.calibrate``.
"""

from ..step_cost import linear

STEP_KEYS = tuple(p.path[-1] for p in linear.PARAMS)
"""The ``[replica] step_ms`` keys, in the formula's order: c_0, c_pf, c_attn, c_dec, c_kv
(routesim.step_cost.linear)."""
