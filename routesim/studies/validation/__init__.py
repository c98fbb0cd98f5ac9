"""The simulator against queueing theory (docs/validation.md): :mod:`.checks` holds each
check's sweep, its comparison with a closed form of :mod:`routesim.theory` and the
document; ``python -m routesim.validation`` is its command line."""
