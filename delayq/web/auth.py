"""Bearer tokens with scopes, for the HTTP API and the dashboard.

Scopes: ``read`` (stats, lookups, dead letters, the schedule), ``produce`` (send, cancel,
reschedule), ``consume`` (reserve, ack, nack, extend) and ``admin`` (everything, and
replaying dead letters).  Tokens come from a file or an environment variable, one per
line::

    # scopes            token
    read                4f9c0e8d2b7a41d6a1e35c0b9d8f7e6a
    produce,consume     0a1b2c3d4e5f60718293a4b5c6d7e8f9
    admin               9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b

A token is presented as ``Authorization: Bearer <token>``, never in the URL.  It is
compared with every configured token in constant time (``hmac.compare_digest`` of their
SHA-256 digests, all of them, whatever matched), so neither the time taken nor an early
exit tells how much of a guess was right.  With no token configured at all the API is
read-only and needs no token for reads; a write then always fails with 403.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from delayq.errors import InvalidInputError
from delayq.web.errors import ApiProblem

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

Scope = Literal["read", "produce", "consume", "admin"]
SCOPES: frozenset[str] = frozenset(get_args(Scope))
WRITE_SCOPES = frozenset({"produce", "consume", "admin"})
ENV_VAR = "DELAYQ_WEB_TOKENS"
MIN_TOKEN_CHARS = 16
_TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces: fits an HTTP header


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """The configured tokens and their scopes.

    Args:
        tokens: token -> scopes.  A token shorter than 16 characters, holding anything
            but printable ASCII, or naming an unknown scope raises ``InvalidInputError``.
    """

    def __init__(self, tokens: Mapping[str, Iterable[str]] | None = None) -> None:
        self._entries: list[tuple[bytes, frozenset[str]]] = []
        for token, scopes in (tokens or {}).items():
            wanted = frozenset(scopes)
            if not isinstance(token, str) or not _TOKEN.fullmatch(token):
                raise InvalidInputError("a token must be printable ASCII without spaces")
            if len(token) < MIN_TOKEN_CHARS:
                raise InvalidInputError(f"a token must be at least {MIN_TOKEN_CHARS} characters")
            unknown = wanted - SCOPES
            if unknown or not wanted:
                raise InvalidInputError(
                    f"scopes must be some of {', '.join(sorted(SCOPES))}, got {sorted(wanted)}"
                )
            self._entries.append((_digest(token), wanted))
        self._matched: dict[str, bytes] = {}
        """Presented tokens that matched a configured one -> their digest (see scopes_of)."""

    @classmethod
    def parse(cls, text: str, *, source: str = "tokens") -> Tokens:
        """Read lines of ``scopes token`` (scopes comma-separated; ``#`` starts a comment)."""
        tokens: dict[str, set[str]] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise InvalidInputError(f"{source} line {number}: expected `scopes token`")
            scopes, token = parts
            tokens.setdefault(token, set()).update(s for s in scopes.split(",") if s)
        return cls(tokens)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Tokens:
        """Read a token file (see :meth:`parse`)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"cannot read token file {path}: {exc}") from exc
        return cls.parse(text, source=str(path))

    @classmethod
    def from_env(cls, name: str = ENV_VAR) -> Tokens:
        """Read the tokens from environment variable ``name`` (lines, or entries split by ``;``)."""
        return cls.parse(os.environ.get(name, "").replace(";", "\n"), source=f"${name}")

    @property
    def anonymous_read(self) -> bool:
        """No token is configured: reads need none, and nothing can be written."""
        return not self._entries

    @property
    def writable(self) -> bool:
        """Some token may write."""
        return any(scopes & WRITE_SCOPES for _, scopes in self._entries)

    def scopes_of(self, presented: str | None) -> frozenset[str]:
        """The scopes ``presented`` grants (empty for an unknown token or none).

        Compares against every configured token in constant time; ``admin`` grants all.
        """
        if presented is None:
            return frozenset()
        # A token that matched before is not hashed again (SHA-256 is a measurable part of
        # an HTTP send's cost).  Only configured tokens are kept, so the dict stays as small
        # as the token file, and looking a guess up in it tells nothing of how close it
        # was: strings are compared only once their salted 64-bit hashes are equal.  The
        # comparison with every configured token below stays, whatever was found.
        digest = self._matched.get(presented)
        if digest is None:
            digest = _digest(presented)
        granted: set[str] = set()
        for known, scopes in self._entries:
            if hmac.compare_digest(digest, known):
                granted |= scopes
        if granted and len(self._matched) < len(self._entries):
            self._matched[presented] = digest
        if "admin" in granted:
            return SCOPES
        return frozenset(granted)


def authorize(tokens: Tokens, scope: Scope, credentials: str | None) -> frozenset[str]:
    """The scopes granted to a request that presented bearer ``credentials`` (None: no
    bearer token), if they include ``scope``; else the 401 or 403 to answer."""
    if tokens.anonymous_read:
        if scope == "read":
            return frozenset({"read"})
        raise ApiProblem(403, "forbidden", "read-only: no token is configured for writes")
    if credentials is None:
        raise ApiProblem(401, "unauthorized", "a bearer token is required")
    granted = tokens.scopes_of(credentials)
    if not granted:
        raise ApiProblem(401, "unauthorized", "unknown token")
    if scope not in granted:
        raise ApiProblem(403, "forbidden", f"this token lacks the {scope!r} scope")
    return granted
