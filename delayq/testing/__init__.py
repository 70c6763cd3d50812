"""Testing a service that uses delayq, on a real Redis: a pytest plugin and ``run_due``.

Installing delayq registers the plugin (``pytest11``); its fixtures start a private
redis-server for the test session (:mod:`delayq.testing.plugin`).  :func:`run_due` lets
queue time pass on it and runs what falls due through a real worker.  :class:`PrivateRedis`
is that server's launcher, usable on its own (with :func:`free_port`).  See docs/testing.md.
"""

from delayq.testing.clock import ClockUnavailableError
from delayq.testing.due import RunDueTimeoutError, run_due
from delayq.testing.server import PrivateRedis, PrivateRedisError, free_port

__all__ = [
    "ClockUnavailableError",
    "PrivateRedis",
    "PrivateRedisError",
    "RunDueTimeoutError",
    "free_port",
    "run_due",
]
