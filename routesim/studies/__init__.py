"""The studies: each package is one study of a model's results, its figure and document
code side by side, outside the pipeline (which never names a model):

- :mod:`.serving`: the tiny-cluster serving validation (``results/exploration/`` and
  ``results/load-curve/``; docs/serving-validation.md and its figures);
- :mod:`.incidents`: the batching model's black-hole timeline figure
  (``results/incidents/``);
- :mod:`.least_outstanding`: the least-outstanding-routing study (docs/least-outstanding-routing.md);
- :mod:`.validation`: the simulator against queueing theory (docs/validation.md);
- :mod:`.scheduler_modes`: the replica schedulers and vLLM's two loops (docs/scheduler-modes.md);
- :mod:`.disaggregation`: prefill/decode pools against co-location (docs/disaggregation.md).

What they share: :mod:`.plotting` (the figures' style and deterministic saving),
:mod:`.folders` (a results folder's stage Datasets) and :mod:`.commands` (what the
command lines that read a results folder share). The commands users run stay at the
top: ``python -m routesim.figures``, ``routesim.report``, ``routesim.least_outstanding``,
``routesim.validation``, ``routesim.scheduler_modes`` and ``routesim.disaggregation``.
"""
