"""Durable sends: the send script and ``WAIT``/``WAITAOF`` on one connection.

``WAIT`` and ``WAITAOF`` only count the writes of the connection that calls them, so the
send script and the wait go out together in one non-transactional pipeline, one round
trip.  The pipeline sends a bare ``EVALSHA``: registering the script with the pipeline
would make redis-py send ``SCRIPT EXISTS`` first, an extra round trip that cost a third
of the durable send rate in ``benchmarks/durable.py``.  A server that lacks the script
(after a restart or ``SCRIPT FLUSH``) answers NOSCRIPT without running anything; the
script is then loaded and the pipeline sent again.

One subtlety: a send whose id is already live writes nothing.  ``WAIT`` waits for the
connection's last write offset; Redis 7.0 (tested) moves that offset on every command, so
it covers the task's original write even if another connection made it, but a server
that moves it only on propagated writes would let ``WAIT`` return at once.  The
replication stream is ordered, so waiting for *any* later write of this connection covers
the original one: when the script wrote nothing, a no-op write (``INCRBY seq 0``, which
Redis propagates) and a second wait follow.  It costs a round trip only for duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from redis import exceptions as rexc

from delayq.bounds import bounded_int
from delayq.duration import Duration, to_millis
from delayq.errors import InvalidDurationError, NotDurableError
from delayq.redis.checks import parse_version
from delayq.redis.cluster import NodeClients, is_cluster

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from redis.asyncio import Redis, RedisCluster
    from redis.commands.core import AsyncScript

MAX_REPLICAS = 100
MAX_TIMEOUT_MS = 60_000
WAITAOF_SINCE = (7, 2)
"""First Redis version with ``WAITAOF``."""
REDIS_PY_SOCKET_TIMEOUT = 5.0
"""redis-py's socket timeout when none is configured."""


@dataclass(frozen=True, slots=True)
class Durability:
    """Make every send wait until replicas (and, on Redis >= 7.2, the AOF) confirm it.

    Args:
        replicas: how many replicas must acknowledge the send (``WAIT``), or on Redis
            >= 7.2 with ``appendonly yes`` on the primary, how many must have fsynced it to
            their AOF, with the primary's own AOF fsynced too (``WAITAOF 1 replicas``).
        timeout: how long a send waits for them (> 0, at most 60 s, and below the
            client's socket timeout); then it raises :class:`NotDurableError`.

    Raises:
        InvalidInputError: ``replicas`` is not an int in [1, 100].
        InvalidDurationError: ``timeout`` is not a positive duration of at most 60 s.
    """

    replicas: int = 1
    timeout: Duration = 1.0
    timeout_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        bounded_int(self.replicas, "replicas", 1, MAX_REPLICAS)
        # 0 would make WAIT block forever.
        timeout_ms = to_millis(self.timeout, name="durability timeout", allow_zero=False)
        if timeout_ms > MAX_TIMEOUT_MS:
            raise InvalidDurationError(
                f"durability timeout must be at most 60 s, got {self.timeout!r}"
            )
        object.__setattr__(self, "timeout_ms", timeout_ms)

    def check_client(self, client: Redis) -> None:
        """Refuse a timeout the client's socket timeout would cut short.

        Raises:
            InvalidDurationError: the wait would outlast the socket timeout, so a replica
                that is down would surface as a dropped connection instead of NotDurableError.
        """
        options = client.connection_pool.connection_kwargs
        socket_timeout = options.get("socket_timeout", REDIS_PY_SOCKET_TIMEOUT)
        if socket_timeout is not None and self.timeout_ms >= socket_timeout * 1000:
            raise InvalidDurationError(
                f"durability timeout ({self.timeout_ms} ms) must be shorter than the "
                f"client's socket_timeout ({socket_timeout} s)"
            )


@dataclass(frozen=True, slots=True)
class WaitCommand:
    """The wait chosen for one server: ``WAITAOF 1 n ms`` or ``WAIT n ms``."""

    args: tuple[str | int, ...]
    replicas: int

    @classmethod
    def choose(cls, version: str, aof_enabled: bool, durability: Durability) -> WaitCommand:
        """``WAITAOF`` on Redis >= 7.2 with AOF on (it errors without a local AOF), else ``WAIT``."""
        n, ms = durability.replicas, durability.timeout_ms
        if parse_version(version) >= WAITAOF_SINCE and aof_enabled:
            return cls(("WAITAOF", 1, n, ms), n)
        return cls(("WAIT", n, ms), n)

    @property
    def aof(self) -> bool:
        """Whether this is ``WAITAOF``."""
        return self.args[0] == "WAITAOF"

    def confirmed(self, reply: Any) -> int:
        """Replicas that confirmed, per the reply; -1 when the primary's own fsync did not
        happen (``WAITAOF`` reports [local fsyncs, replica fsyncs])."""
        if self.aof:
            local, replicas = (int(v) for v in reply)
            return replicas if local >= 1 else -1
        return int(reply)


