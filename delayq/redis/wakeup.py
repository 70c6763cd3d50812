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

If the subscription drops, every waiter is woken so that it re-reads its schedule: a lost
message can delay nothing.

A subscription is silent by nature, so a Redis that stops answering (a stopped process, a
partition) would leave it waiting for ever while wake-ups are lost.  After
:data:`HEARTBEAT` seconds without a message it subscribes again to what it holds, which
Redis confirms and which changes nothing else (``PING`` would do as well, but needs a
permission the documented ACL does not grant); a heartbeat that gets no reply within the
connection's socket timeout (delayq's default 2 s) drops the subscription, and it is
opened again.  One timer per read of a silent subscription, nothing per task.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from redis import exceptions as rexc

from delayq.cancellation import cancel_all, raise_if_cancelling
from delayq.pacing import RetryPacing
from delayq.redis.clients import SILENCE_TIMEOUT
from delayq.redis.cluster import NodeClients, is_cluster

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from redis.asyncio import Redis, RedisCluster
    from redis.asyncio.client import PubSub

log = logging.getLogger("delayq.worker")

HEARTBEAT = 1.0
"""Seconds without a message after which a subscription sends its heartbeat."""


class Wakeup:
    """Maps wake channels to events that a topic's fetch loop waits on."""

    def __init__(self, redis: Redis, channels: Iterable[str]) -> None:
        self._redis = redis
        self._events = {channel: asyncio.Event() for channel in channels}
        self._listeners: dict[str, list[asyncio.Event]] = {}
        self.subscribed = asyncio.Event()

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

    def _deliver(self, channel: str) -> None:
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
            await listen_sharded(
                self._redis, lambda: channels, None, self._deliver, self._lost, subscribed
            )
            return
        await listen(self._redis, subscribe, self._deliver, self._lost, subscribed, confirmed=False)

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

    def _deliver(self, channel: str) -> None:
        found = self._signals.get(channel)
        if found is not None:
            found.fire()

    def _lost(self) -> None:
        self.subscribed.clear()
        for found in self._signals.values():
            found.fire()

    async def run(self) -> None:
        """Listen until cancelled, resubscribing after connection failures."""

        async def subscribe(pubsub: PubSub) -> None:
            await pubsub.psubscribe(*self._patterns)

        def subscribed() -> None:
            self.subscribed.set()
            # A task sent while we were (re)subscribing published to nobody: look again.
            for found in self._signals.values():
                found.fire()

        if self._cluster is not None:
            await listen_sharded(
                self._cluster, lambda: list(self._signals), self._changed, self._deliver,
                self._lost, subscribed,
            )  # fmt: skip
            return
        await listen(self._redis, subscribe, self._deliver, self._lost, subscribed, confirmed=True)


async def listen(
    redis: Redis,
    subscribe: Callable[[PubSub], Awaitable[None]],
    deliver: Callable[[str], None],
    lost: Callable[[], None],
    subscribed: Callable[[], None],
    *,
    confirmed: bool,
) -> None:
    """Run a subscription until cancelled: ``subscribe`` on a fresh connection, call
    ``subscribed()``, ``deliver`` each message's channel, and call ``lost()`` when the
    connection fails or a heartbeat goes unanswered (then resubscribe, backing off up to
    1 s).

    ``confirmed``: call ``subscribed()`` only once Redis confirmed the subscription (so
    that a publish after it certainly reaches us), rather than once the command is sent.
    """
    pacing = RetryPacing(first=0.05)
    while True:
        raise_if_cancelling()
        pubsub = redis.pubsub()  # confirmations are also the heartbeat's replies
        try:
            await subscribe(pubsub)
            if not confirmed:
                subscribed()
            pacing.succeeded()
            await _receive(pubsub, subscribe, deliver, subscribed if confirmed else None)
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            lost()
            retry_in = pacing.failed()
            log.warning("wake-up subscription lost (%s); retrying in %.2fs", exc, retry_in)
            await asyncio.sleep(retry_in)
        finally:
            await asyncio.shield(_close_quietly(pubsub))


