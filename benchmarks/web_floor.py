"""The floor under an HTTP send: a server that answers ``POST .../tasks`` with a fixed 201
and does nothing else (no Redis, no parsing), run as ``delayq web`` runs (uvicorn with
httptools, uvloop, the same corked transport, access log off).  ``benchmarks/web.py
--floor`` measures it one request at a time beside ``send_delayed``: what HTTP alone costs
per request on this host.

    python -m benchmarks.web_floor PORT
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from delayq.web.server import http_protocol

REPLY = b'{"id":"aaaaaaaaaaaa","topic":"t","outcome":"created"}'
START = {
    "type": "http.response.start", "status": 201,
    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(REPLY))],
}  # fmt: skip
BODY = {"type": "http.response.body", "body": REPLY}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(START)
    await send(BODY)


def main() -> None:
    import uvloop

    uvloop.install()
    uvicorn.run(
        app, host="127.0.0.1", port=int(sys.argv[1]), access_log=False, log_level="warning",
        lifespan="off", server_header=False, http=http_protocol(),
    )  # fmt: skip


if __name__ == "__main__":
    main()
