"""``delayq web`` on a real local Redis Cluster (``--url ... --cluster``) and through
Sentinel (``--sentinel ... --service ...``): the API and the dashboard's reads, over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from delayq import Queue
from tests.redis_cluster import SentinelGroup
from tests.web.conftest import TOKENS
from tests.web.server import WebServer

TOPICS = [f"t{i}" for i in range(6)]


def call(web: WebServer, method: str, path: str, body: Any = None, scope: str = "admin") -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(web.url + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {TOKENS[scope]}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


async def test_delayq_web_serves_a_cluster(cluster: Any, queue_name: str, tmp_path: Path) -> None:
    where = ["--url", cluster.url, "--cluster", "--name", queue_name]
    with WebServer(cluster.url, queue_name, tmp_path, where=where) as web:
        for topic in TOPICS:  # topics on every master
            sent = call(web, "POST", f"/api/topics/{topic}/tasks",
                        {"body": {"t": topic}, "task_id": "a", "headers": {"k": topic}})  # fmt: skip
            assert sent["outcome"] == "created"
            call(web, "POST", f"/api/topics/{topic}/tasks", {"body": 2, "delay": 60})
        stats = call(web, "GET", "/api/stats", scope="read")
        assert {t["name"]: (t["ready"], t["delayed"]) for t in stats["topics"]} == {
            topic: (1, 1) for topic in TOPICS
        }
        assert all(t["throughput"] == 0 for t in stats["topics"])
        for topic in TOPICS:
            reply = call(web, "POST", f"/api/topics/{topic}/reserve", {"wait": 5})
            [task] = reply["tasks"]
            assert (task["id"], task["headers"]) == ("a", {"k": topic})
            call(web, "POST", f"/api/leases/{task['lease_token']}/ack")
            page = call(web, "GET", f"/api/topics/{topic}/upcoming", scope="read")
            assert len(page["tasks"]) == 1
            for path in ("timeline", "activity", "history", "dead"):
                call(web, "GET", f"/api/topics/{topic}/{path}", scope="read")
            try:
                call(web, "GET", f"/api/topics/{topic}/tasks/a", scope="read")
                raise AssertionError("an acked task of a topic without history is not found")
            except urllib.error.HTTPError as exc:
                assert exc.code == 404
    queue = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    try:
        assert sum(s.delayed for s in (await queue.stats()).values()) == len(TOPICS)
    finally:
        await queue.close()


async def test_delayq_web_through_sentinel(queue_name: str, tmp_path: Path) -> None:
    with SentinelGroup() as group:
        where = ",".join(f"{h}:{p}" for h, p in group.addresses)
        args = ["--sentinel", where, "--service", group.service, "--name", queue_name]
        with WebServer("unused", queue_name, tmp_path, where=args) as web:
            call(web, "POST", "/api/topics/t0/tasks", {"body": 1, "task_id": "s"})
            assert call(web, "GET", "/api/topics/t0/tasks/s", scope="read")["state"] == "ready"
            stats = call(web, "GET", "/api/stats", scope="read")
            assert [t["name"] for t in stats["topics"]] == ["t0"]
