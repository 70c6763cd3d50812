"""Running handlers: fetch loops, leases and their deadlines, batched acks, the two-stage stop.

Imports the Redis layer (:mod:`delayq.redis`) and the leaves, never :mod:`delayq.queue`:
the worker sees its queue through :class:`~delayq.worker.source.TaskSource`.
"""

from delayq.worker.runner import Worker as Worker

__all__ = ["Worker"]
