"""The HTTP API's two throughput targets, measured beside the Python API in one run.

1. **send**: ``POST /api/topics/{t}/tasks`` one task per request from a local HTTP client,
   against ``queue.send_delayed`` awaited one by one in the same rounds (the enqueue
   scenario's call).  The HTTP client sends over 1 keep-alive connection one request at
   a time, and over ``--connections`` (50) connections at once; each is reported as a
   fraction of the Python rate of the same round.
2. **reserve -> ack**: ``--drain`` ready tasks, one HTTP consumer with ``--connections``
   connections, each looping ``POST .../reserve {"max": --batch}`` then one
   ``POST /api/leases/{token}/ack`` per task: tasks acked per second.
3. with ``--floor``: the same one-by-one sends to a server that answers 201 and does
   nothing else (``benchmarks/web_floor.py``): what HTTP alone costs per request here;
   and to one that also runs one ``send.lua`` per request through a queue's script lane,
   and nothing else (``web_floor.py --redis``): what HTTP plus a send's Redis round trip
   cost, the most an HTTP send one request at a time can reach here.
4. with ``--million``: what the dashboard's topic page asks of a topic of 1,000,000
   delayed tasks (the topic row, a 60-window timeline, 20 upcoming tasks, 20 dead
   letters), as request latency through the API.

Everything runs on this machine: a private ``redis-server``, one ``delayq web`` process
(uvicorn, access log off), and this process as the client (a minimal HTTP/1.1 client on
asyncio streams, so that the client's own cost stays far below the server's).  Rounds
alternate which side goes first; medians are reported.

    .venv/bin/python -m benchmarks.web --rounds 5 [--floor] [--million]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import delayq
from benchmarks.common import emit, percentile
from delayq import Queue
from delayq.testing import PrivateRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token-0123456789abcdef"


class Http:
    """One keep-alive HTTP/1.1 connection: a request, then its whole response."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Http:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length) if length else b""

    def close(self) -> None:
        self.writer.close()


async def python_sends(queue: Queue, topic: str, n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        await queue.send_delayed(topic, {"i": i}, delay=3600)
    return n / (time.perf_counter() - started)


async def http_sends(port: int, topic: str, n: int, connections: int) -> float:
    conns = [await Http.open(port) for _ in range(connections)]
    bodies = [json.dumps({"body": {"i": i}, "delay": 3600}).encode() for i in range(n)]
    path = f"/api/topics/{topic}/tasks"
    next_index = 0

    async def loop(conn: Http) -> None:
        nonlocal next_index
        while next_index < n:
            body = bodies[next_index]
            next_index += 1
            status, reply = await conn.call("POST", path, body)
            assert status == 201, reply

    started = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in conns))
    rate = n / (time.perf_counter() - started)
    for c in conns:
        c.close()
    return rate


async def http_drain(port: int, topic: str, n: int, connections: int, batch: int) -> float:
    conns = [await Http.open(port) for _ in range(connections)]
    acked = 0
    request = json.dumps({"max": batch}).encode()

    async def loop(conn: Http) -> None:
        nonlocal acked
        while acked < n:
            status, reply = await conn.call("POST", f"/api/topics/{topic}/reserve", request)
            assert status == 200, reply
            tasks = json.loads(reply)["tasks"]
            if not tasks:
                return
            for task in tasks:
                status, reply = await conn.call("POST", f"/api/leases/{task['lease_token']}/ack")
                assert status == 204, reply
                acked += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in conns))
    rate = acked / (time.perf_counter() - started)
    for c in conns:
        c.close()
    assert acked == n, (acked, n)
    return rate


async def topic_page(port: int, queue: Queue, size: int, samples: int) -> dict[str, Any]:
    """Latency of the topic page's four requests on a topic of ``size`` delayed tasks."""
    topic = "million"
    batch = 1000
    # Due times spread evenly over the next day, so that the day's hourly windows hold
    # ~42,000 tasks each (estimated) and the hour's minute windows ~700 (counted).
    for start in range(0, size, batch * 20):
        await asyncio.gather(*(
            queue.send_many(
                topic, [{"n": 1}] * batch,
                delay=[60 + (first + i) * 86_400 / size for i in range(batch)],
            )
            for first in range(start, min(size, start + batch * 20), batch)
        ))  # fmt: skip
    conn = await Http.open(port)
    paths = {
        "topic": f"/api/topics/{topic}",
        "timeline": f"/api/topics/{topic}/timeline?window=60&windows=60",
        "timeline_day": f"/api/topics/{topic}/timeline?window=3600&windows=24",
        "upcoming": f"/api/topics/{topic}/upcoming?limit=20",
        "dead": f"/api/topics/{topic}/dead?limit=20",
    }
    result: dict[str, Any] = {"page_tasks": (await queue.stats([topic]))[topic].delayed}
    for name, path in paths.items():
        times = []
        for _ in range(samples):
            before = time.perf_counter()
            status, reply = await conn.call("GET", path)
            times.append((time.perf_counter() - before) * 1000)
            assert status == 200, reply
        result[f"page_{name}_p50_ms"] = round(percentile(times, 50), 2)
        result[f"page_{name}_p99_ms"] = round(percentile(times, 99), 2)
    conn.close()
    return result


