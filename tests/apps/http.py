"""``tests.apps.http:app``: the HTTP API of ``tests.apps.counting``'s queue as an ASGI app
for uvicorn, with one token per scope (``tests.web.conftest.TOKENS``)."""

from __future__ import annotations

from delayq.web import Tokens, create_app
from tests.apps.counting import queue
from tests.web.conftest import TOKENS

app = create_app(queue, Tokens({token: [scope] for scope, token in TOKENS.items()}))
