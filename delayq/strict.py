"""Strict topics: refusing a send to a topic this process registered no handler for
(``Queue(..., strict_topics=True)``, ``delayq web --strict-topics``), before anything is
written, so that a mistyped topic fails at once instead of filling a topic nobody consumes.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from delayq.errors import UnknownTopicError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

    from delayq.events import Sending

NEAREST = 3
"""How many registered names an :class:`~delayq.UnknownTopicError` suggests, at most."""


def check_registered(topic: str, registered: Collection[str], queue: str) -> None:
    """Raise :class:`~delayq.UnknownTopicError` unless ``topic`` is one of ``registered``
    (a strict queue's sends), naming the registered topics nearest to it."""
    if topic not in registered:
        nearest = difflib.get_close_matches(topic, registered, n=NEAREST, cutoff=0.6)
        raise UnknownTopicError(topic, nearest, queue)


def strict_send_hook(topics: Collection[str], queue: str) -> Callable[..., Awaitable[None]]:
    """A send hook (``queue.hooks.on_send``) that refuses sends to topics not in
    ``topics``, before anything is written: ``delayq web --strict-topics`` on an app's
    queue."""

    async def refuse_unknown(sending: Sending, call_next: Callable[[], Awaitable[None]]) -> None:
        check_registered(sending.topic, topics, queue)
        await call_next()

    return refuse_unknown
