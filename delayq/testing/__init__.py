"""Testing a service that uses delayq, on a real Redis: a pytest plugin and ``run_due``.

Installing delayq registers the plugin (``pytest11``); its fixtures start a private
redis-server for the test session (:mod:`delayq_pytest`).  :func:`run_due` lets
a queue's time pass, on that Redis or any other, and runs what falls due through a real
worker.  :class:`PrivateRedis` is that server's launcher, usable on its own (with
:func:`free_port`).  See docs/testing.md.
"""

from delayq.testing.due import RunDueTimeoutError, run_due
from delayq.testing.server import PrivateRedis, PrivateRedisError, free_port

__all__ = [
    "PrivateRedis",
    "PrivateRedisError",
    "RunDueTimeoutError",
    "free_port",
    "run_due",
]
