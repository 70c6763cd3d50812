"""Cancellation that survives libraries which swallow it, and the waits built on it."""

from __future__ import annotations

import asyncio


def raise_if_cancelling() -> None:
    """Re-raise a cancellation that a library call swallowed.

    On Python 3.11, ``asyncio.wait_for`` (which redis-py uses to time out socket writes)
    returns the result instead of raising when the cancel arrives as the write completes.
    A loop that carried on would never stop, so each of our loops checks once per turn.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def cancelled_from_outside() -> bool:
    """Whether the current task was asked to stop (not a cancel of our own making)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def first_of(*events: asyncio.Event, within: float) -> None:
    """Wait until any of ``events`` is set, or ``within`` seconds pass."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def cancel_all(tasks: list[asyncio.Task[None]], *, within: float) -> set[asyncio.Task[None]]:
    """Cancel ``tasks`` and wait up to ``within`` seconds; return those still running.

    The cancel is repeated because a library may swallow one (see ``raise_if_cancelling``).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    pending = set(tasks)
    while pending and loop.time() < deadline:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.05)
    return pending
