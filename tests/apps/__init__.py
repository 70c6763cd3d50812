"""Small importable apps and helpers for the tests that run delayq in other processes.

App modules (``tests.apps.counting``) read ``REDIS_URL`` and ``DELAYQ_QUEUE`` at import,
the way a real deployment configures ``delayq worker module:queue``; importing them needs
those variables, so test modules import :mod:`tests.apps.records` and
:mod:`tests.apps.runner`, never the apps themselves.
"""
