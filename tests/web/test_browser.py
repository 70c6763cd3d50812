"""The dashboard in a real browser: Debian's Chromium driven by Playwright, against a real
``delayq web`` process (uvicorn) and a real Redis, with a real worker.

Skipped, saying why, where /usr/bin/chromium is missing (``scripts/_env.sh`` installs
Debian's ``chromium`` package when it runs as root).  No browser is ever downloaded.
``DELAYQ_WEB_SCREENSHOTS=DIR`` also saves the screenshots there (docs/ holds the ones
docs/web.md shows).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from delayq import Queue
from delayq.testing import PrivateRedis
from tests.fixtures_delayq import StartWorker
from tests.helpers import expire_lease
from tests.web.conftest import TOKENS
from tests.web.server import WebServer

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
SCREENSHOTS = os.environ.get("DELAYQ_WEB_SCREENSHOTS")
WAIT_MS = 20_000  # generous: the box is shared; every wait ends as soon as its condition holds

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="browser tests need Debian's chromium at /usr/bin/chromium "
        "(apt-get install chromium; scripts/_env.sh does it as root)",
    ),
]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def web(queue: Queue, redis_server: PrivateRedis, tmp_path: Path) -> Iterator[WebServer]:
    with WebServer(redis_server.url, queue.name, tmp_path) as server:
        yield server


async def open_dashboard(
    browser: Browser, web: WebServer, scope: str = "admin", width: int = 1280
) -> Page:
    page = await browser.new_page(viewport={"width": width, "height": 900})
    await page.goto(web.url + "/")
    await expect(page.locator("#notice")).to_contain_text("Sign in", timeout=WAIT_MS)
    await page.fill("#token", TOKENS[scope])
    await page.click("#sign-in")
    await expect(page.locator("#who")).to_contain_text("signed in", timeout=WAIT_MS)
    return page


async def shot(page: Page, name: str, tmp_path: Path) -> None:
    await page.screenshot(path=str(tmp_path / name), full_page=True)
    if SCREENSHOTS:
        await page.screenshot(path=str(Path(SCREENSHOTS) / name), full_page=True)


async def test_an_operator_follows_a_task_to_done_and_replays_a_dead_letter(
    browser: Browser, web: WebServer, queue: Queue, start_worker: StartWorker, tmp_path: Path
) -> None:
    ran: list[str] = []

    @queue.topic("emails", history=1000)
    async def send_email(body: dict[str, str]) -> None:
        ran.append(body["to"])

    for minute in range(1, 60, 3):
        for n in range(minute % 7 + 1):
            await queue.send_delayed(
                "emails", {"to": f"u{minute}-{n}@example.com"}, delay=60 * minute
            )
    total = sum(minute % 7 + 1 for minute in range(1, 60, 3)) + 1
    soon = await queue.send_delayed(
        "emails", {"to": "soon@example.com"}, delay=5, task_id="welcome-42",
        headers={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
    )  # fmt: skip
    await seed_activity(queue, "emails")
    await queue.send_delayed("reports", {"day": "2026-11-24"}, delay=900)
    await queue.send_many("invoices.remind", [{"invoice": n} for n in range(3)])
    await queue.pause("invoices.remind")  # so its tasks stay ready
    await queue.send_many(
        "digest.send", [{"user": n} for n in range(40)], delay=[n * 45 for n in range(40)]
    )
    dead_id = await queue.send("reports", {"day": "2026-11-23"}, task_id="report-2026-11-23")
    (leased,) = await queue.consumer.lease("reports")
    await queue.consumer.nack(
        leased.lease_token, dead=True, error="TimeoutError: warehouse did not answer"
    )

    page = await open_dashboard(browser, web)
    await expect(page.locator('tr[data-topic="emails"]')).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator('tr[data-topic="reports"] td').nth(4)).to_have_text("1")
    await expect(page.locator('[data-throughput="emails"]')).not_to_have_text("0")
    await expect(page.locator('[data-throughput="reports"]')).to_have_text("0")
    await shot(page, "web-overview.png", tmp_path)

    # Follow the topic: its counts, the timeline and the next tasks, the soonest first.
    await page.click('tr[data-topic="emails"] a')
    await page.wait_for_function(
        """total => ['delayed', 'ready'].reduce((sum, state) => sum + Number(
            document.querySelector(`[data-count="${state}"]`)?.textContent), 0) === total""",
        arg=total, timeout=WAIT_MS,
    )  # fmt: skip
    assert await page.locator("#timeline rect").count() == 61
    # The last hour's activity: a throughput bar per window, lateness p50 and p99 lines.
    await expect(page.locator("#throughput rect")).to_have_count(SEEDED, timeout=WAIT_MS)
    await expect(page.locator("#lateness path.line")).to_have_count(2)
    await expect(page.locator("#activity-note")).to_contain_text("attempts finished")
    await expect(page.locator("#upcoming tr").first).to_have_attribute("data-task", soon)
    await shot(page, "web-topic.png", tmp_path)

    # The task about to fire: waiting (delayed, or ready by now), then done once a worker ran it.
    await page.click(f'#upcoming a:text-is("{soon}")')
    await expect(page.locator("#state")).to_have_text(re.compile("delayed|ready"), timeout=WAIT_MS)
    await expect(page.locator("#body")).to_contain_text("soon@example.com")
    await expect(page.locator("#headers")).to_contain_text("traceparent")
    await start_worker(queue)
    await expect(page.locator("#state")).to_have_text("done", timeout=WAIT_MS)
    assert "soon@example.com" in ran
    # Its topic keeps history: the page shows the record of how it finished.
    await expect(page.locator("#outcome")).to_have_text("acked", timeout=WAIT_MS)
    await expect(page.locator("#headers")).to_contain_text("00-4bf92f35")
    await expect(page.locator("#body")).to_contain_text("soon@example.com")
    await shot(page, "web-task.png", tmp_path)

    # Replay the dead letter by clicking.
    await page.goto(f"{web.url}/#/topic/reports")
    row = page.locator(f'tr[data-dead="{dead_id}"]')
    await expect(row).to_contain_text("warehouse did not answer", timeout=WAIT_MS)
    await page.click(f'[data-replay="{dead_id}"]')
    await expect(row).to_have_count(0, timeout=WAIT_MS)
    await expect(page.locator("#notice")).to_contain_text("Replayed")
    info = await queue.get("reports", dead_id)
    assert info is not None and info.state == "ready"

    # Look a task up by id.
    await page.fill("#lookup-topic", "reports")
    await page.fill("#lookup-id", dead_id)
    await page.click("#lookup button")
    await expect(page.locator("#state")).to_have_text("ready", timeout=WAIT_MS)
    await expect(page.locator("#body")).to_contain_text("2026-11-23")


SEEDED = 300
"""Windows of activity :func:`seed_activity` writes (of the hour's 360)."""


async def seed_activity(queue: Queue, topic: str) -> None:
    """An hour of a topic's activity, as workers would have added it (``rollup.lua``'s
    ring: ``<slot>:w`` names the window, then its counts): the charts need an hour, which a
    test cannot wait for.  The last :data:`SEEDED` windows before the current one, a busy
    quarter-hour in the middle."""
    now = int((await queue.redis.time())[0]) // 10
    fields: dict[str, int] = {}
    for window in range(now - SEEDED, now):
        age = now - window
        busy = 3 if 120 <= age < 210 else 1
        acked = 40 * busy + window % 7 * 3
        slow = 6 if busy > 1 else 0  # starts in the 200 ms and 1 s buckets
        slot = window % 360
        fields |= {
            f"{slot}:w": window, f"{slot}:acked": acked, f"{slot}:retried": window % 3,
            f"{slot}:dead": int(window % 29 == 0), f"{slot}:late_n": acked,
            f"{slot}:late_ms": acked * 3, f"{slot}:l1": acked - 2 - slow,
            f"{slot}:l4": 2, f"{slot}:l7": slow // 2, f"{slot}:l9": slow - slow // 2,
        }  # fmt: skip
    await queue.redis.hset(queue.keys(topic).rollup, mapping=fields)


async def test_a_read_token_sees_no_buttons_and_a_narrow_window_fits(
    browser: Browser, web: WebServer, queue: Queue, tmp_path: Path
) -> None:
    await queue.send_delayed("a-topic-with-a-rather-long-name.for-narrow-screens", {}, delay=60)
    task_id = await queue.send("dead.things", {"x": 1})
    (leased,) = await queue.consumer.lease("dead.things")
    await queue.consumer.nack(leased.lease_token, dead=True, error="ValueError: " + "long " * 40)
    page = await open_dashboard(browser, web, scope="read", width=380)
    await expect(page.locator('tr[data-topic="dead.things"]')).to_be_visible(timeout=WAIT_MS)
    assert await fits(page)
    await page.click('tr[data-topic="dead.things"] a')
    await expect(page.locator(f'tr[data-dead="{task_id}"]')).to_be_visible(timeout=WAIT_MS)
    assert await page.locator("[data-replay], [data-cancel], #pause").count() == 0
    assert await fits(page)
    await page.goto(f"{web.url}/#/task/dead.things/{task_id}")
    await expect(page.locator("#state")).to_have_text("dead", timeout=WAIT_MS)
    assert await page.locator("#replay, #cancel").count() == 0
    assert await fits(page)


async def fits(page: Page) -> bool:
    """Nothing wider than the window (tables scroll inside their own box)."""
    width: int = await page.evaluate("document.documentElement.scrollWidth")
    return width <= (page.viewport_size or {"width": 0})["width"]


async def test_ten_thousand_topics_are_paged(
    browser: Browser, web: WebServer, queue: Queue
) -> None:
    await queue.announce(f"topic-{n:05d}" for n in range(10_000))
    page = await open_dashboard(browser, web, scope="read")
    await expect(page.locator("#page-info")).to_have_text("1\u201350 of 10000", timeout=WAIT_MS)
    assert await page.locator("#topics tr").count() == 50
    await page.click("text=Next \u203a")
    await expect(page.locator("#page-info")).to_have_text("51\u2013100 of 10000", timeout=WAIT_MS)
    await page.fill("#prefix", "topic-0999")
    await expect(page.locator("#page-info")).to_have_text("1\u201310 of 10", timeout=WAIT_MS)
    await asyncio.sleep(0)


async def test_an_operator_reads_history_and_acts_on_tasks_with_confirmation(
    browser: Browser, web: WebServer, queue: Queue, start_worker: StartWorker
) -> None:
    @queue.topic("orders", history=100)
    async def handle(body: object) -> None: ...

    for n in range(3):
        await queue.send_delayed("orders", {"n": n}, 600, task_id=f"gone-{n}")
        assert await queue.cancel("orders", f"gone-{n}")
    for n in range(4):
        await queue.send("orders", {"n": n}, task_id=f"bad-{n}")
    for leased in await queue.consumer.lease("orders", limit=4):
        await queue.consumer.nack(leased.lease_token, dead=True, error="ValueError: no")
    await queue.send_delayed("orders", {"n": 9}, 3600, task_id="later")

    page = await open_dashboard(browser, web)
    answers: list[str] = []
    accept = {"value": False}

    async def on_dialog(dialog: Any) -> None:
        answers.append(dialog.message)
        await (dialog.accept() if accept["value"] else dialog.dismiss())

    page.on("dialog", on_dialog)
    await page.goto(f"{web.url}/#/topic/orders")
    # History: newest first, filtered by outcome.
    await expect(page.locator("#history tr")).to_have_count(7, timeout=WAIT_MS)
    await expect(page.locator("#history tr").first).to_have_attribute("data-history", "bad-3")
    await page.select_option("#history-outcome", "cancelled")
    await expect(page.locator("#history tr")).to_have_count(3, timeout=WAIT_MS)
    await expect(page.locator("#history tr").first).to_contain_text("cancelled")
    await shot(page, "web-history.png", tmp_path=Path(web.log).parent)

    # Delete all, dismissed: nothing changes; Replay all, accepted: every letter is ready.
    await page.click("#delete-all")
    await expect(page.locator("#dead tr[data-dead]")).to_have_count(4, timeout=WAIT_MS)
    assert "Delete all 4 dead letters" in answers[-1]
    accept["value"] = True
    await page.click("#replay-all")
    await expect(page.locator("#notice")).to_contain_text(
        "Replayed 4 dead letters", timeout=WAIT_MS
    )
    assert (await queue.stats(["orders"]))["orders"].dead == 0
    # A worker records the topic's history setting for the web process's cancels; paused,
    # it leases nothing.
    await queue.pause("orders")
    await start_worker(queue)

    # Find with only an id, on the topic's page.
    await page.fill("#lookup-id", "later")
    await page.click("#lookup button")
    await expect(page.locator("#state")).to_have_text("delayed", timeout=WAIT_MS)
    # Run now, then reschedule an hour out by a delay.
    await page.click("#run-now")
    await expect(page.locator("#state")).to_have_text("ready", timeout=WAIT_MS)
    await page.fill("#reschedule-delay", "3600")
    await page.click("#reschedule")
    await expect(page.locator("#state")).to_have_text("delayed", timeout=WAIT_MS)
    info = await queue.get("orders", "later")
    assert info is not None and info.due_at is not None
    # Cancel asks first; dismissed, the task stays.
    accept["value"] = False
    await page.click("#cancel")
    await expect(page.locator("#state")).to_have_text("delayed")
    assert "Cancel task later" in answers[-1]
    assert await queue.get("orders", "later") is not None
    accept["value"] = True
    await page.click("#cancel")
    # Its topic keeps history: the page shows how it finished.
    await expect(page.locator("#outcome")).to_have_text("cancelled", timeout=WAIT_MS)

    # An unknown id is not found, never done; Find with no topic says what is missing.
    await page.goto(f"{web.url}/#/task/orders/no-such-id")
    await expect(page.locator("#state")).to_have_text("not found", timeout=WAIT_MS)
    await page.goto(f"{web.url}/#/")
    await page.fill("#lookup-topic", "")
    await page.fill("#lookup-id", "later")
    await page.click("#lookup button")
    await expect(page.locator("#notice")).to_contain_text("give the task's topic too")
    assert (await page.request.get(f"{web.url}/favicon.ico")).ok


async def test_the_running_section_flags_an_expired_lease(
    browser: Browser, web: WebServer, queue: Queue
) -> None:
    for n in range(2):
        await queue.send("jobs", {"n": n}, task_id=f"job-{n}")
    assert len(await queue.consumer.lease("jobs", limit=2, ttr=300)) == 2
    await expire_lease(queue.redis, queue.keys("jobs"), "job-1")
    page = await open_dashboard(browser, web, scope="read")
    await page.goto(f"{web.url}/#/topic/jobs")
    await expect(page.locator("#running tr[data-running]")).to_have_count(2, timeout=WAIT_MS)
    expired = page.locator('tr[data-running="job-1"]')
    await expect(expired).to_contain_text("lease expired")
    await expect(page.locator('tr[data-running="job-0"]')).not_to_contain_text("expired")
    await expect(page.locator("#running tr").first).to_have_attribute("data-running", "job-1")


async def test_the_workers_page_and_the_no_consumer_badge(
    browser: Browser, web: WebServer, queue: Queue, start_worker: StartWorker
) -> None:
    await queue.send("nobody.home", {}, task_id="stuck")  # ready, and nothing consumes it

    @queue.topic("served")
    async def handle(body: object) -> None: ...

    worker = await start_worker(queue)
    page = await open_dashboard(browser, web, scope="read")
    badge = page.locator('[data-no-consumer="nobody.home"]')
    await expect(badge).to_have_text("no consumer", timeout=WAIT_MS)
    assert await page.locator('[data-no-consumer="served"]').count() == 0
    await page.click('tr[data-topic="nobody.home"] a')
    await expect(page.locator('#controls [data-no-consumer="nobody.home"]')).to_be_visible(
        timeout=WAIT_MS
    )
    # The header links to the Workers page from every page; it refreshes live.
    await page.click("#nav-workers")
    row = page.locator('#workers tr[data-kind="worker"]')
    await expect(row).to_have_count(1, timeout=WAIT_MS)
    await expect(row).to_contain_text("served")
    await expect(row.locator("td").nth(1)).to_have_text(str(os.getpid()))
    await expect(page.locator('#workers tr[data-kind="http"]')).to_have_count(1)  # delayq web
    await expect(page.locator("#workers-info")).to_contain_text("1 worker, 1 HTTP server")
    worker.stop()  # a clean stop leaves the registry at once
    await expect(row).to_have_count(0, timeout=WAIT_MS)
    await expect(page.locator("#workers-info")).to_contain_text("No live worker")
