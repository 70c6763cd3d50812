"""What a worker needs from the queue it consumes, as a protocol (``delayq.Queue`` is one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from redis.asyncio import Redis

    from delayq.events import Hooks
    from delayq.middleware import Lifespan, Middleware
    from delayq.redis.keys import TopicKeys
    from delayq.redis.registry import Registry
    from delayq.redis.scripts import Scripts
    from delayq.topic import Topic


class TaskSource(Protocol):
    """A queue as its worker sees it: the client, the scripts and the registered topics."""

    @property
    def redis(self) -> Redis:
        """The client the wake-up subscription and start-up checks use."""

    @property
    def scripts(self) -> Scripts:
        """Runs reserve, ack, nack and extend."""

    @property
    def registry(self) -> Registry:
        """The queue's registry of live workers, which the worker's heartbeat keeps."""

    @property
    def topics(self) -> Mapping[str, Topic[Any]]:
        """The registered topics, by name."""

    @property
    def middlewares(self) -> Sequence[Middleware]:
        """The middleware around every handler, outermost first."""

    @property
    def lifespan_factory(self) -> Lifespan | None:
        """The registered lifespan: what a worker enters before its first lease and leaves
        after its last handler."""

    @property
    def hooks(self) -> Hooks:
        """The queue's event listeners, told what happens to each delivery."""

    @property
    def max_body_bytes(self) -> int:
        """The largest body a handler is given."""

    def keys(self, topic: str) -> TopicKeys:
        """The Redis key names of ``topic``."""

    def shard_keys(self, topic: str) -> list[TopicKeys]:
        """The key names of every shard of registered ``topic`` (one for an unsharded one)."""

    async def check_shards(self, topics: Iterable[str]) -> None:
        """Check the declared shard counts of ``topics`` against Redis (``ShardCountError``)."""

    async def announce(self, topics: Iterable[str]) -> None:
        """Record topic names for ``stats``."""
