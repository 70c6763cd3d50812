"""delayq uses only the public API of the packages it depends on, checked with ``ast`` over
every module of ``delayq/``.

Three rules; each is shown to fail on a small bad snippet below:

* **imports**: nothing from another package's private module (a dotted component that
  starts with ``_``, e.g. ``redis._parsers``), no private name imported from one
  (``from starlette.routing import _x``), and nothing from ``uvicorn.protocols`` (uvicorn's
  protocol implementations, which it does not document for use).
* **attributes**: no ``x._name`` (non-dunder) unless ``x`` is ``self`` or ``cls``, also
  through ``getattr``/``setattr``/``hasattr``/``delattr`` with a literal name.  Anything
  else may be a foreign object (``self.client._pool``, ``connection._writer``), so every
  other access is an error unless listed in :data:`ALLOWED_ATTRIBUTES`, where each entry
  says whose object it is.
* **bases**: no class derived from another package's class, except the ones those
  packages publish for subclassing (:data:`PUBLIC_BASES`) and exception types.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "delayq"

ALLOWED_ATTRIBUTES = {
    # os._exit is the documented way to end a forked child without running exit handlers.
    ("delayq/cli/run.py", "os._exit"),
    # Queue's constructors (classmethods) set up the queue they just built: delayq's own object.
    ("delayq/queue.py", "queue._parts"),
}
"""(module, expression) pairs of underscore attributes read on delayq's own objects."""

PUBLIC_BASES = {
    "pydantic.BaseModel",
    "typing.Protocol",
    "typing.Generic",
    "typing.NamedTuple",
    "typing.TypedDict",
    "typing_extensions.Protocol",
    "asyncio.Protocol",
    "abc.ABC",
    "enum.Enum",
    "enum.IntEnum",
    "enum.StrEnum",
    "enum.Flag",
    "logging.Handler",
    "logging.Filter",
    "json.JSONEncoder",
    # OpenTelemetry's contract for `opentelemetry-instrument`: an entry point naming a subclass.
    "opentelemetry.instrumentation.instrumentor.BaseInstrumentor",
}
"""Classes other packages document as bases to subclass."""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign(module: str, level: int) -> bool:
    return level == 0 and module.split(".", maxsplit=1)[0] != "delayq"


def _origins(tree: ast.Module) -> dict[str, str]:
    """Each name a module imports (at any depth), mapped to the dotted path it names."""
    origins: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    origins[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    origins[top] = top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                origins[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return origins


def _dotted(node: ast.expr, origins: dict[str, str]) -> str | None:
    """The dotted path of a base class expression when it starts with an imported name."""
    if isinstance(node, ast.Subscript):  # Generic[T], Protocol[T]
        return _dotted(node.value, origins)
    if isinstance(node, ast.Name):
        return origins.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value, origins)
        return f"{owner}.{node.attr}" if owner else None
    return None


def _import_violations(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names if _foreign(alias.name, 0)]
        elif isinstance(node, ast.ImportFrom) and _foreign(node.module or "", node.level):
            modules = [(node.module or "", [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            if any(_private(part) for part in module.split(".")):
                found.append(f"import from private module {module}")
            elif module == "uvicorn.protocols" or module.startswith("uvicorn.protocols."):
                found.append(f"import from {module}")
            found.extend(f"import of private name {module}.{n}" for n in names if _private(n))
    return found


def _attribute_violations(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"underscore attribute {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))
        ):
            found.append(f"underscore attribute {ast.unparse(node)}")
    return found


def _base_violations(tree: ast.Module) -> list[str]:
    origins = _origins(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            origin = _dotted(base, origins)
            if origin is None or not _foreign(origin, 0) or origin in PUBLIC_BASES:
                continue
            if origin.endswith(("Error", "Exception", "Warning")):
                continue  # exception types exist to be subclassed
            found.append(f"class {node.name} derives from {origin}")
    return found


def violations(source: str) -> list[str]:
    """Every breach of the three rules in one module's source."""
    tree = ast.parse(source)
    return _import_violations(tree) + _attribute_violations(tree) + _base_violations(tree)


def package_violations() -> set[str]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE.parent).as_posix()
        for breach in violations(path.read_text(encoding="utf-8")):
            expression = breach.removeprefix("underscore attribute ")
            if (module, expression) not in ALLOWED_ATTRIBUTES:
                found.add(f"{module}: {breach}")
    return found


def test_delayq_uses_only_public_apis_of_other_packages() -> None:
    found = package_violations()
    assert sorted(found) == []


@pytest.mark.parametrize(
    ("snippet", "breach"),
    [
        ("from redis._parsers.base import BaseParser", "private module redis._parsers.base"),
        ("import redis._parsers", "private module redis._parsers"),
        ("from starlette._utils import is_async_callable", "private module starlette._utils"),
        ("from starlette.routing import _wrap", "private name starlette.routing._wrap"),
        ("from uvicorn.protocols.http import h11_impl", "import from uvicorn.protocols.http"),
        ("def f(connection):\n    return connection._writer", "connection._writer"),
        ("class A:\n    def f(self):\n        return self.client._pool", "self.client._pool"),
        ("import redis\nredis._x", "redis._x"),
        ("def f(c):\n    return getattr(c, '_reader')", "getattr(c, '_reader')"),
        ("import uvicorn\nclass S(uvicorn.Server): ...", "class S derives from uvicorn.Server"),
        (
            "from redis.asyncio.connection import Connection\nclass C(Connection): ...",
            "class C derives from redis.asyncio.connection.Connection",
        ),
        (
            "from fastapi import FastAPI as App\nclass A(App): ...",
            "class A derives from fastapi.FastAPI",
        ),
    ],
)
def test_each_rule_catches_a_breach(snippet: str, breach: str) -> None:
    found = violations(snippet)
    assert any(breach in line for line in found), found


def test_what_the_rules_allow() -> None:
    allowed = """
from __future__ import annotations
import asyncio
from typing import Generic, Protocol, TypeVar
from pydantic import BaseModel
from redis.exceptions import ResponseError
from delayq.ids import _RANDOM_BYTE_TO_CHAR
from ._private import thing
T = TypeVar("T")
class Model(BaseModel): ...
class Shape(Protocol): ...
class Box(Generic[T]): ...
class Wire(asyncio.Protocol): ...
class Refused(ResponseError): ...
class Mine(Model): ...
class A:
    def f(self) -> object:
        return self._thing, type(self).__name__
    @classmethod
    def g(cls) -> object:
        return cls._made
"""
    assert violations(allowed) == []
