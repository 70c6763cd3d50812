"""Every Redis key and channel name delayq uses, and the rules for the names inside them.

All keys of one (queue, topic) share the hash tag ``{queue:topic}``, so they live in one
Redis Cluster slot and every script can touch them atomically::

    delayq:{shop:order.close}:wheel      ZSET  slot number -> lower bound ms of the slot
    delayq:{shop:order.close}:slot:<n>   ZSET  id -> due ms, <= 128 entries (delayed and ready)
    delayq:{shop:order.close}:tasks:<b>  HASH  id -> header "attempts,token,max,ttr,enqueued,due",
                                               id + NUL byte -> body JSON (b: from sha1(id), hex)
    delayq:{shop:order.close}:buckets    STRING number of task buckets (absent: 4,096)
    delayq:{shop:order.close}:reserved   ZSET  id -> lease deadline ms, plus one pin member
                                               (NUL-prefixed, score +inf) that keeps it a skiplist
    delayq:{shop:order.close}:dead       ZSET  id -> dead-lettered at ms
    delayq:{shop:order.close}:errors     HASH  id -> last error
    delayq:{shop:order.close}:slots      STRING counter that numbers new slots
    delayq:{shop:order.close}:clock      STRING ms a test clock moved the topic's time on
                                               (delayq.testing.run_due; absent otherwise)
    delayq:{shop:order.close}:seq        STRING fencing-token counter
    delayq:{shop:order.close}:controls   HASH  fleet-wide controls: paused, rate_limit, max_running
    delayq:{shop:order.close}:starts     HASH  the rate limit's recent leases per sub-window
    delayq:{shop:order.close}:prio       ZSET  id -> due ms: waiting tasks with a priority != 0
    delayq:{shop:order.close}:prio:ready ZSET  -priority -> due ms (13 digits) + id: lease order
    delayq:{shop:order.close}:prio:mark  STRING ms up to which prio's entries are in prio:ready
    delayq:{shop:order.close}:grp:q:<g>  ZSET  member -> due ms: a group's waiting tasks; with
                                               grp:all, grp:ring, grp:wait, grp:full, grp:run,
                                               grp:turn and grp:starts:<g>: a grouped topic's
                                               state, named by _groups.lua from the prefix
                                               (docs/keys.md)
    delayq:{shop:order.close}:meta       HASH  scheduled -> count of delayed + ready tasks;
                                               history -> records kept, history_seq;
                                               ttr_ms, max_attempts -> its workers' defaults
    delayq:{shop:order.close}:history    STREAM finished tasks, when the topic keeps history
    delayq:{shop:order.close}:rollup     HASH  an hour of activity in 10 s windows (history)
    delayq:{shop:order.close}:archive    HASH  SQL destination -> seq of the last history record
                                               it holds (the archive's cursors, archived.lua)
    delayq:{shop:order.close}:result:<id> STRING a finished task's result, expiring (topics
                                               with results=, _results.lua)
    delayq:{shop:order.close}:wake       pub/sub channel: "a task became due earlier"
    delayq:{shop:order.close}:results    pub/sub channel: ids whose result was just stored
                                               (sharded on a Redis Cluster, like wake)
    delayq:{shop:*}:wake                 the pattern of every topic's wake channel (long polls;
                                               on a Redis Cluster the wake channels are sharded
                                               channels, subscribed one by one, see wakeup.py)
    delayq:{shop:order.close}:periodic   HASH  a periodic topic's chain: fp (its schedule's
                                               fingerprint), last (latest tick scheduled, ms),
                                               id (that tick's task id), judged + missed (the
                                               last due tick looked at, and whether it fell due
                                               with no worker there: tick_look.lua)
    delayq:{shop}:topics                 SET   topics that have been used (for stats)

The registry of live workers (:class:`RegistryKeys`) shares the queue's own tag ``{shop}``,
so on a Redis Cluster it is one key space in one slot::

    delayq:{shop}:workers                ZSET  worker id -> when its entry expires, ms
    delayq:{shop}:workers:info           HASH  worker id -> "started ms,last seen ms,<JSON>"
    delayq:{shop}:workers:topic:<topic>  ZSET  worker id -> expiry: the topic's consumers
    delayq:{shop}:workers:schedules      HASH  topic + LF + schedule fingerprint ->
                                               "<last seen ms> <description>": when a live
                                               worker last ran that schedule
    delayq:{shop}:workers:clock          STRING a test clock's offset (never written)

A sharded topic (``@queue.topic(name, shards=N)``, docs/cluster.md) spreads its tasks over N
hash tags: a task lives in shard ``zlib.crc32(task_id) % N`` (:func:`shard_of`).  Shard 0
keeps the names above; shard k >= 1 has the same keys under its own prefix and tag::

    delayq:s:{shop:order.close:37}:wheel  ...and every other key above but ``periodic``

The number in a shard's tag is not k: it is the candidate :func:`shard_tags` picked so that
the N tags fall in N different N-ths of the 16,384 cluster slots (one tag per N-th), which
spreads a topic's shards evenly over masters that own equal runs of slots, as
``redis-cli --cluster create`` assigns them.  A topic may hold ':' and '#', so
``{shop:order.close#3}`` could be a plain topic's tag; no plain key starts with
``delayq:s:`` (plain keys continue ``delayq:{``), and a tag ``queue:topic:c`` splits at its
last ':' into one (topic, c), so no two shards' names, of one topic or of two, ever meet.
Shard 0's ``meta`` hash records the count in its field ``shards`` (absent: 1).
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from delayq.errors import InvalidNameError

PREFIX = "delayq"
MAX_NAME_CHARS = 200
MAX_TASK_ID_BYTES = 256
SHARD_PREFIX = f"{PREFIX}:s:"
"""Start of every key of a topic's shards 1..N-1 (shard 0 keeps the plain names)."""

