"""The text of the Lua scripts: ``delayq/redis/lua/`` with includes expanded, in
production's form or in the test clock's.

A topic's time is Redis's ``TIME`` plus the offset a test clock keeps in ``<prefix>clock``
(``_envelope.lua``).  Production's scripts never read that key, so they cost and return
what they would without test clocks; once :func:`use_test_clock` is called (by
``delayq.testing.run_due``), or in a process started with ``DELAYQ_TEST_CLOCK=1``, every
:class:`~delayq.redis.scripts.Scripts` of the process runs the copies that do.
"""

from __future__ import annotations

import os
import re
import weakref
from functools import cache
from importlib.resources import files
from typing import Protocol

_INCLUDE = re.compile(r"^--@include (\w+)$", re.MULTILINE)
_READ_CLOCK = "local READ_CLOCK = false\n"


@cache
def lua_source(name: str, *, test_clock: bool = False) -> str:
    """The text of ``lua/<name>.lua`` with its ``--@include`` lines expanded; with
    ``test_clock``, the copy that adds the topic's test clock offset to Redis's time
    (``_envelope.lua``: ``READ_CLOCK``)."""
    text = files("delayq.redis").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    text = _INCLUDE.sub(lambda m: lua_source(m.group(1)), text)
    if test_clock:
        text = text.replace(_READ_CLOCK, "local READ_CLOCK = true\n")
    return text


class _Loader(Protocol):
    def load(self) -> None: ...


# A process the test starts (an app server that sends tasks) opts in through its environment.
_BY_ENVIRONMENT = os.environ.get("DELAYQ_TEST_CLOCK") == "1"
_test_clock = _BY_ENVIRONMENT
_loaders: weakref.WeakSet[_Loader] = weakref.WeakSet()


def test_clock_on() -> bool:
    """Whether this process runs the scripts that read test clock offsets."""
    return _test_clock


def watch(loader: _Loader) -> None:
    """Have ``loader`` reload its scripts when :func:`use_test_clock` is called."""
    _loaders.add(loader)


def use_test_clock() -> None:
    """From now on, run the copies of the scripts that read the topics' test clock offsets,
    in every :class:`~delayq.redis.scripts.Scripts` of this process, those that exist and
    those to come.  For ``delayq.testing``: the offsets are test-only state."""
    global _test_clock
    if not _test_clock:
        _test_clock = True
        for loader in list(_loaders):
            loader.load()


def stop_test_clock() -> None:
    """Back to production's scripts in every :class:`~delayq.redis.scripts.Scripts` of this
    process, unless ``DELAYQ_TEST_CLOCK=1`` asked for the others (between tests: the next
    test's Redis holds no offsets anyway)."""
    global _test_clock
    if _test_clock and not _BY_ENVIRONMENT:
        _test_clock = False
        for loader in list(_loaders):
            loader.load()
