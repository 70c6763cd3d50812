"""What a release needs from the tree: bounded dependency ranges and a changelog entry for
the version (the wheel itself is built and run by scripts/test)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import delayq

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# Versions as PEP 440 writes them, pre-releases too (opentelemetry's instrumentation is 0.x b).
BOUNDED = re.compile(r"[A-Za-z0-9_.\-]+(\[[a-z,]+\])?>=[0-9][0-9a-z.]*,<[0-9][0-9a-z.]*(;.*)?")


def requirements() -> list[str]:
    extras = PROJECT["optional-dependencies"]
    listed = PROJECT["dependencies"] + [r for reqs in extras.values() for r in reqs]
    return [r for r in listed if not r.startswith("delayq[")]


@pytest.mark.parametrize("requirement", requirements())
def test_every_dependency_has_a_lower_and_an_upper_bound(requirement: str) -> None:
    assert BOUNDED.fullmatch(requirement.replace(" ", "")), requirement


def test_the_version_has_a_changelog_section() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(
        rf"^## \[{re.escape(delayq.__version__)}\] - \d{{4}}-\d\d-\d\d$", changelog, re.M
    )


def test_the_version_is_read_from_the_package() -> None:
    assert "version" in PROJECT["dynamic"] and "version" not in PROJECT
    dynamic = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    assert dynamic["setuptools"]["dynamic"]["version"] == {"attr": "delayq.__version__"}
