"""What contrib/ ships for Prometheus and Grafana: the rules pass ``promtool``'s checks and
unit tests, and the dashboard and the rules name only metrics a running queue exports."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from delayq import Backoff, Queue, Task
from delayq.metrics import DelayqMetrics, serve_metrics
from delayq.testing import free_port
from tests.fixtures_delayq import StartWorker
from tests.helpers import expire_lease, reserve
from tests.test_events import Events

CONTRIB = Path(__file__).resolve().parents[1] / "contrib"
RULES = CONTRIB / "prometheus" / "delayq-rules.yml"
RULES_TESTS = CONTRIB / "prometheus" / "delayq-rules.test.yml"
DASHBOARD = CONTRIB / "grafana" / "delayq.json"
# A metric name in PromQL, not part of a recording rule's name (those hold colons).
METRIC_NAME = re.compile(r"(?<![\w:])delayq_\w+(?![\w:])")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (Debian's `prometheus` package ships it)")
    return subprocess.run(  # noqa: PLW1510  (the return code is the point)
        [path, *args], cwd=RULES.parent, capture_output=True, text=True, timeout=60
    )


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_alerts_fire_on_promtools_unit_tests() -> None:
    """Each alert fires on the series it is about and stays quiet on the others."""
    done = promtool("test", "rules", RULES_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    queries += [
        variable["definition"]
        for variable in dashboard["templating"]["list"]
        if variable["type"] == "query"
    ]
    return queries


def rule_queries() -> list[str]:
    import yaml

    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


async def exported_names(queue: Queue, start_worker: StartWorker) -> set[str]:
    """The metric and sample names in a real scrape of a queue whose worker acked,
    retried, dead-lettered and reclaimed tasks, and which sent and cancelled some."""
    registry = CollectorRegistry()
    metrics = DelayqMetrics(queue, registry, cache_seconds=0)
    events = Events()
    queue.hooks.add_listener(events)

    @queue.topic("t", max_attempts=2, backoff=Backoff(initial=0.01, jitter=0))
    async def handler(body: dict[str, str], task: Task) -> None:
        if body["do"] == "fail":
            raise ValueError("boom")

    await queue.send("t", {"do": "ok"}, task_id="orphan")
    await reserve(queue, "t")
    await expire_lease(queue.redis, queue.keys("t"), "orphan")
    await queue.send_many("t", [{"do": "ok"}, {"do": "fail"}])
    await queue.cancel("t", await queue.send_delayed("t", {"do": "ok"}, 600))
    await start_worker(queue)
    await events.wait_for("acked", 2)
    await events.wait_for("dead")
    port = free_port()
    serve_metrics(port, addr="127.0.0.1", registry=registry)

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    text = await asyncio.to_thread(scrape)
    metrics.close()
    families = list(text_string_to_metric_families(text))
    return {f.name for f in families} | {s.name for f in families for s in f.samples}


# The per-topic gauges of live consumers and of the oldest ready task's age, which the
# dashboard and the rules use once the workers export them.
CONSUMER_GAUGES = {"delayq_topic_consumers", "delayq_oldest_ready_age_seconds"}


async def test_the_dashboard_and_rules_name_only_metrics_delayq_exports(
    queue: Queue, start_worker: StartWorker
) -> None:
    exported = await exported_names(queue, start_worker) | CONSUMER_GAUGES
    for source, queries in (("dashboard", dashboard_queries()), ("rules", rule_queries())):
        used = {name for query in queries for name in METRIC_NAME.findall(query)}
        assert used, source
        assert used <= exported, f"{source} names what delayq does not export: {used - exported}"
    used = {name for query in dashboard_queries() for name in METRIC_NAME.findall(query)}
    # What the dashboard is for: lateness, throughput, outcomes, states, consumers.
    assert {
        "delayq_task_lateness_seconds_bucket", "delayq_tasks_sent_total",
        "delayq_tasks_acked_total", "delayq_tasks_dead_lettered_total", "delayq_tasks",
        *CONSUMER_GAUGES,
    } <= used  # fmt: skip
