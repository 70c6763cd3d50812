"""Task bodies: JSON through pydantic, both ways, with a size limit.  Never pickle."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pydantic_core
from pydantic import BaseModel, TypeAdapter, ValidationError

from delayq.errors import BodyTooLargeError, BodyValidationError

DEFAULT_MAX_BODY_BYTES = 512 * 1024


def describe_validation_error(topic: str, exc: ValidationError) -> str:
    """One line naming the topic and each failing field, e.g. ``order_id: Input should be...``."""
    problems = "; ".join(
        f"{'.'.join(str(part) for part in err['loc']) or '<body>'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )
    return f"body for topic {topic!r} is invalid: {problems}"


def encode_body(
    topic: str, body: object, adapter: TypeAdapter[Any] | None, max_bytes: int
) -> bytes:
    """Validate ``body`` (against ``adapter`` when the topic's handler is known) and encode it.

    Raises:
        BodyValidationError: not JSON-serialisable, or invalid for the topic's model.
        BodyTooLargeError: the encoding is longer than ``max_bytes``.
    """
    value = body  # validated when the model is known: what failed to encode
    try:
        if adapter is not None:
            value = adapter.validate_python(body)
            data = adapter.dump_json(value)
        else:
            # NaN and infinities become null, as a pydantic model's dump_json does by
            # default: the stored body stays strict JSON that any consumer can parse.
            data = pydantic_core.to_json(body, inf_nan_mode="null")
    except ValidationError as exc:
        raise BodyValidationError(describe_validation_error(topic, exc)) from exc
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        raise BodyValidationError(
            f"body for topic {topic!r} is not JSON-serialisable: {unencodable_path(value)}: {exc}"
        ) from exc
    check_size(topic, data, max_bytes)
    return data


def unencodable_path(body: object) -> str:
    """The dotted path to the innermost part of ``body`` that cannot be encoded alone.

    Named like a validation error's field (``items.0.price``; ``<body>`` when no single
    part is to blame).  pydantic's serialisation errors name only the type, so this walks
    down the failing branch, encoding each child on its own.  It runs only after an
    encoding failed, so the repeated encodings cost nothing on the send path.
    """
    path: list[str] = []
    visited: set[int] = set()  # a container that holds itself ends the walk
    node = body
    while id(node) not in visited:
        visited.add(id(node))
        culprit = _first_unencodable_child(node)
        if culprit is None:
            break
        key, node = culprit
        path.append(str(key))
    return ".".join(path) or "<body>"


def _first_unencodable_child(node: object) -> tuple[object, object] | None:
    return next(((key, child) for key, child in _children(node) if not _encodes(child)), None)


def _children(node: object) -> Iterator[tuple[object, object]]:
    if isinstance(node, Mapping):
        yield from node.items()
    elif isinstance(node, BaseModel):
        yield from ((name, getattr(node, name)) for name in type(node).model_fields)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        yield from ((f.name, getattr(node, f.name)) for f in dataclasses.fields(node))
    elif isinstance(node, list | tuple | set | frozenset):
        yield from enumerate(node)


def _encodes(value: object) -> bool:
    try:
        pydantic_core.to_json(value, inf_nan_mode="null")
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError):
        return False
    return True


def check_size(topic: str, data: bytes, max_bytes: int) -> None:
    """Raise :class:`BodyTooLargeError` when ``data`` is longer than ``max_bytes``."""
    if len(data) > max_bytes:
        raise BodyTooLargeError(
            f"body for topic {topic!r} is {len(data)} bytes, over the limit of {max_bytes}"
        )


def decode_body(topic: str, data: bytes, adapter: TypeAdapter[Any] | None, max_bytes: int) -> Any:
    """Decode a stored body, validating it against ``adapter`` when given.

    Raises:
        BodyTooLargeError: the stored body is over the size limit.
        BodyValidationError: not JSON, or invalid for the topic's model.
    """
    check_size(topic, data, max_bytes)
    try:
        if adapter is not None:
            return adapter.validate_json(data)
        return pydantic_core.from_json(data)
    except ValidationError as exc:
        raise BodyValidationError(describe_validation_error(topic, exc)) from exc
    except ValueError as exc:
        raise BodyValidationError(f"stored body for topic {topic!r} is not JSON: {exc}") from exc
