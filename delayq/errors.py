"""Every exception delayq raises on purpose.

The tree::

    DelayqError
    ├── InvalidInputError (also ValueError)   bad input, rejected before anything is written
    │   ├── InvalidNameError                 queue name, topic or task id
    │   ├── InvalidDurationError             delay, ttr, grace, `at` or a backoff figure
    │   ├── BodyTooLargeError                encoded body over the size limit
    │   └── BodyValidationError              body not JSON-serialisable or not valid for the topic's model
    ├── RedisUnavailableError (also ConnectionError)   Redis cannot be reached or is loading
    ├── RedisAuthError                       Redis refused our credentials or an ACL denied a command
    ├── RedisOutOfMemoryError                Redis is at maxmemory and refused a write
    ├── UnsupportedRedisError                the server is too old for delayq's scripts
    ├── RedisCommandError                    any other error reply from Redis
    ├── LeaseLostError                       Task.extend after the lease was lost (acks/nacks: logged)
    ├── AppImportError                       `delayq worker module:attr` could not load a Queue
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


class InvalidDurationError(InvalidInputError):
    """Raised for a negative, non-finite or wrongly typed duration, a naive datetime,
    or an absolute time too far in the past."""


class BodyTooLargeError(InvalidInputError):
    """Raised when a body's JSON encoding is larger than the queue's ``max_body_bytes``."""


class BodyValidationError(InvalidInputError):
    """Raised when a body is not JSON-serialisable or does not validate against the
    model of the topic's registered handler.  The message names the topic and the field."""


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


class LeaseLostError(DelayqError):
    """Raised by ``Task.extend`` when the lease expired and another worker may hold the task."""


class AppImportError(DelayqError):
    """Raised by the CLI when ``module:attribute`` does not name an importable ``Queue``."""


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
