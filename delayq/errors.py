"""Every exception delayq raises on purpose.

The tree::

    DelayqError
    ├── InvalidInputError (also ValueError)   bad input, rejected before anything is written
    │   ├── InvalidNameError                 queue name, topic or task id
    │   ├── UnknownTopicError                a send to a topic not registered here (strict_topics=True)
    │   ├── InvalidDurationError             delay, ttr, grace, `at`, a backoff figure or a durability timeout
    │   ├── InvalidScheduleError             a periodic topic's cron, interval, time zone or catch_up
    │   ├── BodyTooLargeError                encoded body over the size limit
    │   ├── BodyValidationError              body not JSON-serialisable or not valid for the topic's model
    │   ├── InvalidHeadersError              task headers that are not small str -> str maps
    │   └── UnsupportedShardingError         shards > 1 with a fleet-wide limit or a schedule
    ├── RedisUnavailableError (also ConnectionError)   Redis cannot be reached or is loading
    ├── RedisAuthError                       Redis refused our credentials or an ACL denied a command
    ├── RedisOutOfMemoryError                Redis is at maxmemory and refused a write
    ├── UnsupportedRedisError                the server is too old for delayq's scripts
    ├── RedisCommandError                    any other error reply from Redis
    ├── ShardCountError                      a topic's declared shard count differs from the stored one
    ├── NotDurableError                      a durable send is stored, but too few replicas confirmed it
    ├── LeaseLostError                       Task.extend after the lease was lost (acks/nacks: logged)
    ├── ResultNotReadyError (also TimeoutError)  a result wait ended before the task finished
    ├── AppImportError                       `delayq worker module:attr` could not load a Queue
    ├── LifespanError                        the queue's lifespan raised as a worker entered it
    └── Retry                                raised by a handler to ask for a retry after a delay
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import timedelta


class DelayqError(Exception):
    """Base class of every exception raised by delayq."""


class InvalidInputError(DelayqError, ValueError):
    """Raised at the API edge when an argument is invalid; nothing was written to Redis."""


class InvalidNameError(InvalidInputError):
    """Raised for an empty, oversized or malformed queue name, topic or task id."""


class UnknownTopicError(InvalidInputError):
    """Raised by a send (``send``, ``send_delayed``, ``send_at``, ``send_many``, and the HTTP
    API's send, which answers 404 ``unknown_topic``) on a queue opened with
    ``strict_topics=True``, when no handler for the topic is registered in this process.
    Nothing was written.

    Attributes:
        topic: the topic sent to.
        nearest: the registered topic names closest to it, closest first (maybe none).
    """

    def __init__(self, topic: str, nearest: list[str], queue: str) -> None:
        hint = f"; did you mean {' or '.join(map(repr, nearest))}?" if nearest else ""
        super().__init__(
            f"topic {topic!r} is not registered in queue {queue!r} (strict_topics){hint}"
        )
        self.topic = topic
        self.nearest = nearest


class InvalidDurationError(InvalidInputError):
    """Raised for a negative, non-finite or wrongly typed duration, a naive datetime,
    or an absolute time too far in the past."""


class InvalidScheduleError(InvalidInputError):
    """Raised by ``@queue.periodic`` for a bad cron expression, interval, time zone or
    ``catch_up`` mode, when the handler is decorated (nothing is registered)."""


class BodyTooLargeError(InvalidInputError):
    """Raised when a body's JSON encoding is larger than the queue's ``max_body_bytes``."""


class BodyValidationError(InvalidInputError):
    """Raised when a body is not JSON-serialisable or does not validate against the
    model of the topic's registered handler.  The message names the topic and the field."""


class InvalidHeadersError(InvalidInputError):
    """Raised for task headers that are not a mapping of valid names to strings without
    control characters, or that are too many or too large (``delayq.headers``)."""


class UnsupportedShardingError(InvalidInputError):
    """Raised by ``@queue.topic(name, shards=N)`` with N > 1 together with ``rate_limit``
    or ``max_running``: a limit shared by the shards is not built yet.  (A periodic topic
    has no ``shards`` option: its chain of ticks lives in one shard.)"""


class ShardCountError(DelayqError):
    """Raised before a topic's first use in a process (a send, a lookup, a worker's start)
    when the shard count it was declared with differs from the one recorded in Redis while
    the topic holds tasks.  Nothing was written.  See docs/cluster.md, "Changing a topic's
    shard count": drain the topic with the old count first."""


class RedisUnavailableError(DelayqError, ConnectionError):
    """Raised when Redis cannot be reached (refused, timed out, dropped, still loading).

    A producer sees it from ``send*``; whether that send was applied is then unknown, but
    retrying it with the same ``task_id`` is safe because sends are idempotent by id.
    """


class RedisAuthError(DelayqError):
    """Raised when Redis rejects the credentials, or an ACL forbids a command or key."""


class RedisOutOfMemoryError(DelayqError):
    """Raised when Redis is at ``maxmemory`` (with ``noeviction``) and refuses a write.

    Write scripts are declared with a ``#!lua`` shebang, so Redis refuses them before they
    run: nothing is half-written.
    """


class UnsupportedRedisError(DelayqError):
    """Raised when the Redis server is older than the version delayq's scripts need."""


class RedisCommandError(DelayqError):
    """Raised for any other error reply from Redis, e.g. a key of the wrong type."""


class NotDurableError(DelayqError):
    """Raised by a send on a queue with ``durability`` when fewer replicas than required
    confirmed it within the timeout (or, with ``WAITAOF``, the primary's own fsync did not).

    The tasks in ``task_ids`` ARE stored on the primary; only their durability is
    unconfirmed.  Sending them again with the same ids is safe (sends are idempotent by
    id) and waits again.

    Attributes:
        task_ids: the ids stored on the primary whose durability is unconfirmed.
        unsent: ``send_many`` only: ids of later batches, not sent at all.
        confirmed: replicas that confirmed; -1 when the primary's AOF fsync was not confirmed.
        required: replicas that had to confirm.
    """

    def __init__(
        self,
        task_ids: list[str],
        *,
        confirmed: int,
        required: int,
        timeout_ms: int,
        unsent: list[str] | None = None,
    ) -> None:
        self.task_ids = task_ids
        self.unsent = unsent or []
        self.confirmed = confirmed
        self.required = required
        self.timeout_ms = timeout_ms
        what = (
            "the primary's own AOF fsync was not confirmed"
            if confirmed < 0
            else f"{confirmed} of {required} replica(s) confirmed"
        )
        message = (
            f"{_ids(task_ids)} stored on the primary, but durability is unconfirmed: {what} "
            f"within {timeout_ms} ms; re-sending with the same task_id is safe (sends are "
            "idempotent by id)"
        )
        if self.unsent:
            message += f"; {len(self.unsent)} later task(s) were not sent"
        super().__init__(message)


def _ids(task_ids: list[str], most: int = 5) -> str:
    shown = ", ".join(task_ids[:most])
    more = f" and {len(task_ids) - most} more" if len(task_ids) > most else ""
    return f"task {shown}{more} is" if len(task_ids) == 1 else f"tasks {shown}{more} are"


class LeaseLostError(DelayqError):
    """Raised by ``Task.extend`` when the lease expired and another worker may hold the task."""


class ResultNotReadyError(DelayqError, TimeoutError):
    """Raised by ``result(..., wait=S)`` when the task still exists (delayed, ready or
    running) after ``S`` seconds: it has not finished yet, and may still."""


class AppImportError(DelayqError):
    """Raised by the CLI when ``module:attribute`` does not name an importable ``Queue``."""


class LifespanError(DelayqError):
    """Raised by a worker's ``run`` (and ``Queue.worker``) when the queue's lifespan raised
    on entry: the worker stops before leasing anything.  The lifespan's own exception is
    the ``__cause__``."""


class Retry(DelayqError):
    """Raise from a handler to retry the task later; it counts as an attempt.

    Args:
        delay: seconds (or a timedelta) until the next attempt; ``None`` uses the topic's backoff.
        reason: recorded as the task's ``last_error``.
    """

    def __init__(self, delay: float | timedelta | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry requested")
        self.delay = delay
        self.reason = reason