# Braces would change the hash tag, whitespace and control characters make keys unreadable
# in redis-cli and logs.  A queue name also may not hold ':' so that ("a:b", "c") and
# ("a", "b:c") can never map to the same hash tag.
_TOPIC_FORBIDDEN = re.compile(r"[{}\s\x00-\x1f\x7f]")
_QUEUE_FORBIDDEN = re.compile(r"[{}:\s\x00-\x1f\x7f]")
_ID_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f]")


def _check_name(value: object, what: str, forbidden: re.Pattern[str]) -> str:
    if not isinstance(value, str):
        raise InvalidNameError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidNameError(f"{what} must not be empty")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidNameError(f"{what} is longer than {MAX_NAME_CHARS} characters")
    bad = forbidden.search(value)
    if bad:
        raise InvalidNameError(f"{what} {value!r} contains the forbidden character {bad.group()!r}")
    return value


def check_queue_name(name: object) -> str:
    """Return ``name`` if it is a valid queue name, else raise :class:`InvalidNameError`."""
    return _check_name(name, "queue name", _QUEUE_FORBIDDEN)


def check_topic(topic: object) -> str:
    """Return ``topic`` if it is a valid topic name, else raise :class:`InvalidNameError`."""
    return _check_name(topic, "topic", _TOPIC_FORBIDDEN)


def check_task_id(task_id: object) -> str:
    """Return ``task_id`` if it is a valid task id, else raise :class:`InvalidNameError`."""
    if not isinstance(task_id, str):
        raise InvalidNameError(f"task_id must be a str, got {type(task_id).__name__}")
    if not task_id:
        raise InvalidNameError("task_id must not be empty")
    if len(task_id.encode()) > MAX_TASK_ID_BYTES:
        raise InvalidNameError(f"task_id is longer than {MAX_TASK_ID_BYTES} bytes")
    if _ID_FORBIDDEN.search(task_id):
        raise InvalidNameError(f"task_id {task_id!r} contains a control character")
    return task_id


