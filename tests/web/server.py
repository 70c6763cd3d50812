"""``delayq web`` as a real process (uvicorn) for the browser and fuzzing tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from delayq.testing import free_port
from tests.web.conftest import TOKENS

ROOT = Path(__file__).resolve().parents[2]


class WebServer:
    """``python -m delayq web [app] --url ... --name ... --port ...`` (or the arguments
    ``where`` names the queue with) with a token file holding :data:`TOKENS`; stopped with
    SIGTERM (uvicorn's graceful stop) on exit."""

    def __init__(
        self,
        redis_url: str,
        queue_name: str,
        tmp: Path,
        app: str | None = None,
        where: list[str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        token_file = tmp / "tokens"
        token_file.write_text("".join(f"{scope} {token}\n" for scope, token in TOKENS.items()))
        self.log = tmp / "web.log"
        where = where or ([app] if app else ["--url", redis_url, "--name", queue_name])
        self.argv = [
            sys.executable, "-m", "delayq", "web", *where, "--port", str(self.port),
            "--token-file", str(token_file), "--no-access-log",
        ]  # fmt: skip
        self.env = os.environ | {
            "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, "DELAYQ_QUEUE": queue_name,
        }  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> WebServer:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"delayq web exited:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/api/openapi.json", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"delayq web did not answer within 30 s:\n{self.log.read_text()}")

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(5)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
