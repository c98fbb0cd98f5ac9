"""routesim: batched simulation of request routing across LLM inference replicas.

>>> import routesim
>>> sweep = routesim.load_sweep("sweeps/exploration.toml")
>>> results = routesim.run(sweep)          # {stage name: xarray.Dataset}
>>> tl = routesim.trace(sweep, rate_rps=250, heterogeneity="default", scenario="straggler")
"""

__version__ = "0.1.0"

from .config import ConfigError, load_sweep, parse_sweep  # noqa: E402
from .study import run  # noqa: E402

__all__ = ["ConfigError", "load_sweep", "parse_sweep", "run", "trace", "__version__"]


def __getattr__(name):
    # ``trace`` is imported on first use, so that ``python -m routesim.trace`` does not find
    # the module already imported by the package. Importing it sets ``routesim.trace`` to
    # the module, which is callable like the function (see routesim/trace.py).
    if name == "trace":
        from .trace import trace
        return trace
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
