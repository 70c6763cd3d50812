"""``delayq web``'s transport wrapper: a response's writes in one loop step leave as one."""

from __future__ import annotations

import asyncio
from typing import Any

from delayq.web.server import CorkedTransport


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


async def test_writes_of_one_step_leave_as_one_and_close_flushes() -> None:
    raw = Recorder()
    corked = CorkedTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"HTTP/1.1 201 Created\r\n\r\n")
    corked.write(memoryview(b'{"id": "a"}'))
    assert raw.writes == [] and corked.get_write_buffer_size() == 35
    await asyncio.sleep(0)
    assert raw.writes == [b'HTTP/1.1 201 Created\r\n\r\n{"id": "a"}']
    corked.writelines([b"a", b"b"])
    corked.close()  # what is pending goes first
    assert raw.writes[1:] == [b"ab"] and raw.closed
    await asyncio.sleep(0)  # the scheduled flush finds nothing left
    assert len(raw.writes) == 2
    assert corked.get_extra_info("peername") == ("127.0.0.1", 1)


async def test_nothing_is_written_to_a_closing_transport() -> None:
    raw = Recorder()
    corked = CorkedTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"late")
    raw.closed = True
    await asyncio.sleep(0)
    assert raw.writes == []
