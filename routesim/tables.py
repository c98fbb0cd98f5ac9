"""Numbers and tables as text: the one formatting of the summaries, the report and the
validation document."""

import numpy as np

NONE = "—"
"""How a missing or undefined number (None, NaN, ±inf) is shown."""


def fmt(x, spec) -> str:
    """``format(x, spec)``, or :data:`NONE` when ``x`` is None or not finite."""
    return NONE if x is None or not np.isfinite(x) else format(x, spec)


def _align(headers, align):
    return align or "l" + "r" * (len(headers) - 1)


def text_table(headers, rows, align=None) -> str:
    """Plain-text table; ``align`` is a string of 'l'/'r' per column (default: first left)."""
    align = _align(headers, align)
    cells = [list(map(str, headers))] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def markdown_table(headers, rows, align=None, aligned=True) -> str:
    """A Markdown table; ``align``: 'l'/'r' per column (default: first left, rest right);
    ``aligned`` False writes plain ``|---|`` rules instead. A ``|`` in a cell is escaped."""
    if aligned:
        rule = "| " + " | ".join("---" if a == "l" else "---:" for a in _align(headers, align)) + " |"
    else:
        rule = "|" + "---|" * len(headers)
    lines = ["| " + " | ".join(map(str, headers)) + " |", rule]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def legend(items, width=100) -> str:
    """What each column of a printed table is: ``items`` are (header, meaning) pairs,
    written ``header = meaning`` and joined by "; ", wrapped at ``width`` characters."""
    import textwrap
    text = "; ".join(f"{h} = {m}" for h, m in items)
    return "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False,
                                   subsequent_indent="  "))


def slo_text(ds, name, units="ms") -> str:
    """The SLO ``name`` of a Dataset as text: ``"50 ms"`` when one value (a Dataset attr),
    ``"the row's <name>"`` when it is a dimension of the stage."""
    if name in ds.dims:
        return f"the row's {name}"
    return f"{ds.attrs[name]:g} {units}" if name in ds.attrs else f"the sweep's {name}"
