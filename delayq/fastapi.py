"""delayq's errors answered in your own FastAPI app as delayq's HTTP API answers them
(``pip install delayq[web]``).

    from fastapi import FastAPI
    from delayq.fastapi import install_exception_handlers

    app = FastAPI()
    install_exception_handlers(app)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from delayq.errors import InvalidInputError
from delayq.web.errors import REDIS_SIDE, invalid_input, unavailable

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse


def install_exception_handlers(app: FastAPI) -> None:
    """Answer delayq's errors raised in ``app``'s routes with JSON, in the HTTP API's
    error shape (``{"error": ..., "message": ..., "field": ...}``).

    - :class:`~delayq.errors.InvalidInputError` (every delayq ``ValueError``: a bad
      topic, delay, task id, body or headers) answers **422** with ``error``
      ``"invalid_input"`` and ``field`` naming the argument at fault (``"delay"``,
      ``"topic"``, ...; None when the message names none).  Nothing was written.
    - :class:`~delayq.errors.RedisUnavailableError`, and the other errors that mean
      "Redis cannot take this now" (:class:`~delayq.errors.RedisAuthError`,
      :class:`~delayq.errors.RedisOutOfMemoryError`,
      :class:`~delayq.errors.NotDurableError`), answer **503** with ``error``
      ``"unavailable"`` and a ``Retry-After`` header, and are logged as a warning on the
      ``delayq.web`` logger.  A send that failed this way is safe to retry with the same
      ``task_id``.

    Any other exception is left to the app's other handlers.

    Args:
        app: the FastAPI (or Starlette) app whose routes call delayq.

    Example:
        ```python
        app = FastAPI()
        install_exception_handlers(app)

        @app.post("/orders")
        async def create_order(delay: float) -> dict[str, str]:
            # delay=-1 answers 422 {"error": "invalid_input", "field": "delay", ...};
            # Redis down answers 503 with Retry-After.
            sent = await queue.send_delayed("order.close", {}, delay)
            return {"close": str(sent)}
        ```
    """

    async def bad_input(_request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, InvalidInputError):  # registered for it alone
            raise exc
        return invalid_input(exc)

    async def redis_side(_request: Request, exc: Exception) -> JSONResponse:
        return unavailable(exc)

    app.add_exception_handler(InvalidInputError, bad_input)
    for kind in REDIS_SIDE:
        app.add_exception_handler(kind, redis_side)


__all__ = ["install_exception_handlers"]
