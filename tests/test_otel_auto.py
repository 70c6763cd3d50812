"""``opentelemetry-instrument`` with no code change: a ``delayq worker`` and a uvicorn app
started under it trace their sends and attempts (the SDK's console exporter, parsed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from delayq import Queue
from delayq.otel import instrument
from delayq.testing import free_port
from tests.test_otel import tracing
from tests.web.conftest import TOKENS

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENTRY_POINT = "delayq.otel.instrumentor:DelayqInstrumentor"


def instrumented_env(tmp_path: Path, redis_url: str, queue_name: str) -> dict[str, str]:
    """The environment of a program run under ``opentelemetry-instrument``: spans printed
    as JSON on stdout, exported every 50 ms."""
    path = [str(ROOT)]
    group = entry_points(group="opentelemetry_instrumentor")
    if not any(ep.value == ENTRY_POINT for ep in group):
        # delayq's installed metadata predates the entry point (an editable install made
        # before it was declared): declare it as pyproject.toml does, in a dist of its own.
        declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        lines = [
            f"{k} = {v}" for k, v in declared["entry-points"]["opentelemetry_instrumentor"].items()
        ]
        info = tmp_path / "site" / "delayq_entry_points-0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: delayq-entry-points\nVersion: 0\n"
        )
        (info / "entry_points.txt").write_text(
            "[opentelemetry_instrumentor]\n" + "\n".join(lines) + "\n"
        )
        path.insert(0, str(tmp_path / "site"))
    return os.environ | {
        "PYTHONPATH": os.pathsep.join(path), "REDIS_URL": redis_url, "DELAYQ_QUEUE": queue_name,
        "OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none", "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": "delayq-test",
    }  # fmt: skip


def spans(text: str) -> Iterator[dict[str, Any]]:
    """The spans the console exporter printed (one JSON object each) in ``text``."""
    decoder, index = json.JSONDecoder(), text.find("{")
    while index != -1:
        try:
            span, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:  # a span still being written, or a log line's brace
            index = text.find("{", index + 1)
            continue
        if isinstance(span, dict) and "context" in span:
            yield span
        index = text.find("{", end)


async def wait_for_span(out: Path, process: subprocess.Popen[bytes], name: str) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            found = [s for s in spans(out.read_text()) if s["name"] == name]
            if found:
                return found[0]
            assert process.poll() is None, out.read_text()
            await asyncio.sleep(0.05)


def start(
    argv: list[str], env: dict[str, str], tmp_path: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    command = BIN / "opentelemetry-instrument"
    if not command.exists():
        pytest.skip("opentelemetry-instrument is not installed (pip install opentelemetry-distro)")
    out = tmp_path / "stdout"
    with out.open("wb") as stdout, (tmp_path / "stderr").open("wb") as stderr:
        process = subprocess.Popen(
            [str(command), *argv], cwd=ROOT, env=env, stdout=stdout, stderr=stderr
        )
    return process, out


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


async def test_a_worker_under_opentelemetry_instrument_traces_its_attempts(
    tmp_path: Path, redis_url: str, queue_name: str, queue: Queue
) -> None:
    env = instrumented_env(tmp_path, redis_url, queue_name)
    argv = [sys.executable, "-m", "delayq", "worker", "tests.apps.counting:queue"]
    process, out = start(argv, env, tmp_path)
    try:
        provider, exporter = tracing()
        instrument(queue, tracer_provider=provider)  # the sender: this test's process
        task_id = await queue.send("count", {})
        [send] = exporter.get_finished_spans()
        process_span = await wait_for_span(out, process, "process count")
    finally:
        stop(process)
    assert process.returncode == 0, (tmp_path / "stderr").read_text()
    assert process_span["kind"] == "SpanKind.CONSUMER"
    assert process_span["context"]["trace_id"] == f"0x{send.context.trace_id:032x}"
    assert process_span["parent_id"] == f"0x{send.context.span_id:016x}"
    attributes = process_span["attributes"]
    assert attributes["messaging.message.id"] == task_id
    assert attributes["delayq.outcome"] == "acked"
    assert attributes["server.port"] == queue.redis.connection_pool.connection_kwargs["port"]


def call(url: str, body: object, token: str) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


async def test_uvicorn_under_opentelemetry_instrument_traces_http_sends_and_leases(
    tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    env = instrumented_env(tmp_path, redis_url, queue_name)
    port = free_port()
    argv = [str(BIN / "uvicorn"), "tests.apps.http:app", "--port", str(port), "--no-access-log"]
    process, out = start(argv, env, tmp_path)
    base = f"http://127.0.0.1:{port}/api"
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    sent = await asyncio.to_thread(
                        call, f"{base}/topics/count/tasks", {"body": {}}, TOKENS["produce"]
                    )
                    break
                except OSError:
                    assert process.poll() is None, (tmp_path / "stderr").read_text()
                    await asyncio.sleep(0.1)
        leased = await asyncio.to_thread(
            call, f"{base}/topics/count/reserve", {}, TOKENS["consume"]
        )
        [task] = leased["tasks"]
        await asyncio.to_thread(
            call, f"{base}/leases/{task['lease_token']}/ack", {}, TOKENS["consume"]
        )
        send = await wait_for_span(out, process, "send count")
        consumed = await wait_for_span(out, process, "process count")
    finally:
        stop(process)
    assert send["kind"] == "SpanKind.PRODUCER"
    assert send["attributes"]["messaging.message.id"] == sent["id"] == task["id"]
    assert consumed["parent_id"] == send["context"]["span_id"]
    assert consumed["attributes"]["delayq.outcome"] == "acked"
