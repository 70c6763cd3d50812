"""A queue's test clock: the offset its scripts add to Redis's time.

delayq reads time only from Redis (``TIME`` in its scripts).  Under a test clock
(:func:`delayq.redis.source.use_test_clock`, for the whole process) every script adds its
topic's clock offset to it (``<prefix>clock``, ``_envelope.lua``); production's scripts
never read that key.  :func:`delayq.testing.run_due` moves a queue's time by writing the
same offset into every topic (and shard) of that queue: any Redis >= 7 works, and other
queues on it keep the real time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from delayq.redis.source import use_test_clock

if TYPE_CHECKING:
    from delayq.queue import Queue
    from delayq.redis.keys import TopicKeys


class QueueClock:
    """The time of one queue: its topics' clock keys, moved together.

    Args:
        queue: an open queue; its registered topics, and the topics Redis has recorded for
            it, are moved.
    """

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self._keys: list[TopicKeys] = []

    async def load(self) -> QueueClock:
        """Find the queue's topics (and their shards), and bring every topic's offset to the
        largest one found (a topic added since the last move catches up)."""
        use_test_clock()
        queue = self.queue
        names = set(queue.topics) | set(await queue.topic_names())
        self._keys = []
        for name in sorted(names):
            if name in queue.topics:
                self._keys += queue.shard_keys(name)
            else:
                self._keys += queue.shards.of(name, await queue.shards.count(name))
        offsets = {(await queue.scripts.clock(keys))[1] for keys in self._keys}
        if len(offsets) > 1:
            await self._set(max(offsets))
        return self

    async def now_ms(self) -> int:
        """The queue's time, Unix ms (Redis's, while the queue has no topic)."""
        if not self._keys:
            seconds, micros = await self.queue.redis.time()
            return int(seconds) * 1000 + int(micros) // 1000
        now, _ = await self.queue.scripts.clock(self._keys[0])
        return now

    async def advance(self, milliseconds: int) -> None:
        """Move the queue's time ``milliseconds`` forward."""
        if self._keys:
            _, offset = await self.queue.scripts.clock(self._keys[0])
            await self._set(offset + milliseconds)

    async def _set(self, offset_ms: int) -> None:
        for keys in self._keys:
            await self.queue.scripts.clock(keys, offset_ms)
