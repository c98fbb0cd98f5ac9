"""Prefill/decode disaggregation against co-location at an equal GPU count (issue 42,
item 6): 8 reference replicas co-located, or split 2:6, 4:4 and 6:2 between a prefill
and a decode pool under each pair-routing rule (independent, selective,
transfer_aware), on the chat mix, the Azure code trace's lengths and the Mooncake
excerpt; goodput at the TTFT and TPOT SLOs together, the capacity by
``routesim.capacity``'s rule, the TTFT's parts and the links, paired by seed.

- :mod:`.design`: the design (sweeps/disaggregation-study.toml, the arms) and
  :func:`~.design.run`, which simulates it and writes
  ``results/disaggregation/{chat,code,mooncake}.nc``;
- :mod:`.measure`: every number the document states, and the claims' verdicts;
- :mod:`.figure`: figures/disaggregation.png (and .svg);
- :mod:`.document`: docs/disaggregation.md, its prediction fixed before the runs.

    python -m routesim.disaggregation              # run, then the figure and the document
    python -m routesim.disaggregation --no-run     # the figure and the document from results/ only
"""

from pathlib import Path

RESULTS = Path("results/disaggregation")
OUT = Path("docs/disaggregation.md")
FIGURES = Path("figures")
STEM = "disaggregation"