async def _receive(
    pubsub: PubSub,
    heartbeat: Callable[[PubSub], Awaitable[None]],
    deliver: Callable[[str], None],
    confirmed: Callable[[], None] | None,
) -> None:
    """``deliver`` each message's channel and call ``confirmed()`` on the first confirmation,
    until the connection fails or a ``heartbeat`` stays unanswered (redis-py's
    ``TimeoutError``)."""
    connection = pubsub.connection
    limit = (connection.socket_timeout if connection else None) or SILENCE_TIMEOUT
    loop = asyncio.get_running_loop()
    sent_at: float | None = None
    while True:
        # A heartbeat is a socket write, timed by asyncio.wait_for, which on Python 3.11
        # can swallow a cancel (delayq.cancellation): without this check a cancelled session
        # went on listening, and a worker on a Redis Cluster never finished stopping.
        raise_if_cancelling()
        message = await pubsub.get_message(timeout=HEARTBEAT)
        if message is None:
            if sent_at is None:
                await heartbeat(pubsub)
                sent_at = loop.time()
            elif loop.time() - sent_at >= limit:
                raise rexc.TimeoutError(f"no reply to a heartbeat for {limit:g}s")
            continue
        sent_at = None  # anything heard, a confirmation included, shows the link alive
        kind = message["type"]
        if kind in ("message", "pmessage", "smessage"):
            deliver(_text(message["channel"]))
        elif kind in ("subscribe", "psubscribe", "ssubscribe") and confirmed is not None:
            confirmed()
            confirmed = None  # later confirmations answer heartbeats
        elif kind == "sunsubscribe":
            # Redis drops a shard channel's subscribers when its slot moves to another node.
            raise rexc.ConnectionError("a shard channel's slot moved")


class _Regroup(Exception):
    """The set of channels changed: subscribe again to the new set."""


async def listen_sharded(
    cluster: RedisCluster,
    channels: Callable[[], list[str]],
    changed: asyncio.Event | None,
    deliver: Callable[[str], None],
    lost: Callable[[], None],
    subscribed: Callable[[], None],
) -> None:
    """Run sharded subscriptions to ``channels()`` until cancelled: ``SSUBSCRIBE`` on one
    connection per master owning any of them, ``subscribed()`` once every master confirmed.
    A failed connection, an unanswered heartbeat or a moved slot (``sunsubscribe`` from
    Redis) calls ``lost()``, re-reads the slot map and subscribes again (backing off up to
    1 s); ``changed`` being set subscribes again to the new ``channels()``."""
    nodes = NodeClients(cluster)
    pacing = RetryPacing(first=0.05)
    try:
        while True:
            raise_if_cancelling()
            if changed is not None:
                changed.clear()
            try:
                await cluster.initialize()
                await _serve_shards(nodes, cluster, channels(), changed, deliver, subscribed)
            except _Regroup:
                continue
            except (rexc.RedisError, OSError) as exc:
                lost()
                retry_in = pacing.failed()
                log.warning("wake-up subscription lost (%s); retrying in %.2fs", exc, retry_in)
                await asyncio.sleep(retry_in)
            else:
                pacing.succeeded()
    finally:
        await asyncio.shield(nodes.aclose())


async def _serve_shards(
    nodes: NodeClients,
    cluster: RedisCluster,
    channels: list[str],
    changed: asyncio.Event | None,
    deliver: Callable[[str], None],
    subscribed: Callable[[], None],
) -> None:
    # node -> slot -> channels: one SSUBSCRIBE may only name channels of one slot.  The
    # owners are asked afresh each time (after a failover the client's map may be stale).
    owners = await nodes.slot_owners() if channels else {}
    groups: dict[str, dict[int, list[str]]] = {}
    for channel in channels:
        slot = cluster.keyslot(channel)
        host, port = owners[slot]
        groups.setdefault(f"{host}:{port}", {}).setdefault(slot, []).append(channel)
    waiting = set(groups)

    def confirmer(name: str) -> Callable[[], None]:
        def confirmed() -> None:
            waiting.discard(name)
            if not waiting:
                subscribed()

        return confirmed

    async def session(name: str, group: dict[int, list[str]]) -> None:
        host, _, port = name.rpartition(":")
        pubsub = nodes.for_node(host, int(port), name).pubsub()
        try:

            async def subscribe(ps: PubSub) -> None:
                for same_slot in group.values():
                    await ps.ssubscribe(*same_slot)

            await subscribe(pubsub)
            await _receive(pubsub, subscribe, deliver, confirmer(name))
        finally:
            await asyncio.shield(_close_quietly(pubsub))

    async def regroup() -> None:
        if changed is None:
            await asyncio.Future()  # never: the channel set is fixed
        else:
            await changed.wait()
        raise _Regroup

    if not groups:
        subscribed()
    tasks = [asyncio.ensure_future(session(n, g)) for n, g in groups.items()]
    tasks.append(asyncio.ensure_future(regroup()))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # raises the failure
    finally:
        while await cancel_all(tasks, within=1.0):
            log.warning("a wake-up session did not end after its cancel; cancelling it again")
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved, so asyncio does not log it as never retrieved


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _close_quietly(pubsub: object) -> None:
    try:
        await pubsub.aclose()  # type: ignore[attr-defined]
    except Exception:
        log.debug("closing the wake-up subscription failed", exc_info=True)
