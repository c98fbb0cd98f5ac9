"""The keys of a sweep file that are not model parameters (those are each model's
:class:`~routesim.schema.Param`): the file's name, ``[replica] kind``, the named
replica settings and replicas down at the start (``[cluster]``), the scenarios and
their events, ``[grid]`` and ``[[stages]]``. The parser takes the keys each of these
tables may hold from here, and the keys reference (docs/keys.md, :mod:`routesim.keys`)
documents them from here: one home for what a key is called and what it means.
"""

from dataclasses import dataclass

from .. import models


@dataclass(frozen=True)
class Key:
    """A key of a sweep file's structure. ``default`` and ``allowed`` are text as the
    reference shows it ("" when there is none to show); ``required``: the file must
    give it (in the table, or where ``meaning`` says). ``per_model`` names a
    :class:`~routesim.schema.ReplicaModel` field whose value the reference shows beside
    the key, model by model (``policies``: the names ``policy`` takes)."""

    name: str
    kind: str               # how it is written: "string", "number", "list of numbers", "table", ...
    meaning: str
    default: str = ""
    units: str = ""
    allowed: str = ""
    required: bool = False
    per_model: str = ""     # a ReplicaModel field the reference shows per model


def names(keys) -> tuple:
    """The names of ``keys``, in order (what :meth:`Reader.table` allows)."""
    return tuple(k.name for k in keys)


FILE = (
    Key("name", "string", "the sweep's name: results go to results/<name>/", default="the file's stem"),
)
"""Top-level keys that are not tables (the tables: ``[replica]``, the model's sections,
``[scenarios.NAME]``, ``[grid]``, ``[[stages]]``)."""

REPLICA = (
    Key("kind", "string", "the replica model: queue (one request in service and a FIFO queue, docs/model.md) "
        "or batching (continuous batching over a paged KV cache, docs/model.md §9)",
        default=f'"{models.DEFAULT}"', allowed=", ".join(models.KINDS)),
)
"""``[replica]`` keys besides the batching model's parameters."""

CLUSTER = (
    Key("heterogeneity", "table of lists of numbers",
        "named replica settings, each a list with one entry per replica, each > 0; a stage's "
        "heterogeneity axis names them", per_model="help_heterogeneity"),
    Key("start_down", "list of whole numbers", "replicas (1-based) down from time 0 until a recover event",
        default="[]"),
)
"""``[cluster]`` keys besides the model's parameters (which of them a model takes: its
``section_keys["cluster"]``)."""

SCENARIO = (
    Key("events", "list of event tables", "the scenario's timed events (below); a scenario without events "
        "is steady", default="[]"),
)
"""Keys of one ``[scenarios.NAME]`` table. Without any ``[scenarios]``, the one scenario
is ``steady`` (no events)."""

EVENT = (
    Key("at_s", "number", "when the event happens, from the start of the run", units="s", allowed=">= 0",
        required=True),
    Key("replica", "whole number", "the replica it happens to (1-based); every action but rate_multiplier "
        "names one", allowed=">= 1"),
)
"""Keys of one event besides its action (exactly one of the model's event kinds)."""

EVENT_ACTIONS = {
    "rate_multiplier": Key("rate_multiplier", "number", "the arrival rate becomes this multiple of rate_rps "
                           "(absolute, not cumulative; the whole cluster)", allowed="> 0"),
    "slowdown": Key("slowdown", "number", "the replica's service becomes this many times slower (absolute: "
                    "1 is full speed again)", allowed="> 0"),
    "fail": Key("fail", "true", "the replica fails: it takes no requests until it recovers (docs/model.md)",
                allowed="true"),
    "fail_fast": Key("fail_fast", "true", "the replica turns into a black hole: it stays eligible and fails "
                     "every attempt after fail_fast_ms", allowed="true"),
    "recover": Key("recover", "true", "the replica is healthy again", allowed="true"),
}
"""Every event action a model may take (which ones a model takes: its ``event_kinds``)."""

GRID = (
    Key("rate_rps", "number or list", "base arrival rate (a dimension), in the stage or in [grid]; a trace "
        "stage leaves it out (its coordinate is 0)", units="requests/s", allowed="> 0"),
    Key("heterogeneity", "string or list", "names of [cluster.heterogeneity] settings (a dimension), in the "
        "stage or in [grid]", allowed="names in [cluster.heterogeneity]"),
    Key("scenario", "string or list", "names of [scenarios] tables (a dimension), in the stage or in [grid]",
        allowed="names in [scenarios]"),
)
"""``[grid]``: the condition axes every stage uses unless it gives its own."""

STAGE = (
    Key("name", "string", "the stage's name: results/<sweep>/<name>.nc", default='"stage<N>"'),
    Key("policy", "string or list", "routing policies (a dimension)", required=True, per_model="policies"),
    Key("seeds", "table or list", "{ first = 1, count = 8 } or a list of distinct seeds >= 0 (a dimension)",
        required=True),
    Key("select", "table", "{ parameter = NAME, maximize = METRIC } (or minimize): picks the value of a swept "
        "parameter with the best mean over conditions; later stages use it unless they set it"),
    *GRID,
    Key("workload", "table", "[workload] keys for this stage, written as in [workload] "
        "(workload = { demand = [\"tokens\", \"exponential\"] })"),
)
"""``[[stages]]`` keys besides the parameters, which a stage overrides by their flat name."""

SEEDS = (
    Key("first", "whole number", "first seed", allowed=">= 0", required=True),
    Key("count", "whole number", "number of consecutive seeds", allowed=">= 1", required=True),
)
"""``seeds = { first, count }``."""

SELECT = (
    Key("parameter", "string", "the parameter selected (a list in this stage)", required=True),
    Key("maximize", "string", "the result variable whose mean the selection maximizes (one of maximize, "
        "minimize)"),
    Key("minimize", "string", "the result variable whose mean the selection minimizes"),
)
"""``select = { parameter, maximize | minimize }``."""
