"""Real, throw-away replicas, Redis Clusters and Sentinel groups for tests, built from
:class:`delayq.testing.PrivateRedis` servers.

:class:`RedisCluster` starts 3 masters + 3 replicas (``redis-server --cluster-enabled yes``
on free loopback ports, each in its own temporary directory, via :class:`PrivateRedis`) and
joins them with ``redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes``.
:class:`SentinelGroup` starts a primary, a replica and 3 ``redis-server --sentinel``.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from typing import Any, Self

import redis

from delayq.testing import PrivateRedis, PrivateRedisError, free_port

__all__ = ["PRIMARY_ARGS", "RedisCluster", "SentinelGroup", "replica_of"]

PRIMARY_ARGS = ["--repl-diskless-sync-delay", "0"]
"""``extra_args`` for a primary that replicas sync from at once (Redis waits 5 s by default
for more replicas to join a diskless sync)."""


def replica_of(primary: PrivateRedis, **options: Any) -> PrivateRedis:
    """A new (not started) server that replicates ``primary`` (``--replicaof`` on loopback).

    Start it, then call :meth:`PrivateRedis.wait_replica_link` before relying on it.  Start
    the primary with :data:`PRIMARY_ARGS` so that the sync starts without a 5 s delay.
    """
    extra = [*options.pop("extra_args", []), "--replicaof", "127.0.0.1", str(primary.port)]
    if primary.password is not None:
        extra += ["--masterauth", primary.password]
    return PrivateRedis(extra_args=extra, **options)


CLUSTER_ARGS = [
    "--cluster-enabled", "yes",
    "--cluster-replica-validity-factor", "0",  # a replica may always take over in tests
    *PRIMARY_ARGS,
]  # fmt: skip
#: Fast failovers for the fault tests.  The benchmarks pass Redis's default, 15000: a node
#: pings its peers every node_timeout / 2, so 1000 costs each idle master ~0.8 ms of CPU a
#: second more than the default does (2.5 vs 1.7 ms/s measured; a plain node: 1.1).
NODE_TIMEOUT_MS = 1000


class RedisCluster:
    """A private Redis Cluster: ``masters`` masters, each with ``replicas`` replicas."""

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 1,
        *,
        appendonly: bool = False,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
    ) -> None:
        self.servers: list[PrivateRedis] = []
        self.masters_count = masters
        self.replicas = replicas
        self.appendonly = appendonly
        self.node_timeout_ms = node_timeout_ms

    def start(self) -> Self:
        """Start every node, create the cluster, wait until every node says ``ok``."""
        for _ in range(self.masters_count * (1 + self.replicas)):
            # nodes.conf goes to the server's own directory (its --dir); the bus port is
            # chosen, not port + 10000 (which overflows for high free ports).
            bus = ["--cluster-port", str(free_port())]
            bus += ["--cluster-node-timeout", str(self.node_timeout_ms)]
            server = PrivateRedis(appendonly=self.appendonly, extra_args=[*CLUSTER_ARGS, *bus])
            self.servers.append(server)
            server.start()
        addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        self.cli("--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas),
                 "--cluster-yes")  # fmt: skip
        self.wait_ok()
        return self

    def cli(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``redis-cli ARGS`` and return its output (raise on a non-zero exit)."""
        done = subprocess.run(
            ["redis-cli", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise PrivateRedisError(
                f"redis-cli {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
            )
        return done.stdout

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Block until every running node reports ``cluster_state:ok`` and agrees on the
        slots of every master (all 16384 covered)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._ok(s) for s in self.servers if s.running):
                return
            time.sleep(0.1)
        raise PrivateRedisError("cluster did not become ok in time")

    @staticmethod
    def _ok(server: PrivateRedis) -> bool:
        try:
            with server.client(socket_timeout=1) as client:
                info = client.execute_command("CLUSTER", "INFO")
        except redis.RedisError:
            return False
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text and "cluster_slots_ok:16384" in text

    @property
    def url(self) -> str:
        """The URL of the first running node (any node's address reaches the cluster)."""
        first = next(s for s in self.servers if s.running)
        return f"redis://127.0.0.1:{first.port}"

    def masters(self) -> list[PrivateRedis]:
        """The running nodes that are masters now."""
        return [s for s in self.servers if s.running and self._role(s) == "master"]

    def replicas_of(self, master: PrivateRedis) -> list[PrivateRedis]:
        """The running replicas of ``master``."""
        found = []
        for server in self.servers:
            if server is master or not server.running:
                continue
            with server.client(socket_timeout=1) as client:
                info = client.info("replication")
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
                found.append(server)
        return found

    @staticmethod
    def _role(server: PrivateRedis) -> str:
        with server.client(socket_timeout=1) as client:
            return str(client.info("replication").get("role"))

    def node_of(self, key: str) -> PrivateRedis:
        """The master serving ``key``'s slot now."""
        with self.masters()[0].client() as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return next(s for s in self.servers if s.port == int(master[1]))
        raise PrivateRedisError(f"no master serves {key!r}")

    def slot_of(self, key: str) -> int:
        """The hash slot of ``key``."""
        with self.masters()[0].client() as client:
            return int(client.execute_command("CLUSTER", "KEYSLOT", key))

    def move_slot(self, slot: int, target: PrivateRedis) -> None:
        """Move ``slot`` (and its keys) to ``target`` with ``redis-cli --cluster reshard``."""
        owner = self.node_of_slot(slot)
        if owner is target:
            return
        with target.client() as client:
            target_id = client.execute_command("CLUSTER", "MYID")
        target_id = target_id.decode() if isinstance(target_id, bytes) else target_id
        with owner.client() as client:
            owner_id = client.execute_command("CLUSTER", "MYID")
        owner_id = owner_id.decode() if isinstance(owner_id, bytes) else owner_id
        # Move exactly this slot: migrate it key by key (MIGRATE in batches), as
        # `redis-cli --cluster reshard` does, so clients meet ASK and TRYAGAIN meanwhile.
        with owner.client() as src, target.client() as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", owner_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while True:
                keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 50)
                if not keys:
                    break
                src.execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "REPLACE", "KEYS", *keys
                )
            for node in self.masters():
                with node.client() as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def node_of_slot(self, slot: int) -> PrivateRedis:
        with self.masters()[0].client() as client:
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return next(s for s in self.servers if s.port == int(master[1]))
        raise PrivateRedisError(f"no master serves slot {slot}")

    def reshard(self, source: PrivateRedis, target: PrivateRedis, slots: int) -> str:
        """``redis-cli --cluster reshard``: move ``slots`` slots from ``source`` to ``target``."""
        ids = []
        for node in (source, target):
            with node.client() as client:
                found = client.execute_command("CLUSTER", "MYID")
            ids.append(found.decode() if isinstance(found, bytes) else found)
        return self.cli(
            "--cluster", "reshard", f"127.0.0.1:{source.port}", "--cluster-from", ids[0],
            "--cluster-to", ids[1], "--cluster-slots", str(slots), "--cluster-yes",
            "--cluster-pipeline", "20",
        )  # fmt: skip

    def flush(self) -> None:
        """Delete every key on every master (between tests)."""
        for server in self.masters():
            with server.client() as client, contextlib.suppress(redis.RedisError):
                client.flushall()

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class SentinelGroup:
    """A primary, one replica and ``sentinels`` Sentinels watching them as ``service``."""

    def __init__(self, service: str = "mymaster", sentinels: int = 3) -> None:
        self.service = service
        self.primary = PrivateRedis(extra_args=list(PRIMARY_ARGS))
        self.replica: PrivateRedis | None = None
        self.sentinels: list[PrivateRedis] = []
        self._count = sentinels

    def start(self) -> Self:
        self.primary.start()
        self.replica = replica_of(self.primary, extra_args=list(PRIMARY_ARGS))
        self.replica.start()
        self.replica.wait_replica_link(self.primary)
        for _ in range(self._count):
            sentinel = _SentinelServer(self.service, self.primary.port, quorum=2)
            self.sentinels.append(sentinel)
            sentinel.start()
        self.wait_known()
        return self

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.sentinels]

    def wait_known(self, timeout: float = 20.0) -> None:
        """Block until every sentinel knows the replica and the other sentinels."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ready = all(self._knows_all(s) for s in self.sentinels)
            except redis.RedisError:
                ready = False
            if ready:
                return
            time.sleep(0.1)
        raise PrivateRedisError("sentinels did not discover each other in time")

    def _knows_all(self, sentinel: PrivateRedis) -> bool:
        with sentinel.client(socket_timeout=1) as client:
            master = client.sentinel_master(self.service)
        return (
            int(master.get("num-slaves", 0)) >= 1
            and int(master.get("num-other-sentinels", 0)) >= self._count - 1
        )

    def primary_port(self) -> int:
        """The port of the primary the sentinels name now."""
        with self.sentinels[0].client(socket_timeout=1) as client:
            _host, port = client.sentinel_get_master_addr_by_name(self.service)
        return int(port)

    def close(self) -> None:
        for server in [*self.sentinels, self.replica, self.primary]:
            if server is not None:
                server.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SentinelServer(PrivateRedis):
    """``redis-server CONF --sentinel``: Sentinel rewrites its config file, so it gets one."""

    def __init__(self, service: str, primary_port: int, quorum: int) -> None:
        super().__init__(extra_args=["--sentinel"])
        conf = self.dir / "sentinel.conf"
        conf.write_text(
            f"sentinel monitor {service} 127.0.0.1 {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {service} 1000\n"
            f"sentinel failover-timeout {service} 5000\n"
            f"sentinel parallel-syncs {service} 1\n"
        )
        self.config_file = str(conf)
