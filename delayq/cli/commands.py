"""One function per ``delayq`` command, and the parser that picks one."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import delayq
from delayq.cli.app import DEFAULT_NAME, queue_named
from delayq.cli.fleet import periodic as _periodic
from delayq.cli.fleet import workers as _workers
from delayq.cli.groups import groups as _groups
from delayq.cli.groups import groups_options
from delayq.errors import AppImportError, ResultNotReadyError
from delayq.queue import Queue
from delayq.strict import strict_send_hook

if TYPE_CHECKING:
    from delayq.task import TaskInfo, TopicStats

Command = Callable[[Queue, argparse.Namespace], Awaitable[int]]


def _info_json(info: TaskInfo) -> str:
    return info.model_dump_json(indent=2)


async def _worker(queue: Queue, args: argparse.Namespace) -> int:
    topics = [t for t in args.topics.split(",") if t] if args.topics else None
    _serve_metrics(queue, args)
    await queue.run_worker(
        concurrency=args.concurrency, topics=topics, grace=args.grace, heartbeat=args.heartbeat
    )
    return 0


def _serve_metrics(queue: Queue, args: argparse.Namespace) -> None:
    """With ``--metrics-port``, count what this process does and serve it to Prometheus."""
    if args.metrics_port is None:
        return
    try:
        from delayq.metrics import DelayqMetrics, serve_metrics
    except ImportError as exc:
        raise AppImportError(
            f"--metrics-port needs the prometheus extra (pip install delayq[prometheus]): {exc}"
        ) from exc
    DelayqMetrics(queue)
    serve_metrics(args.metrics_port, addr=args.metrics_addr)


def _metrics_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port")
    parser.add_argument("--metrics-addr", default="0.0.0.0", help="address of --metrics-port")


async def _stats(queue: Queue, args: argparse.Namespace) -> int:
    stats = await queue.stats()
    if not stats:
        print(f"{queue_named(queue, args)} holds no tasks", file=sys.stderr)
    if args.json:
        print(json.dumps({t: s.model_dump() for t, s in stats.items()}, indent=2))
        return 0
    print(f"{'topic':30} {'delayed':>9} {'ready':>9} {'reserved':>9} {'dead':>9} "
          f"{'consumers':>9} {'oldest':>9}  controls")  # fmt: skip
    for topic, s in stats.items():
        oldest = "-" if s.oldest_ready_age is None else f"{s.oldest_ready_age:.1f}s"
        print(
            f"{topic:30} {s.delayed:>9} {s.ready:>9} {s.reserved:>9} {s.dead:>9} "
            f"{s.consumers:>9} {oldest:>9}  {_controls_text(s)}".rstrip()
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


async def _unseen(queue: Queue, args: argparse.Namespace) -> bool:
    """True (after saying so) when Redis has never seen ``args.topic`` and ``--force`` is not
    given: a mistyped name would otherwise be paused, or resumed, silently."""
    if args.force or args.topic in await queue.topic_names() or await queue.stats([args.topic]):
        return False
    print(
        f"delayq {args.command}: Redis has never seen topic {args.topic!r} of "
        f"{queue_named(queue, args)} (no tasks, no stored state); check the name, or pass "
        f"--force to {args.command} it anyway",
        file=sys.stderr,
    )
    return True


async def _pause(queue: Queue, args: argparse.Namespace) -> int:
    if await _unseen(queue, args):
        return 1
    await queue.pause(args.topic)
    print(f"paused {args.topic}: workers lease none of its tasks until `delayq resume`")
    return 0


async def _resume(queue: Queue, args: argparse.Namespace) -> int:
    if await _unseen(queue, args):
        return 1
    await queue.resume(args.topic)
    print(f"resumed {args.topic}")
    return 0


async def _forget(queue: Queue, args: argparse.Namespace) -> int:
    if await queue.admin.forget(args.topic):
        print(f"forgot {args.topic}: its controls, history and counters are gone")
        return 0
    print(
        f"{args.topic} still holds tasks: cancel them (or wait until they finish) first",
        file=sys.stderr,
    )
    return 1


async def _get(queue: Queue, args: argparse.Namespace) -> int:
    info = await queue.get(args.topic, args.task_id)
    if info is None:
        print(
            f"no task {args.task_id!r} in topic {args.topic!r} of {queue_named(queue, args)}",
            file=sys.stderr,
        )
        return 1
    print(_info_json(info))
    return 0


async def _cancel(queue: Queue, args: argparse.Namespace) -> int:
    if await queue.cancel(args.topic, args.task_id, running=args.running):
        print(f"cancelled {args.topic}/{args.task_id}")
        return 0
    why = "unknown or done" if args.running else "unknown, done, or running (see --running)"
    print(f"{args.topic}/{args.task_id} not cancelled: {why}", file=sys.stderr)
    return 1


async def _result(queue: Queue, args: argparse.Namespace) -> int:
    """Exit 0 with the result's JSON, 1 when there is none, 3 when the task has not
    finished within ``--wait``."""
    try:
        found = await queue.result(args.topic, args.task_id, wait=args.wait)
    except ResultNotReadyError as exc:
        print(f"delayq result: {exc}", file=sys.stderr)
        return 3
    if found is None:
        print(
            f"no result for {args.topic}/{args.task_id} in {queue_named(queue, args)} (unknown "
            "task, expired result, or a topic registered without results=)",
            file=sys.stderr,
        )
        return 1
    print(found.model_dump_json(indent=2))
    return 0


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
    if args.strict_topics:
        if not queue.topics:  # every send would be refused
            print("delayq web: --strict-topics needs an app that registers topics", file=sys.stderr)
            return 2
        queue.hooks.on_send(strict_send_hook(queue.topics, queue.name))
    _serve_metrics(queue, args)
    await serve(
        queue, tokens, host=args.host, port=args.port, access_log=not args.no_access_log,
        heartbeat=args.heartbeat,
    )  # fmt: skip
    return 0


async def _history(queue: Queue, args: argparse.Namespace) -> int:
    records = await queue.history(args.topic, limit=args.limit, before=args.before)
    if not records:
        return await _no_history(queue, args)
    for record in records:
        if args.json:
            print(record.model_dump_json())
            continue
        late = "-" if record.lateness is None else f"{record.lateness * 1000:.1f}ms"
        print(f"{record.seq}\t{record.finished_at.isoformat()}\t{record.outcome}\t{record.id}"
              f"\tattempts={record.attempts}\tlateness={late}\t{record.error or ''}")  # fmt: skip
    return 0


async def _no_history(queue: Queue, args: argparse.Namespace) -> int:
    """Tell an empty history from none kept: an app's declaration says, else what the
    topic's workers recorded in Redis."""
    declared = queue.topics.get(args.topic)
    if declared is not None:
        kept = declared.options.history
    else:
        kept = await queue.history.kept(args.topic)
    where = f"topic {args.topic!r} of {queue_named(queue, args)}"
    if not kept:
        print(
            f"{where} keeps no history (declare it with history=N, e.g. "
            f"@queue.topic({args.topic!r}, history=1000), and run its workers)",
            file=sys.stderr,
        )
        return 1
    if args.before is None:
        print(f"{where} keeps history, but no task of it has finished yet", file=sys.stderr)
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


