"""An ACL that denies a command *inside* a script is reported as RedisAuthError."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from delayq import Queue, RedisAuthError
from delayq.testing import PrivateRedis


async def test_acl_denial_inside_a_script_is_an_auth_error(
    make_redis_server: Callable[..., PrivateRedis],
) -> None:
    server = make_redis_server()
    admin = server.client()
    # May run scripts and read, but not write a hash: send.lua fails at its HSET.
    admin.execute_command(
        "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-hset"
    )  # fmt: skip
    port = server.url.rsplit(":", 1)[1].split("/")[0]
    queue = Queue.from_url(f"redis://app:pw@127.0.0.1:{port}/0", name="acl")
    try:
        with pytest.raises(RedisAuthError, match="can't run this command"):
            await queue.send("t", {"n": 1})
    finally:
        await queue.close()
        admin.close()