@dataclass(frozen=True, slots=True)
class DurableWrite:
    """One send script call to confirm: ``statuses`` maps its reply to one status per task
    (1 stored, 0 already live, < 0 rejected) for ``ids``; ``touch_key`` is a key of the
    same hash slot that ``INCRBY 0`` may touch when the script wrote nothing."""

    script: AsyncScript
    keys: Sequence[str]
    args: Sequence[str | int | bytes]
    ids: Sequence[str]
    touch_key: str
    statuses: Callable[[Any], list[int]]


class DurableSender:
    """Runs a send script followed by the chosen wait, for one queue's client."""

    def __init__(self, client: Redis, durability: Durability) -> None:
        durability.check_client(client)
        self._client = client
        self.durability = durability
        self._wait: WaitCommand | None = None

    async def wait_command(self) -> WaitCommand:
        """Detect the server's version and AOF setting once, and choose the wait."""
        if self._wait is None:
            server = await self._client.info("server")
            persistence = await self._client.info("persistence")
            version = str(server.get("redis_version", "0"))
            aof = str(persistence.get("aof_enabled", "0")) == "1"
            self._wait = WaitCommand.choose(version, aof, self.durability)
        return self._wait

    async def run(self, write: DurableWrite) -> Any:
        """Run ``write``'s script and wait for the replicas; return the script's reply.

        Raises:
            NotDurableError: fewer replicas confirmed than required within the timeout.
        """
        wait = await self.wait_command()
        reply, confirmed = await self._pipeline(wait, write)
        found = write.statuses(reply)
        if all(status < 0 for status in found):
            return reply  # rejected: nothing was written, nothing to confirm
        if not any(status == 1 for status in found):
            confirmed = await self._touch_and_wait(wait, write.touch_key)
        if confirmed < wait.replicas:
            raise NotDurableError(
                list(write.ids), confirmed=confirmed, required=wait.replicas,
                timeout_ms=self.durability.timeout_ms,
            )  # fmt: skip
        return reply

    async def _pipeline(self, wait: WaitCommand, write: DurableWrite) -> tuple[Any, int]:
        """The script and the wait in one round trip: the script's reply and the count of
        confirmations."""
        script, keys = write.script, write.keys

        async def once() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *write.args)
            pipe.execute_command(*wait.args)
            return await pipe.execute()

        try:
            reply, waited = await once()
        except rexc.NoScriptError:
            # Nothing was written (the WAIT behind it only waited): load it and repeat.
            await self._client.script_load(script.script)
            reply, waited = await once()
        return reply, wait.confirmed(waited)

    async def _touch_and_wait(self, wait: WaitCommand, touch_key: str) -> int:
        pipe = self._client.pipeline(transaction=False)
        pipe.incrby(touch_key, 0)
        pipe.execute_command(*wait.args)
        _, waited = await pipe.execute()
        return wait.confirmed(waited)


class ClusterDurableSender(DurableSender):
    """Durable sends on a Redis Cluster: the script and the wait run on a plain connection
    to the master that owns the task's slot (``WAIT`` counts that master's replicas), one
    :class:`DurableSender` per master.  After a reshard or a failover the script meets
    MOVED there; the caller's cluster retry refreshes the slot map and sends again."""

    def __init__(self, cluster: RedisCluster, durability: Durability) -> None:
        self._nodes = NodeClients(cluster)
        self._senders: dict[int, DurableSender] = {}
        self.durability = durability
        self._wait = None

    async def run(self, write: DurableWrite) -> Any:
        await self._nodes.cluster.initialize()  # a no-op once the slot map is read
        client = self._nodes.for_key(write.keys[0])
        sender = self._senders.get(id(client))
        if sender is None:
            sender = self._senders[id(client)] = DurableSender(client, self.durability)
        try:
            return await sender.run(write)
        except rexc.MovedError as exc:
            self._nodes.moved(exc)  # the caller's cluster retry sends it there
            raise
        except (rexc.ConnectionError, rexc.TimeoutError, OSError):
            # The master may be gone: ask the cluster who owns the slot now, so that the
            # caller's cluster retry goes to its promoted replica.
            await self._nodes.reroute(write.keys[0])
            raise

    async def aclose(self) -> None:
        """Close the per-master connections."""
        self._senders.clear()
        await self._nodes.aclose()


def durable_sender(client: Redis | RedisCluster, durability: Durability) -> DurableSender:
    """The durable sender for ``client``: per master on a cluster."""
    if is_cluster(client):
        return ClusterDurableSender(client, durability)
    return DurableSender(cast("Redis", client), durability)
