"""The standard fault-suite app: ``delayq worker tests.faults.apps.recorder:queue``.

Configured by the environment: ``REDIS_URL``, ``DELAYQ_FAULT_QUEUE`` (queue name),
``DELAYQ_FAULT_LOG`` (delivery log directory), and optionally ``DELAYQ_FAULT_TTR``,
``DELAYQ_FAULT_MAX_ATTEMPTS``, ``DELAYQ_FAULT_RETRY_DELAY``, ``DELAYQ_FAULT_STEPS``,
``DELAYQ_FAULT_LIMITS`` (JSON: topic -> ``rate_limit``/``max_running`` options).
"""

from tests.faults.apps.plan import from_env

queue = from_env()
