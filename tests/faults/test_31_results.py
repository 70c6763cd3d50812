"""Scenario 31: task results through faults.

A worker SIGKILLed while a caller waits for its task's result: the task is redelivered
after its lease, and the wait returns the second attempt's result.  Redis SIGKILLed and
restarted from its AOF while results are kept: the results survive, and a wait pending
across the restart either gets its result (the subscription comes back) or raises
``RedisUnavailableError``, never hangs past its deadline.
"""

from __future__ import annotations

import asyncio

from delayq import RedisUnavailableError
from tests.helpers import wait_for

APP = "tests.faults.apps.resulting:queue"
TTR = 1.0
RESULT_TOPIC = "results"  # tests/faults/apps/resulting.py (imported only by its worker)


async def test_31_a_wait_outlives_the_worker_killed_holding_its_task(
    make_redis_server, spawn_worker, make_queue, queue_name
) -> None:
    server = make_redis_server()
    admin = server.client()
    holder = await spawn_worker(server, app=APP, ready_topic=RESULT_TOPIC, ttr=TTR).started()
    queue = make_queue(server.url)
    await queue.send(RESULT_TOPIC, {"n": 1, "hang_first": True}, task_id="held")
    waiting = asyncio.create_task(queue.result(RESULT_TOPIC, "held", wait=30))
    reserved = f"delayq:{{{queue_name}:{RESULT_TOPIC}}}:reserved"
    await wait_for(lambda: admin.zscore(reserved, "held") is not None, 10, "the lease")
    holder.kill()
    standby = await spawn_worker(server, app=APP, ready_topic=RESULT_TOPIC, ttr=TTR).started()
    res = await asyncio.wait_for(waiting, 30)
    admin.close()
    assert res is not None and res.outcome == "acked", res
    assert res.value == {"n": 1, "attempt": 2, "pid": standby.pid}
    assert res.attempts == 2


async def test_31_results_survive_a_redis_restart_from_aof(
    make_redis_server, spawn_worker, make_queue
) -> None:
    server = make_redis_server(appendonly=True, appendfsync="always")
    worker = await spawn_worker(server, app=APP, ready_topic=RESULT_TOPIC, ttr=TTR).started()
    queue = make_queue(server.url)
    for n in range(20):
        await queue.send(RESULT_TOPIC, {"n": n}, task_id=f"kept-{n}")
    for n in range(20):
        assert (await queue.result(RESULT_TOPIC, f"kept-{n}", wait=10)) is not None
    await queue.send_delayed(RESULT_TOPIC, {"n": 99}, 1.5, task_id="across")
    waiting = asyncio.create_task(queue.result(RESULT_TOPIC, "across", wait=20))
    await asyncio.sleep(0.1)  # the wait is subscribed and reading (not a timing assert)
    server.kill()
    await asyncio.sleep(0.3)
    server.start()  # same port and directory: replays the AOF
    try:
        across = await asyncio.wait_for(waiting, 30)
    except RedisUnavailableError:
        across = None  # allowed: the wait read while Redis was down
    if across is not None:
        assert across.value == {"n": 99, "attempt": 1, "pid": worker.pid}

    async def kept() -> bool:
        try:
            found = [await queue.result(RESULT_TOPIC, f"kept-{n}") for n in range(20)]
        except RedisUnavailableError:
            return False
        return all(r is not None and r.value["n"] == n for n, r in enumerate(found))  # type: ignore[index]

    await wait_for(kept, 15, "every result read back after the restart")
    assert (await queue.result(RESULT_TOPIC, "across", wait=15)) is not None
