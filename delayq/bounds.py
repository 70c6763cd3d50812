"""The one check for integer settings and arguments: an ``int`` (``True`` is not one) within
bounds, else :class:`~delayq.errors.InvalidInputError` naming the field and the range."""

from __future__ import annotations

from delayq.errors import InvalidInputError


def bounded_int(value: object, name: str, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` if it is an int in ``[low, high]`` (a missing bound is open).

    Raises:
        InvalidInputError: ``value`` is not an int, is a bool, or is out of bounds; the
            message names ``name`` and what it must be.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be {_expected(low, high)}, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise InvalidInputError(f"{name} must be {_expected(low, high)}, got {value!r}")
    return value


def _expected(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"an int in [{low}, {high}]"
    if low == 1:
        return "a positive int"
    if low is not None:
        return f"an int >= {low}"
    return "an int" if high is None else f"an int <= {high}"
