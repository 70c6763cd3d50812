"""Task bodies: JSON through pydantic, both ways, with a size limit.  Never pickle."""

from __future__ import annotations

from typing import Any

import pydantic_core
from pydantic import TypeAdapter, ValidationError

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
    try:
        if adapter is not None:
            data = adapter.dump_json(adapter.validate_python(body))
        else:
            # NaN and infinities become null, as a pydantic model's dump_json does by
            # default: the stored body stays strict JSON that any consumer can parse.
            data = pydantic_core.to_json(body, inf_nan_mode="null")
    except ValidationError as exc:
        raise BodyValidationError(describe_validation_error(topic, exc)) from exc
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        raise BodyValidationError(
            f"body for topic {topic!r} is not JSON-serialisable: {exc}"
        ) from exc
    check_size(topic, data, max_bytes)
    return data


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
