"""routesim: batched simulation of request routing across LLM inference replicas.

>>> import routesim
>>> sweep = routesim.load_sweep("sweeps/exploration.toml")
>>> results = routesim.run(sweep)          # {stage name: xarray.Dataset}
>>> tl = routesim.trace(sweep, rate_rps=250, heterogeneity="default", scenario="straggler")
>>> fig = routesim.plot(results["validation"], "attainment", col="scenario", sel={"heterogeneity": "default"})
"""

__version__ = "0.1.0"

from . import compile_cache  # noqa: E402

compile_cache.use()  # before any compiled module: the kernels' cache follows their source
from . import nrt  # noqa: E402,F401  (before any compiled module: how a call's error exit is marked)

from .config import ConfigError, load_sweep, parse_sweep  # noqa: E402
from .study import run  # noqa: E402
from .timeline import trace  # noqa: E402  (python -m routesim.trace: routesim/trace.py)

__all__ = ["ConfigError", "load_sweep", "parse_sweep", "plot", "run", "trace", "__version__"]


def __getattr__(name):
    """``routesim.plot``, imported on first use (it imports matplotlib): a module that is
    also the function ``routesim.plot(ds, metric, ...)`` (:mod:`routesim.plot`)."""
    if name == "plot":
        import importlib
        return importlib.import_module(".plot", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
