"""delayq with history on every topic (and nothing else of delayq_observed): see
benchmarks/peers/delayq_observed.py."""

from __future__ import annotations

from benchmarks.common import run_cli
from benchmarks.peers.delayq_observed import DelayqObservedPeer

if __name__ == "__main__":
    peer = DelayqObservedPeer(frozenset({"history"}), 1, name="delayq_observed_history")
    run_cli(peer)
