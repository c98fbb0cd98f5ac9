"""The batching model's incidents (sweeps/incidents.toml): the black-hole timeline figure,
``figures/timeline-black-hole.png`` and ``.svg``, drawn without and with containment.

:mod:`.resultset` finds the black-hole stage beside a study's results and traces it;
:mod:`.figures` draws it. ``python -m routesim.figures results/exploration/`` draws it
with the serving validation's figures (from ``results/incidents/`` beside that folder,
or ``--incidents DIR``).
"""
