"""Deadlines on its own: the handlers' lease timeouts, one loop timer per distinct deadline.

The worker-level behaviour (TTRExceeded, extend, cancelling before Redis ends the lease)
is covered against a real Redis in tests/test_worker.py; these pin the cancel rules that
Deadlines takes over from ``asyncio.timeout_at``.  No Redis is involved.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any, cast

import pytest

from delayq.worker.lease import Deadlines, Delivery
from tests.helpers import wait_for


def leased(deadlines: Deadlines, deadline: float) -> Delivery:
    """A delivery with only what Deadlines reads (its deadline), added as the worker adds
    one it has just leased."""
    nothing = cast(Any, None)
    topic = cast(Any, SimpleNamespace(name="job", options=SimpleNamespace(ttr_ms=30_000)))
    envelope = cast(Any, SimpleNamespace(ttr_ms=0))
    d = Delivery(topic, nothing, "t", envelope, deadline=deadline)
    deadlines.add(d)
    return d


async def hold(
    deadlines: Deadlines, d: Delivery, seconds: float, seen: list[str] | None = None
) -> str:
    """Run a 'handler' that sleeps ``seconds`` under ``d``'s deadline, as the worker does;
    say how it ended (and add the message of a cancel it saw to ``seen``)."""
    me = asyncio.current_task()
    assert me is not None
    deadlines.watch(d, me)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError as exc:
        if seen is not None:
            seen.append(str(exc))
        if deadlines.done(d):
            return "timed out"
        raise
    finally:
        deadlines.done(d)
    return "finished"


def soon(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_one_timer_ends_every_handler_that_shares_its_deadline() -> None:
    deadlines = Deadlines()
    at = soon(0.05)
    batch = [leased(deadlines, at) for _ in range(3)]
    assert len(deadlines._timers) == 1
    runs = [asyncio.create_task(hold(deadlines, d, 5)) for d in batch]
    assert await asyncio.wait_for(asyncio.gather(*runs), 1) == ["timed out"] * 3
    assert not deadlines._timers


async def test_the_timer_stays_until_the_last_of_its_batch_is_done() -> None:
    deadlines = Deadlines()
    at = soon(0.05)
    first, second, third = (leased(deadlines, at) for _ in range(3))
    # Handlers that finish at once, one after the other, as no-op handlers do.
    assert await hold(deadlines, first, 0) == "finished"
    assert await hold(deadlines, second, 0) == "finished"
    assert len(deadlines._timers) == 1
    assert deadlines.done(third) is False  # e.g. a body that failed validation
    assert not deadlines._timers
    await asyncio.sleep(0.1)  # nothing fires late
    assert not (first.expired or second.expired or third.expired)


async def test_a_handler_that_finishes_in_time_is_left_alone() -> None:
    deadlines = Deadlines()
    at = soon(0.05)
    quick = asyncio.create_task(hold(deadlines, leased(deadlines, at), 0.01))
    slow = asyncio.create_task(hold(deadlines, leased(deadlines, at), 5))
    assert await quick == "finished"
    assert await asyncio.wait_for(slow, 1) == "timed out"
    assert not deadlines._timers


async def test_a_delivery_that_expires_before_it_starts_is_marked() -> None:
    deadlines = Deadlines()
    d = leased(deadlines, soon(0.01))
    await wait_for(
        lambda: d.expired, 5, "the deadline to pass"
    )  # the worker then does not start its handler
    assert deadlines.done(d) is False
    assert not deadlines._timers


async def test_extend_moves_a_running_handler_to_a_later_deadline() -> None:
    deadlines = Deadlines()
    at = soon(0.05)
    kept, moved = leased(deadlines, at), leased(deadlines, at)
    first = asyncio.create_task(hold(deadlines, kept, 5))
    second = asyncio.create_task(hold(deadlines, moved, 0.2))
    await asyncio.sleep(0)  # both handlers are running
    deadlines.extend(moved, at + 1)
    deadlines.extend(kept, at - 1)  # never earlier
    assert await asyncio.wait_for(first, 1) == "timed out"
    assert await asyncio.wait_for(second, 1) == "finished"
    assert moved.deadline == at + 1 and kept.deadline == at
    assert not deadlines._timers


async def test_a_cancel_from_outside_is_not_a_timeout() -> None:
    deadlines = Deadlines()
    d = leased(deadlines, soon(5))
    run = asyncio.create_task(hold(deadlines, d, 5))
    await asyncio.sleep(0)
    # The deadline passes and the worker is stopped before the handler wakes up.
    deadlines._expire(d.deadline)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert d.expired and d.runner is None


async def test_a_handler_that_swallows_its_timeout_leaves_no_cancel_behind() -> None:
    deadlines = Deadlines()
    d = leased(deadlines, soon(0.02))
    seen: list[object] = []

    async def stubborn() -> None:
        me = asyncio.current_task()
        assert me is not None
        deadlines.watch(d, me)
        with contextlib.suppress(asyncio.CancelledError):  # ignores it, returns normally
            await asyncio.sleep(5)
        seen.append(deadlines.done(d))
        seen.append(me.cancelling())
        await asyncio.sleep(0.01)  # the task may go on awaiting: nothing cancels it again
        seen.append("went on")

    await asyncio.wait_for(stubborn(), 1)
    assert seen == [True, 0, "went on"]


async def test_clear_cancels_every_timer() -> None:
    deadlines = Deadlines()
    d = leased(deadlines, soon(0.02))
    deadlines.clear()
    await asyncio.sleep(0.05)
    assert not d.expired


async def test_the_deadlines_cancel_names_the_ttr_and_a_cancel_from_outside_does_not() -> None:
    deadlines = Deadlines()
    seen: list[str] = []
    assert await hold(deadlines, leased(deadlines, soon(0.01)), 5, seen) == "timed out"
    outside = asyncio.create_task(hold(deadlines, leased(deadlines, soon(30)), 5, seen))
    await asyncio.sleep(0)  # let it start waiting
    outside.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outside
    assert seen == ["TTR exceeded: job/t ran past its TTR of 30s", ""]
