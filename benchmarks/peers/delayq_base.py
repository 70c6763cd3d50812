"""delayq as it was at a git ref, run beside today's: plain delayq before a change.

The package at ``$DELAYQ_BENCH_BASE`` (default :data:`DEFAULT_BASE`, the last commit before
topic controls, issue 25) is exported once with ``git archive`` into
``benchmarks/.venvs/delayq_base/<sha>/`` and imported instead of the working tree's; the
adapter is plain delayq's (``benchmarks/peers/delayq.py``).  Run in one run with the others:
``DELAYQ_BENCH_BASE=<ref> scripts/bench --only delayq,delayq_base --scenarios enqueue,drain``.
The ratio to ``delayq`` then includes every change between the ref and the working tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_BASE = "4d95bbb"
ROOT = Path(__file__).resolve().parents[2]


def base_tree(ref: str) -> tuple[str, Path]:
    """The commit ``ref`` names and a directory holding its ``delayq`` package."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    target = ROOT / "benchmarks" / ".venvs" / "delayq_base" / sha
    if not (target / "delayq" / "__init__.py").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=target.parent))
        archive = subprocess.run(
            ["git", "archive", sha, "delayq"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive, check=True)
        try:
            os.rename(scratch, target)  # atomic: worker processes may race to export it
        except OSError:
            shutil.rmtree(scratch)  # another process got there first
    return sha, target


BASE_SHA, BASE_DIR = base_tree(os.environ.get("DELAYQ_BENCH_BASE", DEFAULT_BASE))
sys.path.insert(0, str(BASE_DIR))  # before anything imports delayq

from benchmarks.common import run_cli  # noqa: E402
from benchmarks.peers.delayq import DelayqPeer  # noqa: E402


class DelayqBasePeer(DelayqPeer):
    name = "delayq_base"

    def settings(self) -> dict[str, Any]:
        import delayq

        assert Path(delayq.__file__).is_relative_to(BASE_DIR), delayq.__file__
        return super().settings() | {"base": BASE_SHA}


if __name__ == "__main__":
    run_cli(DelayqBasePeer())
