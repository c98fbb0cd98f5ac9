"""routesim: batched simulation of request routing across LLM inference replicas.

>>> import routesim
>>> sweep = routesim.load_sweep("sweeps/exploration.toml")
>>> results = routesim.run(sweep)          # {stage name: xarray.Dataset}
>>> tl = routesim.trace(sweep, rate_rps=250, heterogeneity="default", scenario="straggler")
>>> fig = routesim.plot(results["validation"], "attainment", col="scenario", sel={"heterogeneity": "default"})
"""

__version__ = "0.1.0"

__all__ = ["ConfigError", "load_sweep", "parse_sweep", "plot", "run", "trace", "__version__"]

_PUBLIC = {"ConfigError": "config", "load_sweep": "config", "parse_sweep": "config",
           "run": "study", "trace": "timeline", "plot": None}
"""Each public name -> the module that defines it (``None``: the name is a module,
:mod:`routesim.plot`, also the function ``routesim.plot(ds, metric, ...)``). Imported
on first use, so that ``import routesim`` (and every ``python -m routesim.X``, which
imports the package first) costs nothing: the modules behind these names import
xarray and Numba (about 0.6 s), matplotlib for ``plot``. Numba is set up for routesim
by :mod:`routesim.conf`, which every compiled module imports."""


def __getattr__(name):
    """A public name of :data:`_PUBLIC`, imported on first use. ``routesim.trace`` is
    the function (python -m routesim.trace is routesim/trace.py)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    module = importlib.import_module(f".{_PUBLIC[name] or name}", __name__)
    value = module if _PUBLIC[name] is None else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
