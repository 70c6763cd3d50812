"""Task groups: ``group_by`` on ``@queue.topic`` and ``group=`` on a send.

A grouped topic's due tasks are leased round-robin over their groups, and
``max_running_per_group`` / ``rate_limit_per_group`` hold per group across every worker
(docs/controls.md, "Groups").  This module validates the options and computes a task's
group when it is sent; Redis stores it in the task's header and ``_groups.lua`` does the
rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from delayq.bounds import bounded_int
from delayq.errors import InvalidInputError
from delayq.limits import MAX_RUNNING, RateLimit


class Grouping(Protocol):
    """What :func:`task_group` reads of a topic's options (``delayq.topic.TopicOptions``)."""

    @property
    def grouped(self) -> bool:
        """Whether the topic's tasks are sent with a group."""

    @property
    def group_by(self) -> GroupBy | None:
        """Where a task's group comes from."""


GroupBy = str | Callable[[Any], "str | int"]
"""A body field's name, or a function of the body, that gives a task's group."""

MAX_GROUP_BYTES = 128
"""Longest group, in UTF-8 bytes."""

NO_GROUP = ""
"""The group of a task sent to a grouped topic with none (one group like any other)."""


def check_group(value: object, field: str = "group") -> str:
    """A task's group as stored: a str (or an int, as its decimal text) of 1 to 128 UTF-8
    bytes without a comma or control character (the group ends the stored header, whose
    fields commas separate).

    Raises:
        InvalidInputError: anything else, naming ``field``.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidInputError(f"{field} must be a str or an int, got {type(value).__name__}")
    text = str(value)
    size = len(text.encode("utf-8", errors="replace"))
    if not 1 <= size <= MAX_GROUP_BYTES:
        raise InvalidInputError(
            f"{field} must be 1 to {MAX_GROUP_BYTES} bytes (UTF-8), got {size}: {text[:40]!r}"
        )
    if "," in text or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise InvalidInputError(f"{field} must hold no comma or control character, got {text!r}")
    return text


def check_group_by(value: object) -> GroupBy | None:
    """``group_by`` as ``@queue.topic`` takes it: a field name (a non-empty str), a
    callable, or ``None``.

    Raises:
        InvalidInputError: anything else.
    """
    if value is None or callable(value):
        return value
    if isinstance(value, str) and value:
        return value
    raise InvalidInputError(
        f"group_by must be a body field's name or a callable, got {type(value).__name__}"
    )


def check_max_running_per_group(value: object) -> int:
    """A valid ``max_running_per_group``, else :class:`InvalidInputError`."""
    return bounded_int(value, "max_running_per_group", 1, MAX_RUNNING)


def parse_rate_per_group(value: object) -> RateLimit:
    """``rate_limit_per_group`` parsed as the topic's ``rate_limit`` is (:class:`RateLimit`),
    its error naming the option."""
    try:
        return RateLimit.parse(value)
    except InvalidInputError as exc:
        raise InvalidInputError(str(exc).replace("rate_limit", "rate_limit_per_group", 1)) from None


def group_of(body: Any, group_by: GroupBy) -> str:
    """The group ``group_by`` gives ``body`` (a pydantic model, a dataclass-like object or a
    dict for a field name).

    Raises:
        InvalidInputError: the body has no such field, or the value is not a valid group.
    """
    if callable(group_by):
        try:
            value = group_by(body)
        except Exception as exc:  # the user's function: its failure is bad input here
            raise InvalidInputError(f"group_by failed on the body: {exc!r}") from exc
        return check_group(value, "group_by")
    field = f"group_by field {group_by!r}"
    if isinstance(body, dict):
        if group_by not in body:
            raise InvalidInputError(f"{field}: the body has no such key")
        return check_group(body[group_by], field)
    if not hasattr(body, group_by):
        raise InvalidInputError(f"{field}: the body has no such field")
    return check_group(getattr(body, group_by), field)


def task_group(options: Grouping | None, body: Any, group: str | int | None) -> str | None:
    """The group a task is stored with: ``group`` when given; else, for a topic registered
    grouped in this process (``options``), what its ``group_by`` gives (no ``group_by``:
    the group ``""``); else none (an ungrouped task).

    Raises:
        InvalidInputError: a bad group, or ``group_by`` failed on ``body``.
    """
    if group is not None:
        return check_group(group)
    if options is None or not options.grouped:
        return None
    return NO_GROUP if options.group_by is None else group_of(body, options.group_by)
