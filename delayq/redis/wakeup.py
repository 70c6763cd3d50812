"""Pub/sub wake-ups: a task became due earlier than anything its topic held.

Scripts publish on a topic's ``wake`` channel only when a task becomes due earlier than
anything the topic held, so whoever sleeps until the topic's next due time learns about
the new, earlier task at once.  Two listeners share one subscription loop:

- :class:`Wakeup`, one per worker process: a fixed set of channels, one event per topic's
  fetch loop;
- :class:`WakeupHub`, one per queue that serves long polls (``Queue.consumer``): one
  pattern subscription to every topic of the queue, and a :class:`Signal` per topic that
  any number of waiters watch.

On a Redis Cluster the scripts publish with ``SPUBLISH`` (sharded pub/sub: a message stays
on the shard owning its channel's slot), so both listeners subscribe with ``SSUBSCRIBE``
to their concrete channels, one connection per master that owns any of them
(:func:`listen_sharded`); a pattern cannot be sharded, so the hub subscribes to the
channels of the topics actually polled, adding each one as a poll first asks for it.

The same channel carries aborts (``Queue.cancel(..., running=True)``): cancel.lua publishes
``abort:<token>:<id>`` when it ends a running task's lease.  Redis does not record which
worker holds a lease, so every worker of the topic hears it and the one holding that lease
(by id and fencing token) cancels the handler; the subscription is one every worker keeps
anyway, and a lease costs no record of its holder.  An abort wakes no fetch loop, and a
long poll ignores it (the abort's freed place, if one was waited for, is published apart).

If the subscription drops, every waiter is woken so that it re-reads its schedule: a lost
message can delay nothing.

A subscription sends heartbeats and reopens itself (:mod:`delayq.redis.subscription`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Generic, TypeVar

from delayq.pacing import Outage
from delayq.redis.cluster import is_cluster
from delayq.redis.subscription import listen, listen_sharded

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from redis.asyncio import Redis
    from redis.asyncio.client import PubSub

log = logging.getLogger("delayq.worker")

ABORT = "abort:"
"""How a wake channel's message that is an abort starts (cancel.lua)."""


def parse_abort(data: str) -> tuple[str, str] | None:
    """``(token, task id)`` of a wake channel's message that is an abort, else None."""
    if not data.startswith(ABORT):
        return None
    token, _, task_id = data[len(ABORT) :].partition(":")
    return token, task_id


class Wakeup:
    """Maps wake channels to events that a topic's fetch loop waits on; tells ``outage``
    (the worker's, shared by its loops) when the subscription fails and succeeds."""

    def __init__(self, redis: Redis, channels: Iterable[str], outage: Outage | None = None) -> None:
        self._redis = redis
        self._outage = outage or Outage(log)
        self._events = {channel: asyncio.Event() for channel in channels}
        self._listeners: dict[str, list[asyncio.Event]] = {}
        self.subscribed = asyncio.Event()
        self.on_abort: Callable[[str, str, str], None] | None = None
        """Called with (channel, token, task id) for each abort heard (the worker's)."""

    def event(self, channel: str) -> asyncio.Event:
        """The event set whenever ``channel`` receives a wake-up."""
        return self._events[channel]

    def listener(self, channel: str) -> asyncio.Event:
        """Another event set on every wake-up of ``channel`` (a periodic topic's keeper
        waits on one beside the topic's fetch loop)."""
        event = asyncio.Event()
        self._listeners.setdefault(channel, []).append(event)
        return event

    def set_all(self) -> None:
        """Wake every topic (after a reconnect, or to stop)."""
        for event in self._events.values():
            event.set()
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.set()

    def _deliver(self, channel: str, data: str) -> None:
        if data[:1] == "a":  # an abort: no wake-up's data (a due time) starts so
            abort = parse_abort(data)
            if abort is not None:
                if self.on_abort is not None:
                    self.on_abort(channel, *abort)
                return
        event = self._events.get(channel)
        if event is not None:
            event.set()
        for listener in self._listeners.get(channel, ()):
            listener.set()

    async def run(self) -> None:
        """Listen until cancelled, resubscribing after connection failures."""

        async def subscribe(pubsub: PubSub) -> None:
            await pubsub.subscribe(*self._events)

        def subscribed() -> None:
            self.subscribed.set()
            # A task sent while we were (re)subscribing published to nobody: look again.
            self.set_all()

        if is_cluster(self._redis):
            channels = list(self._events)
            await listen_sharded(self._redis, lambda: channels, None, self._deliver, self._lost,
                                 subscribed, self._outage)  # fmt: skip
            return
        await listen(self._redis, subscribe, self._deliver, self._lost, subscribed, self._outage,
                     confirmed=False)  # fmt: skip

    def _lost(self) -> None:
        self.subscribed.clear()
        self.set_all()


