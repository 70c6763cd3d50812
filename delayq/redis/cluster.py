"""Redis Cluster: opening a cluster client, retrying what a moving cluster refuses for a
moment, and one plain client per master for what must run on one node's connection.

Every key of a (queue, topic) shares one hash tag (:mod:`delayq.redis.keys`), so each
script runs whole on the master that owns its slot: redis-py's ``RedisCluster`` routes an
``EVALSHA`` by its first key, loads a script on NOSCRIPT, and follows MOVED and ASK.  What
it gives up on quickly is left to :func:`retrying`: ``TRYAGAIN`` (a multi-key script on a
slot whose keys are half migrated: redis-py retries it for ~0.4 s, but moving a busy
topic's slot takes longer), ``CLUSTERDOWN`` and lost connections while a failover elects a
new master.  Those are tried again with backoff for up to :data:`RETRY_WINDOW` seconds:
every delayq script is safe to repeat (a send by id keeps the first copy, an ack or nack
is fenced by its lease token, a repeated reserve at worst leases tasks whose lease then
expires).
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import redis
from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import SSLConnection

from delayq.pacing import RetryPacing
from delayq.redis.translate import TRANSLATED, translate

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

log = logging.getLogger("delayq")
T = TypeVar("T")

RETRY_WINDOW = 10.0
"""Seconds a script refused by a reconfiguring cluster is tried again (TRYAGAIN,
CLUSTERDOWN, a master lost until its replica is promoted) before the error is raised."""

RETRYABLE: tuple[type[Exception], ...] = (
    rexc.TryAgainError,
    rexc.ClusterDownError,
    rexc.ClusterError,
    rexc.SlotNotCoveredError,
    rexc.MasterDownError,
    rexc.MovedError,
    rexc.AskError,
    rexc.ConnectionError,
    rexc.TimeoutError,
    rexc.ReadOnlyError,
    OSError,
)
"""What a cluster raises while slots move or a master is replaced."""


def is_cluster(client: object) -> TypeGuard[RedisCluster]:
    """Whether ``client`` is redis-py's asyncio cluster client."""
    return isinstance(client, RedisCluster)


_REDIS_PY = Path(redis.__file__).parent
_REDIS_PY_CONNECTIONS = tuple(
    str(_REDIS_PY / part) for part in ("asyncio/connection.py", "asyncio/cluster.py", "_parsers")
)
"""Where redis-py's race raises: its asyncio connections, cluster client and parsers."""


