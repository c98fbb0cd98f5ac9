"""The tiny-cluster serving validation (sweeps/exploration.toml and sweeps/load-curve.toml):
docs/serving-validation.md and its figures.

:mod:`.resultset` reads the results for both :mod:`.figures` (which draws them) and
:mod:`.report` (which writes the document); ``python -m routesim.figures`` and
``python -m routesim.report`` are their command lines.
"""
