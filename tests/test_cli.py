"""The ``delayq`` command, run as a child process the way an operator runs it: through
``python -m delayq`` and through the installed ``delayq`` console script, configured by
``REDIS_URL`` (and the app's ``DELAYQ_QUEUE``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio

import delayq
from delayq import Backoff, Queue, Task
from delayq.cli import load_queue, main
from delayq.testing import free_port
from tests.apps.records import handled
from tests.apps.runner import (
    APP,
    ROOT,
    Result,
    Spawner,
    app_env,
    module_command,
    run_cli,
    script_command,
)
from tests.fixtures_delayq import StartWorker

Command = Callable[..., list[str]]
COMMANDS: dict[str, Command] = {"module": module_command, "script": script_command}


@pytest.fixture(params=sorted(COMMANDS))
def command(request: pytest.FixtureRequest) -> Command:
    """``python -m delayq`` or the ``delayq`` console script."""
    return COMMANDS[request.param]


@pytest.fixture
def spawner(tmp_path: Path) -> Iterator[Spawner]:
    spawner = Spawner(tmp_path)
    yield spawner
    spawner.close()


@pytest.fixture
def env(redis_url: str, queue_name: str) -> dict[str, str]:
    return app_env(redis_url, queue_name)


async def cli(env: dict[str, str], *args: str) -> Result:
    return await run_cli(module_command(*args), env)


# -- worker ----------------------------------------------------------------------------------


async def test_worker_handles_tasks_and_stops_on_sigterm(
    command: Command,
    spawner: Spawner,
    env: dict[str, str],
    queue: Queue,
    redis_client: redis.asyncio.Redis,
) -> None:
    worker = spawner.spawn(command("worker", APP, "--concurrency", "4"), env)
    await worker.wait_started()
    assert "concurrency=4" in worker.log()
    ids = [await queue.send_delayed("count", {}, delay=0.02 * n) for n in range(10)]
    async with asyncio.timeout(10):
        while len(await handled(redis_client, queue.name)) < len(ids):
            await asyncio.sleep(0.02)
    assert await handled(redis_client, queue.name) == dict.fromkeys(ids, 1)

    worker.send_signal(signal.SIGTERM)
    assert await worker.wait() == 0, worker.log()
    assert "worker stopped" in worker.log()
    assert await queue.stats() == {}


async def test_worker_topics_option_consumes_only_those(
    spawner: Spawner, env: dict[str, str], queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    worker = spawner.spawn(module_command("worker", APP, "--topics", "slow,count"), env)
    await worker.wait_started()
    skipped = await queue.send("fail", {})
    counted = await queue.send("count", {})
    async with asyncio.timeout(10):
        while counted not in await handled(redis_client, queue.name):
            await asyncio.sleep(0.02)
    worker.send_signal(signal.SIGTERM)
    assert await worker.wait() == 0
    info = await queue.get("fail", skipped)
    assert info is not None and (info.state, info.attempts) == ("ready", 0)


# -- inspecting and managing ------------------------------------------------------------------

NO_CONTROLS = {"paused": False, "rate_limit": None, "max_running": None, "consumers": 0}


async def test_stats_table_and_json(env: dict[str, str], queue: Queue) -> None:
    await queue.send_delayed("count", {}, delay=60)
    await queue.send_delayed("count", {}, delay=60)
    await queue.send("count", {})
    await queue.send_delayed("slow", {"sleep": 1}, delay=60)

    table, as_json = await asyncio.gather(
        run_cli(module_command("stats", APP), env),
        run_cli(script_command("stats", APP, "--json"), env),
    )
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == [
        "topic", "delayed", "ready", "reserved", "dead", "consumers", "oldest", "controls",
    ]  # fmt: skip
    count, slow = (row.split() for row in rows)
    assert count[:6] == ["count", "2", "1", "0", "0", "0"] and count[6].endswith("s")
    assert slow == ["slow", "1", "0", "0", "0", "0", "-"]
    assert as_json.returncode == 0, as_json.stderr
    listed = json.loads(as_json.stdout)
    assert listed["count"].pop("oldest_ready_age") >= 0
    assert listed == {
        "count": {"delayed": 2, "ready": 1, "reserved": 0, "dead": 0} | NO_CONTROLS,
        "slow": {"delayed": 1, "ready": 0, "reserved": 0, "dead": 0, "oldest_ready_age": None}
        | NO_CONTROLS,
    }


async def test_stats_with_url_and_name_needs_no_app(
    redis_url: str, queue: Queue, queue_name: str
) -> None:
    await queue.send_delayed("anything", {"x": 1}, delay=60)
    bare = app_env(redis_url, "unused")
    del bare["DELAYQ_QUEUE"]
    expected = {
        "anything": {"delayed": 1, "ready": 0, "reserved": 0, "dead": 0, "oldest_ready_age": None}
        | NO_CONTROLS
    }

    with_url, from_env = await asyncio.gather(
        cli(bare, "stats", "--url", redis_url, "--name", queue_name, "--json"),
        cli(bare, "stats", "--name", queue_name, "--json"),  # REDIS_URL from the environment
    )
    assert json.loads(with_url.stdout) == expected, with_url.stderr
    assert json.loads(from_env.stdout) == expected, from_env.stderr


async def test_get_shows_a_task_as_json(env: dict[str, str], queue: Queue) -> None:
    task_id = await queue.send_delayed("count", {"sleep": 0.5}, delay=60, task_id="order-7")

    found, missing = await asyncio.gather(
        cli(env, "get", APP, "count", task_id),
        cli(env, "get", "--name", queue.name, "count", "nope"),
    )
    assert found.returncode == 0, found.stderr
    info = json.loads(found.stdout)
    assert info["id"] == "order-7"
    assert info["topic"] == "count"
    assert info["state"] == "delayed"
    assert info["body"] == {"sleep": 0.5}
    assert info["attempts"] == 0
    assert missing.returncode == 1
    assert "no task 'nope'" in missing.stderr


async def test_cancel(env: dict[str, str], queue: Queue) -> None:
    task_id = await queue.send_delayed("count", {}, delay=60, task_id="order-1")
    first = await run_cli(script_command("cancel", APP, "count", task_id), env)
    assert first.returncode == 0, first.stderr
    assert f"cancelled count/{task_id}" in first.stdout
    assert await queue.get("count", task_id) is None

    again = await cli(env, "cancel", "--name", queue.name, "count", task_id)
    assert again.returncode == 1
    assert "not cancelled" in again.stderr


async def test_forget_removes_a_topic_that_holds_no_task(env: dict[str, str], queue: Queue) -> None:
    await queue.send_delayed("order.clsoe", {}, delay=60, task_id="typo")
    await queue.pause("order.clsoe")
    held = await cli(env, "forget", "--name", queue.name, "order.clsoe")
    assert held.returncode == 1
    assert "still holds tasks" in held.stderr
    assert await queue.cancel("order.clsoe", "typo")
    gone = await cli(env, "forget", "--name", queue.name, "order.clsoe")
    assert gone.returncode == 0, gone.stderr
    assert "forgot order.clsoe" in gone.stdout
    assert "order.clsoe" not in await queue.topic_names()
    assert await queue.stats(["order.clsoe"]) == {}


async def test_dead_lists_and_replays(
    env: dict[str, str], queue: Queue, start_worker: StartWorker
) -> None:
    runs: list[str] = []

    @queue.topic("pay", max_attempts=2, backoff=Backoff(initial=0.01, jitter=0))
    async def pay(body: dict[str, int], task: Task) -> None:
        runs.append(task.id)
        raise RuntimeError(f"declined {body['order']}")

    await start_worker(queue)
    ids = [await pay.send({"order": n}, task_id=f"pay-{n}") for n in range(2)]
    async with asyncio.timeout(10):
        while len(await queue.dead_letters("pay")) < len(ids):
            await asyncio.sleep(0.02)

    listing, limited = await asyncio.gather(
        cli(env, "dead", "--name", queue.name, "pay"),
        cli(env, "dead", "--name", queue.name, "pay", "--limit", "1"),
    )
    assert listing.returncode == 0, listing.stderr
    lines = sorted(listing.stdout.splitlines())
    assert lines == [
        "pay-0\tattempts=2\tRuntimeError: declined 0",
        "pay-1\tattempts=2\tRuntimeError: declined 1",
    ]
    assert len(limited.stdout.splitlines()) == 1

    replayed = await cli(env, "dead", APP, "pay", "--replay", "pay-0")
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed pay/pay-0" in replayed.stdout
    async with asyncio.timeout(10):  # the worker runs it again: two more attempts
        while runs.count("pay-0") < 4:
            await asyncio.sleep(0.02)
    not_dead = await cli(env, "dead", APP, "pay", "--replay", "pay-9")
    assert not_dead.returncode == 1
    assert "is not a dead letter" in not_dead.stderr


async def test_generated_ids_work_as_cli_arguments(env: dict[str, str], queue: Queue) -> None:
    # 1,000 sends: the chance that none starts with '-' is about 1 in 70,000.
    ids = [await queue.send_delayed("count", {}, delay=60) for _ in range(1000)]
    awkward = [task_id for task_id in ids if task_id.startswith("-")]
    if awkward:
        result = await cli(env, "get", APP, "count", awkward[0])
        assert result.returncode == 0, result.stderr
        # `--` is the workaround meanwhile:
        assert (await cli(env, "get", APP, "count", "--", awkward[0])).returncode == 0


# -- errors ----------------------------------------------------------------------------------


async def test_bad_app_exits_2_with_a_clear_message(env: dict[str, str]) -> None:
    no_module, bad_topic = await asyncio.gather(
        cli(env, "worker", "no_such_module_xyz:queue"),
        run_cli(script_command("worker", APP, "--topics", "count,nope"), env),
    )
    for result, message in (
        (no_module, "delayq: cannot import 'no_such_module_xyz'"),
        (bad_topic, "delayq: no handler registered for topic(s) nope"),
    ):
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [result.stderr.strip().splitlines()[0]]
        assert result.stderr.startswith(message), result.stderr  # one line, no traceback


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["worker", "no_such_module_xyz:queue"],
            "cannot import 'no_such_module_xyz'",
            id="no-module",
        ),
        pytest.param(
            ["worker", "tests.apps.records:handled"],
            "is not a delayq.Queue (got function); it holds no delayq.Queue (an app is named "
            "as module:attribute, e.g. app.tasks:queue)",
            id="not-a-queue",
        ),
        pytest.param(
            ["worker", "tests.apps.counting:nothing"],
            "module 'tests.apps.counting' has no attribute 'nothing'; "
            "its queues: tests.apps.counting:queue",
            id="no-attribute",
        ),
        pytest.param(
            ["worker", "tests.apps.counting"],
            "'tests.apps.counting' is a module, not a Queue: add the attribute; "
            "its queues: tests.apps.counting:queue",
            id="module-only",
        ),
        pytest.param(
            ["worker", "justaname"],
            "expected module:attribute, e.g. app.tasks:queue, got 'justaname'",
            id="no-colon",
        ),
        pytest.param(
            ["worker", APP, "--topics", "count,nope"],
            "no handler registered for topic(s) nope",
            id="bad-topic",
        ),
        pytest.param(
            ["worker", APP, "--concurrency", "0"],
            "concurrency must be a positive int",
            id="concurrency",
        ),
        pytest.param(
            ["stats"],
            "give an app (module:attribute, e.g. app.tasks:queue) or --url / $REDIS_URL",
            id="no-url",
        ),
        pytest.param(
            ["stats", "--url", f"redis://127.0.0.1:{free_port()}/0"],
            "Redis is unavailable",
            id="unreachable",
        ),
    ],
)
def test_errors_exit_2_with_one_line(
    args: list[str],
    message: str,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same checks in this process (``cli.main``), where they cost no interpreter start."""
    # main() configures logging for a process of its own; leave pytest's alone.
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)
    monkeypatch.setenv("DELAYQ_QUEUE", env["DELAYQ_QUEUE"])
    if args == ["stats"]:
        monkeypatch.delenv("REDIS_URL", raising=False)
    else:
        monkeypatch.setenv("REDIS_URL", env["REDIS_URL"])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("delayq: ") and err.count("\n") == 1, err
    assert message in err


