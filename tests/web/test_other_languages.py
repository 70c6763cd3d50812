"""The HTTP API from another language: examples/http_consumer.mjs (Node's fetch) against a
real ``delayq web`` process, and the curl session of docs/web.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from delayq import Queue
from delayq.testing import PrivateRedis
from tests.web.conftest import TOKENS
from tests.web.server import ROOT, WebServer

NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed (the Node.js example needs it)")
async def test_the_node_consumer_acks_and_nacks(
    queue: Queue, redis_server: PrivateRedis, tmp_path: Path
) -> None:
    ok = [await queue.send("emails", {"to": f"user{n}@example.com"}) for n in range(3)]
    bad = await queue.send("emails", {"fail": True}, max_attempts=1)
    with WebServer(redis_server.url, queue.name, tmp_path) as web:
        done = subprocess.run(
            [str(NODE), str(ROOT / "examples" / "http_consumer.mjs"), "emails"],
            env=os.environ | {"DELAYQ_URL": web.url, "DELAYQ_TOKEN": TOKENS["consume"],
                              "DELAYQ_MAX_TASKS": "4"},
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(line["done"] for line in lines if "done" in line) == sorted(ok)
    assert [line["failed"] for line in lines if "failed" in line] == [bad]
    for task_id in ok:
        assert await queue.get("emails", task_id) is None
    dead = await queue.get("emails", bad)
    assert dead is not None and dead.state == "dead"
    assert dead.last_error == f"Error: cannot handle {bad}"
