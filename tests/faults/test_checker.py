"""The checker's own reading of delivery logs (no Redis needed)."""

from __future__ import annotations

from pathlib import Path

from tests.faults.checker import Delivery, append, read_log


def test_a_line_still_being_written_is_not_read(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    whole = Delivery("t-1", 10.0, 9.5, 1, 42, "done")
    append(log, whole)
    # What a reader sees while another process is in the middle of its write(2).
    with log.open("a") as file:
        file.write(Delivery("t-2", 11.0, 10.5, 1, 42, "running").line()[:4])
    assert read_log(tmp_path) == [whole]


def test_every_whole_line_of_every_log_is_read(tmp_path: Path) -> None:
    first = Delivery("a", 1.0, 0.5, 1, 1, "start")
    second = Delivery("b", 2.0, 1.5, 2, 2, "done")
    append(tmp_path / "1.log", first)
    append(tmp_path / "2.log", second)
    assert read_log(tmp_path) == [first, second]
