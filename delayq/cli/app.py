"""Finding the queue a command works on: an app's ``module:attribute``, or a URL and a name."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import TYPE_CHECKING

from delayq.errors import AppImportError
from delayq.queue import Queue

if TYPE_CHECKING:
    import argparse
    from types import ModuleType

DEFAULT_NAME = "default"
"""The queue name read when a command opens a queue by URL without ``--name``."""
FORM = "module:attribute, e.g. app.tasks:queue"
"""How an app is named, shown in every message about a bad one."""


def load_queue(spec: str) -> Queue:
    """Import ``module:attribute`` (or ``module.attribute``) and return the Queue it names.

    Raises:
        AppImportError: the module cannot be imported, or the attribute is missing or not
            a Queue; the message names what is missing and shows the ``module:attribute`` form.
    """
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`, find the app next to us
    module_name, sep, attr = spec.partition(":")
    if not sep:
        return _load_dotted(spec)
    if not module_name or not attr:
        raise AppImportError(f"expected {FORM}, got {spec!r}")
    module = _import(module_name)
    if not hasattr(module, attr):
        raise AppImportError(
            f"module {module_name!r} has no attribute {attr!r}; {_queues_in(module, module_name)}"
        )
    queue = getattr(module, attr)
    if not isinstance(queue, Queue):
        raise AppImportError(
            f"{spec!r} is not a delayq.Queue (got {type(queue).__name__}); "
            f"{_queues_in(module, module_name)}"
        )
    return queue


def _load_dotted(spec: str) -> Queue:
    """``module.attribute`` when it names a Queue; otherwise say that the ``:`` is missing."""
    parent, _, attr = spec.rpartition(".")
    if parent and _found(parent):
        queue = getattr(_import(parent), attr, None)
        if isinstance(queue, Queue):
            return queue
    if not _found(spec):
        raise AppImportError(f"expected {FORM}, got {spec!r} (no module of that name found)")
    module = _import(spec)
    raise AppImportError(
        f"{spec!r} is a module, not a Queue: add the attribute; {_queues_in(module, spec)}"
    )


def _found(module_name: str) -> bool:
    """Does ``module_name`` name a module that exists (without running it)?"""
    try:
        return importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        return False  # a parent package is missing


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise AppImportError(f"cannot import {module_name!r}: {exc}") from exc


def _queues_in(module: ModuleType, module_name: str) -> str:
    """The end of a message: the ``module:attribute`` of each Queue the module holds."""
    names = sorted(name for name, value in vars(module).items() if isinstance(value, Queue))
    if not names:
        return f"it holds no delayq.Queue (an app is named as {FORM})"
    return "its queues: " + ", ".join(f"{module_name}:{name}" for name in names)


def open_queue(args: argparse.Namespace) -> Queue:
    """The queue a command names: its app, or ``--sentinel``/``--url`` (or ``$REDIS_URL``)
    with ``--name``."""
    if args.app:
        return load_queue(args.app)
    name = args.name or DEFAULT_NAME
    if args.sentinel:
        if not args.service:
            raise AppImportError("--sentinel needs --service NAME (the monitored primary)")
        return Queue.from_sentinel(_addresses(args.sentinel), service=args.service, name=name)
    url = args.url or os.environ.get("REDIS_URL")
    if not url:
        raise AppImportError(f"give an app ({FORM}) or --url / $REDIS_URL")
    return Queue.from_url(url, name=name, cluster=args.cluster)


def queue_named(queue: Queue, args: argparse.Namespace) -> str:
    """``queue 'default'`` for a message, saying when that name was taken for want of
    ``--name`` (an empty answer is then often the wrong queue, not an empty one)."""
    if not args.app and args.name is None:
        return f"queue {queue.name!r} (no --name given: {DEFAULT_NAME!r} is the default)"
    return f"queue {queue.name!r}"


def _addresses(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` -> [(host, port), ...]."""
    found = []
    for part in text.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise AppImportError(f"--sentinel takes host:port,... (got {part!r})")
        found.append((host, int(port)))
    return found
