"""Registering handlers: what ``@queue.topic`` and ``@queue.periodic`` store, and what
``queue.next_tick`` reads back.

Plain functions over the queue's ``topics`` dict; :class:`~delayq.Queue` calls them.  A
worker reads what is registered when it starts (through
:class:`~delayq.worker.source.TaskSource`); only :func:`next_tick` talks to Redis.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from delayq.errors import InvalidInputError
from delayq.handlers import Handler, tick_handler
from delayq.task import from_millis
from delayq.topic import Sender, Topic, TopicDecorator, TopicOptions

if TYPE_CHECKING:
    from datetime import datetime

    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts
    from delayq.ticks import PeriodicOptions

PeriodicHandler = Callable[..., Awaitable[None]] | Callable[..., None]
"""``async def handler(task) -> None`` (or one taking nothing; or a plain ``def``)."""


def topic_decorator(
    topics: dict[str, Topic[Any]], queue: Sender, queue_name: str, name: str, options: TopicOptions
) -> TopicDecorator:
    """The decorator that registers a handler for topic ``name`` in ``topics``."""

    def register(handler: Handler) -> Topic[Any]:
        if name in topics:
            raise InvalidInputError(f"topic {name!r} already has a handler in queue {queue_name!r}")
        handle: Topic[Any] = Topic(queue, name, handler, options)
        topics[name] = handle
        return handle

    return TopicDecorator(register)


def periodic_decorator(
    register: TopicDecorator, periodic: PeriodicOptions
) -> Callable[[PeriodicHandler], Topic[None]]:
    """The decorator that registers a periodic handler through ``register``."""

    def decorate(handler: PeriodicHandler) -> Topic[None]:
        handle: Topic[None] = register(tick_handler(handler))
        handle.options = replace(handle.options, periodic=periodic)
        return handle

    return decorate


async def next_tick(
    scripts: Scripts,
    keys: Callable[[str], TopicKeys],
    topics: dict[str, Topic[Any]],
    topic: str,
    queue_name: str,
) -> datetime | None:
    """When periodic ``topic`` ticks next, as its chain in Redis says (see
    :meth:`delayq.Queue.next_tick`)."""
    registered = topics.get(topic)
    if registered is None or registered.options.periodic is None:
        raise InvalidInputError(f"{topic!r} is not a periodic topic of queue {queue_name!r}")
    now, fingerprint, last = await scripts.tick_state(keys(topic))
    mine = fingerprint == registered.options.periodic.schedule.fingerprint
    return from_millis(last) if mine and last > now else None
