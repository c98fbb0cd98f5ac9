"""routesim COMMAND [ARGS...] (or python -m routesim COMMAND ...): one entry point for
every command line of the package. ``routesim COMMAND ARGS`` runs exactly what
``python -m routesim.COMMAND ARGS`` runs (which stays): the module's ``__main__`` code,
its exit status and its handling of an interrupt included.

A command is a line of :data:`COMMANDS`: its name, the module ``python -m`` runs, and
one line of help. Only the chosen command's module is imported, so each command
starts as fast as its ``python -m`` form (``--help`` too: each parses its arguments
before it imports the heavy modules).
"""

import runpy
import sys

COMMANDS = {
    "sweep": ("routesim.sweep", "run a sweep file's stages; write a Dataset per stage"),
    "capacity": ("routesim.capacity", "find each policy's largest rate that meets an SLO"),
    "calibrate": ("routesim.calibrate", "fit a replica's step cost from a serving log"),
    "validate": ("routesim.validate", "fit a server by simulation and check it against its runs' logs"),
    "trace": ("routesim.trace", "record timelines of one condition of a stage"),
    "plot": ("routesim.plot", "draw any metric of any results file against its dimensions"),
    "keys": ("routesim.keys", "print every key a sweep file may hold (docs/keys.md)"),
    "figures": ("routesim.figures", "draw a bundled study's figures from its results folder"),
    "report": ("routesim.report", "write a bundled study's document from its results folder"),
    "validation": ("routesim.validation", "check the simulator against queueing theory"),
    "least_outstanding": ("routesim.least_outstanding", "run the least-outstanding-routing study"),
    "scheduler_modes": ("routesim.scheduler_modes", "run the scheduler-modes study"),
    "disaggregation": ("routesim.disaggregation", "run the prefill/decode disaggregation study"),
}
"""name -> (the module ``python -m`` runs, one line of help). Adding a command is one
line here."""


def version_text() -> str:
    """``routesim <version>, commit <hash>`` (``(uncommitted changes)`` after it), or
    ``routesim <version>, not a git checkout``: the package's installed version and
    :func:`routesim.results.git_commit`, as every Dataset records them."""
    from importlib.metadata import PackageNotFoundError, version

    from .results import git_commit
    try:
        number = version("routesim")
    except PackageNotFoundError:  # run from a source tree that pip did not install
        from . import __version__ as number
    commit = git_commit()
    return f"routesim {number}, " + (commit if commit == "not a git checkout" else f"commit {commit}")


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return ("usage: routesim [--version] COMMAND [ARGS...]\n\n"
            "commands (routesim COMMAND --help for each one's options; the same as "
            "python -m routesim.COMMAND):\n" + "\n".join(lines) + "\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(version_text())
        return 0
    name = argv[0].replace("-", "_")
    if name not in COMMANDS:
        print(f"error: routesim: unknown command {argv[0]!r} (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    if argv[1:2] in (["-V"], ["--version"]):
        print(version_text())
        return 0
    return run(COMMANDS[name][0], argv[1:])


def run(module: str, args: list) -> int:
    """Run ``python -m <module> <args>`` in this process; return its exit status."""
    if not isinstance(sys.modules.get(module, sys), type(sys)):
        del sys.modules[module]  # routesim.trace once imported is the function (routesim/trace.py)
    saved = sys.argv
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)  # sys.exit("message"), as Python would show it
        return 1
    finally:
        sys.argv = saved
    return 0


def console() -> None:
    """The ``routesim`` console script (and ``python -m routesim``)."""
    sys.exit(main())


if __name__ == "__main__":
    console()
