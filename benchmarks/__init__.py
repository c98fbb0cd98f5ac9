"""routesim's benchmark suite: ``python -m benchmarks`` (see ``__main__.py``).

Not part of CI's pass/fail. It writes docs/performance.md; ``simpy_model.py`` is the
SimPy peer, held to the engine by tests/test_simpy_model.py.
"""
