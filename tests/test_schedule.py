"""Queue.upcoming and Queue.timeline: reading the schedule by rank, never all of it."""

from __future__ import annotations

import pytest
import redis.asyncio

from delayq import InvalidInputError, Queue
from tests.helpers import reserve, schedule_entries


async def all_pages(queue: Queue, topic: str, limit: int) -> list[str]:
    ids: list[str] = []
    cursor = None
    for _ in range(10_000):
        page = await queue.upcoming(topic, limit=limit, cursor=cursor)
        assert len(page.tasks) <= limit
        ids += [t.id for t in page.tasks]
        cursor = page.cursor
        if cursor is None:
            return ids
    raise AssertionError("pagination did not end")


async def test_an_empty_topic_has_nothing_upcoming(queue: Queue) -> None:
    page = await queue.upcoming("t")
    assert (page.tasks, page.cursor) == ([], None)


async def test_pages_walk_the_schedule_in_order_exactly_once(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    # Many ties (send_many gives a batch one due time) and several slots.
    await queue.send_many("t", [{}] * 300, delay=60)
    await queue.send_many("t", [{}] * 200, delay=[i % 7 for i in range(200)])
    await queue.send_many("t", [{}] * 150, delay=30)
    expected = await schedule_entries(redis_client, queue.keys("t"))
    order = sorted(expected, key=lambda i: expected[i])
    for limit in (1, 7, 128, 500):
        ids = await all_pages(queue, "t", limit)
        assert sorted(ids) == sorted(order)
        assert len(ids) == len(set(ids))
        dues = [expected[i] for i in ids]
        assert dues == sorted(dues)


async def test_upcoming_tells_ready_from_delayed(queue: Queue) -> None:
    ready = await queue.send("t", {})
    later = await queue.send_delayed("t", {}, delay=3600)
    page = await queue.upcoming("t")
    assert [(t.id, t.state, t.attempts) for t in page.tasks] == [
        (ready, "ready", 0),
        (later, "delayed", 0),
    ]
    assert page.tasks[1].enqueued_at is not None
    assert page.tasks[1].due_at > page.tasks[1].enqueued_at


async def test_a_cursor_whose_task_left_resumes_after_its_due_time(queue: Queue) -> None:
    ids = [await queue.send_delayed("t", {}, delay=10 + i) for i in range(5)]
    page = await queue.upcoming("t", limit=2)
    assert [t.id for t in page.tasks] == ids[:2]
    assert await queue.cancel("t", ids[1])
    assert page.cursor is not None
    rest = await queue.upcoming("t", limit=10, cursor=page.cursor)
    assert [t.id for t in rest.tasks] == ids[2:]
    assert rest.cursor is None


async def test_leased_tasks_are_not_upcoming(queue: Queue) -> None:
    await queue.send("t", {})
    later = await queue.send_delayed("t", {}, delay=60)
    await reserve(queue, "t")
    assert [t.id for t in (await queue.upcoming("t")).tasks] == [later]


@pytest.mark.parametrize(
    "kwargs",
    [{"limit": 0}, {"limit": 501}, {"limit": 1.5}, {"cursor": "x"}, {"cursor": "12"},
     {"cursor": "12:"}, {"cursor": "-1:a"}, {"cursor": "1:a\x00"}],
)  # fmt: skip
async def test_bad_upcoming_arguments_are_refused(queue: Queue, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        await queue.upcoming("t", **kwargs)  # type: ignore[arg-type]


async def test_the_timeline_counts_each_window_exactly(queue: Queue) -> None:
    await queue.send_many("t", [{}] * 3)  # due now
    delays = [30] * 5 + [90] * 7 + [150] * 2 + [100_000]
    await queue.send_many("t", [{}] * len(delays), delay=delays)
    timeline = await queue.timeline("t", window=60, windows=3)
    assert (timeline.due, timeline.due_estimated) == (3, False)
    assert [w.count for w in timeline.windows] == [5, 7, 2]
    assert not any(w.estimated for w in timeline.windows)
    assert timeline.windows[0].start == timeline.now
    assert (timeline.windows[2].end - timeline.now).total_seconds() == 180


async def test_the_timeline_is_exact_across_many_slots(queue: Queue) -> None:
    # 1,500 tasks 0.1 s apart: windows of 50 s hold ~500 tasks, 4 to 8 slots each.
    delays = [i * 0.1 + 1 for i in range(1500)]
    await queue.send_many("t", [{}] * len(delays), delay=delays)
    timeline = await queue.timeline("t", window=50, windows=4)
    counts = [w.count for w in timeline.windows]
    assert sum(counts) == 1500
    assert not any(w.estimated for w in timeline.windows)
    assert all(abs(c - 500) <= 12 for c in counts[1:3])  # the send took some ms


async def test_a_huge_window_is_estimated_and_flagged(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    delays = [60 + i * 0.01 for i in range(6000)]
    await queue.send_many("t", [{}] * len(delays), delay=delays)
    assert await redis_client.zcard(queue.keys("t").wheel) > 18
    timeline = await queue.timeline("t", window=3600, windows=1)
    (window,) = timeline.windows
    assert window.estimated
    assert 6000 * 0.6 < window.count < 6000 * 1.4


@pytest.mark.parametrize(
    "kwargs",
    [{"window": 0}, {"window": -1}, {"windows": 0}, {"windows": 241}, {"windows": 2.0},
     {"window": 86_400 * 200, "windows": 2}],
)  # fmt: skip
async def test_bad_timeline_arguments_are_refused(queue: Queue, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        await queue.timeline("t", **kwargs)  # type: ignore[arg-type]


async def test_stats_of_some_topics(queue: Queue) -> None:
    await queue.send("a", {})
    await queue.send_delayed("b", {}, delay=60)
    assert await queue.topic_names() == ["a", "b"]
    assert set(await queue.stats(["b"])) == {"b"}
    assert (await queue.stats(["b", "nothing"]))["b"].delayed == 1
