"""Pin what routesim prints and writes, to check that a structural change keeps it.

    python tools/pin_outputs.py write PINS.json   # before the change
    python tools/pin_outputs.py check PINS.json   # after it: every output the same bytes

Runs the shipped sweeps of both replica models (their printed tables and every
variable, coordinate and attribute of every Dataset), a timeline of each model
(``routesim.trace``), and regenerates the committed figures and
docs/serving-validation.md from those results into a temporary folder; each output is
reduced to a SHA-256. For a refactoring, not a test: the digests are of this code's
own output, so they say "unchanged", never "right".

Left out: the attrs that record the software and machine a Dataset was made with
(``routesim.results.ENVIRONMENT_ATTRS``: the git commit, the versions of Python, NumPy,
Numba, llvmlite and xarray, the CPU) and a document's line that gives them
(``routesim.results.made_with``). They describe the environment, not the output: with
them every commit would change every pin.
"""

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from routesim.results import ENVIRONMENT_ATTRS, MADE_WITH, load

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ("exploration", "load-curve", "batching", "incidents", "mooncake-replay", "azure-replay")
TRACES = {
    "trace-queue": ["sweeps/exploration.toml", "--policy", "adaptive,round_robin", "--rate", "250",
                    "--heterogeneity", "default", "--scenario", "straggler", "--seed", "101"],
    "trace-batching": ["sweeps/incidents.toml", "--stage", "black-hole", "--seed", "1"],
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dataset_digest(path: Path) -> str:
    """Every variable's name, dims, dtype, bytes and attrs, and the Dataset's attrs but
    its ``ENVIRONMENT_ATTRS``."""
    h = hashlib.sha256()
    ds = load(path)
    for name in sorted(ds.variables):
        v = ds[name].variable
        h.update(repr((name, v.dims, str(v.dtype), sorted(v.attrs.items()))).encode())
        h.update(v.values.tobytes() if v.dtype != object else repr(v.values.tolist()).encode())
    h.update(repr(sorted((k, str(v)) for k, v in ds.attrs.items() if k not in ENVIRONMENT_ATTRS)).encode())
    return h.hexdigest()


def document_digest(path: Path) -> str:
    """A generated document's bytes but its provenance paragraph (a line that begins
    ``MADE_WITH``, and the empty line after it)."""
    lines, kept = path.read_bytes().split(b"\n"), []
    for k, line in enumerate(lines):
        if line.startswith(MADE_WITH.encode()) or (line == b"" and k and lines[k - 1].startswith(MADE_WITH.encode())):
            continue
        kept.append(line)
    return sha(b"\n".join(kept))


def run(argv, cwd=ROOT) -> str:
    out = subprocess.run([sys.executable, "-m", *argv], cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def outputs() -> dict:
    pins = {}
    tmp = Path(tempfile.gettempdir()) / "routesim-pins"   # a fixed folder: paths are printed
    lock = open(tmp.with_suffix(".lock"), "w")             # one run at a time uses it
    fcntl.flock(lock, fcntl.LOCK_EX)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        results = tmp / "results"
        for name in SWEEPS:
            text = run(["routesim.sweep", f"sweeps/{name}.toml", "--out", str(results / name), "--quiet"])
            pins[f"{name}: printed"] = sha(text.encode())
            for nc in sorted((results / name).glob("*.nc")):
                pins[f"{name}: {nc.name}"] = dataset_digest(nc)
        for name, argv in TRACES.items():
            out = tmp / f"{name}.nc"
            pins[f"{name}: printed"] = sha(run(["routesim.trace", *argv, "--out", str(out)]).encode())
            pins[f"{name}: {out.name}"] = dataset_digest(out)
        figures = tmp / "figures"
        doc = tmp / "serving-validation.md"
        run(["routesim.figures", str(results / "exploration"), "--out", str(figures), "--quiet"])
        run(["routesim.report", str(results / "exploration"), "--figures", str(figures),
             "--out", str(doc), "--quiet"])
        for f in sorted(figures.iterdir()):
            pins[f"figures/{f.name}"] = sha(f.read_bytes())
        pins["docs/serving-validation.md"] = document_digest(doc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        lock.close()
    return pins


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("write", "check"):
        raise SystemExit(__doc__)
    action, path = args[0], Path(args[1])
    pins = outputs()
    if action == "write":
        path.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
        print(f"{len(pins)} outputs pinned in {path}")
        return
    want = json.loads(path.read_text())
    changed = sorted(k for k in want.keys() | pins.keys() if want.get(k) != pins.get(k))
    for k in changed:
        print(f"changed: {k}")
    print(f"{len(want) - len(changed)} of {len(want)} outputs the same bytes")
    raise SystemExit(1 if changed else 0)


if __name__ == "__main__":
    main()
