"""Where Numba keeps routesim's compiled kernels: a folder named by the source of every
compiled module.

Numba's own cache notices a change to the file that defines a cached function, not to
the files of the functions it calls, which it compiles into it: after an edit to
``batching/replica.py``, the cached ``batching/engine.py`` kernels would still run the
old replica code. Naming the cache folder by a digest of all of routesim's compiled
source makes any such change start a fresh folder. A ``NUMBA_CACHE_DIR`` set by the
user is left alone (then keeping it fresh is the user's business).
"""

import hashlib
import os
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


REGISTRIES = ("batching/policies", "step_cost")
"""Folders of registered units (one module each) whose constants the compiled dispatchers
read (a policy's traits, a form's code): every module of them counts, compiled or not."""


NUMBA = re.compile(rb"^[ \t]*(?:import numba\b|from numba\b)", re.MULTILINE)
"""A module that imports Numba: every module with a kernel, an intrinsic or an overload
does (a word such as "overload" in a study's prose does not make a module compiled)."""


def counted(path: Path) -> bool:
    """Whether the digest covers the module at ``path``: it imports Numba, is conf.py (the
    compile flags) or belongs to one of :data:`REGISTRIES`."""
    registered = path.parent.relative_to(PACKAGE).as_posix() in REGISTRIES
    return registered or path.name == "conf.py" or NUMBA.search(path.read_bytes()) is not None


def digest() -> str:
    """A hash of every routesim module :func:`counted` covers."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        if counted(path):
            h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def folder() -> Path:
    """The cache folder for this source: under the package's ``__pycache__`` when it is
    writable (as Numba's default), else under the user's cache folder."""
    base = PACKAGE / "__pycache__"
    try:
        base.mkdir(exist_ok=True)
        writable = os.access(base, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "routesim"
    return base / f"numba-{digest()}"


def use() -> None:
    """Point Numba's cache at :func:`folder` unless ``NUMBA_CACHE_DIR`` is set. Must run
    before any compiled routesim module is imported (their kernels pick their cache
    folder when they are defined)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    from numba.core import config
    config.CACHE_DIR = str(folder())
