"""Moving a private redis-server's wall clock forward: the shim and its offset.

delayq reads time only from Redis (``TIME`` in its scripts), so letting time pass for a
queue means letting it pass for Redis.  The plugin's redis-server runs with
``clock_shim.c`` preloaded (``LD_PRELOAD``); the shim adds the offset stored in a small
file, mapped shared, to every wall-clock read, and :class:`Clock` writes that offset.  The
shim is compiled once with the system's C compiler and cached (or taken from
``$DELAYQ_CLOCK_SHIM``).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

from delayq.errors import DelayqError

OFFSET_FORMAT = "<q"
"""The offset file: one little-endian int64 of nanoseconds."""


class ClockUnavailableError(DelayqError):
    """Raised when queue time cannot be moved: the shim could not be built (no C compiler,
    not Linux), or the queue is not on the plugin's redis-server."""


def shim_library() -> Path:
    """The compiled clock shim: ``$DELAYQ_CLOCK_SHIM``, or built from ``clock_shim.c`` into
    a cache directory on first use.

    Raises:
        ClockUnavailableError: not on Linux, or no C compiler (``cc``, ``gcc``, ``clang``,
            or ``$CC``) to build it with.
    """
    given = os.environ.get("DELAYQ_CLOCK_SHIM")
    if given:
        return Path(given)
    if not sys.platform.startswith("linux"):
        raise ClockUnavailableError(
            f"moving Redis's clock needs Linux (LD_PRELOAD); this is {sys.platform}"
        )
    source = files("delayq.testing").joinpath("clock_shim.c").read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = _cache_dir() / f"delayq-clock-shim-{digest}.so"
    if target.exists():
        return target
    compiler = _compiler()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        source_path = Path(scratch) / "clock_shim.c"
        source_path.write_bytes(source)
        built = Path(scratch) / target.name
        result = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(source_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ClockUnavailableError(
                f"building delayq's clock shim with {compiler} failed:\n{result.stderr}"
            )
        # Atomic, so that parallel test sessions never load a half-written library.
        os.replace(built, target)
    return target


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise ClockUnavailableError(
        "delayq.testing needs a C compiler once, to build the clock shim that lets time"
        " pass for its redis-server (run_due): install one (Debian/Ubuntu: apt-get install"
        " gcc), or point $DELAYQ_CLOCK_SHIM at a built clock_shim.so"
    )


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "delayq"


class Clock:
    """The offset a shimmed redis-server adds to its wall clock.

    Args:
        path: the offset file (created, holding 0).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("wb") as out:
            out.write(struct.pack(OFFSET_FORMAT, 0))
        self._fd = os.open(path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, struct.calcsize(OFFSET_FORMAT))

    @property
    def offset_ns(self) -> int:
        """How far the server's clock is ahead of the real one, in nanoseconds."""
        value: int = struct.unpack(OFFSET_FORMAT, self._map[:8])[0]
        return value

    def set_offset(self, nanoseconds: int) -> None:
        """Put the server's clock ``nanoseconds`` ahead of the real one (an aligned 8-byte
        store: the server never reads half of it)."""
        self._map[:8] = struct.pack(OFFSET_FORMAT, nanoseconds)

    def advance(self, milliseconds: int) -> None:
        """Move the server's clock ``milliseconds`` forward."""
        self.set_offset(self.offset_ns + milliseconds * 1_000_000)

    def reset(self) -> None:
        """Back to the real time."""
        self.set_offset(0)

    def close(self) -> None:
        """Unmap the offset file."""
        self._map.close()
        os.close(self._fd)
