"""Durable sends against a real primary and a real replica (``--replicaof`` on loopback).

Redis 7.0 has no ``WAITAOF``, so the end-to-end tests exercise ``WAIT``; the choice of
``WAITAOF`` (Redis >= 7.2 with AOF on) and the reading of its reply are tested as the pure
functions that make them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio

from delayq import (
    Durability,
    InvalidDurationError,
    InvalidInputError,
    NotDurableError,
    Queue,
    RedisAuthError,
)
from delayq.redis.durability import WaitCommand
from delayq.testing import PrivateRedis
from tests.redis_cluster import PRIMARY_ARGS, replica_of

TIMEOUT = 0.3
"""Wait of the queue whose sends are expected to fail: they take this long."""
PATIENT = 3.0
"""Wait of the queue whose sends are expected to succeed: a loaded 2-core machine (other
test runs share it) can take more than 0.3 s to get a replica's acknowledgement."""
SLACK = 3.0
"""A wait ends at its timeout; the slack covers a loaded machine, not the design."""


@pytest.fixture
def primary(make_redis_server: Callable[..., PrivateRedis]) -> PrivateRedis:
    return make_redis_server(extra_args=PRIMARY_ARGS)


@pytest.fixture
def replica(primary: PrivateRedis) -> Iterator[PrivateRedis]:
    server = replica_of(primary)
    try:
        server.start()
        server.wait_replica_link(primary)
        yield server
    finally:
        server.close()


async def _queue(primary: PrivateRedis, name: str, timeout: float) -> AsyncIterator[Queue]:
    q = Queue.from_url(primary.url, name=name, durability=Durability(replicas=1, timeout=timeout))
    try:
        yield q
    finally:
        await q.close()


@pytest.fixture
async def durable(primary: PrivateRedis, queue_name: str) -> AsyncIterator[Queue]:
    """A durable queue whose sends should succeed (a patient wait)."""
    async for q in _queue(primary, queue_name, PATIENT):
        yield q


@pytest.fixture
async def impatient(primary: PrivateRedis, queue_name: str) -> AsyncIterator[Queue]:
    """The same queue with a short wait, for sends that are expected to fail."""
    async for q in _queue(primary, queue_name, TIMEOUT):
        yield q


def on_replica(replica: PrivateRedis, queue: Queue, topic: str, task_id: str) -> bytes | None:
    with replica.client() as client:
        # The task's header, in its bucket (docs/keys.md).
        value: bytes | None = client.hget(queue.keys(topic).bucket(task_id), task_id)
        return value


async def test_durable_sends_are_on_the_replica_when_they_return(
    durable: Queue, replica: PrivateRedis
) -> None:
    @durable.topic("t")
    async def handler(body: dict[str, Any]) -> None: ...

    sent = [
        await durable.send("t", {"n": 1}, task_id="now"),
        await durable.send_delayed("t", {"n": 2}, 60, task_id="later"),
        await durable.send_at("t", {"n": 3}, datetime.now(UTC) + timedelta(hours=1), task_id="at"),
        await handler.send_delayed({"n": 4}, 5, task_id="handle"),
        *await durable.send_many("t", [{"n": i} for i in range(7)], batch_size=3),
    ]
    # WAIT returned only once the replica acknowledged the writes, so no polling here.
    missing = [t for t in sent if on_replica(replica, durable, "t", t) is None]
    assert missing == []


async def test_a_durable_send_many_replaces_and_reports_each_outcome(
    durable: Queue, replica: PrivateRedis
) -> None:
    await durable.send_delayed("t", {"n": 0}, 60, task_id="waiting")
    sent = await durable.send_many(
        "t", [{"n": 1}, {"n": 2}, {"n": 3}], task_ids=["waiting", "new", "new"],
        delay=60, on_conflict="replace", batch_size=2,
    )  # fmt: skip
    assert [s.outcome for s in sent] == ["replaced", "created", "replaced"]
    assert (await durable.get("t", "new")).body == {"n": 3}  # type: ignore[union-attr]
    assert on_replica(replica, durable, "t", "new") is not None


