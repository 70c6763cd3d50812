"""A/B of ``delayq web`` at another commit against this checkout: ``POST .../tasks`` one
request at a time, each server in turn (the order alternating by round), beside
``queue.send_delayed`` awaited one by one in the same rounds.

The other commit's ``delayq`` package is exported with ``git archive`` into a temporary
directory and its server runs from there, with this checkout's virtualenv and Redis.

    .venv/bin/python -m benchmarks.web_ab <commit> [--rounds 8] [--n 3000] [--connections 1]

``--connections 50`` sends over 50 keep-alive connections at once (the HTTP send target).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import emit
from benchmarks.web import ROOT, TOKEN, _wait_for, http_sends, python_sends
from delayq import Queue
from tests.redis_server import RedisServer, free_port


def _server(code: Path, url: str, port: int, tokens: Path) -> subprocess.Popen[bytes]:
    """``delayq web`` run from ``code`` (a directory holding a ``delayq`` package)."""
    return subprocess.Popen(
        [sys.executable, "-m", "delayq", "--log-level", "WARNING", "web", "--url", url,
         "--name", "ab", "--port", str(port), "--token-file", str(tokens), "--no-access-log"],
        cwd=code,
    )  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc``): the
    server's cost per request, which other load on a shared host changes far less than
    the rate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(
    url: str, ports: dict[str, int], rounds: int, n: int, connections: int, pids: dict[str, int]
) -> dict[str, Any]:
    queue = Queue.from_url(url, name="ab")
    try:
        await queue.send("warm", {})
        for port in ports.values():
            await http_sends(port, "warm", 300, 1)
        rates: dict[str, list[float]] = {"python": [], "before": [], "after": []}
        cpu_us: dict[str, list[float]] = {"before": [], "after": []}
        for round_no in range(rounds):
            order = ["python", "before", "after"]
            for side in order if round_no % 2 == 0 else order[::-1]:
                topic = f"{side}-{uuid.uuid4().hex[:6]}"
                if side == "python":
                    rates[side].append(await python_sends(queue, topic, n))
                    continue
                used = cpu_seconds(pids[side])
                rates[side].append(await http_sends(ports[side], topic, n, connections))
                cpu_us[side].append((cpu_seconds(pids[side]) - used) / n * 1e6)
    finally:
        await queue.close()
    result: dict[str, Any] = {f"{k}_rounds": [round(v) for v in vs] for k, vs in rates.items()}
    for side in ("before", "after"):
        ratios = [h / p for h, p in zip(rates[side], rates["python"], strict=True)]
        result[f"ratio_{side}_rounds"] = [round(r, 3) for r in ratios]
        result[f"ratio_{side}"] = round(statistics.median(ratios), 3)
    for side, values in cpu_us.items():
        result[f"server_cpu_us_per_send_{side}_rounds"] = [round(v, 1) for v in values]
        result[f"server_cpu_us_per_send_{side}"] = round(statistics.median(values), 1)
    result["cpu_before_over_after"] = round(
        result["server_cpu_us_per_send_before"] / result["server_cpu_us_per_send_after"], 3
    )
    gains = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    result["after_over_before_rounds"] = [round(g, 3) for g in gains]
    result["after_over_before"] = round(statistics.median(gains), 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.web_ab")
    parser.add_argument("commit", help="the 'before' side: a commit of this repository")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--n", type=int, default=3000, help="sends per side per round")
    parser.add_argument("--connections", type=int, default=1, help="HTTP connections at once")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with RedisServer() as redis_server, tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        before.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.commit, "delayq"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        tokens = Path(tmp) / "tokens"
        tokens.write_text(f"admin {TOKEN}\n")
        ports = {"before": free_port(), "after": free_port()}
        servers = [
            _server(before, redis_server.url, ports["before"], tokens),
            _server(ROOT, redis_server.url, ports["after"], tokens),
        ]
        try:
            for port in ports.values():
                _wait_for(port)
            result = asyncio.run(
                _measure(
                    redis_server.url,
                    ports,
                    args.rounds,
                    args.n,
                    args.connections,
                    {"before": servers[0].pid, "after": servers[1].pid},
                )
            )
        finally:
            for server in servers:
                server.terminate()
                server.wait(20)
    result |= {
        "before": args.commit, "n": args.n, "connections": args.connections, "rounds": args.rounds,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip
    emit(result)


if __name__ == "__main__":
    main()
