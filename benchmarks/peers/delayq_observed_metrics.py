"""delayq with Prometheus metrics on (and nothing else of delayq_observed): see
benchmarks/peers/delayq_observed.py."""

from __future__ import annotations

from benchmarks.common import run_cli
from benchmarks.peers.delayq_observed import DelayqObservedPeer

if __name__ == "__main__":
    peer = DelayqObservedPeer(frozenset({"metrics"}), 1, name="delayq_observed_metrics")
    run_cli(peer)
