"""Running a pub/sub subscription that survives failures: on one connection
(:func:`listen`), or on a Redis Cluster as sharded subscriptions, one connection per master
(:func:`listen_sharded`).  :mod:`delayq.redis.wakeup` listens with them.

A subscription is silent by nature, so a Redis that stops answering (a stopped process, a
partition) would leave it waiting for ever while wake-ups are lost.  After
:data:`HEARTBEAT` seconds without a message it subscribes again to what it holds, which
Redis confirms and which changes nothing else (``PING`` would do as well, but needs a
permission the documented ACL does not grant); a heartbeat that gets no reply within the
connection's socket timeout (delayq's default 2 s) drops the subscription, and it is
opened again.  One timer per read of a silent subscription, nothing per task.

A failure to reach Redis is told to an :class:`~delayq.pacing.Outage`, shared by the
process's loops, which logs an outage once rather than once per retry.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from redis import exceptions as rexc

from delayq.cancellation import cancel_all, raise_if_cancelling
from delayq.pacing import RetryPacing
from delayq.redis.clients import SILENCE_TIMEOUT
from delayq.redis.cluster import NodeClients

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from redis.asyncio import Redis, RedisCluster
    from redis.asyncio.client import PubSub

    from delayq.pacing import Outage

log = logging.getLogger("delayq.worker")

HEARTBEAT = 1.0
"""Seconds without a message after which a subscription sends its heartbeat."""


async def listen(
    redis: Redis,
    subscribe: Callable[[PubSub], Awaitable[None]],
    deliver: Callable[[str, str], None],
    lost: Callable[[], None],
    subscribed: Callable[[], None],
    outage: Outage,
    *,
    confirmed: bool,
) -> None:
    """Run a subscription until cancelled: ``subscribe`` on a fresh connection, call
    ``subscribed()``, ``deliver`` each message's channel and data, and call ``lost()`` when the
    connection fails or a heartbeat goes unanswered (then resubscribe, backing off up to
    1 s).  ``outage`` is told of each failure, and of Redis's first reply after one.

    ``confirmed``: call ``subscribed()`` only once Redis confirmed the subscription (so
    that a publish after it certainly reaches us), rather than once the command is sent.
    """
    pacing = RetryPacing(first=0.05)

    def answered() -> None:
        # A sent command proves nothing (a stopped server's kernel still accepts it): the
        # confirmation does.
        outage.reachable()
        if confirmed:
            subscribed()

    while True:
        raise_if_cancelling()
        pubsub = redis.pubsub()  # confirmations are also the heartbeat's replies
        try:
            await subscribe(pubsub)
            if not confirmed:
                subscribed()
            pacing.succeeded()
            await _receive(pubsub, subscribe, deliver, answered)
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            lost()
            outage.failed("the wake-up subscription", exc)
            await asyncio.sleep(pacing.failed())
        finally:
            await asyncio.shield(_close_quietly(pubsub))


async def _receive(
    pubsub: PubSub,
    heartbeat: Callable[[PubSub], Awaitable[None]],
    deliver: Callable[[str, str], None],
    confirmed: Callable[[], None] | None,
) -> None:
    """``deliver`` each message's channel and data, and call ``confirmed()`` on the first confirmation,
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
            deliver(_text(message["channel"]), _text(message["data"]))
        elif kind in ("subscribe", "psubscribe", "ssubscribe") and confirmed is not None:
            confirmed()
            confirmed = None  # later confirmations answer heartbeats
        elif kind == "sunsubscribe":
            # Redis drops a shard channel's subscribers when its slot moves to another node.
            raise _SlotMoved("a shard channel's slot moved")


class _SlotMoved(rexc.ConnectionError):
    """Redis dropped a shard channel's subscribers: its slot moved to another node."""


class _Regroup(Exception):
    """The set of channels changed: subscribe again to the new set."""


async def listen_sharded(
    cluster: RedisCluster,
    channels: Callable[[], list[str]],
    changed: asyncio.Event | None,
    deliver: Callable[[str, str], None],
    lost: Callable[[], None],
    subscribed: Callable[[], None],
    outage: Outage,
) -> None:
    """Run sharded subscriptions to ``channels()`` until cancelled: ``SSUBSCRIBE`` on one
    connection per master owning any of them, ``subscribed()`` once every master confirmed.
    A failed connection, an unanswered heartbeat or a moved slot (``sunsubscribe`` from
    Redis) calls ``lost()``, re-reads the slot map and subscribes again (backing off up to
    1 s); ``changed`` being set subscribes again to the new ``channels()``.  ``outage`` is
    told of each failure to reach Redis, and of every master's confirmation after one."""
    nodes = NodeClients(cluster)
    pacing = RetryPacing(first=0.05)

    def answered() -> None:
        outage.reachable()
        subscribed()

    try:
        while True:
            raise_if_cancelling()
            if changed is not None:
                changed.clear()
            try:
                await cluster.initialize()
                await _serve_shards(nodes, cluster, channels(), changed, deliver, answered)
            except _Regroup:
                continue
            except _SlotMoved as exc:
                lost()  # Redis answers: not an outage
                log.info("wake-up subscription moved (%s); subscribing again", exc)
                await asyncio.sleep(pacing.failed())
            except (rexc.RedisError, OSError) as exc:
                lost()
                outage.failed("the wake-up subscription", exc)
                await asyncio.sleep(pacing.failed())
            else:
                pacing.succeeded()
    finally:
        await asyncio.shield(nodes.aclose())


async def _serve_shards(
    nodes: NodeClients,
    cluster: RedisCluster,
    channels: list[str],
    changed: asyncio.Event | None,
    deliver: Callable[[str, str], None],
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
    """A channel's name or a message's data as text; bytes that are not UTF-8 (published by
    something other than delayq) are replaced, so they match nothing instead of killing
    the listener."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


async def _close_quietly(pubsub: object) -> None:
    try:
        await pubsub.aclose()  # type: ignore[attr-defined]
    except Exception:
        log.debug("closing the wake-up subscription failed", exc_info=True)
