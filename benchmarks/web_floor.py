"""The floors under an HTTP send, run as ``delayq web`` runs (uvicorn with httptools,
uvloop, access log off).  ``benchmarks/web.py --floor``
measures each one request at a time beside ``send_delayed``:

* ``python -m benchmarks.web_floor PORT``: a server that answers ``POST .../tasks`` with a
  fixed 201 and does nothing else (no Redis, no parsing): what HTTP alone costs per
  request on this host;
* ``python -m benchmarks.web_floor PORT --redis URL --name QUEUE``: the same, plus one real
  send per request: ``send.lua`` run once with fixed arguments (a fresh task id, a fixed
  body, 1 h delay) through the script lane of a ``Queue.from_url`` queue, as the app's
  sends are, and nothing else (no parsing, no validation, no encoding).  What HTTP plus a
  Redis round trip of a send cost together: the most any HTTP send one request at a time
  can reach on this host, whatever the server's own work.
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn

REPLY = b'{"id":"aaaaaaaaaaaa","topic":"t","outcome":"created"}'
START = {
    "type": "http.response.start", "status": 201,
    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(REPLY))],
}  # fmt: skip
BODY = {"type": "http.response.body", "body": REPLY}
TOPIC = "floor"
SEND_BODY = b'{"i":0}'
DELAY_MS = 3_600_000


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(START)
    await send(BODY)


def redis_app(url: str, name: str) -> Any:
    """The do-nothing app, plus one ``send.lua`` per request through a queue's lane."""
    from delayq import Queue
    from delayq.ids import new_task_id

    state: dict[str, Any] = {}

    async def with_send(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        queue = state.get("queue")
        if queue is None:  # opened in the server's event loop
            queue = state["queue"] = Queue.from_url(url, name=name)
        status, _ = await queue.scripts.send(
            queue.keys(TOPIC), new_task_id(), absolute=False, value_ms=DELAY_MS,
            max_attempts=0, ttr_ms=0, body=SEND_BODY, tolerance_ms=5000,
        )  # fmt: skip
        assert status == 1, status
        await send(START)
        await send(BODY)

    return with_send


def main() -> None:
    import uvloop

    parser = argparse.ArgumentParser(prog="python -m benchmarks.web_floor")
    parser.add_argument("port", type=int)
    parser.add_argument("--redis", help="also run one send.lua per request on this Redis")
    parser.add_argument("--name", default="floor", help="the queue's name (with --redis)")
    args = parser.parse_args()
    uvloop.install()
    uvicorn.run(
        redis_app(args.redis, args.name) if args.redis else app, host="127.0.0.1",
        port=args.port, access_log=False, log_level="warning", lifespan="off",
        server_header=False,
    )  # fmt: skip


if __name__ == "__main__":
    main()