async def measure(
    args: argparse.Namespace, url: str, port: int, name: str, floors: tuple[int, int] | None
) -> dict[str, Any]:
    queue = Queue.from_url(url, name=name)
    rates: dict[str, list[float]] = {"python": [], "http_1": [], "http_many": [], "drain": []}
    if floors:
        rates["floor_1"] = []
        rates["floor_send_1"] = []
    try:
        await queue.send("warm", {})  # connect, load the scripts
        await http_sends(port, "warm", 200, 4)
        for round_no in range(args.rounds):
            tag = uuid.uuid4().hex[:6]
            order = ["python", "http"] if round_no % 2 == 0 else ["http", "python"]
            for side in order:
                if side == "python":
                    rates["python"].append(await python_sends(queue, f"py-{tag}", args.n))
                else:
                    rates["http_1"].append(await http_sends(port, f"h1-{tag}", args.n, 1))
                    rates["http_many"].append(
                        await http_sends(port, f"hn-{tag}", args.n, args.connections)
                    )
                    if floors:
                        rates["floor_1"].append(await http_sends(floors[0], "t", args.n, 1))
                        rates["floor_send_1"].append(await http_sends(floors[1], "t", args.n, 1))
            await queue.send_many(f"d-{tag}", [{"i": i} for i in range(args.drain)])
            rates["drain"].append(
                await http_drain(port, f"d-{tag}", args.drain, args.connections, args.batch)
            )
        result: dict[str, Any] = {
            f"{key}_per_s": round(statistics.median(values)) for key, values in rates.items()
        }
        result |= {f"{key}_rounds": [round(v) for v in values] for key, values in rates.items()}
        per_round = zip(rates["python"], rates["http_1"], rates["http_many"], strict=True)
        ratios = [(one / py, many / py) for py, one, many in per_round]
        result["ratio_http_1"] = round(statistics.median(r[0] for r in ratios), 3)
        result["ratio_http_many"] = round(statistics.median(r[1] for r in ratios), 3)
        for key in ("floor_1", "floor_send_1") if floors else ():
            ratios_of = [f / py for f, py in zip(rates[key], rates["python"], strict=True)]
            result[f"ratio_{key}"] = round(statistics.median(ratios_of), 3)
            result[f"ratio_{key}_rounds"] = [round(r, 3) for r in ratios_of]
        result["ratio_http_1_rounds"] = [round(r[0], 3) for r in ratios]
        result["ratio_http_many_rounds"] = [round(r[1], 3) for r in ratios]
        if args.million:
            result |= await topic_page(port, queue, 1_000_000, 50)
        return result
    finally:
        await queue.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.web")
    parser.add_argument("--n", type=int, default=3000, help="sends per side per round")
    parser.add_argument("--drain", type=int, default=5000, help="tasks reserved and acked")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--batch", type=int, default=10, help="max tasks per reserve")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--million", action="store_true", help="also the 1M-task topic page")
    parser.add_argument("--floor", action="store_true", help="also a do-nothing HTTP server")
    parser.add_argument("--pretty", action="store_true")
    args = parser.parse_args()
    port = free_port()
    name = f"web{uuid.uuid4().hex[:6]}"
    load_before = os.getloadavg()
    with PrivateRedis() as redis_server, tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens"
        tokens.write_text(f"admin {TOKEN}\n")
        server = subprocess.Popen(
            [sys.executable, "-m", "delayq", "--log-level", "WARNING", "web", "--url",
             redis_server.url, "--name", name, "--port", str(port), "--token-file", str(tokens),
             "--no-access-log"],
            cwd=ROOT,
        )  # fmt: skip
        floors = (free_port(), free_port()) if args.floor else None
        floor_servers = [
            subprocess.Popen(
                [sys.executable, "-m", "benchmarks.web_floor", str(p), *extra], cwd=ROOT
            )
            for p, extra in zip(
                floors or (),
                ([], ["--redis", redis_server.url, "--name", f"{name}f"]),
                strict=False,
            )
        ]
        try:
            for one in (port, *(floors or ())):
                _wait_for(one)
            result = asyncio.run(measure(args, redis_server.url, port, name, floors))
        finally:
            for process in (server, *floor_servers):
                process.terminate()
                process.wait(20)
    result |= {
        "n": args.n, "drain": args.drain, "connections": args.connections, "batch": args.batch,
        "rounds": args.rounds, "delayq": delayq.__version__,
        # Other sessions share this 2-core host: what else ran, as 1/5/15-minute load.
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip
    emit(result, pretty=args.pretty)


def _wait_for(port: int) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError("delayq web did not start")


if __name__ == "__main__":
    main()
