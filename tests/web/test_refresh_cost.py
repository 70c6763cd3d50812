"""A dashboard refresh costs Redis O(topics shown), not O(tasks): the requests app.js makes
for one refresh of the overview and of a topic page, counted in Redis's own INFO
commandstats (commands run inside scripts included).  The overview's are the same for a
topic of 100,000 tasks as for one of 25; so are a topic page's, but for its timeline,
whose count per window is bounded (``timeline.lua``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis.asyncio

import delayq.web.api
from delayq import Queue
from delayq.testing import PrivateRedis
from delayq.upcoming import EXACT_SLOTS
from delayq.web import create_app
from tests.web.conftest import auth, tokens

pytestmark = pytest.mark.slow  # 100,000 tasks written and read: the slow tier

R = auth("read")
OVERVIEW = ["stats?offset=0&limit=50&prefix="]
TOPIC = [
    "stats?prefix={t}&limit=1",
    "topics/{t}/timeline?window=60&windows=60",
    "topics/{t}/upcoming?limit=20",
    "topics/{t}/dead?offset=0&limit=20",
    "topics/{t}/activity",
    "topics/{t}/history?limit=20",
    "topics/{t}/running?limit=20",
    "topics/{t}/groups?limit=20",
]
"""What app.js requests per refresh (overview; topic page)."""


async def commands(client: redis.asyncio.Redis) -> dict[str, int]:
    stats: dict[str, Any] = await client.info("commandstats")
    skip = ("cmdstat_info", "cmdstat_config|resetstat")
    return {name: int(v["calls"]) for name, v in stats.items() if name not in skip}


async def refresh_costs(server: PrivateRedis, size: int) -> dict[str, dict[str, int]]:
    """Redis commands one refresh of the overview, of the topic page without its
    timeline, and of the timeline cost, on a queue whose topic ``big`` holds ``size`` tasks
    among ten small topics.  The tasks fall due over the next hour (~13 slots a minute for
    100,000), none while the test runs: stats.lua walks the slots of the smaller of the
    due and not-due sides, a few slots on a topic mostly of one kind."""
    queue = Queue.from_url(server.url, name=f"cost{uuid.uuid4().hex[:8]}")
    client: redis.asyncio.Redis = redis.asyncio.Redis.from_url(server.url)
    try:
        for start in range(0, size, 5_000):
            count = min(5_000, size - start)
            delays = [120 + n % 3_400 for n in range(count)]
            await queue.send_many("big", [{"n": n} for n in range(count)], delay=delays)
        for n in range(10):
            await queue.send_delayed(f"small-{n}", {}, 60)
        transport = httpx.ASGITransport(app=create_app(queue, tokens()))
        async with httpx.AsyncClient(transport=transport, base_url="http://d") as http:

            async def refresh(paths: list[str]) -> dict[str, int]:
                await client.config_resetstat()
                for path in paths:
                    response = await http.get("/api/" + path.format(t="big"), headers=R)
                    assert response.status_code == 200, response.text
                return await commands(client)

            await refresh(OVERVIEW + TOPIC)  # loads the scripts
            return {
                "overview": await refresh(OVERVIEW),
                "topic": await refresh([p for p in TOPIC if "timeline" not in p]),
                "timeline": await refresh([p for p in TOPIC if "timeline" in p]),
            }
    finally:
        await client.aclose()
        await queue.close()


@pytest.fixture
def server(make_redis_server: Callable[..., PrivateRedis]) -> PrivateRedis:
    return make_redis_server()


async def test_a_refresh_costs_the_same_for_100k_tasks_as_for_25(
    server: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delayq.web.api, "NAMES_TTL", -1.0)  # read the names on every refresh
    small = await refresh_costs(server, 25)
    big = await refresh_costs(server, 100_000)
    for view in ("overview", "topic"):
        assert sum(small[view].values()) > 0
        assert big[view] == small[view], (view, big[view], small[view])
    # The timeline counts the slots (128 tasks each) of each window one by one up to
    # EXACT_SLOTS, then samples EXACT_SLOTS of them: per window (and for "due now") at most
    # 5 commands for its edges, a ZRANGE and a ZCARD per slot counted, and one ZCOUNT of
    # the tasks with a priority, however dense the hour.  100,000 tasks due within the hour
    # (~13 slots a window) come near that bound.
    bound = 61 * (5 + 2 * EXACT_SLOTS + 1) + 2
    assert sum(small["timeline"].values()) < sum(big["timeline"].values()) <= bound, big
