"""Task ids generated client-side, before the first attempt to send.

An id fixed before the first attempt is what makes a send whose outcome is unknown (a
timeout, a cut connection) safe to retry: sending the same id again adds nothing.
"""

from __future__ import annotations

import os

ID_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_."
ID_CHARS = 12
_RANDOM_BYTE_TO_CHAR = bytes(ID_ALPHABET[byte % 64] for byte in range(256))
"""Maps each byte to one of the 64 characters; 256 is a multiple of 64, so a uniformly random
byte gives a uniformly random character (6 bits).  ``bytes.translate`` runs it in C."""


def new_task_id() -> str:
    """A random id: 12 characters of [A-Za-z0-9_.] (72 bits).  Twelve bytes keep each copy
    of the id in Redis's smallest string class, and without '-' an id never reads as a
    command-line option."""
    return os.urandom(ID_CHARS).translate(_RANDOM_BYTE_TO_CHAR).decode()


def new_task_ids(count: int) -> list[str]:
    """``count`` ids as :func:`new_task_id` makes them, from one ``os.urandom`` call."""
    text = os.urandom(ID_CHARS * count).translate(_RANDOM_BYTE_TO_CHAR).decode()
    return [text[start : start + ID_CHARS] for start in range(0, len(text), ID_CHARS)]
