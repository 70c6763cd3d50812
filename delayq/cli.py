"""The ``delayq`` command: run a worker, and inspect or manage a queue.

delayq worker myapp.tasks:queue --concurrency 50 [--topics a,b] [--grace 10] [--metrics-port 9100]
delayq stats  myapp.tasks:queue          (or --url/--name without importing the app; add
              --cluster for a Redis Cluster node's URL, or --sentinel H:P,... --service NAME)
delayq get    myapp.tasks:queue order.close order-7
delayq cancel myapp.tasks:queue order.close order-7
delayq dead   myapp.tasks:queue order.close [--replay ID] [--limit 100]
delayq pause  myapp.tasks:queue payment.capture      (and `delayq resume ...`)
delayq web    myapp.tasks:queue --port 8080 [--token-file F]   (needs delayq[web])
delayq periodic myapp.tasks:queue        (periodic topics and their next ticks)
delayq history myapp.tasks:queue order.close [--limit 100] [--before SEQ] [--json]
delayq archive myapp.tasks:queue --to postgresql+asyncpg://... [--every 60]  (delayq[archive])
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from delayq.errors import AppImportError, DelayqError
from delayq.queue import Queue
from delayq.ticks import tick_id

if TYPE_CHECKING:
    from delayq.task import TaskInfo, TopicStats

Command = Callable[[Queue, argparse.Namespace], Awaitable[int]]


def load_queue(spec: str) -> Queue:
    """Import ``module:attribute`` (or ``module.attribute``) and return the Queue it names.

    Raises:
        AppImportError: the module cannot be imported or the attribute is not a Queue.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise AppImportError(f"expected module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`, find the app next to us
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppImportError(f"cannot import {module_name!r}: {exc}") from exc
    queue = getattr(module, attr, None)
    if not isinstance(queue, Queue):
        raise AppImportError(f"{spec!r} is not a delayq.Queue (got {type(queue).__name__})")
    return queue


def _open(args: argparse.Namespace) -> Queue:
    if args.app:
        return load_queue(args.app)
    if args.sentinel:
        if not args.service:
            raise AppImportError("--sentinel needs --service NAME (the monitored primary)")
        return Queue.from_sentinel(_addresses(args.sentinel), service=args.service, name=args.name)
    url = args.url or os.environ.get("REDIS_URL")
    if not url:
        raise AppImportError("give an app (module:attribute) or --url / $REDIS_URL")
    return Queue.from_url(url, name=args.name, cluster=args.cluster)


def _addresses(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` -> [(host, port), ...]."""
    found = []
    for part in text.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise AppImportError(f"--sentinel takes host:port,... (got {part!r})")
        found.append((host, int(port)))
    return found


def _info_json(info: TaskInfo) -> str:
    return info.model_dump_json(indent=2)


async def _worker(queue: Queue, args: argparse.Namespace) -> int:
    topics = [t for t in args.topics.split(",") if t] if args.topics else None
    if args.metrics_port is not None:
        try:
            from delayq.metrics import DelayqMetrics, serve_metrics
        except ImportError as exc:
            raise AppImportError(
                f"--metrics-port needs the prometheus extra (pip install delayq[prometheus]): {exc}"
            ) from exc
        DelayqMetrics(queue)
        serve_metrics(args.metrics_port, addr=args.metrics_addr)
    await queue.run_worker(concurrency=args.concurrency, topics=topics, grace=args.grace)
    return 0


async def _stats(queue: Queue, args: argparse.Namespace) -> int:
    stats = await queue.stats()
    if args.json:
        print(json.dumps({t: s.model_dump() for t, s in stats.items()}, indent=2))
        return 0
    print(f"{'topic':30} {'delayed':>9} {'ready':>9} {'reserved':>9} {'dead':>9}  controls")
    for topic, s in stats.items():
        print(
            f"{topic:30} {s.delayed:>9} {s.ready:>9} {s.reserved:>9} {s.dead:>9}  "
            f"{_controls_text(s)}".rstrip()
        )
    return 0


def _controls_text(s: TopicStats) -> str:
    """``paused, rate_limit=100/s, max_running=5`` for the stats table ('' for none)."""
    parts = ["paused"] if s.paused else []
    if s.rate_limit:
        parts.append(f"rate_limit={s.rate_limit}")
    if s.max_running:
        parts.append(f"max_running={s.max_running}")
    return ", ".join(parts)


async def _pause(queue: Queue, args: argparse.Namespace) -> int:
    await queue.pause(args.topic)
    print(f"paused {args.topic}: workers lease none of its tasks until `delayq resume`")
    return 0


async def _resume(queue: Queue, args: argparse.Namespace) -> int:
    await queue.resume(args.topic)
    print(f"resumed {args.topic}")
    return 0


async def _get(queue: Queue, args: argparse.Namespace) -> int:
    info = await queue.get(args.topic, args.task_id)
    if info is None:
        print(f"no task {args.task_id!r} in topic {args.topic!r}", file=sys.stderr)
        return 1
    print(_info_json(info))
    return 0


async def _cancel(queue: Queue, args: argparse.Namespace) -> int:
    if await queue.cancel(args.topic, args.task_id):
        print(f"cancelled {args.topic}/{args.task_id}")
        return 0
    print(f"{args.topic}/{args.task_id} not cancelled: unknown, done, or running", file=sys.stderr)
    return 1


async def _dead(queue: Queue, args: argparse.Namespace) -> int:
    if args.replay:
        if await queue.replay(args.topic, args.replay):
            print(f"replayed {args.topic}/{args.replay}")
            return 0
        print(f"{args.topic}/{args.replay} is not a dead letter", file=sys.stderr)
        return 1
    for info in await queue.dead_letters(args.topic, limit=args.limit):
        print(f"{info.id}\tattempts={info.attempts}\t{info.last_error or ''}")
    return 0


async def _web(queue: Queue, args: argparse.Namespace) -> int:
    try:
        from delayq.web import Tokens
        from delayq.web.server import serve
    except ImportError as exc:
        raise AppImportError(
            f"delayq web needs the web extra (pip install delayq[web]): {exc}"
        ) from exc
    tokens = Tokens.from_file(args.token_file) if args.token_file else Tokens.from_env()
    await serve(queue, tokens, host=args.host, port=args.port, access_log=not args.no_access_log)
    return 0


async def _periodic(queue: Queue, args: argparse.Namespace) -> int:
    rows = []
    for name, topic in queue.topics.items():
        if topic.options.periodic is not None:
            following = await queue.next_tick(name)
            rows.append((name, topic.options.periodic, following))
    if args.json:
        listed = {
            name: {
                "schedule": periodic.schedule.description,
                "catch_up": periodic.catch_up,
                "next_tick": following.isoformat() if following else None,
            }
            for name, periodic, following in rows
        }
        print(json.dumps(listed, indent=2))
        return 0
    print(f"{'topic':24} {'schedule':40} {'catch_up':8}  next tick")
    for name, periodic, following in rows:
        when = tick_id(round(following.timestamp() * 1000)) if following else "-"
        print(f"{name:24} {periodic.schedule.description:40} {periodic.catch_up:8}  {when}")
    return 0


async def _history(queue: Queue, args: argparse.Namespace) -> int:
    records = await queue.history(args.topic, limit=args.limit, before=args.before)
    for record in records:
        if args.json:
            print(record.model_dump_json())
            continue
        late = "-" if record.lateness is None else f"{record.lateness * 1000:.1f}ms"
        print(f"{record.seq}\t{record.finished_at.isoformat()}\t{record.outcome}\t{record.id}"
              f"\tattempts={record.attempts}\tlateness={late}\t{record.error or ''}")  # fmt: skip
    return 0


async def _archive(queue: Queue, args: argparse.Namespace) -> int:
    try:
        from delayq.archive.command import archive_command
    except ImportError as exc:
        raise AppImportError(
            f"delayq archive needs the archive extra (delayq[archive]): {exc}"
        ) from exc
    topics = [t for t in args.topics.split(",") if t] if args.topics else None
    return await archive_command(
        queue, args.to, table=args.table, batch=args.batch, migrate=args.migrate,
        topics=topics, every=args.every,
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``delayq`` command."""
    parser = argparse.ArgumentParser(prog="delayq", description="Delayed tasks on Redis.")
    parser.add_argument("--log-level", default=os.environ.get("DELAYQ_LOG_LEVEL", "INFO"))
    commands = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, handler: Command, help_text: str, app_required: bool
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument(
            "app", nargs=None if app_required else "?", help="module:attribute of a Queue"
        )
        if not app_required:
            sub.add_argument("--url", help="Redis URL (default $REDIS_URL) when no app is given")
            sub.add_argument("--name", default="default", help="queue name when no app is given")
            sub.add_argument("--cluster", action="store_true", help="--url is a Redis Cluster node")
            sub.add_argument("--sentinel", metavar="HOST:PORT,...", help="Sentinels to ask")
            sub.add_argument("--service", help="with --sentinel: the monitored primary's name")
        sub.set_defaults(handler=handler)
        return sub

    worker = command("worker", _worker, "run a worker", app_required=True)
    worker.add_argument("--concurrency", type=int, default=50)
    worker.add_argument("--topics", help="comma-separated subset of the registered topics")
    worker.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port")
    worker.add_argument("--metrics-addr", default="0.0.0.0", help="address of --metrics-port")
    worker.add_argument("--grace", type=float, default=10.0)
    stats = command("stats", _stats, "count tasks by topic and state", app_required=False)
    stats.add_argument("--json", action="store_true")
    for name, handler, text in (
        ("get", _get, "show one task"),
        ("cancel", _cancel, "cancel a task"),
    ):
        sub = command(name, handler, text, app_required=False)
        sub.add_argument("topic")
        sub.add_argument("task_id")
    for name, handler, text in (
        ("pause", _pause, "stop every worker from leasing a topic's tasks"),
        ("resume", _resume, "let a paused topic's tasks be leased again"),
    ):
        command(name, handler, text, app_required=False).add_argument("topic")
    dead = command("dead", _dead, "list or replay dead letters", app_required=False)
    dead.add_argument("topic")
    dead.add_argument("--replay", metavar="ID")
    dead.add_argument("--limit", type=int, default=100)
    web = command("web", _web, "serve the HTTP API and dashboard", app_required=False)
    web.add_argument("--host", default="127.0.0.1")
    web.add_argument("--port", type=int, default=8080)
    web.add_argument(
        "--token-file",
        help="lines of `scopes token` (default: $DELAYQ_WEB_TOKENS; none: read-only)",
    )
    web.add_argument("--no-access-log", action="store_true", help="do not log each request")
    periodic = command(
        "periodic", _periodic, "list periodic topics and their next ticks", app_required=True
    )
    periodic.add_argument("--json", action="store_true")
    history = command("history", _history, "list a topic's finished tasks", app_required=False)
    history.add_argument("topic")
    history.add_argument("--limit", type=int, default=100)
    history.add_argument("--before", type=int, metavar="SEQ", help="older than this record")
    history.add_argument("--json", action="store_true", help="one JSON object per line")
    archive = command("archive", _archive, "copy history into SQL", app_required=False)
    archive.add_argument(
        "--to", required=True, action="append",
        help="SQLAlchemy async URL, e.g. postgresql+asyncpg:// (repeat for more databases)",
    )  # fmt: skip
    archive.add_argument("--migrate", action="store_true", help="migrate a 0.1 archive table")
    archive.add_argument("--topics", help="comma-separated topics (default: all)")
    archive.add_argument("--table", default="delayq_history")
    archive.add_argument("--batch", type=int, default=500, help="records per transaction")
    archive.add_argument("--every", type=float, help="keep running: archive every N seconds")
    return parser


async def _run(args: argparse.Namespace) -> int:
    queue = _open(args)
    try:
        code: int = await args.handler(queue, args)
        return code
    finally:
        await queue.close()


ANYIO_THREAD = "AnyIO worker thread"
"""The name of the threads ``anyio.to_thread.run_sync`` runs plain ``def`` handlers in."""
LEFTOVER_TIMEOUT = 1.0
"""How long tasks still running after the command are given to unwind before exit."""


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
    except KeyboardInterrupt:
        code = 130
    except DelayqError as exc:
        print(f"delayq: {exc}", file=sys.stderr)
        code = 2
    _exit_past_handler_threads(code)
    return code


def _exit_past_handler_threads(code: int) -> None:
    """Exit now if a plain ``def`` handler's thread still runs (abandoned at its TTR or at
    the stop; its task was failed or handed back): Python would otherwise wait for it at
    exit, and a thread cannot be killed."""
    left = [t for t in threading.enumerate() if t.name == ANYIO_THREAD and t.is_alive()]
    if left:
        logging.getLogger("delayq").error(
            "exiting with %d handler thread(s) still running (abandoned)", len(left)
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