async def test_replica_down_raises_not_durable_but_the_task_is_stored(
    durable: Queue, impatient: Queue, primary: PrivateRedis, replica: PrivateRedis
) -> None:
    replica.stop()
    started = time.monotonic()
    with pytest.raises(NotDurableError) as caught:
        await impatient.send_delayed("t", {"n": 1}, 60, task_id="unconfirmed")
    elapsed = time.monotonic() - started
    assert TIMEOUT <= elapsed < TIMEOUT + SLACK
    err = caught.value
    assert (err.task_ids, err.confirmed, err.required, err.unsent) == (["unconfirmed"], 0, 1, [])
    assert "stored on the primary" in str(err) and "same task_id is safe" in str(err)
    info = await durable.get("t", "unconfirmed")
    assert info is not None and info.state == "delayed"
    assert "t" in await durable.stats()  # the topic was recorded although the send raised

    # Re-sending once the replica is back confirms the stored task (idempotent by id).
    replica.start()
    replica.wait_replica_link(primary)
    assert await durable.send_delayed("t", {"n": 1}, 60, task_id="unconfirmed") == "unconfirmed"
    assert on_replica(replica, durable, "t", "unconfirmed") is not None


async def test_send_many_reports_the_unconfirmed_batch_and_what_was_not_sent(
    impatient: Queue, replica: PrivateRedis
) -> None:
    replica.stop()
    ids = [f"m{i}" for i in range(7)]
    with pytest.raises(NotDurableError) as caught:
        await impatient.send_many("t", [{"n": i} for i in range(7)], task_ids=ids, batch_size=3)
    assert caught.value.task_ids == ids[:3]
    assert caught.value.unsent == ids[3:]
    assert "4 later task(s) were not sent" in str(caught.value)
    assert [await impatient.get("t", i) is not None for i in ids] == [True] * 3 + [False] * 4


async def test_a_primary_without_replicas_never_confirms(impatient: Queue) -> None:
    with pytest.raises(NotDurableError):
        await impatient.send("t", {}, task_id="alone")
    assert await impatient.get("t", "alone") is not None


async def test_resending_a_stored_id_waits_for_its_original_write(
    primary: PrivateRedis, replica: PrivateRedis, durable: Queue, impatient: Queue, queue_name: str
) -> None:
    """A duplicate send writes nothing; WAIT on a connection that wrote nothing would
    return at once.  The replica is frozen (still connected, acking nothing new), and the
    re-send comes from a second client whose connection never wrote: it must not confirm."""
    replica.pause()
    try:
        with pytest.raises(NotDurableError):
            await impatient.send("t", {}, task_id="dup")
        other = Queue.from_url(
            primary.url, name=queue_name, durability=Durability(replicas=1, timeout=TIMEOUT)
        )
        try:
            with pytest.raises(NotDurableError):
                await other.send("t", {}, task_id="dup")
            with pytest.raises(NotDurableError) as caught:
                await other.send_many("t", [{}], task_ids=["dup"])
            assert caught.value.task_ids == ["dup"]
        finally:
            await other.close()
    finally:
        replica.resume()
    # Once the replica catches up, re-sending confirms the stored task (as the error says).
    assert await durable.send("t", {}, task_id="dup") == "dup"
    assert on_replica(replica, durable, "t", "dup") is not None


async def test_durable_send_reloads_scripts_after_a_flush_and_a_restart(
    durable: Queue, primary: PrivateRedis, replica: PrivateRedis
) -> None:
    await durable.send("t", {}, task_id="before")
    with primary.client() as client:
        client.script_flush()
    await durable.send("t", {}, task_id="after-flush")
    primary.restart()  # no persistence: the replica resyncs to an empty primary
    replica.wait_replica_link(primary)
    await durable.send("t", {}, task_id="after-restart")  # stale pooled connection, NOSCRIPT
    assert on_replica(replica, durable, "t", "after-restart") is not None