def _worker_options(worker: argparse.ArgumentParser) -> None:
    """The options of ``delayq worker``."""
    worker.add_argument("--concurrency", type=int, default=50)
    worker.add_argument("--topics", help="comma-separated subset of the registered topics")
    _metrics_arguments(worker)
    worker.add_argument("--grace", type=float, default=10.0)
    worker.add_argument(
        "--heartbeat", type=float, default=5.0, help="seconds between registry heartbeats"
    )


def _web_options(web: argparse.ArgumentParser) -> None:
    """The options of ``delayq web``."""
    web.add_argument("--host", default="127.0.0.1")
    web.add_argument("--port", type=int, default=8080)
    web.add_argument(
        "--token-file",
        help="lines of `scopes token` (default: $DELAYQ_WEB_TOKENS; none: read-only)",
    )
    web.add_argument("--no-access-log", action="store_true", help="do not log each request")
    web.add_argument(
        "--heartbeat", type=float, default=5.0, help="seconds between registry heartbeats"
    )
    web.add_argument(
        "--strict-topics", action="store_true",
        help="answer a send to a topic the app registers no handler for with 404 unknown_topic",
    )  # fmt: skip


def _result_options(result: argparse.ArgumentParser) -> None:
    result.add_argument("topic")
    result.add_argument("task_id")
    result.add_argument(
        "--wait", type=float, default=0.0, metavar="S",
        help="wait up to S seconds for a task still to finish (exit 3 if it has not)",
    )  # fmt: skip


def _dead_options(dead: argparse.ArgumentParser) -> None:
    dead.add_argument("topic")
    dead.add_argument("--replay", metavar="ID")
    dead.add_argument("--limit", type=int, default=100)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``delayq`` command."""
    parser = argparse.ArgumentParser(prog="delayq", description="Delayed tasks on Redis.")
    parser.add_argument("--log-level", default=os.environ.get("DELAYQ_LOG_LEVEL", "INFO"))
    parser.add_argument("--version", action="version", version=f"delayq {delayq.__version__}")
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
            sub.add_argument(
                "--name", help=f"queue name when no app is given (default {DEFAULT_NAME!r})"
            )
            sub.add_argument("--cluster", action="store_true", help="--url is a Redis Cluster node")
            sub.add_argument("--sentinel", metavar="HOST:PORT,...", help="Sentinels to ask")
            sub.add_argument("--service", help="with --sentinel: the monitored primary's name")
        sub.set_defaults(handler=handler)
        return sub

    _worker_options(command("worker", _worker, "run a worker", app_required=True))
    workers = command("workers", _workers, "list the live workers", app_required=False)
    workers.add_argument("--json", action="store_true", help="a JSON list of WorkerInfo")
    stats = command("stats", _stats, "count tasks by topic and state", app_required=False)
    stats.add_argument("--json", action="store_true")
    for name, handler, text in (
        ("get", _get, "show one task"),
        ("cancel", _cancel, "cancel a task"),
    ):
        sub = command(name, handler, text, app_required=False)
        sub.add_argument("topic")
        sub.add_argument("task_id")
        if name == "cancel":
            sub.add_argument(
                "--running", action="store_true",
                help="also abort the task if it runs now: its worker cancels the handler",
            )  # fmt: skip
    for name, handler, text in (
        ("pause", _pause, "stop every worker from leasing a topic's tasks"),
        ("resume", _resume, "let a paused topic's tasks be leased again"),
        ("forget", _forget, "clean the stored state of a topic that holds no task"),
    ):
        control = command(name, handler, text, app_required=False)
        control.add_argument("topic")
        control.add_argument(
            "--force", action="store_true",
            help=f"{name} a topic Redis has never seen (no tasks, no stored state)",
        )  # fmt: skip
    _result_options(command("result", _result, "show a finished task's result", app_required=False))
    _dead_options(command("dead", _dead, "list or replay dead letters", app_required=False))
    groups_options(command("groups", _groups, "count a grouped topic's tasks by group", False))
    web = command("web", _web, "serve the HTTP API and dashboard", app_required=False)
    _web_options(web)
    _metrics_arguments(web)
    periodic = command(
        "periodic",
        _periodic,
        "list periodic topics, their next ticks and who runs them",
        app_required=True,
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
