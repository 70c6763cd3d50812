"""The dashboard's Groups table in a real browser (Debian's Chromium driven by Playwright,
against a real ``delayq web`` process and Redis): shown on a grouped topic's page with
each group's counts, hidden on a topic without groups."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from delayq import Queue
from tests.test_group_stats import grouped, send
from tests.web.server import WebServer
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    CHROMIUM,
    WAIT_MS,
    browser,
    open_dashboard,
    shot,
    web,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]


async def test_a_grouped_topic_shows_its_groups(
    browser: Browser,  # noqa: F811  (the fixture imported above)
    web: WebServer,  # noqa: F811
    queue: Queue,
    tmp_path: Path,
) -> None:
    await grouped(queue, "tenant.jobs", max_running_per_group=2)
    await send(queue, "tenant.jobs", "acme", ready=5, delayed=2)
    await send(queue, "tenant.jobs", "globex", ready=1)
    await send(queue, "tenant.jobs", "initech", delayed=3)
    await queue.consumer.lease("tenant.jobs", limit=10)  # acme: 2 (its cap), globex: 1
    await queue.send_delayed("plain", {}, 60)

    page = await open_dashboard(browser, web, scope="read")
    await page.goto(web.url + "/#/topic/tenant.jobs")
    rows = page.locator("#groups tr")
    await expect(page.locator("#groups-section")).to_be_visible(timeout=WAIT_MS)
    await expect(rows).to_have_count(3, timeout=WAIT_MS)
    assert [await r.get_attribute("data-group") for r in await rows.all()] == [
        "acme", "globex", "initech",
    ]  # fmt: skip
    acme = page.locator('tr[data-group="acme"]')
    await expect(acme.locator('[data-count="ready"]')).to_have_text("3")
    await expect(acme.locator('[data-count="delayed"]')).to_have_text("2")
    await expect(acme.locator('[data-count="running"]')).to_have_text("2")
    await expect(acme.locator("[data-limited]")).to_have_attribute("data-limited", "yes")
    await expect(acme.locator(".badge.limited")).to_have_text("limited")
    globex = page.locator('tr[data-group="globex"]')
    await expect(globex.locator('[data-count="ready"]')).to_have_text("0")
    await expect(globex.locator('[data-count="running"]')).to_have_text("1")
    await expect(globex.locator("[data-limited]")).to_have_attribute("data-limited", "no")
    await expect(page.locator('tr[data-group="initech"] [data-count="delayed"]')).to_have_text("3")
    await shot(page, "web-groups.png", tmp_path)

    # A topic without groups has no Groups table.
    await page.goto(web.url + "/#/topic/plain")
    await expect(page.locator("h1")).to_have_text("plain", timeout=WAIT_MS)
    await expect(page.locator("#upcoming tr")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator("#groups-section")).to_be_hidden()