@dataclass(frozen=True, slots=True)
class TopicKeys:
    """The key and channel names of one (queue, topic)."""

    topic: str
    prefix: str
    """Start of every key below; the scripts build bucket and slot names from it."""
    wheel: str
    reserved: str
    dead: str
    errors: str
    seq: str
    wake: str
    buckets: str
    """How many task buckets the topic has (absent: ``BUCKETS_MIN``); see :meth:`bucket`."""
    controls: str
    """The topic's fleet-wide controls (pause, declared limits); absent for a plain topic."""
    starts: str
    """The rate limit's count of recent leases (``_controls.lua``)."""
    prio: str
    """Every waiting task with a priority other than 0, by due time (``_priority.lua``).
    The scripts build this name and the next two from :attr:`prefix` (``prio_keys`` in
    ``_layout.lua``), as they build bucket and slot names."""
    prio_ready: str
    """The due ones of :attr:`prio`, in lease order."""
    prio_mark: str
    """How far :attr:`prio` has been moved into :attr:`prio_ready` (ms)."""
    meta: str
    """The topic's counts kept by the scripts (``_layout.lua``: ``meta_key``)."""
    clock: str
    """How far a test clock moved the topic's time on, ms; every script adds it to Redis's
    ``TIME`` (``_envelope.lua``).  Only :func:`delayq.testing.run_due` writes it."""
    periodic: str
    """A periodic topic's chain of ticks (tick.lua)."""
    history: str
    """Finished tasks of a topic that keeps history (``_history.lua``)."""
    rollup: str
    """Its activity per 10 s window for the last hour (``rollup.lua``)."""
    archive: str
    """How far each SQL destination has copied :attr:`history` (``archived.lua``)."""
    results: str
    """The channel on which the scripts name the tasks whose result they stored
    (``_results.lua``); see :meth:`result` for the result's key."""
    wake_publish: str
    """What the scripts are given as the wake channel: :attr:`wake`, or on a Redis Cluster
    ``!`` + :attr:`wake`, which they publish with ``SPUBLISH`` (sharded pub/sub)."""
    shard: int = 0
    """Which shard of the topic these are (0: the plain names; see the module's docstring)."""

    @classmethod
    def build(
        cls,
        queue: str,
        topic: str,
        *,
        sharded_wake: bool = False,
        shard: int = 0,
        shards: int = 1,
    ) -> TopicKeys:
        """Return the names for ``topic`` in ``queue`` (both assumed already validated);
        ``sharded_wake``: the scripts publish wake-ups with ``SPUBLISH`` (Redis Cluster);
        ``shard``: the names of that shard (0: the plain names) of a topic of ``shards``."""
        if not 0 <= shard < max(shards, 1):
            raise ValueError(f"shard {shard} of a topic of {shards} shards")
        tag = shard_tags(queue, topic, shards)[shard] if shard else f"{queue}:{topic}"
        base = f"{SHARD_PREFIX if shard else PREFIX + ':'}{{{tag}}}:"
        return cls(
            topic=topic,
            prefix=base,
            wheel=base + "wheel",
            reserved=base + "reserved",
            dead=base + "dead",
            errors=base + "errors",
            seq=base + "seq",
            wake=base + "wake",
            buckets=base + "buckets",
            controls=base + "controls",
            starts=base + "starts",
            prio=base + "prio",
            prio_ready=base + "prio:ready",
            prio_mark=base + "prio:mark",
            meta=base + "meta",
            clock=base + "clock",
            periodic=base + "periodic",
            history=base + "history",
            rollup=base + "rollup",
            archive=base + "archive",
            results=base + "results",
            wake_publish=("!" if sharded_wake else "") + base + "wake",
            shard=shard,
        )

    def bucket(self, task_id: str, count: int = 0) -> str:
        """The HASH holding ``task_id``'s header and body when the topic has ``count`` buckets.

        ``count`` is what the :attr:`buckets` key holds; 0 (or the key being absent)
        means ``BUCKETS_MIN``.  Mirrors ``bucket_of`` in ``_layout.lua``.
        """
        count = max(count, BUCKETS_MIN)
        level = BUCKETS_MIN
        while level * 2 <= count:
            level *= 2
        digest = hashlib.sha1(task_id.encode()).hexdigest()
        hashed = int(digest[:3], 16) + 4096 * int(digest[3:8], 16)
        number = hashed % (2 * level)
        if number >= count:
            number = hashed % level
        return f"{self.prefix}tasks:{number:03x}"

    def stored(self) -> tuple[str, ...]:
        """Every key of the topic's state but its task buckets and schedule slots (which
        Redis deletes once empty) and a periodic chain (never deleted: a deploy may still
        run its schedule), in the order forget.lua takes them as KEYS."""
        return (self.prefix, self.wheel, self.reserved, self.dead, self.controls, self.meta,
                self.seq, self.errors, self.buckets, self.starts, self.prio, self.prio_ready,
                self.prio_mark, self.clock, self.history, self.rollup, self.archive,
                self.prefix + "slots")  # fmt: skip

    def result(self, task_id: str) -> str:
        """The STRING holding ``task_id``'s result (``result_key`` in ``_layout.lua``)."""
        return f"{self.prefix}result:{task_id}"

    def slot(self, number: bytes | str) -> str:
        """The schedule slot (ZSET id -> due ms) named ``number`` in the wheel."""
        name = number.decode() if isinstance(number, bytes) else number
        return f"{self.prefix}slot:{name}"


