"""``GET /api/workers``: the queue's live workers, for operators and the dashboard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from delayq.fleet import WorkerInfo
from delayq.web.depends import authorizer, only_query
from delayq.web.errors import ERROR_RESPONSES

if TYPE_CHECKING:
    from delayq.queue import Queue
    from delayq.web.auth import Tokens


class WorkersPage(BaseModel):
    """The live workers of the queue (and the processes serving HTTP consumers)."""

    workers: list[WorkerInfo]


def router(queue: Queue, tokens: Tokens) -> APIRouter:
    """The route of ``GET /api/workers`` (scope ``read``)."""

    async def workers() -> WorkersPage:
        """The live workers, as their latest heartbeats told them (``Queue.workers()``)."""
        return WorkersPage(workers=await queue.workers())

    api = APIRouter(prefix="/api", responses=ERROR_RESPONSES)
    api.add_api_route(
        "/workers", workers, methods=["GET"], response_model=WorkersPage,
        dependencies=[Depends(authorizer(tokens)("read")), Depends(only_query())],
        openapi_extra={"x-scope": "read"},
    )  # fmt: skip
    return api
