"""The two replica schedulers and vLLM's two loops compared (issue 22, item 3; issue 40):
what ``[replica] scheduler = "vllm"`` (vLLM V1 0.30.0's scheduler and KV-cache manager,
conformance/VLLM-SCHEDULER.md, in vLLM's default asynchronous loop) changes against
``"reserve"`` (token-model.md §2, the default), and what that loop changes against the
synchronous one (``async_scheduling = false``), measured on the example cluster and on
the Mooncake excerpt, every policy, paired by seed; and whether any routing conclusion
changes.

- :mod:`.design`: the design (sweeps, the capacity search, the loads) and :func:`run`,
  which simulates it and writes ``results/scheduler-modes/{example,mooncake}.nc``;
- :mod:`.measure`: every number the document states, derived from those Datasets
  (paired differences with bootstrap intervals, orderings of policies, verdicts);
- :mod:`.figure`: figures/scheduler-modes.png (and .svg);
- :mod:`.document`: docs/scheduler-modes.md.

    python -m routesim.scheduler_modes              # run, then the figure and the document
    python -m routesim.scheduler_modes --no-run     # the figure and the document from results/ only
"""

from pathlib import Path

RESULTS = Path("results/scheduler-modes")
OUT = Path("docs/scheduler-modes.md")
FIGURES = Path("figures")
STEM = "scheduler-modes"
