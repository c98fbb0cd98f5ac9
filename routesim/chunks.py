"""Chunks of a stage: planning, and persistence of finished chunks for ``--resume``.

A chunk is a contiguous range ``lo:hi`` of a stage's runs in the order its model takes
them (``grid.order()``). The flat order is C order over ``Stage.dims`` with ``seed``
innermost (then any swept parameters), so a chunk of the queue model is a block of
conditions × a block of seeds; the batching model takes the runs of one workload (one
seed) together, so that they share what its scheduler makes of the workload. Every
chunk is simulated on its own (:func:`routesim.batch.simulate_range`) and put back in
place (:func:`routesim.batch.put`), so the assembled Dataset is the same, bit for bit,
whatever the chunk size and wherever chunks ran.

On disk (one folder per stage, by default ``results/<name>/.chunks/<stage>/``)::

    manifest.json      what the chunks belong to: fingerprint, runs, chunk size
    000000.npz         runs lo:hi of chunk 0: metrics, replicas, router, tail, lo, hi
    000001.npz         ...

Every file is written under a temporary name and renamed, so a process killed at any
point (SIGKILL included) leaves only whole chunks and at worst a stray temporary.
A chunk belongs to its manifest's fingerprint: a hash of the sweep file's text, the
stage, the values it inherits from earlier selections, the chunk size, and the
package (its version and a digest of the source of every routesim module). A
changed sweep file or package makes the stored chunks stale: they are then
discarded, never mixed in.
"""

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import write_bytes

FORMAT = 1            # bump when the layout of a chunk file changes
MANIFEST = "manifest.json"