def is_disconnect_race(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py's cluster race: a connection handed out while another
    call disconnects it, so the command fails unsent on a stream or parser state that is
    gone.  Only an ``AttributeError`` raised inside redis-py's asyncio connection, cluster
    or parser code, on one of redis-py's objects or ``None``, is one; delayq's own bugs are
    not."""
    if not isinstance(exc, AttributeError):
        return False
    owner = exc.obj
    if owner is not None and not type(owner).__module__.startswith("redis."):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(_REDIS_PY_CONNECTIONS)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, RETRYABLE) or is_disconnect_race(exc):
        return True
    # A script's error reply carrying a redirection (e.g. TRYAGAIN raised inside EVALSHA
    # arrives as a plain ResponseError on some paths).
    return isinstance(exc, rexc.ResponseError) and str(exc).startswith(
        ("TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK", "MASTERDOWN", "READONLY")
    )


async def retrying(
    cluster: RedisCluster,
    call: Callable[[], Awaitable[T]],
    first: BaseException,
    *,
    window: float = RETRY_WINDOW,
) -> T:
    """Repeat ``call`` (which just raised ``first``) while the cluster answers with
    transient errors, backing off from 50 ms to 1 s, for up to ``window`` seconds.  Raises
    the last error when the window closes or an error is not transient.  redis-py itself
    re-reads the slot map after MOVED or a lost node (refreshing it here, from many
    callers at once, would close connections that other calls are using)."""
    if not _transient(first):
        raise first
    loop = asyncio.get_running_loop()
    deadline = loop.time() + window
    pacing = RetryPacing(first=0.05, cap=1.0)
    pause = pacing.failed()
    error: BaseException = first
    while loop.time() + pause < deadline:
        await asyncio.sleep(pause)
        pause = pacing.failed()
        try:
            return await call()
        except Exception as exc:
            if not _transient(exc):
                raise
            error = exc
            log.debug("cluster busy (%s); retrying", exc)
    raise error


async def run_command(client: object, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call``, one plain command on ``client``, as the scripts run: on a cluster it
    is repeated while slots move or a master is replaced, and redis-py's errors come out
    as delayq's (see :func:`after_failure`)."""
    try:
        return await call()
    except (*TRANSLATED, AttributeError) as exc:
        return await after_failure(client if is_cluster(client) else None, call, exc)


async def after_failure(
    cluster: RedisCluster | None, call: Callable[[], Awaitable[T]], exc: Exception
) -> T:
    """What a call that just raised ``exc`` comes to: on a cluster, ``call`` repeated while
    the cluster answers with transient errors (:func:`retrying`); else, or when that ends,
    the error as delayq's.  An ``AttributeError`` is retried only when it is redis-py's
    race (:func:`is_disconnect_race`), and otherwise comes out as it is."""
    try:
        if cluster is None:
            raise exc
        return await retrying(cluster, call, exc)
    except TRANSLATED as again:
        raise translate(again) from again


_NODE_OPTIONS = (
    "username", "password", "credential_provider", "socket_timeout", "socket_connect_timeout",
    "socket_keepalive", "socket_keepalive_options", "client_name", "encoding",
    "encoding_errors", "decode_responses", "protocol", "health_check_interval",
)  # fmt: skip


class NodeClients:
    """One plain ``Redis`` client per master of a cluster, opened on first use with the
    cluster client's credentials, timeouts and TLS settings, for what must run on one
    node's connection: a durable send's script and ``WAIT``, a sharded subscription."""

    def __init__(self, cluster: RedisCluster) -> None:
        self.cluster = cluster
        self._clients: dict[str, Redis] = {}
        self._moved: dict[int, tuple[str, int]] = {}

    def for_key(self, key: str) -> Redis:
        """The client of the master serving ``key``'s slot: per the last MOVED seen for it
        (:meth:`moved`), else per the cluster client's slot map."""
        found = self._moved.get(self.cluster.keyslot(key))
        if found is not None:
            host, port = found
            return self.for_node(host, port, f"{host}:{port}")
        node = self.cluster.get_node_from_key(key)
        if node is None:
            raise rexc.SlotNotCoveredError(f"no node serves {key!r}")
        return self.for_node(node.host, int(node.port), node.name)

    def moved(self, error: rexc.MovedError) -> None:
        """Remember where a MOVED reply says its slot now lives."""
        self._moved[error.slot_id] = (error.host, int(error.port))

    async def reroute(self, key: str) -> None:
        """Ask the cluster which master owns ``key``'s slot now (after a lost master)."""
        try:
            owners = await self.slot_owners()
        except (rexc.RedisError, OSError) as exc:
            log.debug("no node answered CLUSTER SLOTS: %s", exc)
            return
        slot = self.cluster.keyslot(key)
        if slot in owners:
            self._moved[slot] = owners[slot]

    async def slot_owners(self) -> dict[int, tuple[str, int]]:
        """Ask the cluster (``CLUSTER SLOTS``, from the first node that answers) which
        master owns each slot, on these connections rather than the cluster client's."""
        error: Exception = rexc.ConnectionError("no cluster node known")
        for node in self.cluster.get_nodes():
            try:
                client = self.for_node(node.host, int(node.port), node.name)
                reply = await client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
            except (rexc.RedisError, OSError) as exc:
                error = exc
                continue
            owners: dict[int, tuple[str, int]] = {}
            for start, end, master, *_ in reply:
                host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
                for slot in range(int(start), int(end) + 1):
                    owners[slot] = (host or node.host, int(master[1]))
            return owners
        raise error

    def for_node(self, host: str, port: int, name: str) -> Redis:
        """The client of the node at ``host:port`` (``name``: redis-py's ``host:port``)."""
        client = self._clients.get(name)
        if client is None:
            kwargs: dict[str, Any] = self.cluster.get_connection_kwargs()
            options = {k: kwargs[k] for k in _NODE_OPTIONS if k in kwargs}
            connection_class = kwargs.get("connection_class")
            if isinstance(connection_class, type) and issubclass(connection_class, SSLConnection):
                options["ssl"] = True
                options.update({k: v for k, v in kwargs.items() if k.startswith("ssl_")})
            client = self._clients[name] = Redis(host=host, port=port, **options)
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
