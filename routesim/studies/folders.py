"""A results folder as the serving and incident studies read it: every stage's Dataset."""

from pathlib import Path

from .. import results


def load(results_dir) -> dict:
    """{stage name: Dataset} of every ``*.nc`` stage file in a results folder."""
    out = {}
    for path in sorted(Path(results_dir).glob("*.nc")):
        if path.name.startswith("trace"):
            continue
        ds = results.load(path)
        out[ds.attrs.get("stage", path.stem)] = ds
    return out
