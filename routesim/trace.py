"""``python -m routesim.trace ...``: the command line of :mod:`routesim.timeline`.

``routesim.trace`` is always the function :func:`routesim.timeline.trace`: the package
imports it under that name, and importing this module (``import routesim.trace``)
puts the function, not the module, in its place, so the name never changes meaning
with the order of imports. Everything else of timelines is in :mod:`routesim.timeline`.
"""

import sys

from routesim.timeline import main, trace

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
else:  # an import: routesim.trace stays the function
    sys.modules[__name__] = trace
