"""The shared checks: bounded_int's verdicts and messages, and RetryPacing's pauses."""

from __future__ import annotations

import pytest

from delayq.bounds import bounded_int
from delayq.errors import InvalidInputError
from delayq.pacing import RetryPacing


def test_bounded_int_returns_an_int_within_its_bounds() -> None:
    assert bounded_int(5, "limit", 1, 10) == 5
    assert bounded_int(1, "limit", 1, 10) == 1
    assert bounded_int(10, "limit", 1, 10) == 10
    assert bounded_int(-3, "priority", -3, 3) == -3
    assert bounded_int(10**9, "concurrency", 1) == 10**9
    assert bounded_int(-7, "before") == -7


@pytest.mark.parametrize(
    ("value", "low", "high", "message"),
    [
        (0, 1, 10, "limit must be an int in [1, 10], got 0"),
        (11, 1, 10, "limit must be an int in [1, 10], got 11"),
        (True, 1, 10, "limit must be an int in [1, 10], got True"),
        (2.0, 1, 10, "limit must be an int in [1, 10], got 2.0"),
        ("3", 1, None, "limit must be a positive int, got '3'"),
        (-1, 0, None, "limit must be an int >= 0, got -1"),
        (None, None, None, "limit must be an int, got None"),
    ],
)
def test_bounded_int_names_the_field_and_its_range(
    value: object, low: int | None, high: int | None, message: str
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        bounded_int(value, "limit", low, high)
    assert str(raised.value) == message
    assert isinstance(raised.value, ValueError)


def test_retry_pacing_doubles_to_its_cap_and_starts_over_after_a_success() -> None:
    pacing = RetryPacing(first=0.05, cap=1.0)
    assert [pacing.failed() for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert pacing.failures == 7
    pacing.succeeded()
    assert pacing.failures == 0
    assert pacing.failed() == 0.05


def test_retry_pacing_survives_a_long_outage() -> None:
    pacing = RetryPacing()
    for _ in range(10_000):
        pause = pacing.failed()
    assert pause == 1.0
