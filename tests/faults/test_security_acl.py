"""Security: a least-privilege ACL user, and wrong credentials.

The ACL below is the least a delayq user needs: the queue's keys, its wake-up channels, and
30 commands.  ``test_acl_user_runs_everything_and_needs_every_command`` runs every core
operation under it — producer API, dead letters, and a worker process through the CLI —
and then checks with ``INFO commandstats`` that each allowed command was actually used, so
the list is both sufficient and minimal for the current scripts (it fails, on purpose,
when a script starts or stops using a command: update the list and docs).

    ACL SETUSER <user> on ><password> resetkeys ~delayq:{<queue>:* ~delayq:{<queue>}:*
        resetchannels &delayq:{<queue>:* -@all +<each command of ACL_COMMANDS>

Queue names may hold glob characters (``*?[``); escape them with ``\\`` in the patterns.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from delayq import Queue, RedisAuthError
from delayq.redis.keys import BUCKETS_MIN
from tests.faults.apps.plan import OTHER_TOPIC, WORK_TOPIC
from tests.faults.checker import assert_no_loss, check, read_log
from tests.faults.harness import ROOT, Producer
from tests.helpers import wait_for
from tests.test_buckets import ids_in_bucket

ACL_COMMANDS = [
    # top level: scripts, start-up checks, the topic set, wake-ups
    "evalsha", "script|load", "info", "sadd", "smembers", "subscribe",
    # inside the scripts
    "time", "type", "zrange", "zadd", "zrem", "zremrangebyrank", "zscore", "zmscore",
    "zcard", "zcount", "hget", "hmget", "hset", "hdel", "hexists", "incrby", "publish",
    "get", "hlen", "exists", "hincrby",
    # inside the scripts, only for a topic with a rate limit, and the registry's heartbeat
    "pexpire",
    # inside the registry's heartbeat (a worker's entry, and the ones that expired)
    "zremrangebyscore", "pttl",
    # inside the scripts, only when a task bucket splits (a topic of ~100,000 tasks)
    "hgetall", "set", "object|encoding",
]  # fmt: skip
# Not needed: ping, unsubscribe (the wake-up connection is closed, not unsubscribed), eval.


def acl_rules(queue_name: str, password: str) -> list[str]:
    """The ACL SETUSER rules for a delayq user of ``queue_name``."""
    return [
        "on", f">{password}", "resetkeys",
        f"~delayq:{{{queue_name}:*", f"~delayq:{{{queue_name}}}:*",
        "resetchannels", f"&delayq:{{{queue_name}:*",
        "-@all", *(f"+{command}" for command in ACL_COMMANDS),
    ]  # fmt: skip


def _used_commands(admin) -> set[str]:
    stats = admin.info("commandstats")
    return {
        key.removeprefix("cmdstat_").lower()
        for key, value in stats.items()
        if isinstance(value, dict) and value.get("calls", 0) > 0
    }


def _denied(admin) -> list[dict[str, object]]:
    """ACL LOG entries, except the client-library handshake redis-py tolerates."""
    return [e for e in admin.acl_log() if e["object"] != "client|setinfo"]


async def test_acl_user_runs_everything_and_needs_every_command(
    make_redis_server, spawn_worker, log_dir, queue_name, record_property
) -> None:
    server = make_redis_server()
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "app", *acl_rules(queue_name, "app-pw"))
    url = f"redis://app:app-pw@127.0.0.1:{server.port}/0"
    admin.config_resetstat()

    # A rate limit and max_running on one topic, so that the worker's reserve uses them too.
    limits = {OTHER_TOPIC: {"rate_limit": "1000/s", "max_running": 3}}
    worker = await spawn_worker(server, url=url, concurrency=5, ttr=5.0,
                                env={"DELAYQ_FAULT_LIMITS": json.dumps(limits)}).started()  # fmt: skip
    queue = Queue.from_url(url, name=queue_name)
    try:
        producer = Producer(queue)
        for i in range(20):
            await producer.send(f"acl-{i}", delay=0.05 * (i % 4))
        await queue.pause(OTHER_TOPIC)  # the worker's reserve reads the topic's controls
        await queue.send_many(OTHER_TOPIC, [{"n": i} for i in range(5)],
                              task_ids=[f"many-{i}" for i in range(5)])  # fmt: skip
        # Ids still stored (due in an hour) sent again: send_many then looks them up among
        # the dead letters.  (Ids of tasks already run would be new again.)
        for _ in range(2):
            await queue.send_many(OTHER_TOPIC, [{"n": i} for i in range(2)], delay=3600,
                                  task_ids=[f"later-{i}" for i in range(2)])  # fmt: skip
        await producer.send("extends", body={"plan": {"1": [["extend", 10]]}})
        await producer.send("fails", body={"plan": {"1": [["fail"]]}})
        # Enough tasks in one bucket of a topic of its own to split a bucket.
        crowded = ids_in_bucket(queue.keys("crowded"), BUCKETS_MIN, 0, 33, "acl")
        await queue.send_many("crowded", [{}] * 33, delay=3600, task_ids=crowded)
        assert (await queue.get("crowded", crowded[0])) is not None
        assert (await queue.stats())[OTHER_TOPIC].paused
        assert (await queue.stats())[OTHER_TOPIC].max_running == 3
        await queue.resume(OTHER_TOPIC)
        await queue.send_delayed(WORK_TOPIC, {}, 60, task_id="to-cancel")
        await queue.send_delayed(WORK_TOPIC, {}, 60, task_id="to-move")
        assert await queue.reschedule(WORK_TOPIC, "to-move", delay=0)
        assert (await queue.get(WORK_TOPIC, "to-cancel")).state == "delayed"  # type: ignore[union-attr]
        assert await queue.cancel(WORK_TOPIC, "to-cancel")
        await queue.send(WORK_TOPIC, {"plan": {"1": [["fail"]]}}, task_id="to-bury",
                         max_attempts=1)  # fmt: skip
        expected = producer.returned | {"to-move", *(f"many-{i}" for i in range(5))}
        done = lambda: {d.task_id for d in read_log(log_dir) if d.event == "done"}  # noqa: E731
        try:
            await wait_for(lambda: expected <= done(), 10, "every task delivered")
        except AssertionError as exc:
            raise AssertionError(f"denied: {_denied(admin)}\n{worker.output()[-2000:]}") from exc
        await wait_for(lambda: queue.dead_letters(WORK_TOPIC), 5, "the dead letter")
        assert (await queue.stats())[WORK_TOPIC].dead == 1
        assert await queue.replay(WORK_TOPIC, "to-bury")
    finally:
        await queue.close()
    await worker.terminate()

    report = check("ACL least-privilege user, end to end", sent=expected, returned=expected,
                   deliveries=read_log(log_dir))  # fmt: skip
    report.publish(record_property)
    assert_no_loss(report)
    # The admin's own commands, and the handshake every connection may send.
    ignored = {"config|resetstat", "acl|setuser", "pubsub|numsub", "hello", "auth",
               "client|setinfo"}  # fmt: skip
    used = _used_commands(admin) - ignored
    denied = _denied(admin)
    admin.close()
    assert not denied, denied
    assert used <= set(ACL_COMMANDS), f"used but not allowed: {used - set(ACL_COMMANDS)}"
    assert set(ACL_COMMANDS) <= used, f"allowed but never used: {set(ACL_COMMANDS) - used}"


@pytest.mark.no_recount("every write is refused: nothing is stored")
async def test_acl_user_cannot_touch_another_queue(make_redis_server, queue_name) -> None:
    server = make_redis_server()
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", "app", *acl_rules(queue_name, "pw"))
    queue = Queue.from_url(f"redis://app:pw@127.0.0.1:{server.port}/0", name=f"{queue_name}x")
    try:
        with pytest.raises(RedisAuthError, match="no permissions"):
            await queue.send_delayed(WORK_TOPIC, {}, 1)
    finally:
        await queue.close()


@pytest.mark.no_recount("the connection is refused: nothing is stored")
@pytest.mark.parametrize(
    "credentials, message",
    [("app:wrong@", "invalid username-password"), ("", "authenticated")],
)
async def test_wrong_password_is_a_clear_auth_error(
    credentials, message, make_redis_server, queue_name
) -> None:
    server = make_redis_server(password="right")
    queue = Queue.from_url(f"redis://{credentials}127.0.0.1:{server.port}/0", name=queue_name)
    try:
        with pytest.raises(RedisAuthError, match=message):
            await queue.send(WORK_TOPIC, {})
    finally:
        await queue.close()


@pytest.mark.no_recount("the connection is refused: nothing is stored")
async def test_worker_with_wrong_password_exits_with_the_reason(
    make_redis_server, queue_name, log_dir
) -> None:
    server = make_redis_server(password="right")
    env = {
        "REDIS_URL": f"redis://:wrong@127.0.0.1:{server.port}/0",
        "DELAYQ_FAULT_QUEUE": queue_name,
        "DELAYQ_FAULT_LOG": str(log_dir),
        "PYTHONPATH": str(ROOT),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "delayq", "worker", "tests.faults.apps.recorder:queue",
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 2, output
    assert b"delayq: Redis refused access" in output
    assert b"Traceback" not in output
