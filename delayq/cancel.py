"""Cancellation that survives libraries which swallow it."""

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
