"""Run a module with this process's wall clock shifted: ``python -m tests.faults.apps.shifted
SECONDS MODULE [ARGS...]`` (e.g. ``... shifted -5 delayq worker app:queue``).

``time.time`` and ``time.time_ns`` are patched before anything else is imported, so every
library that reads the wall clock through them sees it ``SECONDS`` off.  delayq must not
care: due times, leases and deadlines come from Redis's clock or the monotonic clock.
(``datetime.now()`` reads the clock in C and is not shifted; delayq's scheduling never
calls it.)
"""

import runpy
import sys
import time


def _shift(seconds: float) -> None:
    real_time, real_time_ns = time.time, time.time_ns
    offset_ns = int(seconds * 1e9)
    time.time = lambda: real_time() + seconds
    time.time_ns = lambda: real_time_ns() + offset_ns


def main() -> None:
    """Shift the clock, then run the module as ``__main__`` with the remaining arguments."""
    seconds, module, *rest = sys.argv[1:]
    _shift(float(seconds))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
