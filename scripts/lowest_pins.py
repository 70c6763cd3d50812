"""Print pip requirements that pin each core dependency of delayq to its lower bound.

scripts/_env.sh builds .venv-lowest from them, so the core tests also run at the oldest
versions pyproject.toml allows.  Every core dependency must read ``name>=LOW,<HIGH``: one
without both bounds fails here, so a range can't go untested at its lower end.  The test
tools follow, with their ranges as they are (the latest within them).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

RANGE = re.compile(r"(?P<name>[A-Za-z0-9_.\-\[\]]+)>=(?P<low>[0-9][0-9.]*),<[0-9][0-9.]*")
TEST_TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout", "hypothesis", "httpx")


def pins(pyproject: Path) -> list[str]:
    """The requirement lines: core dependencies at ``==`` their lower bound, then the tools."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    lines = []
    for requirement in project["dependencies"]:
        found = RANGE.fullmatch(requirement.replace(" ", ""))
        if found is None:
            raise SystemExit(f"{requirement!r}: a core dependency needs >=LOW,<HIGH")
        lines.append(f"{found['name']}=={found['low']}")
    for requirement in project["optional-dependencies"]["dev"]:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        if name in TEST_TOOLS:
            lines.append(requirement)
    return lines


if __name__ == "__main__":
    print("\n".join(pins(Path(sys.argv[1]))))
