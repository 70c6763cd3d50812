"""Every Python example in README.md and docs/ runs, as written, against a private Redis.

A page's ```python blocks run in order in one namespace, as a reader would type them into
one session: a later block may use what an earlier one defined, and top-level ``await``
works.  A block whose first line names a file (``# app/tasks.py``) is written to that path
in a temporary directory and imported, so later blocks can import it as the page does;
its names join the page's namespace too.  Blocks that define pytest tests or fixtures
(``async def test_...``, ``@pytest.fixture``) are put together, in order, into one test
module per page, which runs in its own pytest process under pytest's and pytest-asyncio's
defaults (no project configuration), with the delayq plugin that installing delayq
registers: every test in it must pass.  The examples read ``REDIS_URL`` from the
environment, which this test points at the tests' private redis-server (a database of its
own, emptied before each page).  A block preceded by ``<!-- not-run: reason -->`` is a
fragment that cannot run on its own (it needs a Redis Cluster, say) and is skipped.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

import delayq

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The database the examples use: the shared test server's other tests use database 0.
DOCS_DB = 9

BLOCK = re.compile(
    r"(?P<marker><!--\s*not-run:[^>]*-->\s*\n)?^```python\n(?P<code>.*?)^```\s*$",
    re.M | re.S,
)
PYTEST_BLOCK = re.compile(r"^(@pytest\.|(async )?def test_)", re.M)
FILE_LINE = re.compile(r"#\s*(?P<path>[\w/]+\.py)\s*$")


@dataclass
class Block:
    page: Path
    line: int
    code: str
    run: bool

    @property
    def is_pytest(self) -> bool:
        return bool(PYTEST_BLOCK.search(self.code))


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [
        Block(
            page=page,
            line=text.count("\n", 0, m.start("code")) + 1,
            code=m.group("code"),
            run=m.group("marker") is None,
        )
        for m in BLOCK.finditer(text)
    ]


def pages_with_examples() -> list[Path]:
    return [page for page in PAGES if any(block.run for block in blocks(page))]


def test_every_page_with_python_is_collected() -> None:
    # A page renamed or moved out of docs/ must not silently drop its examples.
    assert ROOT / "README.md" in pages_with_examples()
    assert len(pages_with_examples()) >= 5


async def test_a_failing_example_fails_and_a_marked_fragment_is_skipped(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not-run: a fragment -->\n```python\nundefined_name\n```\n\n"
        "```python\nimport asyncio\n\nawait asyncio.sleep(0)\nvalue = 1\n```\n\n"
        "```python\nassert value == 2, 'boom'\n```\n"
    )
    with pytest.raises(AssertionError, match=r"page\.md:14 failed: AssertionError\('boom'\)"):
        await run_page(page, tmp_path / "modules")


async def run_page(page: Path, tmp_path: Path) -> None:
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    tmp_path.mkdir(exist_ok=True)
    sys.path.insert(0, str(tmp_path))
    modules_before = set(sys.modules)
    opened: dict[int, delayq.Queue] = {}
    try:
        for block in blocks(page):
            if not block.run or block.is_pytest:
                continue
            where = (
                f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name}:{block.line}"
            )
            first = block.code.splitlines()[0] if block.code else ""
            match = FILE_LINE.fullmatch(first.strip())
            try:
                if match:
                    namespace.update(import_file(tmp_path, match.group("path"), block.code))
                else:
                    code = compile(block.code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                    result = eval(code, namespace)
                    if inspect.iscoroutine(result):
                        await result
            except Exception as exc:
                raise AssertionError(f"the example at {where} failed: {exc!r}") from exc
            finally:
                # A later block may rebind a name that held a queue: every queue any block
                # made is closed, or its connections are collected later, in another test.
                opened.update((id(v), v) for v in namespace.values() if isinstance(v, delayq.Queue))
    finally:
        for value in opened.values():
            await value.close()
        for name in set(sys.modules) - modules_before:
            module_file = getattr(sys.modules[name], "__file__", None) or ""
            if module_file.startswith(str(tmp_path)):
                del sys.modules[name]
        sys.path.remove(str(tmp_path))


def import_file(root: Path, relative: str, code: str) -> dict[str, Any]:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    for package in path.relative_to(root).parents:
        if package != Path("."):
            (root / package / "__init__.py").touch()
    path.write_text(code)
    importlib.invalidate_caches()
    top = relative.split("/", maxsplit=1)[0].removesuffix(".py")
    module = sys.modules.get(top)
    if module is not None and not (getattr(module, "__file__", None) or "").startswith(str(root)):
        raise AssertionError(f"an example's package {top!r} is already imported from elsewhere")
    module = importlib.import_module(relative.removesuffix(".py").replace("/", "."))
    return {name: value for name, value in vars(module).items() if not name.startswith("_")}


@pytest.mark.parametrize(
    "page", pages_with_examples(), ids=[str(p.relative_to(ROOT)) for p in pages_with_examples()]
)
async def test_page_examples_run(
    page: Path, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "/".join(redis_url.split("/")[:3]) + f"/{DOCS_DB}"  # scheme://host:port/db
    client = redis.asyncio.Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()
    monkeypatch.setenv("REDIS_URL", url)
    await run_page(page, tmp_path)
    tests = [block for block in blocks(page) if block.run and block.is_pytest]
    if tests:
        await run_pytest_blocks(page, tests, tmp_path / "pytest")


async def run_pytest_blocks(page: Path, tests: list[Block], where: Path) -> None:
    where.mkdir()
    # One module per block, as a reader would paste each one: two blocks may both define a
    # fixture of the same name (a plugin-Redis queue, a docker-compose queue).
    modules = []
    for block in tests:
        module = where / f"test_{page.stem.replace('-', '_')}_line_{block.line}.py"
        module.write_text(block.code)
        modules.append(str(module))
    (where / "pytest.ini").write_text("[pytest]\n")  # pytest's defaults, not this project's
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        str(where / "pytest.ini"),
        "--rootdir",
        str(where),
        *modules,
        cwd=where,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    report = output.decode(errors="replace")
    lines = ", ".join(str(block.line) for block in tests)
    assert process.returncode == 0, f"the tests of {page.name} (lines {lines}) failed:\n{report}"
    assert " passed" in report and "skipped" not in report, report
