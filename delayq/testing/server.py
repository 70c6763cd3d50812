"""One private redis-server launcher, for the plugin, delayq's own tests and its benchmarks:
a child process on a free loopback port, with its own directory and no RDB snapshots.

Besides starting and stopping, it does what tests of failures need: extra server options
(AOF, ``--replicaof``, ``--cluster-enabled``, ACL users, TLS ports), a crash by signal,
a freeze (SIGSTOP) and thaw, and a restart on the same port and directory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import quote

import redis

from delayq.errors import DelayqError

if TYPE_CHECKING:
    from types import TracebackType

START_TIMEOUT = 10.0

# Every live child, so an interpreter that exits without closing its servers (Ctrl-C, a
# crash in a fixture) does not leave orphaned redis-servers behind.
_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _reap_all() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=5)
    _LIVE.clear()


class PrivateRedisError(DelayqError):
    """Raised when a private redis-server cannot start: no binary (the message says what
    to install), or it exited or did not answer (the message has its log)."""


def find_redis_server() -> str:
    """``$DELAYQ_REDIS_SERVER``, else ``redis-server`` from ``PATH``.

    Raises:
        PrivateRedisError: neither exists; the message says what to install.
    """
    given = os.environ.get("DELAYQ_REDIS_SERVER")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise PrivateRedisError(
                f"$DELAYQ_REDIS_SERVER={given!r} is not an executable redis-server"
            )
        return given
    found = shutil.which("redis-server")
    if found is None:
        raise PrivateRedisError(
            "delayq.testing starts a private redis-server (>= 7.0) for the test session and"
            " found none on PATH: install one (Debian/Ubuntu: apt-get install redis-server;"
            " macOS: brew install redis), or set $DELAYQ_REDIS_SERVER to its path"
        )
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    Racy by nature (the port is released before a server binds it), which is acceptable
    on a test machine.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateRedis:
    """A private redis-server on a free loopback port.

    RDB snapshots are always off; AOF is off unless ``appendonly=True``.  The plain TCP
    port is always listened on (readiness checks and :meth:`client` use it), so TLS
    options add a ``--tls-port`` beside it rather than replace it.  Usable as a context
    manager (started on entry, closed on exit).

    Args:
        appendonly: keep an AOF in :attr:`dir`, so :meth:`restart` after :meth:`kill`
            replays it.
        appendfsync: the AOF's ``appendfsync`` policy.
        password: ``--requirepass``; :attr:`url` and :meth:`client` carry it.
        extra_args: appended verbatim to the command line, e.g. ``["--maxmemory", "10mb"]``
            or ``["--user", "app on >pw ~* +@all"]``.
        config_file: a config file read before the command line (a Sentinel needs one it
            can rewrite).
        start_timeout: seconds to wait for the server to answer.

    Attributes:
        port: the loopback port it listens on (the same across restarts).
        dir: its working directory (AOF, cluster ``nodes.conf``, ``redis.log``).
        log_path: the server's log, appended to across restarts.
    """

    def __init__(
        self,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        password: str | None = None,
        extra_args: list[str] | None = None,
        config_file: str | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.password = password
        self.extra_args = list(extra_args or [])
        self.config_file = config_file
        self.start_timeout = start_timeout
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-testing-"))
        self.log_path = self.dir / "redis.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:<port>/0``."""
        auth = f":{quote(self.password, safe='')}@" if self.password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The running server's process id, or ``None`` when it is not running."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive (a paused one is)."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Self:
        """Start the server and wait until it answers.

        Raises:
            PrivateRedisError: it is already running, there is no redis-server, or it
                exited or did not answer within ``start_timeout`` (with its log).
        """
        if self.running:
            raise PrivateRedisError(f"redis-server already running on port {self.port}")
        argv = [
            find_redis_server(), *([self.config_file] if self.config_file else []),
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--save", "", "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync, "--daemonize", "no",
            "--logfile", "",  # to stdout, appended to log_path: the log survives restarts
        ]  # fmt: skip
        if self.password is not None:
            argv += ["--requirepass", self.password]
        argv += self.extra_args
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
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
                raise PrivateRedisError(f"redis-server exited at start:\n{self.log_tail()}")
            if self._answers():
                return
            time.sleep(0.02)
        self.kill()
        raise PrivateRedisError(
            f"redis-server did not answer within {self.start_timeout}s:\n{self.log_tail()}"
        )

    def _answers(self) -> bool:
        """Whether the server serves commands.  Any reply counts (``-NOAUTH`` too, so
        readiness does not depend on passwords or ACLs) except ``-LOADING`` (AOF replay)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                reply = sock.recv(256)
        except OSError:
            return False
        return reply[:1] in (b"+", b"-") and not reply.startswith(b"-LOADING")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (by default SIGKILL: a crash, no AOF flush) and wait for the process
        to exit; ``sig`` must be one that ends it.  A paused server is continued first for
        any signal but SIGKILL, since a stopped process acts on it only once continued."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(sig)
            if self._paused and sig != signal.SIGKILL:
                self._proc.send_signal(signal.SIGCONT)
            self._proc.wait(timeout=10)
        self._forget()

    def stop(self) -> None:
        """Shut the server down (SIGTERM), escalating to SIGKILL after 10 s."""
        try:
            self.kill(signal.SIGTERM)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)

    def restart(self) -> Self:
        """Stop it if running, then start it again on the same port and directory (so an
        AOF written before a :meth:`kill` is replayed)."""
        if self.running:
            self.stop()
        return self.start()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): its connections hang instead of failing."""
        assert self._proc is not None and self.running, "redis-server is not running"
        self._proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT)."""
        assert self._proc is not None and self.running, "redis-server is not running"
        self._proc.send_signal(signal.SIGCONT)
        self._paused = False

    def _forget(self) -> None:
        if self._proc is not None:
            _LIVE.discard(self._proc)
        self._paused = False

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new synchronous redis-py client for this server (``kwargs`` go to
        ``Redis.from_url``); the caller closes it."""
        return redis.Redis.from_url(self.url, **kwargs)

    def wait_replica_link(self, primary: PrivateRedis, timeout: float = 10.0) -> None:
        """Wait until this server, started with ``--replicaof`` ``primary``, finished its
        sync and both ends see the link up (the primary lists it ``online``).

        Raises:
            PrivateRedisError: not within ``timeout`` seconds.
        """
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
        raise PrivateRedisError(f"replica did not sync within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Stop the server and remove its directory.  Idempotent."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

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
        return f"<PrivateRedis 127.0.0.1:{self.port} {state} dir={self.dir}>"
