"""Real, throw-away ``redis-server`` processes for tests.

Each :class:`RedisServer` owns one ``redis-server`` child process listening on a
free 127.0.0.1 port, with its own temporary working directory (AOF files and the
server log live there).  Tests use it to exercise delayq against a real server,
including the unpleasant cases: SIGKILL, restart from AOF, a frozen server.

No pytest import here, so benchmarks and scripts can reuse it.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import redis

__all__ = ["PRIMARY_ARGS", "RedisServer", "RedisServerError", "free_port", "replica_of"]

PRIMARY_ARGS = ["--repl-diskless-sync-delay", "0"]
"""``extra_args`` for a primary that replicas sync from at once (Redis waits 5 s by default
for more replicas to join a diskless sync)."""

# Every live child, so an interpreter that exits without tearing its fixtures
# down (Ctrl-C, a crash in a fixture) does not leave orphaned servers behind.
_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _reap_all() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(OSError):
            proc.kill()
            proc.wait(timeout=5)
    _LIVE.clear()


class RedisServerError(RuntimeError):
    """The server did not come up (the message carries the tail of its log)."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    Racy by nature (the port is released before the server binds it), which is
    acceptable on a test machine.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A private ``redis-server`` subprocess on a free loopback port.

    RDB snapshots are always off (``--save ""``); AOF is off unless
    ``appendonly=True``.  ``extra_args`` are appended verbatim to the command
    line, e.g. ``["--maxmemory", "10mb", "--maxmemory-policy", "noeviction"]`` or
    ``["--user", "app on >pw ~* +@all"]``.  The plain TCP port is always
    listened on (readiness checks and :meth:`client` use it), so TLS options
    must add a ``--tls-port`` next to it rather than replace it.
    """

    def __init__(
        self,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        password: str | None = None,
        extra_args: list[str] | None = None,
        executable: str = "redis-server",
        start_timeout: float = 5.0,
        config_file: str | None = None,
    ) -> None:
        self.config_file = config_file
        """A config file read before the command line (a Sentinel needs one it can rewrite)."""
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.password = password
        self.extra_args = list(extra_args or [])
        self.executable = executable
        self.start_timeout = start_timeout
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-redis-"))
        self.log_path = self.dir / "redis.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    # -- lifecycle ---------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """PID of the running server, or None when it is not running."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start the server and block until it answers PING (or raise)."""
        if self.running:
            raise RedisServerError(f"redis-server already running on port {self.port}")
        argv = [
            self.executable,
            *([self.config_file] if self.config_file else []),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--logfile", "",  # log to stdout, which goes to log_path below
        ]  # fmt: skip
        if self.password is not None:
            argv += ["--requirepass", self.password]
        argv += self.extra_args
        # Append, so the log survives restarts and tells the whole story.
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            except FileNotFoundError as exc:
                raise RedisServerError(
                    f"{self.executable!r} not found: install redis-server >= 7.0"
                ) from exc
        _LIVE.add(self._proc)
        self._paused = False
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._forget()
                raise RedisServerError(f"redis-server exited at startup\n{self.log_tail()}")
            if self._answers_ping():
                return
            time.sleep(0.02)
        self.kill()
        raise RedisServerError(
            f"redis-server did not answer PING within {self.start_timeout}s\n{self.log_tail()}"
        )

    def _answers_ping(self) -> bool:
        """True once the server serves commands.

        Speaks RESP over a raw socket instead of using redis-py, so that *any*
        reply counts (``-NOAUTH`` included): readiness must not depend on how
        passwords or ACLs are configured.  ``-LOADING`` (AOF replay) does not.
        """
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                reply = sock.recv(256)
        except OSError:
            return False
        return reply[:1] in (b"+", b"-") and not reply.startswith(b"-LOADING")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL: a crash, no AOF rewrite or flush) and
        wait for the process to exit.  ``sig`` must be one that ends it."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(sig)
            if self._paused and sig != signal.SIGKILL:
                # A stopped process only acts on the signal once continued.
                self._proc.send_signal(signal.SIGCONT)
            self._proc.wait(timeout=10)
        self._forget()

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM), escalating to SIGKILL after 10 s."""
        try:
            self.kill(signal.SIGTERM)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)

    def restart(self) -> Self:
        """Stop if running, then start again on the same port and directory,
        so an AOF written before a kill is replayed."""
        if self.running:
            self.stop()
        return self.start()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections hang instead of failing."""
        assert self._proc is not None and self.running, "server is not running"
        self._proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT)."""
        assert self._proc is not None and self.running, "server is not running"
        self._proc.send_signal(signal.SIGCONT)
        self._paused = False

    def close(self) -> None:
        """Stop the server and delete its directory.  Idempotent."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _forget(self) -> None:
        if self._proc is not None:
            _LIVE.discard(self._proc)
        self._paused = False

    # -- access ------------------------------------------------------------

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:PORT/0``."""
        auth = f":{quote(self.password, safe='')}@" if self.password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new synchronous client for this server; the caller closes it."""
        return redis.Redis.from_url(self.url, **kwargs)

    def wait_replica_link(self, primary: RedisServer, timeout: float = 10.0) -> None:
        """Block until this replica finished its sync with ``primary`` and both ends see
        the link up (the primary lists it ``online``), or raise."""
        deadline = time.monotonic() + timeout
        with self.client() as mine, primary.client() as theirs:
            while time.monotonic() < deadline:
                info = mine.info("replication")
                listed = theirs.info("replication").get("slave0")
                if (
                    info.get("master_link_status") == "up"
                    and not info.get("master_sync_in_progress")
                    and isinstance(listed, dict)
                    and listed.get("state") == "online"
                    and int(listed.get("port", 0)) == self.port
                ):
                    return
                time.sleep(0.02)
        raise RedisServerError(f"replica did not sync within {timeout}s\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the server's log (stdout and stderr)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no redis log>"
        return "\n".join(text.splitlines()[-lines:])

    # -- context manager ---------------------------------------------------

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer 127.0.0.1:{self.port} {state} dir={self.dir}>"


def replica_of(primary: RedisServer, **options: Any) -> RedisServer:
    """A new (not started) server that replicates ``primary`` (``--replicaof`` on loopback).

    Start it, then call :meth:`RedisServer.wait_replica_link` before relying on it.  Start
    the primary with :data:`PRIMARY_ARGS` so that the sync starts without a 5 s delay.
    """
    extra = [*options.pop("extra_args", []), "--replicaof", "127.0.0.1", str(primary.port)]
    if primary.password is not None:
        extra += ["--masterauth", primary.password]
    return RedisServer(extra_args=extra, **options)
