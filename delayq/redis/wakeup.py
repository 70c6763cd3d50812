"""One pub/sub connection per worker process that wakes the fetch loop of a topic early.

Scripts publish on a topic's ``wake`` channel only when a task becomes due earlier than
anything the topic held, so a worker sleeping until its next due time learns about the
new, earlier task at once.  If the subscription drops, every topic is woken so that it
re-reads its schedule: a lost message can delay nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from redis import exceptions as rexc

from delayq.cancel import raise_if_cancelling

if TYPE_CHECKING:
    from collections.abc import Iterable

    from redis.asyncio import Redis

log = logging.getLogger("delayq.worker")


class Wakeup:
    """Maps wake channels to events that a topic's fetch loop waits on."""

    def __init__(self, redis: Redis, channels: Iterable[str]) -> None:
        self._redis = redis
        self._events = {channel: asyncio.Event() for channel in channels}
        self.subscribed = asyncio.Event()

    def event(self, channel: str) -> asyncio.Event:
        """The event set whenever ``channel`` receives a wake-up."""
        return self._events[channel]

    def set_all(self) -> None:
        """Wake every topic (after a reconnect, or to stop)."""
        for event in self._events.values():
            event.set()

    async def run(self) -> None:
        """Listen until cancelled, resubscribing after connection failures."""
        retry_in = 0.05
        while True:
            raise_if_cancelling()
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(*self._events)
                self.subscribed.set()
                # A task sent while we were (re)subscribing published to nobody: look again.
                self.set_all()
                retry_in = 0.05
                async for message in pubsub.listen():
                    channel = message["channel"]
                    name = channel.decode() if isinstance(channel, bytes) else channel
                    event = self._events.get(name)
                    if event is not None:
                        event.set()
            except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
                self.subscribed.clear()
                self.set_all()
                log.warning("wake-up subscription lost (%s); retrying in %.2fs", exc, retry_in)
                await asyncio.sleep(retry_in)
                retry_in = min(retry_in * 2, 1.0)
            finally:
                await asyncio.shield(_close_quietly(pubsub))


async def _close_quietly(pubsub: object) -> None:
    try:
        await pubsub.aclose()  # type: ignore[attr-defined]
    except Exception:
        log.debug("closing the wake-up subscription failed", exc_info=True)
