"""Running one delivery: its body, its Task, its topic's chain under the TTR deadline, and
recording how it ended (a batched ack, or nack.lua for a retry or a dead letter).

Cancellation is the delicate part.  A delivery's chain (middleware and handler) runs in a
consumer task, which two things may cancel: the delivery's deadline (:class:`Deadlines`,
at its TTR) and the worker's stop.  Code in the chain may catch ``CancelledError`` and
return, as if it had finished.  So the outcome is not read from how the chain ended alone:

* the deadline fired (``Deadlines.done`` says whether it was the cause): the attempt failed
  with ``TTRExceeded``, whether the chain raised, returned or turned the cancel into
  another exception;
* the task was aborted (``Queue.cancel(..., running=True)``, heard on the wake channel:
  :meth:`Deadlines.abort`): cancel.lua already ended the lease and recorded the task as
  cancelled, so the attempt ends with neither an ack nor a nack, whatever the chain did
  (a chain that swallowed the cancel and returned would only have its ack refused);
* the worker is stopping (the consumer was cancelled from outside): the delivery is not
  acked, whatever the chain did, and the cancel goes on up; the worker then hands the
  lease back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from delayq.cancellation import cancelled_from_outside
from delayq.codec import decode_body
from delayq.duration import to_millis
from delayq.errors import (
    BodyTooLargeError,
    BodyValidationError,
    DelayqError,
    InvalidInputError,
    LeaseLostError,
    RedisUnavailableError,
    Retry,
)
from delayq.results import encode_result
from delayq.task import Task, from_millis
from delayq.worker.acker import Acker
from delayq.worker.lease import aborted, local_deadline
from delayq.worker.report import Reporter, nack_event

if TYPE_CHECKING:
    from collections.abc import Mapping

    from delayq.pacing import Outage
    from delayq.redis.scripts import NackMode, Scripts
    from delayq.worker.chain import Call
    from delayq.worker.lease import Deadlines, Delivery

log = logging.getLogger("delayq.worker")

MAX_ERROR_CHARS = 2000


class _Aborted(Exception):
    """The delivery's task was aborted while its chain ran (see the module's docstring)."""


class Executor:
    """Runs deliveries through their topic's chain and records their outcomes.

    Args:
        scripts: runs nack.lua and extend.lua (acks go through the :class:`Acker`).
        deadlines: the worker's lease deadlines.
        held: the worker's deliveries by (topic, id); a recorded outcome removes one.
        max_body_bytes: the largest body a handler is given.
        ack_limit: acks queued or in flight before finished handlers wait.
        reporter: tells the queue's event listeners and the worker's ``on_outcome`` about
            each delivery (``delivered`` and its outcome), when anyone listens.
        outage: the worker's, told when recording an outcome cannot reach Redis.
    """

    def __init__(
        self,
        scripts: Scripts,
        deadlines: Deadlines,
        held: dict[tuple[str, str], Delivery],
        *,
        max_body_bytes: int,
        ack_limit: int,
        reporter: Reporter,
        outage: Outage,
    ) -> None:
        self._scripts = scripts
        self._outage = outage
        self._reporter = reporter
        self.now = time.monotonic  # the loop's clock: the worker sets it to loop.time
        self.chains: Mapping[str, Call] = {}
        """The call of each topic, by name (see :mod:`delayq.worker.chain`), set when the
        worker starts."""
        self._deadlines = deadlines
        self._held = held
        self._max_body_bytes = max_body_bytes
        self.acker = Acker(scripts, self._acked, limit=ack_limit, outage=outage)
        self.state: Any = None
        """What the queue's lifespan yielded (every Task's ``state``)."""
        self.channels: Mapping[str, str] = {}
        """The topic of each wake channel the worker listens on (for aborts), by channel."""
        self.keeps_inside = False
        """Whether the chains hand a handler's value to :meth:`keep` themselves (middleware
        wraps the handler, so a chain returns the middleware's value, not the handler's)."""

    async def execute(self, d: Delivery, me: asyncio.Task[Any]) -> None:
        """Run ``d`` in ``me`` (the current task) and record its outcome."""
        topic, envelope = d.topic, d.envelope
        if d.aborted:  # while it waited in the buffer
            self._deadlines.done(d)
            self._abandon(d)
            return
        if d.expired:
            # Leased, then left in the buffer past its deadline (a handler blocked the
            # loop): another worker may run it soon, so this one must not start.
            error = "TTRExceeded: the lease ran out before the handler started"
            log.warning(
                "%s/%s: its lease (TTR %gs) ran out before its handler started, on attempt %d",
                topic.name, d.task_id, d.ttr, envelope.attempts,
            )  # fmt: skip
            await self.nack(d, "retry", self._backoff_ms(d), error)
            return
        try:
            body = decode_body(topic.name, envelope.body, topic.adapter, self._max_body_bytes)
        except (BodyValidationError, BodyTooLargeError) as exc:
            self._deadlines.done(d)
            # No attempt can succeed with this body: dead at once (nack logs it).
            await self.nack(d, "dead", 0, f"{type(exc).__name__}: {exc}")
            return
        task: Task[Any] = Task(
            id=d.task_id, topic=topic.name, attempt=envelope.attempts,
            max_attempts=envelope.max_attempts or topic.options.max_attempts,
            due_at=from_millis(envelope.due_ms), enqueued_at=from_millis(envelope.enqueued_ms),
            ttr=(envelope.ttr_ms or topic.options.ttr_ms) / 1000, token=envelope.token,
            extend=lambda seconds: self._extend(d, seconds), state=self.state,
            priority=envelope.priority, headers=envelope.headers, group=envelope.group,
        )  # fmt: skip
        d.started = self.now()
        if self._reporter.listening:
            self._reporter.started(d)
        try:
            value = await self._run(d, body, task, me)
        except Retry as retry:
            await self._retry(d, retry)
        except _Aborted:
            self._abandon(d)
        except asyncio.CancelledError as exc:
            if cancelled_from_outside():
                raise
            # The handler raised CancelledError itself (e.g. from a cancelled inner task):
            # that is its failure, not ours to stop on.
            await self.nack(d, "retry", self._backoff_ms(d), f"CancelledError: {exc}")
        except BaseException as exc:
            if isinstance(exc, TimeoutError) and d.expired:
                error = f"TTRExceeded: handler still running after its {task.ttr:g}s lease"
                log.warning(
                    "handler for %s/%s ran past its TTR of %gs on attempt %d of %d; cancelled",
                    topic.name, d.task_id, task.ttr, task.attempt, task.max_attempts,
                )  # fmt: skip
            else:
                error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "handler for %s/%s failed: %s", topic.name, d.task_id, error, exc_info=exc
                )
            await self.nack(d, "retry", self._backoff_ms(d), error)
        else:
            if d.topic.options.results_ms and not self.keeps_inside:
                d.result = encode_result(topic.name, d.task_id, value, self._max_body_bytes)
            # The slot is free once the ack is queued (see Acker); _acked ends the delivery.
            self.acker.submit(d)
            await self.acker.room()

    async def _run(self, d: Delivery, body: Any, task: Task[Any], me: asyncio.Task[Any]) -> Any:
        """Run ``d``'s chain in ``me``; returns what the chain returned (the handler's value
        when no middleware wraps it).

        Raises:
            TimeoutError: ``d``'s deadline cancelled the chain, whatever the chain then did.
            _Aborted: ``d``'s task was aborted, whatever the chain then did.
            asyncio.CancelledError: the worker is stopping, also when the chain returned.
        """
        self._deadlines.watch(d, me)
        try:
            value = await self.chains[d.topic.name](body, task)
        except BaseException as exc:
            if self._deadlines.done(d):
                raise (_Aborted() if d.aborted else TimeoutError()) from exc
            raise
        finally:
            d.ran = self.now() - d.started
        if self._deadlines.done(d):
            # The chain swallowed the deadline's or the abort's cancel: it did not finish.
            raise _Aborted if d.aborted else TimeoutError
        if cancelled_from_outside():
            raise asyncio.CancelledError  # it swallowed the worker's stop: not done either
        return value

    def abort(self, channel: str, token: str, task_id: str) -> None:
        """cancel.lua aborted a leased task (heard on ``channel``): cancel its handler if
        this worker holds that lease (same id and fencing token)."""
        d = self._held.get((self.channels.get(channel, ""), task_id))
        if d is not None and d.envelope.token == token:
            log.info("%s/%s aborted: cancelling its handler", d.topic.name, task_id)
            self._deadlines.abort(d)

    def keep(self, task: Task[Any], value: object) -> None:
        """Carry what ``task``'s handler returned to its ack (topics with ``results=``),
        encoded now: a value that cannot be stored is logged, and the task still acked."""
        d = self._held.get((task.topic, task.id))
        if d is not None:
            d.result = encode_result(task.topic, task.id, value, self._max_body_bytes)

    def _acked(self, deliveries: list[Delivery], refused: set[int]) -> None:
        held = self._held
        for d in deliveries:
            held.pop((d.topic.name, d.task_id), None)
            if refused and id(d) in refused:
                if d.aborted:
                    log.info("ack of %s/%s refused: the task was aborted", d.topic.name, d.task_id)
                else:
                    log.warning("ack of %s/%s refused: its lease was lost", d.topic.name, d.task_id)
        if self._reporter.listening:
            self._reporter.acked(deliveries, refused)

    def _abandon(self, d: Delivery) -> None:
        """End an aborted delivery: cancel.lua already ended its lease and recorded it, so
        nothing is sent to Redis; listeners hear ``lease_lost`` (its outcome is not ours)."""
        self._held.pop((d.topic.name, d.task_id), None)
        log.info("%s/%s was aborted: attempt %d ended without an outcome",
                 d.topic.name, d.task_id, d.envelope.attempts)  # fmt: skip
        if self._reporter.listening:
            self._reporter.tell("lease_lost", d, aborted(d))

    @staticmethod
    def _backoff_ms(d: Delivery) -> int:
        return to_millis(d.topic.options.backoff.delay(d.envelope.attempts), name="backoff")

    async def _retry(self, d: Delivery, retry: Retry) -> None:
        error = f"Retry: {retry.reason}" if retry.reason else "Retry: requested by the handler"
        if retry.delay is None:
            delay_ms = self._backoff_ms(d)
        else:
            try:
                delay_ms = to_millis(retry.delay, name="Retry.delay")
            except InvalidInputError as exc:
                log.warning(
                    "%s/%s raised Retry with %s; using the backoff", d.topic.name, d.task_id, exc
                )
                delay_ms, error = self._backoff_ms(d), f"{type(exc).__name__}: {exc}"
        await self.nack(d, "retry", delay_ms, error)

    async def nack(self, d: Delivery, mode: NackMode, delay_ms: int, error: str) -> None:
        """Record a failed attempt (``retry``, ``dead``) or hand the lease back (``release``)."""
        error = error[:MAX_ERROR_CHARS]
        try:
            outcome, _ = await self._scripts.nack(
                d.keys, d.task_id, d.envelope.token, mode=mode, delay_ms=delay_ms,
                error=error, max_attempts=d.topic.options.max_attempts,
                history=d.topic.options.history, times=d.times(),
                results=d.topic.options.results_ms,
            )  # fmt: skip
        except DelayqError as exc:
            # The lease stays in Redis and expires: the task is redelivered, not lost.
            what = f"recording the outcome of {d.topic.name}/{d.task_id}"
            if isinstance(exc, RedisUnavailableError):
                self._outage.failed(what, exc)
            else:
                log.warning("%s failed (%s)", what, exc)
            return
        self._held.pop((d.topic.name, d.task_id), None)
        if outcome == 0 and mode == "release":
            # Usually an ack that landed while we were stopping: nothing to hand back.
            log.debug("nothing to release for %s/%s", d.topic.name, d.task_id)
        elif outcome == 0:
            why = "the task was aborted" if d.aborted else "its lease was lost"
            (log.info if d.aborted else log.warning)(
                "%s of %s/%s refused: %s", mode, d.topic.name, d.task_id, why
            )
        elif outcome == 2:
            log.warning("dead-lettered %s/%s: %s", d.topic.name, d.task_id, error)
        if self._reporter.listening and (outcome or mode != "release"):
            self._reporter.tell(nack_event(mode, outcome), d, error)

    async def _extend(self, d: Delivery, seconds: float) -> None:
        ms = to_millis(seconds, name="seconds", allow_zero=False)
        # Measured from before the call, like the lease itself, so the handler's timeout
        # still precedes the new end of the lease in Redis.
        sent = asyncio.get_running_loop().time()
        deadline = await self._scripts.extend(d.keys, d.task_id, d.envelope.token, ms)
        if not deadline:
            raise LeaseLostError(f"lease of {d.topic.name}/{d.task_id} was lost")
        self._deadlines.extend(d, local_deadline(sent, ms))
