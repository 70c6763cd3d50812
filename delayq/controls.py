"""Fleet-wide topic controls on the queue: pause and resume (``Queue`` inherits them).

The controls live in Redis, in each topic's ``controls`` hash, and ``reserve.lua`` enforces
them for every worker of the queue; see docs/controls.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable

    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap


class ControlledQueue(Protocol):
    """What the controls need from the queue that inherits them."""

    shards: ShardMap

    @property
    def scripts(self) -> Scripts:
        """Runs control.lua."""

    def keys(self, topic: str) -> TopicKeys:
        """The Redis key names of ``topic``."""

    async def announce(self, topics: Iterable[str]) -> None:
        """Record topic names for ``stats``."""


class TopicControls:
    """``Queue.pause`` and ``Queue.resume``."""

    async def pause(self: ControlledQueue, topic: str) -> None:
        """Stop every worker of the queue from leasing ``topic``'s tasks, until :meth:`resume`.

        Takes effect at each worker's next lease (tasks already leased run to the end) and
        holds across worker restarts: the pause is stored in Redis.  Sends are still
        accepted; ``stats()`` and ``get()`` show the pause.  A sharded topic is paused
        shard by shard (each shard's ``controls`` hash).
        """
        for keys in await self.shards.every(topic):
            await self.scripts.control(keys, {"paused": "1"})
        await self.announce([topic])  # so that stats() lists it, tasks or not

    async def resume(self: ControlledQueue, topic: str) -> None:
        """Let ``topic``'s tasks be leased again after :meth:`pause`; its workers are woken
        at once (a topic that is not paused is left as it is)."""
        for keys in await self.shards.every(topic):
            await self.scripts.control(keys, {"paused": ""})
