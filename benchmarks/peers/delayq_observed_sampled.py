"""delayq with metrics, history and tracing, spans sampled with
``ParentBased(TraceIdRatioBased(0.01))``: see benchmarks/peers/delayq_observed.py."""

from __future__ import annotations

from benchmarks.common import run_cli
from benchmarks.peers.delayq_observed import DelayqObservedPeer

if __name__ == "__main__":
    peer = DelayqObservedPeer(
        frozenset({"metrics", "history", "otel"}), 0.01, name="delayq_observed_sampled"
    )
    run_cli(peer)
