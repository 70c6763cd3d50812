"""Lease tokens: what a consumer that is not a worker holds between a lease and its ack,
nack or extend (:class:`~delayq.consumer.Consumer`).  A token names the task and its
lease's fencing token, so that the scripts can refuse a stale one."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from delayq.errors import InvalidInputError
from delayq.redis.keys import check_task_id, check_topic

MAX_LEASE_TOKEN_CHARS = 1024
_SEPARATOR = "\x1f"  # topics and task ids hold no control characters
_TOKEN_TEXT = re.compile(r"1[A-Za-z0-9_-]{1,1023}")
_FENCING = re.compile(r"[1-9][0-9]{0,18}")
_ATTEMPT = re.compile(r"[1-9][0-9]{0,9}")


@dataclass(frozen=True, slots=True)
class LeaseHandle:
    """What a lease token stands for: the task (topic and id), its lease's fencing token and
    the attempt it is.  Not a secret: whoever may consume the topic may ack its tasks."""

    topic: str
    task_id: str
    fencing_token: str
    attempt: int

    def encode(self) -> str:
        """The lease token: ``1`` (the format's version) and URL-safe base64 without padding."""
        raw = _SEPARATOR.join((self.fencing_token, str(self.attempt), self.topic, self.task_id))
        return "1" + base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode()

    @classmethod
    def parse(cls, text: object) -> LeaseHandle:
        """Read a lease token, strictly: only the canonical encoding of a well-formed handle.

        Raises:
            InvalidInputError: ``text`` is not a lease token.
        """
        if not isinstance(text, str) or not _TOKEN_TEXT.fullmatch(text):
            raise InvalidInputError("lease token is malformed")
        data = text[1:]
        try:
            raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise InvalidInputError("lease token is malformed") from None
        parts = raw.split(_SEPARATOR)
        if len(parts) != 4 or not _FENCING.fullmatch(parts[0]) or not _ATTEMPT.fullmatch(parts[1]):
            raise InvalidInputError("lease token is malformed")
        try:
            handle = cls(check_topic(parts[2]), check_task_id(parts[3]), parts[0], int(parts[1]))
        except InvalidInputError:
            raise InvalidInputError("lease token is malformed") from None
        if handle.encode() != text:  # one token per lease: no aliases
            raise InvalidInputError("lease token is malformed")
        return handle
