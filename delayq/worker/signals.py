"""Stopping a worker on SIGINT and SIGTERM, where the event loop can install handlers."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable


def install_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> list[int]:
    """Call ``stop`` on SIGINT and SIGTERM; returns the signals it could install."""
    installed: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop)
        except (ValueError, RuntimeError, NotImplementedError):
            continue  # not the main thread, or no signal support: stop() still works
        installed.append(sig)
    return installed
