"""The dashboard's Abort button for a running task, in Debian's Chromium (Playwright), against
a real ``delayq web`` process, a real Redis and a real worker (see test_browser.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from playwright.async_api import Browser, expect

from delayq import Queue
from tests.fixtures_delayq import StartWorker
from tests.helpers import wait_for
from tests.web.server import WebServer
from tests.web.test_browser import (  # noqa: F401
    WAIT_MS,
    browser,
    open_dashboard,
    pytestmark,
    web,
)


async def test_a_running_task_is_aborted_from_its_page_after_a_confirmation(
    browser: Browser,  # noqa: F811
    web: WebServer,  # noqa: F811
    queue: Queue,
    start_worker: StartWorker,
) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    @queue.topic("reports", ttr=600, history=100)
    async def render(body: dict[str, int]) -> None:
        started.set()
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = await start_worker(queue)
    await queue.send("reports", {"n": 1}, task_id="r-1")
    await asyncio.wait_for(started.wait(), 10)

    page = await open_dashboard(browser, web)
    answers: list[str] = []
    accept = {"value": False}

    async def on_dialog(dialog: Any) -> None:
        answers.append(dialog.message)
        await (dialog.accept() if accept["value"] else dialog.dismiss())

    page.on("dialog", on_dialog)
    await page.goto(f"{web.url}/#/task/reports/r-1")
    await expect(page.locator("#state")).to_have_text("reserved", timeout=WAIT_MS)
    await expect(page.locator("#cancel")).to_have_count(0)  # a plain cancel refuses it
    # Dismissed: the handler runs on.
    await page.click("#abort")
    await wait_for(lambda: answers, 10, "the confirmation")
    assert "Abort task r-1 of reports?" in answers[-1]
    await expect(page.locator("#state")).to_have_text("reserved")
    assert not cancelled.is_set() and (await queue.get("reports", "r-1")) is not None
    # Accepted: the worker cancels the handler; the topic's history shows how it ended.
    accept["value"] = True
    await page.click("#abort")
    await expect(page.locator("#notice")).to_contain_text("Aborted", timeout=WAIT_MS)
    await asyncio.wait_for(cancelled.wait(), 10)
    await expect(page.locator("#outcome")).to_have_text("cancelled", timeout=WAIT_MS)
    await wait_for(lambda: worker.held == 0, 10, "the worker to let the task go")


async def test_a_reader_sees_no_abort_button(
    browser: Browser,  # noqa: F811
    web: WebServer,  # noqa: F811
    queue: Queue,
) -> None:
    await queue.send("reports", {"n": 1}, task_id="r-1")
    await queue.consumer.lease("reports")
    page = await open_dashboard(browser, web, scope="read")
    await page.goto(f"{web.url}/#/task/reports/r-1")
    await expect(page.locator("#state")).to_have_text("reserved", timeout=WAIT_MS)
    assert await page.locator("#abort, #cancel").count() == 0
