"""Security: names cannot escape their namespace, and nothing stored is ever executed.

* Topic and queue names, fuzzed with hypothesis: either rejected with ``InvalidNameError``
  before anything is written, or every key built for them lies under ``delayq:{`` with the
  hash tag ``{queue:topic}`` — one Redis Cluster slot per (queue, topic), and no two
  (queue, topic) pairs ever share a tag.
* Task ids, fuzzed: rejected, or stored only as members and fields inside the topic's own
  keys (sent, read back and cancelled on a real Redis, which then holds no other key).
* No pickle, marshal, eval or exec anywhere in delayq, and the Lua scripts never decode a
  body (they only parse the numeric header), so a planted blob can never run.
"""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

import delayq
from delayq import InvalidNameError, Queue
from delayq.redis.keys import TopicKeys, check_queue_name, check_task_id, check_topic, topics_key
from delayq.testing import PrivateRedis

# Every character class that matters: braces, ':', glob characters, whitespace, control
# characters, non-ASCII, and plain letters.
NAME_CHARS = st.sampled_from([*"ab:{}*?[]\\ \t\n\x00\x7f\u00e9\u4e2d/.-_%", "\U0001f600"])
UNSAFE_MODULES = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "yaml"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}
names = st.one_of(st.text(NAME_CHARS, max_size=12), st.text(max_size=12),
                  st.text(min_size=195, max_size=205))  # fmt: skip


def _tag(key: str) -> str | None:
    """The Redis Cluster hash tag of ``key`` (the rule redis-server applies)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if start >= 0 and end > start + 1 else None


def _keys_or_none(queue: str, topic: str) -> TopicKeys | None:
    try:
        return TopicKeys.build(check_queue_name(queue), check_topic(topic))
    except InvalidNameError:
        return None


@settings(max_examples=500, deadline=None)
@given(queue=names, topic=names, other_queue=names, other_topic=names)
def test_keys_stay_in_their_namespace_and_slot(queue, topic, other_queue, other_topic) -> None:
    keys = _keys_or_none(queue, topic)
    if keys is None:
        return
    built = [keys.prefix, keys.wheel, keys.reserved, keys.dead, keys.errors, keys.seq,
             keys.wake, keys.buckets, keys.bucket("an id"), keys.bucket("an id", 9000),
             keys.slot("0000000000000001"), keys.controls, keys.starts, keys.prio,
             keys.prio_ready, keys.prio_mark]  # fmt: skip
    for key in built:
        assert key.startswith("delayq:{")
        assert _tag(key) == f"{queue}:{topic}"
    assert len({key_slot(key.encode()) for key in built}) == 1
    assert _tag(topics_key(queue)) == queue
    other = _keys_or_none(other_queue, other_topic)
    if other is not None and (other_queue, other_topic) != (queue, topic):
        assert _tag(other.wheel) != _tag(keys.wheel)
        assert not set(built) & {other.wheel, other.bucket("an id"), other.reserved, other.dead}


@pytest.mark.parametrize("bad", ["a{b", "a}b", "a b", "a\nb", "a\x00b", "", "x" * 201])
def test_names_that_could_escape_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidNameError):
        check_topic(bad)
    with pytest.raises(InvalidNameError):
        check_queue_name(bad)
    with pytest.raises(InvalidNameError):
        check_queue_name("a:b")  # ("a:b", "c") and ("a", "b:c") would share a tag


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_id=st.one_of(st.text(NAME_CHARS, max_size=20), st.text(max_size=40),
                         st.binary(max_size=20).map(lambda b: b.decode("latin-1"))))  # fmt: skip
def test_task_ids_stay_inside_their_topic(redis_server: PrivateRedis, task_id: str) -> None:
    try:
        check_task_id(task_id)
    except InvalidNameError:
        return
    asyncio.run(_round_trip(redis_server, task_id))


async def _round_trip(server: PrivateRedis, task_id: str) -> None:
    # A database of its own, so that any key the send created must be one of the topic's.
    queue = Queue.from_url(f"redis://127.0.0.1:{server.port}/7", name="fuzzids")
    try:
        await queue.send_delayed("t", {"id": task_id}, 60, task_id=task_id)
        info = await queue.get("t", task_id)
        assert info is not None and info.id == task_id and info.body == {"id": task_id}
        keys = queue.keys("t")
        allowed = {keys.wheel, keys.bucket(task_id), keys.prefix + "slots", keys.meta,
                   topics_key("fuzzids")}  # fmt: skip
        present = {k.decode() async for k in queue.redis.scan_iter("*")}
        slots = {k for k in present if k.startswith(keys.prefix + "slot:")}
        assert present - slots <= allowed, present - slots - allowed
        assert len(slots) == 1
        assert await queue.cancel("t", task_id)
    finally:
        await queue.close()


def test_nothing_stored_is_ever_executed_or_unpickled() -> None:
    package = Path(delayq.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                    node.module or ""]  # fmt: skip
                assert not {m.split(".")[0] for m in modules} & UNSAFE_MODULES, (path, modules)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in UNSAFE_CALLS, (path.name, node.lineno, node.func.id)
    forbidden_lua = re.compile(r"\b(loadstring|load|dofile|cjson|cmsgpack)\b")
    for path in (package / "lua").glob("*.lua"):
        code = "\n".join(line.split("--")[0] for line in path.read_text().splitlines())
        assert not forbidden_lua.search(code), (path.name, forbidden_lua.search(code))
