"""Long polls (``reserve`` with ``wait``) that end when the server stops."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from delayq.consumer import LeasedTask


async def until_set(
    lease: Coroutine[Any, Any, list[LeasedTask]], stopping: asyncio.Event
) -> list[LeasedTask]:
    """``lease``'s tasks, or none once ``stopping`` is set first: a long poll ends when the
    server stops rather than holding the stop up (cut while it leases, the tasks it leased
    are delivered again after their TTR)."""
    leasing = asyncio.ensure_future(lease)
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((leasing, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not leasing.done():
            leasing.cancel()
    await asyncio.wait((leasing,))  # let a cut lease unwind (our own cancellation propagates)
    return [] if leasing.cancelled() else leasing.result()