BUCKETS_MIN = 4096
"""Task buckets a topic starts with; they split one by one as it grows (``_layout.lua``)."""

BODY_FIELD_SUFFIX = "\0"
"""A task's body is stored in its bucket under its id plus this (ids hold no control characters)."""


def shard_of(task_id: str, shards: int) -> int:
    """The shard holding ``task_id`` in a topic of ``shards`` shards: ``zlib.crc32`` of the
    id's UTF-8 bytes modulo ``shards`` (stable across processes and versions, and unrelated
    to the sha1 that picks a task's bucket inside its shard)."""
    return zlib.crc32(task_id.encode()) % shards if shards > 1 else 0


@lru_cache(maxsize=256)
def shard_tags(queue: str, topic: str, shards: int) -> tuple[str, ...]:
    """The hash tags of the ``shards`` shards of ``topic`` (shard 0's is the plain
    ``queue:topic``), placed one in each ``shards``-th of the cluster's slot range.

    Shard 0's tag falls in some N-th of the slots; the other N-th's are given to shards
    1..N-1 in ascending order, and each takes the first candidate tag ``queue:topic:c``
    (c = 0, 1, 2, ...) whose slot lies in its N-th.  The result depends only on the three
    arguments, so every process derives the same names; finding them costs about
    N log N slot hashes (a few ms for the largest count), once per process and topic.
    """
    if shards < 2:
        return (f"{queue}:{topic}",)
    if shards > REDIS_CLUSTER_HASH_SLOTS:
        raise ValueError(f"at most {REDIS_CLUSTER_HASH_SLOTS} shards, got {shards}")

    def part(tag: str) -> int:
        return key_slot(tag.encode()) * shards // REDIS_CLUSTER_HASH_SLOTS

    plain = f"{queue}:{topic}"
    parts = [n for n in range(shards) if n != part(plain)]
    wanted = set(parts)
    found: dict[int, str] = {}
    candidate = 0
    while wanted:
        tag = f"{plain}:{candidate}"
        where = part(tag)
        if where in wanted:
            wanted.discard(where)
            found[where] = tag
        candidate += 1
    return (plain, *(found[n] for n in parts))


def topics_key(queue: str) -> str:
    """The set of topic names ever used in ``queue``."""
    return f"{PREFIX}:{{{queue}}}:topics"


@dataclass(frozen=True, slots=True)
class RegistryKeys:
    """The key names of a queue's registry of live workers (see the module's docstring)."""

    workers: str
    info: str
    schedules: str
    clock: str
    topic_prefix: str
    """Followed by a topic name: that topic's consumers."""

    @classmethod
    def build(cls, queue: str) -> RegistryKeys:
        """Return the registry's names for ``queue`` (assumed already validated)."""
        base = f"{PREFIX}:{{{queue}}}:workers"
        return cls(
            workers=base,
            info=base + ":info",
            schedules=base + ":schedules",
            clock=base + ":clock",
            topic_prefix=base + ":topic:",
        )

    def consumers(self, topic: str) -> str:
        """The ZSET of the live workers consuming ``topic``."""
        return self.topic_prefix + topic


_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def wake_pattern(queue: str, channel: str = "wake") -> str:
    """The PSUBSCRIBE pattern matching the wake channel (or ``channel``, e.g. ``results``)
    of every topic of ``queue``.

    A queue name holds no ``{``, ``}`` or ``:``, so the pattern cannot match another
    queue's channels; glob characters in it are escaped.
    """
    escaped = _GLOB_SPECIAL.sub(r"\\\1", queue)
    return f"{PREFIX}:{{{escaped}:*}}:{channel}"


def shard_wake_pattern(queue: str, channel: str = "wake") -> str:
    """The PSUBSCRIBE pattern matching the wake channel (or ``channel``) of every shard
    k >= 1 of every sharded topic of ``queue`` (:func:`wake_pattern` covers shard 0)."""
    escaped = _GLOB_SPECIAL.sub(r"\\\1", queue)
    return f"{SHARD_PREFIX}{{{escaped}:*}}:{channel}"
