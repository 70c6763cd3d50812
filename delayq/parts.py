"""The parts a :class:`~delayq.Queue` is made of, built from its client and settings: the
validated settings, the scripts, producer and consumer, the shard map and history, and the
key names of its topics.

``Queue`` holds the public methods and delegates here; a worker reads the key names, shard
lists and options through the queue (:class:`~delayq.worker.source.TaskSource`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from delayq.admin import Admin
from delayq.bounds import bounded_int
from delayq.consumer import Consumer
from delayq.duration import Duration, to_millis
from delayq.errors import InvalidInputError
from delayq.events import Hooks
from delayq.history import History
from delayq.producer import Producer
from delayq.redis.clients import close_client
from delayq.redis.cluster import is_cluster
from delayq.redis.durability import ClusterDurableSender, Durability, durable_sender
from delayq.redis.keys import TopicKeys, check_queue_name, check_topic
from delayq.redis.registry import Registry
from delayq.redis.scripts import Scripts
from delayq.shards import ShardMap
from delayq.topic import Topic, TopicOptions
from delayq.waits import Results

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pydantic import TypeAdapter
    from redis.asyncio import Redis, RedisCluster

    from delayq.redis.lane import ScriptLane


class QueueParts:
    """What one queue delegates to.  The arguments are :class:`~delayq.Queue`'s.

    Raises:
        InvalidInputError: a bad ``name``, ``max_body_bytes``, ``past_tolerance`` or
            ``durability`` (checked in that order).
    """

    def __init__(
        self, redis: Redis | RedisCluster, name: str, max_body_bytes: int,
        past_tolerance: Duration, durability: Durability | None, strict_topics: bool = False,
    ) -> None:  # fmt: skip
        self.name = check_queue_name(name)
        self.max_body_bytes = bounded_int(max_body_bytes, "max_body_bytes", 1)
        self.past_tolerance_ms = to_millis(past_tolerance, name="past_tolerance")
        if durability is not None and not isinstance(durability, Durability):
            raise InvalidInputError(f"durability must be a Durability, got {durability!r}")
        self.durability = durability
        # A RedisCluster speaks the same commands; delayq's parts type it as Redis.
        self.redis: Redis = cast("Redis", redis)
        self.topics: dict[str, Topic[Any]] = {}
        self.hooks = Hooks()
        self._cluster = is_cluster(redis)
        self._durable = durable_sender(redis, durability) if durability else None
        self._keys: dict[str, TopicKeys] = {}
        self._owns_client = False
        self.scripts = Scripts(self.redis)
        self.shards = ShardMap(
            self.name, lambda: self.scripts, self.keys, self._declared_shards,
            sharded_wake=self._cluster,
        )  # fmt: skip
        self.history = History(
            self.redis, self.keys, self.shards.route, self.shards.every, lambda: self.scripts
        )
        self.registry = Registry(self.redis, self.name)
        self.results = Results(
            self.redis, self.name, lambda: self.scripts, self.shards.route, self._results_ms
        )
        self.producer = Producer(
            self.redis, self.scripts, queue=self.name, keys=self.keys, adapter=self._adapter,
            max_body_bytes=max_body_bytes, past_tolerance_ms=self.past_tolerance_ms,
            durable=self._durable, hooks=self.hooks, shards=self.shards, topics=self.topics,
            strict=strict_topics,
            history=lambda topic: self.topic_options(topic).history,
            results=lambda topic: self.topic_options(topic).results_ms, options=self.topic_options,
        )  # fmt: skip
        self.admin = Admin(self.redis, self.scripts, self.shards, self.name, self.topic_options)
        """A topic as a whole: its leased tasks, all its dead letters, forgetting it."""
        self.consumer = Consumer(
            self.redis, self.scripts, queue=self.name, keys=self.keys,
            options=self.topic_options, hooks=self.hooks, shards=self.shards,
            max_result_bytes=self.max_body_bytes,
        )  # fmt: skip

    def own(self, lane: ScriptLane | None) -> None:
        """Take over the client (``close`` closes it), and run the scripts on ``lane`` if any."""
        if lane is not None:
            self.scripts.use_lane(lane)
        self._owns_client = True

    async def close(self) -> None:
        """Close the consumer's subscription and the connections the queue opened."""
        await self.consumer.aclose()
        await self.results.aclose()
        if isinstance(self._durable, ClusterDurableSender):
            await self._durable.aclose()
        if self._owns_client:
            await self.scripts.aclose()
            await close_client(self.redis)

    def keys(self, topic: str) -> TopicKeys:
        """The Redis key names of ``topic`` (validated)."""
        keys = self._keys.get(topic)
        if keys is None:
            keys = self._keys[topic] = TopicKeys.build(
                self.name, check_topic(topic), sharded_wake=self._cluster
            )
        return keys

    def shard_keys(self, topic: str) -> list[TopicKeys]:
        """The key names of every shard of registered ``topic``, as declared here."""
        return self.shards.of(topic, self.topics[topic].options.shards)

    async def check_shards(self, topics: Iterable[str]) -> None:
        """Resolve the shard count of ``topics`` now (a worker's start), not at first use.

        Raises:
            ShardCountError: a declared count differs from the one recorded in Redis while
                the topic holds tasks.
        """
        for topic in topics:
            await self.shards.count(topic)

    def topic_options(self, topic: str) -> TopicOptions:
        """The options of ``topic``: its registered handler's, else the defaults."""
        registered = self.topics.get(topic)
        return registered.options if registered else TopicOptions()

    async def announce(self, topics: Iterable[str]) -> None:
        """Record topic names in the queue's topic set, which ``stats`` reads."""
        await self.producer.announce(topics)

    def _results_ms(self, topic: str) -> int:
        """How long ``topic`` keeps results as registered here (0: none), or -1 when it is
        not registered here (what its workers recorded then decides)."""
        registered = self.topics.get(topic)
        return registered.options.results_ms if registered else -1

    def _declared_shards(self, topic: str) -> int | None:
        registered = self.topics.get(topic)
        return registered.options.shards if registered else None

    def _adapter(self, topic: str) -> TypeAdapter[Any] | None:
        """The body validator of ``topic`` when this process has its handler registered."""
        registered = self.topics.get(topic)
        return registered.adapter if registered else None
