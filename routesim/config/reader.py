"""Typed access to a sweep file's TOML tree: every problem is a :class:`ConfigError`
naming the file and the key path (``stages[1].seeds``)."""

import difflib
import math


class ConfigError(ValueError):
    """A sweep file that cannot be run: ``file``, ``key`` path and ``message``."""

    def __init__(self, file, key, message):
        self.file, self.key, self.message = str(file), key, message
        where = f"{self.file}: {key}: " if key else f"{self.file}: "
        super().__init__(where + message)


def _suggest(key, allowed, noun="valid keys"):
    close = difflib.get_close_matches(key, list(allowed), n=1)
    if not close:  # a short prefix scores too low for difflib: 'dt' -> 'dt_ms'
        close = [a for a in allowed if a.startswith(key)]
        close = close if len(close) == 1 else []
    return f" (did you mean '{close[0]}'?)" if close else f" ({noun}: {', '.join(allowed)})"


class Reader:
    """Typed access to the TOML tree, raising ConfigError with key paths."""

    def __init__(self, path):
        self.path = path

    def fail(self, key, message):
        raise ConfigError(self.path, key, message)

    def table(self, value, key, allowed):
        if not isinstance(value, dict):
            self.fail(key, f"expected a table, got {_typename(value)}")
        for k in value:
            if k not in allowed:
                self.fail(_join(key, k), "unknown key" + _suggest(k, allowed))
        return value

    def number(self, value, key, kind=float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"expected a number, got {_typename(value)}")
        if kind is int and not (isinstance(value, int) or float(value).is_integer()):
            self.fail(key, f"expected a whole number, got {value!r}")
        if kind is int and abs(value) >= 2**63:
            self.fail(key, f"too large: {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(key, f"expected a finite number, got {value!r}")
        return kind(value)

    def string(self, value, key):
        if not isinstance(value, str):
            self.fail(key, f"expected a string, got {_typename(value)}")
        return value

    def values(self, value, key, item):
        """A scalar or a non-empty list of distinct ones, as a tuple (a list is a grid
        axis: each value becomes a coordinate, and a coordinate given twice would make
        two runs of one condition and a Dataset whose label selects both)."""
        if isinstance(value, list):
            if not value:
                self.fail(key, "empty axis: give at least one value")
            values = tuple(item(v, f"{key}[{i}]") for i, v in enumerate(value))
            for i, v in enumerate(values):
                if v in values[:i]:
                    self.fail(key, f"{value[i]!r} is listed twice ([{values.index(v)}] and [{i}]): "
                                   "each value of an axis must differ")
            return values
        return (item(value, key),)


def _typename(value):
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__)


def _join(key, sub):
    return f"{key}.{sub}" if key else str(sub)
