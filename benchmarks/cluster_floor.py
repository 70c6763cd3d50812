"""The floor under delayq's cluster figures: what a cluster-enabled redis-server, and this
host, cost by themselves, with no delayq client in the way.

Each measured as the server's CPU µs per request (INFO cpu ``used_cpu_user +
used_cpu_sys``), sequential requests on one plain connection per node (no cluster client,
so no routing on either side), in slices that alternate so the host's drift hits all alike:

- ``return 1``: ``EVALSHA`` of ``return 1`` naming one key, on the plain node (one replica,
  no ``--cluster-enabled``) and on a cluster master: the request alone;
- ``send.lua``: ``EVALSHA`` of delayq's own ``send.lua`` (a task delayed 1 h, arguments
  built beforehand), on the plain node, on one cluster master, and on the three masters in
  turn (request i to master i mod 3, each on a topic it owns): the same script and the same
  number of requests per master, but each master now wakes for every third request only;
- ``idle``: each node's CPU ms per second while nobody sends anything (cron, replication
  and, on a cluster, the cluster bus).

``send.lua`` on three masters in turn against one master is what this 2-core host charges
for spreading requests over nodes that share its cores (each master's caches go cold while
the others run); against the plain node, what cluster mode charges.  Also runnable alone::

    .venv/bin/python -m benchmarks.cluster_floor --n 12000
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from typing import Any

import redis

from benchmarks.common import cpu_seconds
from delayq.redis.keys import TopicKeys
from delayq.redis.scripts import lua_source, waiting_keys
from tests.redis_cluster import RedisCluster
from tests.redis_server import PRIMARY_ARGS, RedisServer, replica_of

TRIVIAL_SCRIPT = "return 1"
SLICES = 4
IDLE_S = 2.0
BODY = b'{"due":0}'
_ids = itertools.count()


def server_cpu(client: redis.Redis) -> float:
    """The server's user + sys CPU seconds so far."""
    return cpu_seconds(client.info("cpu"))


class Target:
    """One node and a topic whose slot it serves, with both scripts loaded."""

    def __init__(self, server: RedisServer, topic: TopicKeys) -> None:
        self.client = server.client()
        self.topic = topic
        self.trivial = self.client.script_load(TRIVIAL_SCRIPT)
        self.send = self.client.script_load(lua_source("send"))

    def call_trivial(self) -> None:
        self.client.evalsha(self.trivial, 1, self.topic.wheel)

    def call_send(self) -> None:
        keys = waiting_keys(self.topic)
        task_id = f"{next(_ids):012d}"
        wake = self.topic.wake_publish
        self.client.evalsha(self.send, len(keys), *keys, task_id, "d", 3_600_000, 0, 0, BODY,
                            5000, wake)  # fmt: skip

    def cpu(self) -> float:
        return server_cpu(self.client)


def _topic_on(cluster: RedisCluster, master: RedisServer) -> TopicKeys:
    """A topic whose keys ``master`` serves."""
    for i in range(10_000):
        topic = TopicKeys.build("floor", f"t{i}", sharded_wake=True)
        if cluster.node_of(topic.wheel) is master:
            return topic
    raise RuntimeError(f"no topic found for {master}")


def _per_call(targets: list[Target], call: Callable[[Target], None], n: int) -> list[float]:
    """``n`` calls spread over ``targets`` in turn; each target's CPU µs per call it got."""
    before = [t.cpu() for t in targets]
    for i in range(n):
        call(targets[i % len(targets)])
    share = n / len(targets)
    return [(t.cpu() - b) / share * 1e6 for t, b in zip(targets, before, strict=True)]


def measure(plain: RedisServer, cluster: RedisCluster, n: int) -> dict[str, float]:
    """The floor figures (see the module docstring), each summed over slices."""
    masters = cluster.masters()
    single = Target(plain, TopicKeys.build("floor", "t"))
    turns = [Target(m, _topic_on(cluster, m)) for m in masters]
    per_slice = max(n // SLICES, len(turns))
    runs: dict[str, Callable[[], list[float]]] = {
        "trivial_plain": lambda: _per_call([single], Target.call_trivial, per_slice),
        "trivial_master": lambda: _per_call(turns[:1], Target.call_trivial, per_slice),
        "send_plain": lambda: _per_call([single], Target.call_send, per_slice),
        "send_master": lambda: _per_call(turns[:1], Target.call_send, per_slice),
        "send_turns": lambda: _per_call(turns, Target.call_send, per_slice),
    }
    sums = dict.fromkeys(runs, 0.0)
    try:
        for index in range(SLICES):
            names = list(runs) if index % 2 == 0 else list(reversed(runs))
            for name in names:
                sums[name] += max(runs[name]())  # the costliest master of the three
        everyone = [single, *turns]
        before = [t.cpu() for t in everyone]
        time.sleep(IDLE_S)
        idle = [(t.cpu() - b) / IDLE_S * 1000 for t, b in zip(everyone, before, strict=True)]
    finally:
        for target in [single, *turns]:
            target.client.close()
    usec = {name: total / SLICES for name, total in sums.items()}
    return {
        "floor_trivial_plain_usec": usec["trivial_plain"],
        "floor_trivial_master_usec": usec["trivial_master"],
        "floor_send_plain_usec": usec["send_plain"],
        "floor_send_master_usec": usec["send_master"],
        "floor_send_turns_usec": usec["send_turns"],
        "floor_cluster_ratio": usec["send_master"] / usec["send_plain"],
        "floor_turns_ratio": usec["send_turns"] / usec["send_master"],
        "floor_idle_plain_ms_per_s": idle[0],
        "floor_idle_master_ms_per_s": sum(idle[1:]) / len(idle[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=12_000, help="requests per measurement")
    parser.add_argument("--node-timeout-ms", type=int, default=15_000)
    args = parser.parse_args()
    with (
        RedisServer(extra_args=list(PRIMARY_ARGS)) as plain,
        replica_of(plain) as replica,
        RedisCluster(node_timeout_ms=args.node_timeout_ms) as cluster,
    ):
        replica.wait_replica_link(plain)
        figures: dict[str, Any] = measure(plain, cluster, args.n)
    for key, value in figures.items():
        print(f"{key:<30}{value:>10.2f}")


if __name__ == "__main__":
    main()
