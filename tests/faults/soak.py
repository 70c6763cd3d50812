"""The soak: steady load for a long time with every fault of the suite at random.

Run by ``scripts/soak`` (not in CI)::

    scripts/soak [--seconds 600] [--rate 100] [--workers 3] [--seed N]

A redis-server (AOF, ``appendfsync always``) sits behind a fault proxy; worker processes
(``delayq worker`` through the CLI, some with skewed clocks) and an in-process producer
talk to it through the proxy.  Every few seconds one fault strikes: a worker SIGKILLed
and replaced, a worker frozen past its TTR, Redis SIGKILLed and restarted, all connections
cut, cuts armed before or after Redis executes a call, a latency spike, a frozen network.
Some tasks fail once or run long on purpose.  At the end the faults stop, the queue
drains, and the checker's table is printed; the exit status is 1 if anything was lost or
ran early.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from delayq import Queue
from delayq.testing import PrivateRedis
from tests.faults.checker import check, read_log
from tests.faults.harness import Producer, WorkerProc
from tests.faults.proxy import FaultProxy
from tests.helpers import wait_for

TTR = 3.0


class Soak:
    """One soak run: the server, the proxy, the workers, the producer and the fault loop."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.log_dir = workdir / "deliveries"
        self.log_dir.mkdir()
        self.server = PrivateRedis(appendonly=True, appendfsync="always").start()
        self.admin = self.server.client()
        self.proxy = FaultProxy(self.server.port).start()
        self.queue_name = f"soak{args.seed}"
        self.workers: list[WorkerProc] = []
        self.faults: Counter[str] = Counter()

    async def start_worker(self) -> None:
        shift = self.rng.choice([None, None, -5.0, 5.0])
        worker = WorkerProc(self.proxy.url(), self.queue_name, self.log_dir, self.admin,
                            concurrency=20, ttr=TTR, clock_shift=shift)  # fmt: skip
        self.workers.append(worker)
        worker.start()

    def body(self, task_id: str) -> dict[str, Any]:
        roll = self.rng.random()
        if roll < 0.05:
            return {"plan": {"1": [["fail"]]}}
        if roll < 0.10:
            return {"plan": {"1": [["sleep", self.rng.randint(500, 2500)]]}}
        return {}

    async def produce(self, producer: Producer, until: float) -> None:
        n = 0
        lanes: set[asyncio.Task[bool]] = set()
        while time.monotonic() < until:
            task_id = f"soak-{n:08d}"
            n += 1
            lane = asyncio.create_task(producer.send_until_returned(
                task_id, self.rng.uniform(0, 5), self.body(task_id), give_up_after=120
            ))  # fmt: skip
            lanes.add(lane)
            lane.add_done_callback(lanes.discard)
            await asyncio.sleep(1 / self.args.rate)
        await asyncio.gather(*lanes)

    async def strike(self) -> None:
        """Inflict one random fault and undo it."""
        fault = self.rng.choice(["kill_worker", "freeze_worker", "kill_redis", "cut_all",
                                 "cut_next", "latency", "partition"])  # fmt: skip
        self.faults[fault] += 1
        print(f"{time.strftime('%H:%M:%S')} fault: {fault}", flush=True)
        live = [w for w in self.workers if w.alive]
        if fault == "kill_worker" and live:
            self.rng.choice(live).kill()
            await self.start_worker()
        elif fault == "freeze_worker" and live:
            victim = self.rng.choice(live)
            victim.signal(signal.SIGSTOP)
            await asyncio.sleep(TTR + self.rng.uniform(0.5, 3))
            victim.signal(signal.SIGCONT)
        elif fault == "kill_redis":
            self.server.kill()
            await asyncio.sleep(self.rng.uniform(0, 3))
            self.server.start()
        elif fault == "cut_all":
            self.proxy.cut()
        elif fault == "cut_next":
            self.proxy.cut_next(self.rng.choice(["request", "reply"]), self.rng.randint(1, 20))
        elif fault == "latency":
            self.proxy.slow(200)
            await asyncio.sleep(self.rng.uniform(1, 5))
            self.proxy.slow(0)
        elif fault == "partition":
            self.proxy.pause()
            await asyncio.sleep(self.rng.uniform(0.5, 3))
            self.proxy.resume()

    async def run(self) -> int:
        for _ in range(self.args.workers):
            await self.start_worker()
        queue = Queue.from_url(self.proxy.url(), name=self.queue_name)
        producer = Producer(queue)
        until = time.monotonic() + self.args.seconds
        producing = asyncio.create_task(self.produce(producer, until))
        while time.monotonic() < until:
            await asyncio.sleep(self.rng.uniform(3, 12))
            await self.strike()
        await producing
        self.proxy.disarm()
        print("draining...", flush=True)
        with contextlib.suppress(AssertionError):
            await wait_for(
                lambda: (
                    producer.returned
                    <= {d.task_id for d in read_log(self.log_dir) if d.event == "done"}
                ),
                120,
                "the drain",
            )
        await queue.close()
        report = check("soak", sent=producer.sent, returned=producer.returned,
                       deliveries=read_log(self.log_dir), not_before=producer.not_before)  # fmt: skip
        report.extra.update(seconds=self.args.seconds, faults=dict(self.faults),
                            send_errors=dict(producer.errors))  # fmt: skip
        report.publish()
        return 1 if report.lost or report.early else 0

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.proxy.close()
        self.admin.close()
        self.server.close()


def main(argv: list[str] | None = None) -> int:
    """Run the soak; returns the exit status."""
    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=100.0, help="tasks sent per second")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args(argv)
    print(f"soak: {args.seconds:g}s at {args.rate:g} tasks/s, seed {args.seed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="delayq-soak-") as workdir:
        soak = Soak(args, Path(workdir))
        try:
            return asyncio.run(soak.run())
        finally:
            soak.close()


if __name__ == "__main__":
    sys.exit(main())