class Signal:
    """A wake-up that many waiters can watch without stealing it from each other.

    A waiter takes :meth:`watch` *before* it looks at the schedule and awaits the event it
    got after: a wake-up fired in between sets that event, so none is missed, and no
    waiter clears another's (what a shared ``asyncio.Event`` with ``clear()`` would do).
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def watch(self) -> asyncio.Event:
        """The event the next :meth:`fire` sets."""
        return self._event

    def fire(self) -> None:
        """Wake everyone watching now; later watchers get a fresh event."""
        self._event.set()
        self._event = asyncio.Event()


class WakeupHub:
    """One pattern subscription to the wake channels of every topic of a queue.

    Args:
        redis: the client whose pool lends the subscription its connection.
        patterns: the globs of the queue's wake channels (``keys.wake_pattern``, and
            ``keys.shard_wake_pattern`` for the shards of sharded topics).
    """

    def __init__(self, redis: Redis, *patterns: str) -> None:
        self._redis = redis
        self._patterns = patterns
        self._signals: dict[str, Signal] = {}
        self._cluster = redis if is_cluster(redis) else None
        self._sharded = self._cluster is not None
        self._changed = asyncio.Event()
        self._outage = Outage(log)
        self.subscribed = asyncio.Event()
        """Set once Redis confirmed the subscription: a publish after that reaches us."""

    def signal(self, channel: str, *more: str) -> Signal:
        """The signal of ``channel`` (made on first use; one small object per topic), which
        the ``more`` channels (a sharded topic's other shards) fire too.  On a cluster a new
        channel is subscribed to: :attr:`subscribed` is set again once it is."""
        found = self._signals.get(channel)
        if found is None:
            found = Signal()
        for name in (channel, *more):
            if self._signals.get(name) is not found:
                self._signals[name] = found
                if self._sharded:
                    self.subscribed.clear()
                    self._changed.set()
        return found

    def _deliver(self, channel: str, data: str) -> None:
        if data[:1] == "a":
            return  # an abort, which only the worker holding the lease acts on
        found = self._signals.get(channel)
        if found is not None:
            found.fire()

    def _fire_all(self) -> None:
        """Wake every waiter: a message may have been lost (or not yet subscribed to)."""
        for found in self._signals.values():
            found.fire()

    def _lost(self) -> None:
        self.subscribed.clear()
        self._fire_all()

    async def run(self) -> None:
        """Listen until cancelled, resubscribing after connection failures."""

        async def subscribe(pubsub: PubSub) -> None:
            await pubsub.psubscribe(*self._patterns)

        def subscribed() -> None:
            self.subscribed.set()
            # A task sent while we were (re)subscribing published to nobody: look again.
            self._fire_all()

        if self._cluster is not None:
            await listen_sharded(
                self._cluster, lambda: list(self._signals), self._changed, self._deliver,
                self._lost, subscribed, self._outage,
            )  # fmt: skip
            return
        await listen(self._redis, subscribe, self._deliver, self._lost, subscribed, self._outage,
                     confirmed=True)  # fmt: skip


class ResultHub(WakeupHub):
    """Wakes whoever waits for a task's result (``queue.result(..., wait=S)``).

    A script that stores results names the finished ids on the topic's ``results``
    channel (``_results.lua``); the hub subscribes as :class:`WakeupHub` does (a pattern
    on one Redis, the channels of the topics waited on with ``SSUBSCRIBE`` on a cluster)
    and fires only the signal of each id named, so a finished task wakes its own waiters,
    not every waiter of the topic.  A lost or renewed subscription wakes every waiter to
    read its result again.
    """

    def __init__(self, redis: Redis, *patterns: str) -> None:
        super().__init__(redis, *patterns)
        self._waiting: dict[tuple[str, str], tuple[Signal, int]] = {}

    def watch(self, channel: str, task_id: str) -> Signal:
        """The signal fired when ``task_id``'s result is named on ``channel`` (or the
        subscription was lost or renewed); pair with :meth:`unwatch`."""
        self.signal(channel)  # on a cluster: subscribes to the channel
        found, count = self._waiting.get((channel, task_id), (None, 0))
        if found is None:
            found = Signal()
        self._waiting[channel, task_id] = (found, count + 1)
        return found

    def unwatch(self, channel: str, task_id: str) -> None:
        """One waiter of ``task_id`` is gone."""
        found, count = self._waiting.pop((channel, task_id))
        if count > 1:
            self._waiting[channel, task_id] = (found, count - 1)

    def _deliver(self, channel: str, data: str) -> None:
        for task_id in data.split("\n"):
            entry = self._waiting.get((channel, task_id))
            if entry is not None:
                entry[0].fire()

    def _fire_all(self) -> None:
        for found, _ in self._waiting.values():
            found.fire()


HubT = TypeVar("HubT", bound=WakeupHub)


class LazyHub(Generic[HubT]):
    """One hub's subscription for a queue, started on first use on the running loop and
    started again when it ended or the loop is another one (a queue used from a second
    event loop), so that a process that never waits never subscribes."""

    def __init__(self, make: Callable[[], HubT], name: str) -> None:
        self._make, self._name = make, name
        self._hub: HubT | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def current(self) -> HubT | None:
        """The hub last started, if any (it may have ended since)."""
        return self._hub

    def on(self, loop: asyncio.AbstractEventLoop) -> HubT:
        """The hub, listening on ``loop``."""
        hub, task = self._hub, self._task
        if hub is None or task is None or task.done() or task.get_loop() is not loop:
            hub = self._hub = self._make()
            self._task = loop.create_task(hub.run(), name=self._name)
        return hub

    async def aclose(self) -> None:
        """Stop the subscription, if one was opened."""
        task, self._task, self._hub = self._task, None, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
