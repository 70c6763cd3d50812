"""``GET /api/topics/{topic}/groups``: a grouped topic's groups with the most ready tasks,
for operators and the dashboard's Groups table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from delayq.group_stats import MAX_GROUPS, GroupStats
from delayq.web.api import name
from delayq.web.depends import authorizer, only_query
from delayq.web.errors import ERROR_RESPONSES, naming

if TYPE_CHECKING:
    from delayq.queue import Queue
    from delayq.web.auth import Tokens


class GroupsPage(BaseModel):
    """The groups of a topic, most ready tasks first (``Queue.groups()``); empty for a
    topic without groups."""

    topic: str
    groups: list[GroupStats]


def router(queue: Queue, tokens: Tokens) -> APIRouter:
    """The route of ``GET /api/topics/{topic}/groups`` (scope ``read``)."""

    async def groups(
        topic: str, limit: Annotated[int, Query(ge=1, le=MAX_GROUPS)] = 20
    ) -> GroupsPage:
        """The `limit` groups with the most ready tasks, each with its delayed and running
        tasks and whether its cap or rate limit holds it back now."""
        with naming("topic", "limit"):
            found = await queue.groups(name(topic), limit=limit)
        return GroupsPage(topic=name(topic), groups=found)

    api = APIRouter(prefix="/api", responses=ERROR_RESPONSES)
    api.add_api_route(
        "/topics/{topic}/groups", groups, methods=["GET"], response_model=GroupsPage,
        dependencies=[Depends(authorizer(tokens)("read")), Depends(only_query("limit"))],
        openapi_extra={"x-scope": "read"},
    )  # fmt: skip
    return api
