"""The package's import graph: no cycles, and arrows that point one way.

Read with ``ast`` from the source, so the check sees what a reader of the code sees, not
what one run imported.  For the layers, imports under ``TYPE_CHECKING`` and inside functions
count too; for cycles, what runs counts: ``TYPE_CHECKING`` imports are left out, and
``from pkg import x`` imports ``pkg/__init__`` as well as ``pkg.x``.

The layers, from the top (a module may import its own layer and the ones below)::

    extensions   delayq.testing, delayq.web, delayq.fastapi, delayq.metrics, delayq.otel,
                 delayq.archive, delayq.cli, delayq.__main__, delayq (the package's re-exports)
    queue        delayq.queue and the modules it delegates to
    worker       delayq.worker.*
    redis        delayq.redis.*
    leaves       errors, bounds, pacing, duration, backoff, ids, codec, task, cancellation,
                 topic, limits, middleware, ticks, headers, events, results: anyone may import these
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "delayq"

LEAVES = {
    "delayq.errors",
    "delayq.duration",
    "delayq.backoff",
    "delayq.ids",
    "delayq.codec",
    "delayq.task",
    "delayq.cancellation",
    "delayq.bounds",
    "delayq.pacing",
    "delayq.topic",
    "delayq.handlers",
    "delayq.limits",
    "delayq.groups",
    "delayq.middleware",
    "delayq.ticks",
    "delayq.headers",
    "delayq.events",
    "delayq.results",
}
# delayq.cli (and __main__, which runs it) is an extension too: `delayq web` imports
# delayq.web when it runs (and
# test_import_delayq_loads_no_optional_dependency checks that importing the CLI does not).
EXTENSIONS = ("delayq.testing", "delayq.web", "delayq.fastapi", "delayq.metrics", "delayq.otel",
              "delayq.archive", "delayq.cli", "delayq.__main__")  # fmt: skip
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 320
OPTIONAL = ("fastapi", "starlette", "uvicorn", "prometheus_client", "opentelemetry",
            "sqlalchemy", "asyncpg", "asyncmy", "playwright", "croniter", "uvloop",
            "httptools", "schemathesis")  # fmt: skip


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import statements inside ``if TYPE_CHECKING:`` blocks."""
    found: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            for statement in node.body:
                found.update(
                    n for n in ast.walk(statement) if isinstance(n, ast.Import | ast.ImportFrom)
                )
    return found


def imports_of(name: str, path: Path, known: set[str], *, runtime: bool = False) -> set[str]:
    """The delayq modules ``name`` imports (a ``from pkg import mod`` names the module).

    ``runtime``: leave out ``TYPE_CHECKING`` imports, and count ``from pkg import x`` as
    importing ``pkg`` too (its ``__init__`` runs first, and may import ``name`` back).  A
    plain ``import a.b`` does not count ``a``: every module would then import ``delayq``.
    """
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = type_checking_only(tree) if runtime else set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".") if is_package else name.split(".")[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            if runtime:
                found.add(base)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m for m in found if m in known and m != name}


def graph(*, runtime: bool = False) -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known, runtime=runtime) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layer(name: str) -> int:
    if name in LEAVES:
        return 0
    if name.startswith("delayq.redis"):
        return 1
    if name.startswith("delayq.worker"):
        return 2
    if name == "delayq" or name.startswith(EXTENSIONS) or name in ("delayq.cli", "delayq.__main__"):
        return 4
    return 3  # the public surface: queue, topic and the parts the queue delegates to


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_no_import_cycles_at_run_time_including_through_a_package_init() -> None:
    found = list(cycles(graph(runtime=True)))
    assert found == []


def test_the_run_time_graph_counts_a_package_init() -> None:
    edges = graph(runtime=True)
    assert "delayq.worker" in edges["delayq.queue"]  # from delayq.worker import Worker
    assert "delayq.worker.runner" in edges["delayq.worker"]
    # source.py's imports are all under TYPE_CHECKING
    assert graph()["delayq.worker.source"] and not edges["delayq.worker.source"]


def test_imports_point_down() -> None:
    upward = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        for target in targets
        if layer(target) > layer(name)
    ]
    assert upward == []


def test_core_never_imports_an_extension_or_optional_dependency() -> None:
    for name, path in modules().items():
        if name.startswith(EXTENSIONS):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for imported in names:
                assert not imported.startswith(OPTIONAL), f"{name} imports {imported}"
                assert not imported.startswith(EXTENSIONS), f"{name} imports {imported}"


def test_import_delayq_loads_no_optional_dependency() -> None:
    # redis-py itself imports opentelemetry when it is installed (redis.observability), so
    # what counts is what delayq loads beyond its required dependencies.
    code = (
        "import sys, redis.asyncio, pydantic, anyio; before = set(sys.modules); "
        "import delayq, delayq.cli; "
        f"print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in {OPTIONAL!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_stay_small(name: str) -> None:
    lines = len(modules()[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name} has {lines} lines; split it"


@pytest.mark.parametrize("name", sorted(modules()))
def test_classes_stay_small(name: str) -> None:
    tree = ast.parse(modules()[name].read_text(encoding="utf-8"))
    large = [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    ]
    assert large == [], f"{name}: split {large}"
