"""Every bad-input rule of the producer and management API.

Each rejection must be an ``InvalidInputError`` (so also a ``ValueError`` and a
``DelayqError``) of the documented subclass, raised before anything reaches Redis: the
tests look for keys of the test's queue afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio
from pydantic import BaseModel

from delayq import (
    BodyTooLargeError,
    BodyValidationError,
    DelayqError,
    InvalidDurationError,
    InvalidInputError,
    InvalidNameError,
    Queue,
)
from delayq.duration import MAX_SECONDS
from tests.helpers import queue_keys, redis_now_ms, stored, task_fields

BAD_DELAYS: list[Any] = [
    -1,
    -0.001,
    timedelta(seconds=-1),
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
    "5",
    None,
    [1],
    MAX_SECONDS + 1,
    timedelta(days=365 * 101),
]
BAD_TTRS: list[Any] = [0, 0.0, -1, timedelta(0), math.nan, math.inf, True, "1", [1], 1e12]
BAD_TOPICS: list[Any] = [
    "",
    "a" * 201,
    "a{b",
    "a}b",
    "a b",
    "a\tb",
    "a\nb",
    "a\u00a0b",  # unicode whitespace counts as whitespace
    "a\x00b",
    "a\x1fb",
    "a\x7fb",
    5,
    None,
    b"topic",
]
BAD_TASK_IDS: list[Any] = [
    "",
    "a" * 257,
    "\u00e9" * 129,  # 258 bytes in UTF-8, though only 129 characters
    "a\x00",
    "a\nb",
    "a\tb",
    "a\x7f",
    5,
    b"id",
]
BAD_MAX_ATTEMPTS: list[Any] = [0, -1, 1_000_001, True, False, 1.0, 2.5, "3", math.nan]


class Order(BaseModel):
    order_id: int
    email: str


class Line(BaseModel):
    sku: str
    quantity: int


class Cart(BaseModel):
    lines: list[Line]


async def rejected(
    action: Awaitable[object], error: type[InvalidInputError], match: str | None = None
) -> InvalidInputError:
    """Await ``action``, expecting ``error``; check it is a ValueError and a DelayqError too."""
    with pytest.raises(error, match=match) as info:
        await action
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, DelayqError)
    return info.value


async def assert_nothing_written(client: redis.asyncio.Redis, queue_name: str) -> None:
    assert await queue_keys(client, queue_name) == []


async def snapshot(client: redis.asyncio.Redis, queue_name: str) -> dict[str, bytes | None]:
    """The serialized value of every key of the queue, to prove a failed call changed nothing."""
    return {key: await client.dump(key) for key in await queue_keys(client, queue_name)}


# -- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize("delay", BAD_DELAYS, ids=repr)
async def test_bad_delay_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, delay: Any
) -> None:
    await rejected(queue.send_delayed("t", {"n": 1}, delay=delay), InvalidDurationError)
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize(
    ("delay", "shown"),
    [(timedelta(seconds=-5), "got -5 s"), (timedelta(days=365 * 101), "got 3.18514e+09 s")],
)
async def test_a_bad_timedelta_is_reported_in_seconds(
    queue: Queue, delay: timedelta, shown: str
) -> None:
    error = await rejected(queue.send_delayed("t", {}, delay=delay), InvalidDurationError)
    assert str(error).endswith(shown), error
    assert "days=" not in str(error)


async def test_the_longest_delay_is_stored_and_readable(queue: Queue) -> None:
    task_id = await queue.send_delayed("t", {"n": 1}, delay=MAX_SECONDS)
    info = await stored(queue, "t", task_id)
    assert info.due_at.year >= datetime.now(UTC).year + 99


async def test_at_from_the_year_9999_on_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    at = datetime(9999, 1, 1, tzinfo=UTC)
    await rejected(queue.send_at("t", {}, at=at), InvalidDurationError, match="9999")
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize("ttr", BAD_TTRS, ids=repr)
async def test_bad_ttr_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, ttr: Any
) -> None:
    await rejected(queue.send("t", {"n": 1}, ttr=ttr), InvalidDurationError)
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize("ttr", BAD_TTRS[:4], ids=repr)
def test_topic_with_bad_ttr_cannot_be_registered(queue: Queue, ttr: Any) -> None:
    with pytest.raises(InvalidDurationError):
        queue.topic("t", ttr=ttr)
    assert queue.topics == {}


async def test_naive_datetime_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    naive = datetime.now() + timedelta(minutes=1)  # naive on purpose
    error = await rejected(queue.send_at("t", {}, at=naive), InvalidDurationError)
    assert "timezone-aware" in str(error)
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize(
    "at", [1_900_000_000.0, date(2100, 1, 1), "2100-01-01T00:00:00Z"], ids=repr
)
async def test_at_must_be_a_datetime(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, at: Any
) -> None:
    await rejected(queue.send_at("t", {}, at=at), InvalidDurationError)
    await assert_nothing_written(redis_client, queue_name)


async def test_at_too_far_in_the_past_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    # Judged on Redis's clock: 10 s before Redis's now is past the default 5 s tolerance.
    at = datetime.fromtimestamp(await redis_now_ms(redis_client) / 1000 - 10, tz=UTC)
    error = await rejected(queue.send_at("t", {}, at=at), InvalidDurationError)
    assert "in the past" in str(error)
    # Not even the topic set (which feeds stats) is touched.
    await assert_nothing_written(redis_client, queue_name)


async def test_at_within_the_tolerance_runs_at_once(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    before = await redis_now_ms(redis_client)
    at = datetime.fromtimestamp(before / 1000 - 2, tz=UTC)
    task_id = await queue.send_at("t", {}, at=at)
    info = await stored(queue, "t", task_id)
    assert info.state == "ready"
    # A time in the past is clamped to "now" on Redis's clock, not stored as given.
    assert info.due_at.timestamp() * 1000 >= before


async def test_past_tolerance_is_configurable(
    redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    strict = Queue(redis_client, name=queue_name, past_tolerance=0.2)
    at = datetime.fromtimestamp(await redis_now_ms(redis_client) / 1000 - 1, tz=UTC)
    await rejected(strict.send_at("t", {}, at=at), InvalidDurationError)
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize("tolerance", [-1, math.nan, "5"], ids=repr)
def test_bad_past_tolerance_is_rejected(
    redis_client: redis.asyncio.Redis, queue_name: str, tolerance: Any
) -> None:
    with pytest.raises(InvalidDurationError):
        Queue(redis_client, name=queue_name, past_tolerance=tolerance)


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=repr)
async def test_bad_topic_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, topic: Any
) -> None:
    await rejected(queue.send(topic, {"n": 1}), InvalidNameError)
    await rejected(queue.get(topic, "x"), InvalidNameError)
    await rejected(queue.cancel(topic, "x"), InvalidNameError)
    await rejected(queue.reschedule(topic, "x", delay=1), InvalidNameError)
    await rejected(queue.replay(topic, "x"), InvalidNameError)
    await rejected(queue.dead_letters(topic), InvalidNameError)
    with pytest.raises(InvalidNameError):
        queue.topic(topic)
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize("topic", ["a" * 200, "order.close:v2", "x", "caf\u00e9/\u00fcber-1"])
async def test_topic_names_at_the_limits_are_accepted(queue: Queue, topic: str) -> None:
    task_id = await queue.send(topic, {"n": 1})
    info = await stored(queue, topic, task_id)
    assert info.topic == topic


@pytest.mark.parametrize(
    "make_name",
    [
        lambda q: "",
        lambda q: q + "a" * 200,
        lambda q: q + ":x",  # ':' would let ("a:b", "c") and ("a", "b:c") share a hash tag
        lambda q: q + "{x",
        lambda q: q + "}",
        lambda q: q + " x",
        lambda q: q + "\x01",
        lambda q: 7,
    ],
    ids=["empty", "too-long", "colon", "open-brace", "close-brace", "space", "control", "int"],
)
async def test_bad_queue_name_is_rejected(
    redis_client: redis.asyncio.Redis, redis_url: str, queue_name: str, make_name: Any
) -> None:
    name = make_name(queue_name)
    with pytest.raises(InvalidNameError) as info:
        Queue(redis_client, name=name)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, DelayqError)
    with pytest.raises(InvalidNameError):
        Queue.from_url(redis_url, name=name)
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize("task_id", BAD_TASK_IDS, ids=repr)
async def test_bad_task_id_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, task_id: Any
) -> None:
    await rejected(queue.send("t", {}, task_id=task_id), InvalidNameError)
    await rejected(queue.send_delayed("t", {}, 5, task_id=task_id), InvalidNameError)
    at = datetime.now(UTC) + timedelta(minutes=1)
    await rejected(queue.send_at("t", {}, at, task_id=task_id), InvalidNameError)
    await rejected(queue.get("t", task_id), InvalidNameError)
    await rejected(queue.cancel("t", task_id), InvalidNameError)
    await rejected(queue.reschedule("t", task_id, delay=1), InvalidNameError)
    await rejected(queue.replay("t", task_id), InvalidNameError)
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize(
    "task_id", ["a" * 256, "\u00e9" * 128, "with space", "order:42/{x}", "\u2603"], ids=repr
)
async def test_task_ids_at_the_limits_are_accepted(queue: Queue, task_id: str) -> None:
    assert await queue.send("t", {"n": 1}, task_id=task_id) == task_id
    info = await stored(queue, "t", task_id)
    assert info.id == task_id
    assert await queue.cancel("t", task_id)


# -- bodies ---------------------------------------------------------------------------------


async def test_body_over_the_size_limit_is_rejected(
    redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    small = Queue(redis_client, name=queue_name, max_body_bytes=64)
    # {"s":"..."} is 8 bytes of JSON around the string: 57 characters make 65 bytes.
    error = await rejected(small.send("t", {"s": "x" * 57}), BodyTooLargeError)
    assert "65 bytes" in str(error)
    assert "'t'" in str(error)
    await assert_nothing_written(redis_client, queue_name)

    # Exactly at the limit is fine; the limit counts the encoded bytes, not characters.
    await small.send("t", {"s": "x" * 56}, task_id="fits")
    before = await snapshot(redis_client, queue_name)
    await rejected(small.send("t", {"s": "\u00e9" * 29}), BodyTooLargeError)  # 58 + 8 bytes
    assert await snapshot(redis_client, queue_name) == before


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "64"], ids=repr)
def test_bad_max_body_bytes_is_rejected(
    redis_client: redis.asyncio.Redis, queue_name: str, limit: Any
) -> None:
    with pytest.raises(InvalidInputError):
        Queue(redis_client, name=queue_name, max_body_bytes=limit)


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (object(), "<body>"),
        ({"fine": 1, "bad_field": object()}, "bad_field"),
        ({"items": [{"ok": 1}, {"price": object()}]}, "items.1.price"),
        ([1, {2, object()}], "1."),  # a set's index is its iteration order
        ((1, b"\xff"), "1"),
        ({"f": lambda: 1}, "f"),
        (b"\xff", "<body>"),
    ],
    ids=["object", "field", "nested-field", "set-member", "invalid-utf8", "function", "bytes"],
)
async def test_body_that_is_not_json_serialisable_is_rejected_naming_the_field(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, body: Any, path: str
) -> None:
    error = await rejected(queue.send("jobs", body), BodyValidationError)
    assert str(error).startswith(f"body for topic 'jobs' is not JSON-serialisable: {path}")
    await assert_nothing_written(redis_client, queue_name)


class Note(BaseModel):
    note: str
    extra: Any


async def test_unencodable_field_of_a_topic_model_is_named(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    @queue.topic("notes")
    async def take_note(body: Note) -> None:
        pass

    body = {"note": "n", "extra": {"ok": [1, 2], "when": {"bad": object()}}}
    error = await rejected(queue.send("notes", body), BodyValidationError)
    assert "'notes' is not JSON-serialisable: extra.when.bad: " in str(error)
    looping: dict[str, Any] = {"ok": 1}
    looping["self"] = looping  # a body that contains itself ends the walk, not the process
    error = await rejected(queue.send("jobs", looping), BodyValidationError)
    assert "is not JSON-serialisable: self: " in str(error)
    await assert_nothing_written(redis_client, queue_name)


async def test_non_finite_floats_are_stored_as_json_null(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    task_id = await queue.send("jobs", {"a": math.nan, "b": [math.inf, -math.inf], "c": 1.5})
    info = await stored(queue, "jobs", task_id)
    assert info.body == {"a": None, "b": [None, None], "c": 1.5}
    _header, raw = await task_fields(redis_client, queue.keys("jobs"), task_id)
    assert raw is not None
    assert b"NaN" not in raw and b"Infinity" not in raw


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"order_id": "abc", "email": "a@b.c"}, "order_id"),
        ({"order_id": 1}, "email"),
        ({"order_id": [1], "email": None}, "order_id"),
        ("not an object", "<body>"),
    ],
    ids=["wrong-type", "missing", "two-errors", "not-an-object"],
)
async def test_body_invalid_for_the_topic_model_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, body: Any, field: str
) -> None:
    @queue.topic("order.close")
    async def close_order(order: Order) -> None:
        pass

    error = await rejected(queue.send("order.close", body), BodyValidationError)
    assert "'order.close'" in str(error)
    assert field in str(error)
    await rejected(close_order.send_delayed(body, 1), BodyValidationError)
    await assert_nothing_written(redis_client, queue_name)


async def test_body_validation_names_a_nested_field(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    @queue.topic("cart")
    async def checkout(cart: Cart) -> None:
        pass

    body = {"lines": [{"sku": "a", "quantity": 1}, {"sku": "b", "quantity": "many"}]}
    error = await rejected(checkout.send(body), BodyValidationError)  # type: ignore[arg-type]
    assert "'cart'" in str(error)
    assert "lines.1.quantity" in str(error)
    await assert_nothing_written(redis_client, queue_name)


async def test_a_topic_without_a_local_handler_is_not_validated(queue: Queue) -> None:
    # The producer cannot know the consumer's model; any JSON goes (checked on delivery).
    task_id = await queue.send("order.close", {"order_id": "abc"})
    info = await stored(queue, "order.close", task_id)
    assert info.body == {"order_id": "abc"}


# -- options --------------------------------------------------------------------------------


@pytest.mark.parametrize("max_attempts", BAD_MAX_ATTEMPTS, ids=repr)
async def test_bad_max_attempts_is_rejected(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, max_attempts: Any
) -> None:
    error = await rejected(queue.send("t", {}, max_attempts=max_attempts), InvalidInputError)
    assert "max_attempts" in str(error)
    with pytest.raises(InvalidInputError):
        queue.topic("t", max_attempts=max_attempts)
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize("max_attempts", [1, 1_000_000])
async def test_max_attempts_at_the_limits_are_accepted(queue: Queue, max_attempts: int) -> None:
    task_id = await queue.send("t", {}, max_attempts=max_attempts)
    info = await stored(queue, "t", task_id)
    assert info.max_attempts == max_attempts


@pytest.mark.parametrize(
    "options",
    [{}, {"delay": 1, "at": datetime.now(UTC) + timedelta(minutes=1)}],
    ids=["neither", "both"],
)
async def test_reschedule_takes_exactly_one_of_delay_and_at(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, options: dict[str, Any]
) -> None:
    await rejected(queue.reschedule("t", "x", **options), InvalidInputError, match="exactly one")
    await assert_nothing_written(redis_client, queue_name)


@pytest.mark.parametrize(
    "options",
    [
        {"delay": -1},
        {"delay": math.nan},
        {"delay": True},
        {"at": datetime(2100, 1, 1)},  # naive on purpose
        {"at": datetime(2000, 1, 1, tzinfo=UTC)},  # far in the past
    ],
    ids=["negative", "nan", "bool", "naive", "past"],
)
async def test_bad_reschedule_leaves_the_task_alone(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, options: dict[str, Any]
) -> None:
    await queue.send_delayed("t", {}, delay=60, task_id="x")
    before = await snapshot(redis_client, queue_name)
    await rejected(queue.reschedule("t", "x", **options), InvalidDurationError)
    assert await snapshot(redis_client, queue_name) == before


@pytest.mark.parametrize(("limit", "offset"), [(0, 0), (-1, 0), (1, -1), (1.5, 0), ("1", 0)])
async def test_bad_dead_letter_paging_is_rejected(queue: Queue, limit: Any, offset: Any) -> None:
    await rejected(queue.dead_letters("t", limit=limit, offset=offset), InvalidInputError)


# -- the registry ---------------------------------------------------------------------------


def test_a_topic_takes_one_handler(queue: Queue) -> None:
    @queue.topic("t")
    async def first(body: dict[str, int]) -> None:
        pass

    with pytest.raises(InvalidInputError, match="already has a handler"):

        @queue.topic("t")
        async def second(body: dict[str, int]) -> None:
            pass

    assert queue.topics["t"].handler is first.handler


def test_a_handler_must_be_a_function_with_one_or_two_arguments(queue: Queue) -> None:
    def sync_three(body: object, task: object, extra: object) -> None:
        pass

    async def three(body: object, task: object, extra: object) -> None:
        pass

    async def none() -> None:
        pass

    async def generator(body: object) -> object:  # an async generator: never "runs"
        yield body

    for handler in (sync_three, three, none, generator):
        with pytest.raises(InvalidInputError):
            queue.topic("t")(handler)  # type: ignore[arg-type]
    assert queue.topics == {}
