"""``GET /api/topics/{topic}/tasks/{task_id}/result``: a finished task's result, for topics
registered with ``results=`` (``Queue.result``), waiting up to ``wait`` seconds for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query

from delayq.errors import ResultNotReadyError
from delayq.results import TaskResult
from delayq.web.api import name
from delayq.web.depends import authorizer, only_query
from delayq.web.errors import ERROR_RESPONSES, ApiError, ApiProblem, naming, not_found

if TYPE_CHECKING:
    from delayq.queue import Queue
    from delayq.web.auth import Tokens

MAX_RESULT_WAIT = 30.0
"""Longest ``wait`` a request may ask for, in seconds."""


def router(queue: Queue, tokens: Tokens) -> APIRouter:
    """The route of ``GET .../result`` (scope ``read``)."""

    async def result(
        topic: str,
        task_id: str,
        wait: Annotated[float, Query(ge=0, le=MAX_RESULT_WAIT, allow_inf_nan=False)] = 0,
    ) -> TaskResult[Any]:
        """The task's result (`outcome` acked, dead or cancelled, the handler's `value`),
        waiting up to `wait` s (at most 30) for a task still to finish: 408 `not_ready`
        once that ran out.  404 for an unknown id, an expired result or a topic that keeps
        none."""
        with naming("topic", "task_id", "wait"):
            try:
                found = await queue.result(name(topic), name(task_id), wait=wait)
            except ResultNotReadyError as exc:
                raise ApiProblem(408, "not_ready", str(exc)) from None
        if found is None:
            raise not_found("no result (unknown task, expired, or its topic keeps none)")
        return found

    api = APIRouter(prefix="/api", responses=ERROR_RESPONSES)
    api.add_api_route(
        "/topics/{topic}/tasks/{task_id}/result", result, methods=["GET"],
        response_model=TaskResult[Any],
        responses={408: {"model": ApiError, "description": "The task has not finished yet."}},
        dependencies=[Depends(authorizer(tokens)("read")), Depends(only_query("wait"))],
        openapi_extra={"x-scope": "read"},
    )  # fmt: skip
    return api
