"""What a parsed, validated sweep file is: its stages, their scenario events and
selections."""

from dataclasses import dataclass, field
from pathlib import Path

from .. import models
from ..schema import ReplicaModel


@dataclass(frozen=True)
class Event:
    """One scenario event; ``replica`` is 0-based (-1 for cluster-wide)."""

    at_s: float
    kind: int                      # the model's EventKind code
    replica: int = -1
    value: float = 0.0
    key: str = field(default="", compare=False)  # key path in the file, for messages


@dataclass(frozen=True)
class Selection:
    """Pick the value of ``parameter`` that maximizes (or minimizes) the mean metric."""

    parameter: str
    metric: str
    maximize: bool = True


@dataclass(frozen=True)
class Stage:
    """One stage's grid.

    ``values`` maps every standard dimension and every parameter to a tuple of values
    (``seed`` given as first/count: a ``range``, so a huge count costs nothing to parse);
    a parameter whose tuple has several values, or that the file gave as a list, is a
    dimension. ``inherit`` names parameters whose value comes from an earlier stage's
    selection (their entry in ``values`` is only a placeholder until then). ``given``
    names the parameters the file sets, in the stage or for every stage.
    """

    name: str
    key: str                       # key path in the file, for messages
    values: dict
    swept: tuple                   # extra dimensions (parameter names), in order
    standard: tuple                # the model's dimensions of every stage
    select: Selection | None = None
    inherit: tuple = ()
    given: frozenset = frozenset()  # parameters the file sets (for the stage or every stage)

    @property
    def dims(self):
        return self.standard + self.swept


@dataclass(frozen=True)
class Sweep:
    """A parsed, validated sweep file."""

    name: str
    path: Path
    text: str
    heterogeneity: dict            # name -> per replica: mean service times (ms) or time factors
    scenarios: dict                # name -> tuple of Event, time-sorted
    stages: tuple
    kind: str                      # replica model (routesim.models)
    start_down: tuple = ()         # 0-based replicas down at time 0 (models with start_down)

    @property
    def model(self) -> ReplicaModel:
        return models.get(self.kind)

    @property
    def units(self) -> dict:
        return {p.name: p.units for p in self.model.params}