def plan(runs: int, size: int) -> list[tuple[int, int]]:
    """The chunks of ``runs`` flat runs, at most ``size`` runs each: [(lo, hi), ...]."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    return [(lo, min(runs, lo + size)) for lo in range(0, runs, size)]


def _source_digest() -> str:
    """routesim's version and a hash of every module of the package (path and bytes, in
    sorted order): no parsing, so a few milliseconds. Stricter than hashing only what a
    chunk's numbers come from: an edit anywhere in routesim (a figure's code included)
    makes ``--resume`` start afresh and a worker with that edit refuse the client."""
    from . import __version__
    here = Path(__file__).parent
    h = hashlib.sha256()
    for f in sorted(here.rglob("*.py")):
        h.update(str(f.relative_to(here).as_posix()).encode() + b"\0" + f.read_bytes() + b"\0")
    return f"{__version__}+{h.hexdigest()[:16]}"


_DIGEST = _source_digest()  # at import: as close as it gets to the code this process runs


def package_digest() -> str:
    """routesim's version and a hash of its source: what produced a chunk. A worker whose digest
    differs from the client's refuses chunks (cluster.py)."""
    return _DIGEST


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def data_digest(files) -> str:
    """A hash of the request traces ``files`` (paths) and their contents, in sorted order;
    "" for none."""
    if not files:
        return ""
    h = hashlib.sha256()
    for path in sorted(str(p) for p in files):
        h.update(path.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """What a stage's chunks depend on; ``digest`` is the key that stored chunks must match."""

    sweep: str       # hash of the sweep file's text
    package: str     # package_digest()
    stage: str       # stage name and the selected values it inherits
    chunk_size: int
    runs: int
    data: str = ""   # hash of the data files the stage reads (request traces), "" if none

    @classmethod
    def of(cls, sweep_text: str, stage_name: str, inherited: dict, chunk_size: int, runs: int,
           data_files=()):
        sel = json.dumps({k: repr(_plain(v)) for k, v in sorted(inherited.items())})
        return cls(sweep=hashlib.sha256(sweep_text.encode()).hexdigest(), package=package_digest(),
                   stage=f"{stage_name} {sel}", chunk_size=int(chunk_size), runs=int(runs), data=data_digest(data_files))

    @property
    def digest(self) -> str:
        parts = [FORMAT, self.sweep, self.package, self.stage, self.chunk_size, self.runs]
        if self.data:  # a stage without data files keeps the digest it always had
            parts.append(self.data)
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def differences(self, stored: dict) -> list[str]:
        """What changed, in words, since ``stored`` (a manifest) was written."""
        why = []
        if stored.get("sweep") != self.sweep:
            why.append("the sweep file changed")
        if stored.get("package") != self.package:
            why.append(f"routesim changed ({stored.get('package')} -> {self.package})")
        if stored.get("stage") != self.stage:
            why.append("the selected values it inherits changed")
        if stored.get("chunk_size") != self.chunk_size:
            why.append(f"the chunk size changed ({stored.get('chunk_size')} -> {self.chunk_size})")
        if stored.get("runs") != self.runs:
            why.append("the number of runs changed")
        if stored.get("data", "") != self.data:
            why.append("a trace file it replays changed")
        return why or ["their format changed"]


def read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


class ChunkStore:
    """The finished chunks of one stage in ``folder``.

    ``open`` starts fresh (removing whatever is there) unless ``resume`` is set and
    the stored manifest has the same fingerprint; ``done`` then lists the chunks
    already on disk. ``note(message)`` is told, in one line, why stored chunks are
    not reused. ``outcome``: the class of a chunk's results (the model's ``Outcome``).
    """

    def __init__(self, folder: Path, fingerprint: Fingerprint, ranges: list, done: list, outcome):
        """Use :meth:`open`."""
        self.folder, self.fingerprint, self.ranges, self.done = Path(folder), fingerprint, ranges, done
        self.outcome = outcome  # the class of a chunk's results

    @classmethod
    def open(cls, folder, fingerprint: Fingerprint, ranges: list, resume: bool, note=print, *,
             outcome):
        folder = Path(folder)
        stored = read_manifest(folder) if resume else None
        if stored is not None and stored.get("digest") == fingerprint.digest:
            done = [i for i in range(len(ranges)) if (folder / cls.name(i)).exists()]
            for stray in folder.glob(".*.tmp"):  # a write cut short by a kill
                stray.unlink(missing_ok=True)
            return cls(folder, fingerprint, ranges, done, outcome)
        if stored is not None:
            note(f"{folder}: stored chunks are stale ({'; '.join(fingerprint.differences(stored))}); "
                 "starting this stage fresh")
        elif resume and folder.exists():
            note(f"{folder}: no usable manifest; starting this stage fresh")
        elif not resume:
            cls._discarding(folder, fingerprint, note)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        manifest = dict(vars(fingerprint), digest=fingerprint.digest, format=FORMAT,
                        chunks=len(ranges))
        write_bytes(folder / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
        return cls(folder, fingerprint, ranges, [], outcome)

    @staticmethod
    def _discarding(folder: Path, fingerprint: Fingerprint, note) -> None:
        """Tell ``note``, in one line, how many finished chunks a fresh start (no
        ``--resume``) is about to remove from ``folder``, and whether ``--resume``
        would have reused them (it reads them back with their own chunk size)."""
        kept = sum(1 for _ in folder.glob("[0-9]*.npz"))
        if not kept:
            return
        stored = read_manifest(folder) or {}
        why = ([] if stored.get("digest") == fingerprint.digest else
               [w for w in fingerprint.differences(stored) if not w.startswith("the chunk size")])
        if why:
            note(f"{folder}: starting fresh, discarding {kept} finished chunks of an earlier run "
                 f"(stale: {'; '.join(why)}; --resume would not have reused them either)")
        else:
            note(f"{folder}: starting fresh, discarding {kept} finished chunks of an earlier run "
                 "of this sweep (--resume would have reused them)")

    @staticmethod
    def name(i: int) -> str:
        return f"{i:06d}.npz"

    def path(self, i: int) -> Path:
        return self.folder / self.name(i)

    def save(self, i: int, part) -> None:
        lo, hi = self.ranges[i]
        arrays = {name: getattr(part, name) for name in part.FIELDS}
        write_bytes(self.path(i), lambda f: np.savez(f, lo=lo, hi=hi, **arrays))

    def load(self, i: int):
        lo, hi = self.ranges[i]
        with np.load(self.path(i), allow_pickle=False) as z:
            if (int(z["lo"]), int(z["hi"])) != (lo, hi):
                raise ValueError(f"{self.path(i)} holds runs {int(z['lo'])}:{int(z['hi'])}, not {lo}:{hi}")
            part = self.outcome(**{name: z[name] for name in self.outcome.FIELDS})
        if part.runs != hi - lo or any(getattr(part, n).shape[0] != hi - lo for n in part.FIELDS):
            raise ValueError(f"{self.path(i)} does not hold {hi - lo} runs")
        return part

    def finished(self):
        """(i, Outcome) of each stored chunk that reads back whole; one that does not
        (it cannot happen through a kill, only through outside damage) is left out,
        to be computed again."""
        for i in self.done:
            try:
                yield i, self.load(i)
            except Exception:  # noqa: BLE001 - unreadable: compute it again
                continue

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
