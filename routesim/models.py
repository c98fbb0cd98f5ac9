"""The replica models routesim knows, by ``[replica] kind``: the one module that names
them. Everything else reaches a model through its :class:`routesim.schema.ReplicaModel`
(``get(kind)``, or the model of a sweep, a grid or a Dataset).
"""

import importlib

PACKAGES = {
    "queue": "routesim.queue",        # docs/model.md: one request in service and a FIFO queue
    "batching": "routesim.batching",  # token-model.md: continuous batching over a paged KV cache
}
"""Replica kind -> the package that implements it."""

KINDS = tuple(PACKAGES)
"""Replica models: ``[replica] kind``."""

DEFAULT = "queue"
"""The kind of a sweep without ``[replica] kind`` (and of a Dataset that does not say)."""


def get(kind: str):
    """The ReplicaModel of a kind (its package's ``params.MODEL``)."""
    return importlib.import_module(PACKAGES[kind] + ".params").MODEL


def every():
    """Every ReplicaModel, in :data:`KINDS` order."""
    return tuple(get(k) for k in KINDS)


def of_grid(grid):
    """The model whose grid this is."""
    return get(grid.kind)


def of_dataset(ds):
    """The model whose results (or timeline) a Dataset holds."""
    return get(ds.attrs.get("replica_kind", DEFAULT))