async def test_a_rejected_send_is_not_reported_as_not_durable(impatient: Queue) -> None:
    # No replica at all, so any wait fails; but nothing was written, so nothing is unconfirmed.
    with pytest.raises(InvalidDurationError):
        await impatient.send_at("t", {}, datetime.now(UTC) - timedelta(hours=1))


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"replicas": 0}, InvalidInputError),
        ({"replicas": 101}, InvalidInputError),
        ({"replicas": True}, InvalidInputError),
        ({"replicas": "1"}, InvalidInputError),
        ({"timeout": 0}, InvalidDurationError),
        ({"timeout": -1}, InvalidDurationError),
        ({"timeout": float("nan")}, InvalidDurationError),
        ({"timeout": 61}, InvalidDurationError),
        ({"timeout": "1"}, InvalidDurationError),
    ],
)
def test_settings_are_validated(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Durability(**options)


async def test_queue_rejects_a_timeout_the_socket_timeout_would_cut(redis_url: str) -> None:
    with pytest.raises(InvalidDurationError, match="socket_timeout"):
        Queue.from_url(redis_url, socket_timeout=1, durability=Durability(timeout=1))
    client = redis.asyncio.Redis.from_url(redis_url)  # redis-py's default: 5 s
    with pytest.raises(InvalidDurationError, match="socket_timeout"):
        Queue(client, durability=Durability(timeout=5))
    await client.aclose()
    with pytest.raises(InvalidInputError, match="Durability"):
        Queue.from_url(redis_url, durability=1)
    queue = Queue.from_url(redis_url, socket_timeout=None, durability=Durability(timeout=30))
    await queue.close()


async def test_from_url_gives_the_pool_room_for_the_durable_wait(redis_url: str) -> None:
    """Durable sends wait on the pool: its socket timeout grows by the durability timeout,
    so a wait longer than delayq's 2 s silence limit ends as NotDurableError, not as a
    timeout (the server has no replica, so the WAIT runs its full 2.5 s)."""
    queue = Queue.from_url(redis_url, durability=Durability(timeout=2.5))
    try:
        assert queue.redis.connection_pool.connection_kwargs["socket_timeout"] == 4.5
        with pytest.raises(NotDurableError):
            await queue.send("t", {}, task_id="waits")
    finally:
        await queue.close()


@pytest.mark.parametrize(
    ("version", "aof", "expected"),
    [
        ("7.0.15", True, ("WAIT", 2, 1500)),
        ("7.0.15", False, ("WAIT", 2, 1500)),
        ("7.2.0", False, ("WAIT", 2, 1500)),  # WAITAOF numlocal 1 errors without a local AOF
        ("7.2.0", True, ("WAITAOF", 1, 2, 1500)),
        ("8.2.1", True, ("WAITAOF", 1, 2, 1500)),
    ],
)
def test_wait_command_choice(version: str, aof: bool, expected: tuple[Any, ...]) -> None:
    command = WaitCommand.choose(version, aof, Durability(replicas=2, timeout=1.5))
    assert command.args == expected
    assert command.replicas == 2


def test_wait_replies_are_read_per_command() -> None:
    durability = Durability(replicas=2, timeout=1)
    wait = WaitCommand.choose("7.0.15", True, durability)
    waitaof = WaitCommand.choose("7.2.4", True, durability)
    assert wait.confirmed(1) == 1
    assert wait.confirmed(3) == 3
    assert waitaof.confirmed([1, 2]) == 2
    assert waitaof.confirmed([1, 0]) == 0
    assert waitaof.confirmed([0, 2]) == -1  # the primary's own fsync is missing


def test_the_not_durable_message_names_a_failed_local_fsync() -> None:
    err = NotDurableError(["a"], confirmed=-1, required=1, timeout_ms=100)
    assert "primary's own AOF fsync was not confirmed" in str(err)


async def test_a_user_without_wait_gets_an_auth_error(
    make_redis_server: Callable[..., PrivateRedis], queue_name: str
) -> None:
    """The ACL must allow WAIT; without it the send is stored but cannot be confirmed."""
    server = make_redis_server()
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-wait")
    queue = Queue.from_url(
        f"redis://app:pw@127.0.0.1:{server.port}/0", name=queue_name,
        durability=Durability(replicas=1, timeout=TIMEOUT),
    )  # fmt: skip
    try:
        with pytest.raises(RedisAuthError, match=r"(?i)wait"):
            await queue.send("t", {}, task_id="denied")
        assert await queue.get("t", "denied") is not None
    finally:
        await queue.close()
