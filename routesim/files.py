"""Writing a file whole or not at all: a unique temporary name beside it, then a rename.

Every file routesim writes (result Datasets, chunks, figures, documents) goes through
:func:`replace_atomically`, so an interrupted run never leaves a half-written file and
two runs writing the same file at once never share a temporary. A temporary is named
``.<name>.<random>.tmp``; the commands remove strays of a killed run by that pattern.
"""

import functools
import os
import tempfile
from pathlib import Path


@functools.cache
def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _temporary(path: Path) -> Path:
    """A new empty temporary file beside ``path`` (its folder created if needed), with the
    usual permissions (``0o666`` less the umask), not mkstemp's private ones."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def replace_atomically(path, write) -> Path:
    """Call ``write(tmp)`` with the path of a new temporary file beside ``path``
    (:func:`_temporary`), then rename it to ``path``; return ``path``."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; return ``path``."""
    return replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_texts(texts) -> list:
    """Write several files (``texts``: {path: text}, UTF-8) so that each is whole and
    none is renamed into place until every one is written: each to a temporary beside
    it, then all renamed; on a failure before the renames every temporary is removed and
    no file changed. Returns the paths."""
    paths = [Path(p) for p in texts]
    tmps = []
    try:
        for path, text in zip(paths, texts.values()):
            tmps.append(_temporary(path))
            tmps[-1].write_text(text, encoding="utf-8")
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in zip(tmps, paths):
        os.replace(tmp, path)
    return paths


def write_bytes(path, write) -> Path:
    """Call ``write(f)`` on a binary file object of a temporary beside ``path``, then
    rename it to ``path``; return ``path``."""
    def opened(tmp):
        with open(tmp, "wb") as f:
            write(f)
    return replace_atomically(path, opened)


def unwritable(folder) -> str | None:
    """Why files cannot be written into ``folder``, or None if they can: a command's
    check of its ``--out`` before it computes anything.

    Probes the way the writers will write: creates the folder (and its missing
    parents) and a temporary file in it, then removes everything it created, whether
    the probe succeeds or fails. Only the operating system can say (root may write
    into a folder without write bits, nobody into a new folder under /proc).
    """
    folder = Path(folder)
    for part in (folder, *folder.parents):
        if part.exists():
            if not part.is_dir():
                return f"{part} is a file, not a folder"
            break
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"cannot create the folder {folder}: {exc.strerror or exc}"
        try:
            fd, tmp = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=folder)
        except OSError as exc:
            return f"cannot write into {folder}: {exc.strerror or exc}"
        os.close(fd)
        os.unlink(tmp)
        return None
    finally:
        for made in missing:  # innermost first
            try:
                made.rmdir()
            except OSError:
                pass


def unwritable_file(path) -> str | None:
    """Why a file cannot be written at ``path``, or None if it can: not a folder, and
    its folder :func:`unwritable` says nothing against."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder, not a file"
    return unwritable(path.parent)
