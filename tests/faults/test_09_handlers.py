"""Scenario 9: handlers that misbehave.

* raise ``BaseException`` subclasses (``SystemExit``, ``KeyboardInterrupt``,
  ``GeneratorExit``, a custom one) or never return: the attempt fails (a handler still
  running at its TTR is cancelled), the task is retried, the worker carries on;
* raise ``asyncio.CancelledError`` themselves (e.g. re-raised from an inner task that was
  cancelled): the worker must treat it as a failed attempt, not lose a consumer;
* block the event loop past the TTR (``time.sleep``): the whole process stalls, so Redis
  hands its expired leases to another worker; the blocked delivery finishes late and its
  ack is refused.  Limit: every task the stalled process held runs twice;
* swallow cancellation forever: the TTR cannot stop it; Redis reclaims the lease, the task
  runs again.  Limits: the handler keeps its slot until the process exits, and on SIGTERM
  the worker gives up on it about a second after the grace period, releases its task and
  exits leaving it behind;
* kill the process (``os._exit``): the worker is gone; a replacement (a supervisor's job)
  or any other worker redelivers the task once its lease expires.
"""

from __future__ import annotations

from pathlib import Path

from tests.faults.apps.plan import real_now
from tests.faults.checker import Delivery, assert_no_loss, check, read_log
from tests.faults.harness import Producer
from tests.helpers import wait_for

TTR = 1.0


def _done(log_dir: Path) -> set[str]:
    return {d.task_id for d in read_log(log_dir) if d.event == "done"}


async def _run(
    name: str,
    plans: dict[str, list[list[object]]],
    server,
    queue,
    log_dir: Path,
    normal: int = 20,
    timeout: float = 10.0,
) -> tuple[Producer, list[Delivery]]:
    """Send one task per plan (misbehaving on attempt 1) plus ``normal`` tasks; wait for all."""
    producer = Producer(queue)
    for task_id, first in plans.items():
        await producer.send(task_id, body={"plan": {"1": first}})
    for i in range(normal):
        await producer.send(f"{name}-normal-{i}")
    await wait_for(lambda: producer.returned <= _done(log_dir), timeout, f"{name}: all done")
    return producer, read_log(log_dir)


async def test_09_handler_raises_base_exceptions_or_never_returns(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server()
    worker = await spawn_worker(server, concurrency=4, ttr=TTR).started()
    plans = {
        "system-exit": [["raise", "SystemExit"]],
        "keyboard-interrupt": [["raise", "KeyboardInterrupt"]],
        "generator-exit": [["raise", "GeneratorExit"]],
        "custom-base-exception": [["raise", "PlannedBaseException"]],
        "never-returns": [["hang"]],
    }
    producer, deliveries = await _run("base", plans, server, make_queue(server.url), log_dir)
    report = check("09 handler raises BaseException / never returns", sent=producer.sent,
                   returned=producer.returned, deliveries=deliveries)  # fmt: skip
    report.publish(record_property)
    assert_no_loss(report, allow_duplicates=False)
    retried = {d.task_id: d.attempt for d in deliveries if d.event == "done" and d.attempt > 1}
    assert retried == dict.fromkeys(plans, 2)
    assert worker.alive


async def test_09_handler_raises_cancelled_error(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    """Regression: a CancelledError raised by the handler itself ended the consumer
    coroutine; after ``concurrency`` of them the worker leased tasks that nobody ran."""
    server = make_redis_server()
    worker = await spawn_worker(server, concurrency=2, ttr=TTR).started()
    plans = {f"cancelled-{i}": [["raise", "CancelledError"]] for i in range(2)}
    producer, deliveries = await _run(
        "cancelled", plans, server, make_queue(server.url), log_dir, normal=5, timeout=TTR + 2
    )
    report = check("09 handler raises CancelledError", sent=producer.sent,
                   returned=producer.returned, deliveries=deliveries)  # fmt: skip
    report.publish(record_property)
    assert_no_loss(report)
    assert worker.alive


async def test_09_handler_blocks_the_event_loop_past_ttr(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server()
    blocked = await spawn_worker(server, concurrency=4, ttr=TTR).started()
    queue = make_queue(server.url)
    producer = Producer(queue)
    await producer.send("blocker", body={"plan": {"1": [["block", 2500]]}})
    await wait_for(lambda: read_log(log_dir), 5, "the blocker to start")
    other = await spawn_worker(server, concurrency=4, ttr=TTR).started()
    await _run("block", {}, server, queue, log_dir, normal=20)
    await wait_for(lambda: "refused" in blocked.output(), 5, "the late ack's refusal")

    report = check("09 handler blocks the event loop 2.5 s (TTR 1 s)", sent=producer.sent,
                   returned=producer.returned, deliveries=read_log(log_dir))  # fmt: skip
    report.publish(record_property)
    assert_no_loss(report)
    blocker = [(d.pid, d.attempt) for d in read_log(log_dir) if d.task_id == "blocker"
               and d.event == "done"]  # fmt: skip
    assert (other.pid, 2) in blocker, blocker
    assert blocked.alive and other.alive


async def test_09_handler_swallows_cancellation(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server()
    worker = await spawn_worker(server, concurrency=2, ttr=TTR).started()
    plans = {"stubborn": [["hang_shielded"]]}
    producer, deliveries = await _run("stubborn", plans, server, make_queue(server.url), log_dir,
                                      normal=10, timeout=TTR + 6)  # fmt: skip
    report = check("09 handler swallows cancellation", sent=producer.sent,
                   returned=producer.returned, deliveries=deliveries)  # fmt: skip
    report.publish(record_property)
    assert_no_loss(report)
    assert worker.alive


async def test_09_sigterm_stops_a_worker_whose_handler_swallows_cancellation(
    make_redis_server, spawn_worker, make_queue, log_dir
) -> None:
    """Regression: the stop awaited the cancelled handlers with no deadline, and then
    ``asyncio.run`` cancelled the stuck task again and waited for it forever."""
    server = make_redis_server()
    grace = 0.5
    worker = await spawn_worker(server, concurrency=2, ttr=30.0, grace=grace).started()
    producer = Producer(make_queue(server.url))
    await producer.send("stubborn", body={"plan": {"1": [["hang_shielded"]]}})
    await wait_for(lambda: read_log(log_dir), 5, "the handler to start")
    # Grace, then each cancellation round gets about a second; the process must then exit
    # (with any status: leaving a handler behind is not a clean stop).
    await worker.terminate(timeout=grace + 5.0)


async def test_09_handler_kills_its_process(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server()
    doomed = await spawn_worker(server, concurrency=4, ttr=TTR).started()
    producer = Producer(make_queue(server.url))
    await producer.send("killer", body={"plan": {"1": [["exit", 13]]}})
    await wait_for(lambda: not doomed.alive, 5, "the worker to die")
    died = real_now()
    replacement = await spawn_worker(server, concurrency=4, ttr=TTR).started()
    await wait_for(lambda: "killer" in _done(log_dir), TTR + 5, "redelivery")
    report = check("09 handler calls os._exit", sent=producer.sent, returned=producer.returned,
                   deliveries=read_log(log_dir))  # fmt: skip
    report.extra["recovery_s"] = max(d.at for d in read_log(log_dir)) - died
    report.publish(record_property)
    assert_no_loss(report)
    assert doomed.proc is not None and doomed.proc.returncode == 13
    assert replacement.alive
