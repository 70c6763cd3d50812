"""Running one command as a process: logging, the event loop, exit status, and a quiet end
when its reader goes away (``delayq get ... | head -1``)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from delayq.cli.app import open_queue
from delayq.cli.commands import build_parser
from delayq.errors import DelayqError
from delayq.worker.chain import HANDLER_THREADS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Coroutine, Sequence

LEFTOVER_TIMEOUT = 1.0
"""How long tasks still running after the command are given to unwind before exit."""
BROKEN_PIPE = 1
"""Exit status when stdout's reader went away, as Python's own (docs: "Note on SIGPIPE")."""


async def _run(args: argparse.Namespace) -> int:
    queue = open_queue(args)
    try:
        code: int = await args.handler(queue, args)
        return code
    finally:
        await queue.close()


def run_and_abandon(
    main_coro: Coroutine[Any, Any, int],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
) -> int:
    """Run ``main_coro`` like ``asyncio.run`` but never wait forever for leftovers.

    ``asyncio.run`` cancels the tasks still pending at the end and waits for all of them.
    A handler that swallows cancellation (the worker already released its lease, fenced)
    would then keep the process alive after SIGTERM; we wait a moment and exit anyway.
    """
    loop = loop_factory()
    try:
        return loop.run_until_complete(main_coro)
    finally:
        leftovers = asyncio.all_tasks(loop)
        for task in leftovers:
            task.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.wait(leftovers, timeout=LEFTOVER_TIMEOUT))
        stuck = [task for task in leftovers if not task.done()]
        if stuck:
            logging.getLogger("delayq").error("exiting with %d task(s) still running", len(stuck))
        else:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _loop_factory(command: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop for ``delayq web`` when it is installed (the web extra brings
    it, as uvicorn would pick it), else asyncio's."""
    if command == "web":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``delayq`` command. Returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.getLevelName(str(args.log_level).upper())
    if not isinstance(level, int):
        parser.error(f"unknown log level {args.log_level!r} (use DEBUG, INFO, WARNING or ERROR)")
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code = run_and_abandon(_run(args), _loop_factory(args.command))
        sys.stdout.flush()  # here, where a closed pipe can still be caught
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        _silence_stdout()
        code = BROKEN_PIPE
    except DelayqError as exc:
        print(f"delayq: {exc}", file=sys.stderr)
        code = 2
    _exit_past_handler_threads(code)
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and Python's flush at exit would
    otherwise print a second BrokenPipeError (the recipe of Python's docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _exit_past_handler_threads(code: int) -> None:
    """Exit now if a plain ``def`` handler's thread still runs (abandoned at its TTR or at
    the stop; its task was failed or handed back): Python would otherwise wait for it at
    exit, and a thread cannot be killed."""
    left = HANDLER_THREADS.running
    if left:
        logging.getLogger("delayq").error(
            "exiting with %d handler thread(s) still running (abandoned)", left
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