def test_an_app_named_with_a_dot_still_loads(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", env["REDIS_URL"])
    monkeypatch.setenv("DELAYQ_QUEUE", env["DELAYQ_QUEUE"])
    assert load_queue("tests.apps.counting.queue") is load_queue(APP)


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"delayq {delayq.__version__}\n"


def test_url_without_name_says_which_queue_it_read(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)
    # A database no test writes to, so the default queue there is empty.
    empty = redis_url.rpartition("/")[0] + "/15"
    note = "queue 'default' (no --name given: 'default' is the default)"
    assert main(["stats", "--url", empty]) == 0
    assert capsys.readouterr().err == f"{note} holds no tasks\n"
    assert main(["get", "--url", empty, "count", "order-7"]) == 1
    assert capsys.readouterr().err == f"no task 'order-7' in topic 'count' of {note}\n"
    assert main(["stats", "--url", empty, "--name", "default"]) == 0
    assert capsys.readouterr().err == "queue 'default' holds no tasks\n"


async def test_output_into_a_closed_pipe_ends_quietly(env: dict[str, str], queue: Queue) -> None:
    """``delayq get ... | head -1``: the reader may be gone before the command writes."""
    await queue.send_delayed("count", {}, task_id="t1", delay=60)
    read, write = os.pipe()
    os.close(read)  # the reader has gone: any write fails with EPIPE
    try:
        proc = await asyncio.create_subprocess_exec(
            *module_command("get", APP, "count", "t1"),
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
        )
    finally:
        os.close(write)
    async with asyncio.timeout(20):
        _, err = await proc.communicate()
    assert proc.returncode == 1
    assert err.decode() == ""


async def test_history_says_when_a_topic_keeps_none(
    env: dict[str, str], redis_url: str, queue: Queue, start_worker: StartWorker
) -> None:
    declared = await cli(env, "history", APP, "count")
    assert declared.returncode == 1, declared.stderr
    assert "topic 'count' of queue" in declared.stderr
    assert "keeps no history (declare it with history=N" in declared.stderr
    by_url = ("history", "--url", redis_url, "--name", queue.name)
    recorded = await cli(env, *by_url, "kept")
    assert recorded.returncode == 1 and "keeps no history" in recorded.stderr

    @queue.topic("kept", history=10)
    async def handle(body: dict[str, int]) -> None: ...

    await start_worker(queue)  # records the topic's history setting in Redis
    async with asyncio.timeout(10):
        while not await queue.history.kept("kept"):
            await asyncio.sleep(0.02)
    empty = await cli(env, *by_url, "kept")
    assert empty.returncode == 0, empty.stderr
    assert "keeps history, but no task of it has finished yet" in empty.stderr


@pytest.mark.parametrize(
    "args", [[], ["frobnicate"], ["worker"], ["get", "--name", "q", "only-topic"]]
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert "usage: delayq" in capsys.readouterr().err


async def test_unknown_log_level_exits_2_with_a_clear_message(env: dict[str, str]) -> None:
    typo = {**env, "DELAYQ_LOG_LEVEL": "verbose"}
    from_env, from_flag = await asyncio.gather(
        cli(typo, "stats", APP), cli(env, "--log-level", "loud", "stats", APP)
    )
    for result in (from_env, from_flag):
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert "level" in result.stderr.lower()


async def test_get_cancel_and_stats_on_a_sharded_topic(
    redis_url: str, queue: Queue, queue_name: str
) -> None:
    """The CLI declares no handler: it takes the shard count recorded in Redis."""
    from tests.test_shards import ids_in

    @queue.topic("sharded", shards=4)
    async def handle(body: dict[str, int]) -> None: ...

    ids = [ids_in(shard, 1, 4, stem="cli")[0] for shard in range(4)]
    await queue.send_many("sharded", [{"n": n} for n in range(4)], task_ids=ids, delay=60)
    bare = app_env(redis_url, "unused")
    where = ("--url", redis_url, "--name", queue_name)
    stats = await cli(bare, "stats", *where, "--json")
    assert json.loads(stats.stdout)["sharded"]["delayed"] == 4, stats.stderr
    found = await cli(bare, "get", *where, "sharded", ids[3])
    assert json.loads(found.stdout)["body"] == {"n": 3}, found.stderr
    cancelled = await cli(bare, "cancel", *where, "sharded", ids[2])
    assert cancelled.returncode == 0, cancelled.stderr
    assert await queue.get("sharded", ids[2]) is None
