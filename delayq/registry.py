"""The handler registry that ``Queue`` inherits: ``@queue.topic``, and the hooks around
handlers, ``@queue.lifespan`` and ``@queue.middleware``.

A worker reads what is registered here when it starts (through
:class:`~delayq.worker.source.TaskSource`); nothing here talks to Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from delayq.backoff import Backoff
from delayq.duration import Duration, to_millis
from delayq.errors import InvalidInputError
from delayq.hooks import Lifespan, Middleware, check_lifespan, check_middleware
from delayq.limits import RateLimit, check_max_running
from delayq.redis.keys import check_topic
from delayq.topic import Sender, Topic, TopicDecorator, TopicOptions, check_max_attempts

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

LifespanT = TypeVar("LifespanT", bound=Lifespan)
MiddlewareT = TypeVar("MiddlewareT", bound=Middleware)


class RegisteringQueue(Sender, Protocol):
    """What the registry needs from the queue that inherits it."""

    name: str
    topics: dict[str, Topic[Any]]
    middlewares: list[Middleware]
    lifespan_factory: Lifespan | None


class HandlerRegistry:
    """``Queue.topic``, ``Queue.lifespan`` and ``Queue.middleware``.

    Attributes:
        topics: the registered topics, by name.
        middlewares: the middleware around every handler, outermost first.
        lifespan_factory: the registered lifespan, if any.
    """

    topics: dict[str, Topic[Any]]
    middlewares: list[Middleware]
    lifespan_factory: Lifespan | None

    def topic(
        self: RegisteringQueue,
        name: str,
        *,
        ttr: Duration = 30.0,
        max_attempts: int = 5,
        backoff: Backoff | None = None,
        rate_limit: str | None = None,
        max_running: int | None = None,
    ) -> TopicDecorator:
        """Register the decorated ``async def`` handler for topic ``name``.

        Args:
            name: the topic; one handler per topic per queue.
            ttr: lease length (time to run); a handler still running then is cancelled and
                the attempt fails; a worker that died loses the lease and the task is redelivered.
            max_attempts: deliveries before a failing task is dead-lettered.
            backoff: retry delays after a failure (default ``Backoff()``).
            rate_limit: ``"N/s"``, ``"N/m"`` or ``"N/h"``: at most N task starts in any
                second, minute or hour, across every worker of the queue.
            max_running: at most this many of the topic's tasks leased at once, across
                every worker.  Both are enforced in Redis (see docs/controls.md).

        Returns:
            A decorator turning the handler into a :class:`Topic` handle.
        """
        check_topic(name)
        options = TopicOptions(
            ttr_ms=to_millis(ttr, name="ttr", allow_zero=False),
            max_attempts=check_max_attempts(max_attempts),
            backoff=backoff or Backoff(),
            rate_limit=None if rate_limit is None else RateLimit.parse(rate_limit),
            max_running=None if max_running is None else check_max_running(max_running),
        )

        def register(handler: Callable[..., Awaitable[None]]) -> Topic[Any]:
            if name in self.topics:
                raise InvalidInputError(
                    f"topic {name!r} already has a handler in queue {self.name!r}"
                )
            handle: Topic[Any] = Topic(self, name, handler, options)
            self.topics[name] = handle
            return handle

        return TopicDecorator(register)

    def lifespan(self: RegisteringQueue, lifespan: LifespanT) -> LifespanT:
        """Register the queue's lifespan (a decorator): the resources its handlers share.

        ``lifespan`` is an async generator function that yields once (or a function
        returning an async context manager).  Every worker enters it once before it leases
        its first task and leaves it after its last handler finished (also when the start
        fails); what it yields is ``task.state`` in every handler.  An exception on entry
        stops the worker with :class:`~delayq.LifespanError`.  One lifespan per queue.

        Returns:
            ``lifespan`` itself.

        Raises:
            InvalidInputError: not a lifespan, or the queue already has one.
        """
        check_lifespan(lifespan)
        if self.lifespan_factory is not None:
            raise InvalidInputError(f"queue {self.name!r} already has a lifespan")
        self.lifespan_factory = lifespan
        return lifespan

    def middleware(self: RegisteringQueue, middleware: MiddlewareT) -> MiddlewareT:
        """Register ``async def middleware(task, call_next)`` around every handler call
        (a decorator).

        Middleware runs in registration order, the first registered outermost, inside the
        task's TTR.  ``await call_next()`` runs the rest of the chain and the handler; what
        the middleware raises is the attempt's failure, and one that returns without
        calling ``call_next`` ends the attempt as done (acked).  Workers compose the chain
        when they start: register middleware before starting them.

        Returns:
            ``middleware`` itself.

        Raises:
            InvalidInputError: not an ``async def`` taking (task, call_next).
        """
        self.middlewares.append(check_middleware(middleware))
        return middleware
