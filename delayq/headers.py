"""Per-task headers: small ``str -> str`` maps sent with a task (W3C trace context, ...).

Headers are stored in the body's field of the task's bucket, in front of the body, only
when there are any::

    \\x01{"traceparent":"00-..."}\\x01{"order_id":7}

No JSON text starts with the byte ``\\x01`` and no JSON text contains it unescaped, so the
byte both marks headers and ends them.  A task without headers is stored exactly as before
(its body alone), so headers cost nothing in Redis, in the scripts or in memory when they
are not used; the scripts never look inside the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pydantic_core

from delayq.errors import InvalidHeadersError

MARK = b"\x01"
MAX_HEADERS = 32
"""Most headers one task may carry."""
MAX_HEADERS_BYTES = 4096
"""Largest encoded size of a task's headers (names, values and JSON punctuation)."""
MAX_NAME_CHARS = 128
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")
_VALUE_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f]")
NO_HEADERS: Mapping[str, str] = MappingProxyType({})
"""The headers of a task sent without any (read-only)."""


def check_headers(headers: object) -> dict[str, str]:
    """Return ``headers`` as a new dict if valid, else raise :class:`InvalidHeadersError`.

    Names are 1-128 characters of letters, digits, ``.``, ``_`` and ``-`` (not starting with
    a punctuation mark); values are strings without control characters; at most
    :data:`MAX_HEADERS` of them, :data:`MAX_HEADERS_BYTES` encoded.
    """
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidHeadersError(f"headers must be a mapping of str to str, got {headers!r}")
    if len(headers) > MAX_HEADERS:
        raise InvalidHeadersError(f"{len(headers)} headers, over the limit of {MAX_HEADERS}")
    for name, value in headers.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > MAX_NAME_CHARS:
            raise InvalidHeadersError(
                f"header name {name!r} must be 1-{MAX_NAME_CHARS} letters, digits, '.', '_' "
                "or '-', starting with a letter or digit"
            )
        if not isinstance(value, str):
            raise InvalidHeadersError(f"header {name!r} must be a str, got {type(value).__name__}")
        if _VALUE_FORBIDDEN.search(value):
            raise InvalidHeadersError(f"header {name!r} contains a control character")
    return dict(headers)


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """The prefix stored before the body: empty for no headers.

    Raises:
        InvalidHeadersError: the encoding is over :data:`MAX_HEADERS_BYTES`.
    """
    if not headers:
        return b""
    data = pydantic_core.to_json(headers)
    if len(data) > MAX_HEADERS_BYTES:
        raise InvalidHeadersError(
            f"headers are {len(data)} bytes encoded, over the limit of {MAX_HEADERS_BYTES}"
        )
    return MARK + data + MARK


def split_headers(field: bytes) -> tuple[Mapping[str, str], bytes]:
    """(headers, body) of a stored body field.  Unreadable headers are dropped, not raised:
    the body is what the handler needs, and validating it reports what is wrong with it."""
    if field[:1] != MARK:
        return NO_HEADERS, field
    end = field.find(MARK, 1)
    if end < 0:
        return NO_HEADERS, field
    try:
        parsed: Any = pydantic_core.from_json(field[1:end])
    except ValueError:
        parsed = None
    headers = (
        {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else NO_HEADERS
    )
    return headers, field[end + 1 :]
