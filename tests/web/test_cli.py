"""``delayq web`` as a user starts it: a real uvicorn process, the app form and the
--url form, a token file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from delayq.testing import PrivateRedis
from tests.web.conftest import TOKENS
from tests.web.server import ROOT, WebServer


def call(
    url: str, method: str = "GET", body: object = None, token: str | None = None
) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_app_form_shares_the_topics_options(
    redis_server: PrivateRedis, queue_name: str, tmp_path: Path
) -> None:
    with WebServer(redis_server.url, queue_name, tmp_path, app="tests.apps.counting:queue") as web:
        status, sent = call(
            f"{web.url}/api/topics/fail/tasks", "POST", {"body": {}}, TOKENS["produce"]
        )
        assert status == 201, sent
        status, leased = call(f"{web.url}/api/topics/fail/reserve", "POST", {}, TOKENS["consume"])
        assert status == 200, leased
        assert isinstance(leased, dict)
        (task,) = leased["tasks"]
        assert task["max_attempts"] == 2  # the registered handler's, not the default 5
        status, _ = call(f"{web.url}/api/stats", token=TOKENS["read"])
        assert status == 200
        assert call(f"{web.url}/api/stats")[0] == 401
        status, listed = call(f"{web.url}/api/workers", token=TOKENS["read"])
        assert status == 200 and isinstance(listed, dict)
        (serving,) = listed["workers"]  # delayq web itself, as it serves HTTP consumers
        assert (serving["kind"], serving["pid"]) == ("http", web.process.pid)
        assert "fail" in serving["topics"]
        assert web.stop() == 0
    client = redis_server.client()
    assert not client.zcard(f"delayq:{{{queue_name}}}:workers")  # a clean stop left the list
    assert "Traceback" not in web.log.read_text()


def test_a_missing_token_file_is_a_clear_error(tmp_path: Path, redis_server: PrivateRedis) -> None:
    done = subprocess.run(  # noqa: PLW1510  (the return code is the point)
        [sys.executable, "-m", "delayq", "web", "--url", redis_server.url,
         "--token-file", str(tmp_path / "nope")],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 2
    assert "cannot read token file" in done.stderr


def test_sigterm_ends_long_polls_and_stops_cleanly(
    make_redis_server: Callable[..., PrivateRedis], queue_name: str, tmp_path: Path
) -> None:
    server = make_redis_server()
    redis = server.client()
    with WebServer(server.url, queue_name, tmp_path) as web, ThreadPoolExecutor(1) as pool:
        url = f"{web.url}/api/topics/idle/reserve"
        poll = pool.submit(call, url, "POST", {"wait": 30}, TOKENS["consume"])
        deadline = time.monotonic() + 10
        while not redis.execute_command("PUBSUB", "NUMPAT") and time.monotonic() < deadline:
            time.sleep(0.01)  # until the long poll listens for wake-ups
        assert redis.execute_command("PUBSUB", "NUMPAT"), "the long poll never started"
        assert web.stop() == 0
        # Answered, not cut by uvicorn at the end of its graceful stop (which logs ERROR).
        assert poll.result(timeout=30) == (200, {"tasks": []})
    log = web.log.read_text()
    assert "Traceback" not in log, log
    assert " ERROR " not in log, log


def test_sigterm_after_serving_the_dashboard_logs_no_error(
    redis_server: PrivateRedis, queue_name: str, tmp_path: Path
) -> None:
    """The static files are read in a worker thread, which is still alive at the stop: it
    runs no handler, so the exit does not count it as one."""
    with WebServer(redis_server.url, queue_name, tmp_path) as web:
        for path in ("/", "/static/app.js"):
            with urllib.request.urlopen(web.url + path, timeout=10) as response:
                assert response.status == 200 and response.read()
        assert web.stop() == 0
    log = web.log.read_text()
    assert " ERROR " not in log, log
    assert "Traceback" not in log, log


def test_strict_topics_refuses_a_topic_the_app_does_not_register(
    redis_server: PrivateRedis, queue_name: str, tmp_path: Path
) -> None:
    where = ["tests.apps.counting:queue", "--strict-topics"]
    with WebServer(redis_server.url, queue_name, tmp_path, where=where) as web:
        status, refused = call(
            f"{web.url}/api/topics/fial/tasks", "POST", {"body": {}}, TOKENS["produce"]
        )
        assert (status, refused["error"]) == (404, "unknown_topic"), refused  # type: ignore[index]
        assert "did you mean 'fail'" in refused["message"]  # type: ignore[index]
        status, sent = call(
            f"{web.url}/api/topics/fail/tasks", "POST", {"body": {}}, TOKENS["produce"]
        )
        assert status == 201, sent
        assert web.stop() == 0


def test_strict_topics_without_an_app_is_refused(redis_server: PrivateRedis) -> None:
    done = subprocess.run(  # noqa: PLW1510  (the return code is the point)
        [sys.executable, "-m", "delayq", "web", "--url", redis_server.url, "--strict-topics"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--strict-topics needs an app" in done.stderr
