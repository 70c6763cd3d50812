"""A worker on the caller's event loop, as an async context manager (``queue.worker()``).

Entering starts :meth:`Worker.run` as a task (without signal handlers: the host, say
uvicorn, owns the signals) and returns once the worker consumes and listens for wake-ups,
or raises what stopped it (``LifespanError``, ``UnsupportedRedisError``).  Leaving stops it
with the same two-stage stop as ``delayq worker``: no new leases, unstarted tasks handed
back, running handlers get the grace period, then they are cancelled and their tasks
handed back.  If the task leaving the block is itself cancelled while it waits for that,
the worker is cancelled too, which skips the grace but still hands every lease back.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from delayq.cancellation import cancelled_from_outside

if TYPE_CHECKING:
    from collections.abc import Coroutine


class Worker(Protocol):
    """What this module needs of :class:`~delayq.worker.runner.Worker` (which imports it)."""

    @property
    def listening(self) -> asyncio.Event:
        """Set once the worker consumes."""

    def run(self, *, handle_signals: bool = True) -> Coroutine[Any, Any, None]:
        """Consume until stopped."""

    def stop(self) -> None:
        """Stop gracefully."""


START_TIMEOUT = 60.0
"""How long entering waits for the worker to start (it waits for Redis meanwhile)."""


async def start(worker: Worker) -> asyncio.Task[None]:
    """Start ``worker`` in a task; return it once the worker listens for wake-ups.

    Raises:
        Whatever ended the worker's run before it started (e.g. ``LifespanError``).
        TimeoutError: it did not start within :data:`START_TIMEOUT` (Redis unreachable).
    """
    run = asyncio.create_task(worker.run(handle_signals=False), name="delayq-embedded-worker")
    listening = asyncio.ensure_future(worker.listening.wait())
    try:
        done, _ = await asyncio.wait(
            {run, listening}, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        if run in done:
            await run  # raises what stopped it
            raise RuntimeError("the worker stopped before it started")  # pragma: no cover
        if not done:
            raise TimeoutError(f"the worker did not start within {START_TIMEOUT:g}s")
    except BaseException:
        listening.cancel()
        await _cancel(run)
        raise
    return run


async def stop(worker: Worker, run: asyncio.Task[None]) -> None:
    """Stop ``worker`` gracefully and wait for its ``run`` to end (see the module)."""
    worker.stop()
    try:
        await asyncio.shield(run)
    except asyncio.CancelledError:
        if not cancelled_from_outside():
            return  # the run itself was cancelled (by its owner): it released its leases
        await _cancel(run)  # our caller is cancelled: cut the grace short, then go on up
        raise


async def _cancel(run: asyncio.Task[None]) -> None:
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
