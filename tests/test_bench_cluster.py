"""The cluster benchmark's plumbing (``scripts/bench --scenarios cluster``), with tiny counts.

It runs end to end on the session's cluster and a private plain node, and yields every
figure that the report and the targets read.  The figures themselves are the benchmark's
business: nothing here depends on how fast anything ran.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from benchmarks import cluster as bench
from benchmarks import cluster_floor, report, scenarios, targets
from tests.redis_server import RedisServer


async def test_one_round_yields_what_the_targets_read(
    cluster: Any, make_redis_server: Callable[..., RedisServer], monkeypatch: Any
) -> None:
    # A worker that ran every task but does not stop is recorded, not waited for (30 s);
    # here that would be the wake-up listener's swallowed cancel again (about one run in
    # two before it was fixed), so none may occur.
    monkeypatch.setattr(bench, "STOP_S", 3.0)
    plain = make_redis_server()
    args = argparse.Namespace(n=36, lateness=12, window=0.2, idle=0.1, round=0)
    figures = await bench.measure(
        bench.Setup("plain", plain.url, False, [plain]),
        bench.Setup("cluster", cluster.url, True, cluster.masters()),
        args,
    )
    figures |= cluster_floor.measure(plain, cluster, n=24)

    assert sum(figures["cl_master_tasks"]) == 36  # every task stored, on some master
    assert figures["cl_stuck_stops"] == len(figures["cl_stuck_where"]) == 0, figures[
        "cl_stuck_where"
    ]
    assert len(figures["cl_master_keys"]) == len(figures["cl_master_cpu_ms"]) == 3
    for prefix in ("cl_late_sharded", "cl_late_flat", "cl_late_single"):
        assert figures[f"{prefix}_early"] == 0
    results: dict[str, Any] = {
        "raw": {"cluster": {scenarios.CLUSTER_KEY: [figures]}},
        "summary": {scenarios.CLUSTER_KEY: report.summarize({"c": {"k": [figures]}})["k"]},
        "peers": {},
    }
    verdicts = targets.judge(results)
    assert [v.target.split(":")[0] for v in verdicts] == ["cluster"] * 3
    assert "12-shard topic per master" in report._cluster(
        results, results["summary"][scenarios.CLUSTER_KEY]
    )
