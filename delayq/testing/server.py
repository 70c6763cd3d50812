"""The plugin's private redis-server: a child process on a free loopback port, with its own
directory and no persistence."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from delayq.errors import DelayqError

START_TIMEOUT = 10.0


class PrivateRedisError(DelayqError):
    """Raised when the plugin's redis-server cannot start: no binary (the message says
    what to install), or it exited or did not answer (the message has its log)."""


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
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateRedis:
    """A private redis-server for a test session.

    Attributes:
        url: ``redis://127.0.0.1:<port>/0``.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-testing-"))
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrivateRedis:
        """Start the server and wait until it answers."""
        argv = [
            find_redis_server(),
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PrivateRedisError(f"redis-server exited at start:\n{self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
            ):
                sock.sendall(b"PING\r\n")
                if sock.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        self.close()
        raise PrivateRedisError(f"redis-server did not answer within {START_TIMEOUT}s")

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's log."""
        try:
            text = (self.dir / "redis.log").read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Stop the server and remove its directory.  Idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
