"""delayq: asyncio-native delayed tasks on Redis.

Every state change is one atomic Lua script; bodies are typed JSON through pydantic;
tasks fire on Redis's clock, milliseconds after they are due, at least once.
"""

import logging

from delayq.admin import Admin, RunningPage
from delayq.backoff import Backoff
from delayq.consumer import Consumer, LeasedTask, NackResult
from delayq.duration import Duration
from delayq.errors import (
    AppImportError,
    BodyTooLargeError,
    BodyValidationError,
    DelayqError,
    InvalidDurationError,
    InvalidHeadersError,
    InvalidInputError,
    InvalidNameError,
    InvalidScheduleError,
    LeaseLostError,
    LifespanError,
    NotDurableError,
    RedisAuthError,
    RedisCommandError,
    RedisOutOfMemoryError,
    RedisUnavailableError,
    ResultNotReadyError,
    Retry,
    ShardCountError,
    UnknownTopicError,
    UnsupportedRedisError,
    UnsupportedShardingError,
)
from delayq.events import Hooks, Sending, TaskEvent
from delayq.fleet import WorkerInfo
from delayq.group_stats import GroupStats
from delayq.limits import RateLimit
from delayq.middleware import CallNext, Middleware
from delayq.queue import Queue
from delayq.redis.durability import Durability
from delayq.results import TaskResult
from delayq.task import Outcome, SendOutcome, SendResult, Task, TaskInfo, TaskState, TopicStats
from delayq.topic import OnConflict, Topic
from delayq.upcoming import Timeline, TimelineWindow, UpcomingPage, UpcomingTask
from delayq.worker import Worker

__version__ = "0.2.0"

__all__ = [
    "Admin",
    "AppImportError",
    "Backoff",
    "BodyTooLargeError",
    "BodyValidationError",
    "CallNext",
    "Consumer",
    "DelayqError",
    "Durability",
    "Duration",
    "GroupStats",
    "Hooks",
    "InvalidDurationError",
    "InvalidHeadersError",
    "InvalidInputError",
    "InvalidNameError",
    "InvalidScheduleError",
    "LeaseLostError",
    "LeasedTask",
    "LifespanError",
    "Middleware",
    "NackResult",
    "NotDurableError",
    "OnConflict",
    "Outcome",
    "Queue",
    "RateLimit",
    "RedisAuthError",
    "RedisCommandError",
    "RedisOutOfMemoryError",
    "RedisUnavailableError",
    "ResultNotReadyError",
    "ShardCountError",
    "Retry",
    "RunningPage",
    "SendOutcome",
    "SendResult",
    "Sending",
    "Task",
    "TaskEvent",
    "TaskInfo",
    "TaskResult",
    "TaskState",
    "Timeline",
    "TimelineWindow",
    "Topic",
    "TopicStats",
    "UnknownTopicError",
    "UnsupportedRedisError",
    "UnsupportedShardingError",
    "UpcomingPage",
    "UpcomingTask",
    "Worker",
    "WorkerInfo",
    "__version__",
]

logging.getLogger("delayq").addHandler(logging.NullHandler())
