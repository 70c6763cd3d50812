"""One adapter module per benchmarked library.

``PEERS`` maps each library to the virtualenv group it runs in: the peers pin
conflicting redis-py versions, so they live in ``benchmarks/.venvs/<group>``
(installed from ``benchmarks/requirements-<group>.txt``).  The special group
``dev`` means the project's own interpreter (``.venv``), where delayq lives.

Adding a library = one module here that subclasses ``benchmarks.common.Peer``
and ends with ``run_cli(...)``, plus one line below.
"""

#: library -> virtualenv group, in report order.
PEERS: dict[str, str] = {
    "delayq": "dev",
    "arq": "redis5",
    "saq": "redis5",
    "streaq": "redis8",
    "taskiq": "redis8",
    "bullmq": "redis8",
    "bare": "dev",  # no library: delayq's shape of work, the drain's yardstick
}

#: Group name that means "the dev interpreter", not a benchmark virtualenv.
DEV_GROUP = "dev"

#: delayq configurations measured beside delayq on request (``--only delayq,delayq_base``),
#: never in a default run: library -> virtualenv group, like ``PEERS``.
VARIANTS: dict[str, str] = {
    "delayq_base": "dev",  # delayq at a git ref, before a change (peers/delayq_base.py)
    "delayq_results": "dev",  # its topics keep results (peers/delayq_results.py)
}

#: Everything ``--only`` may name.
RUNNABLE: dict[str, str] = PEERS | VARIANTS
