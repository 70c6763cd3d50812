"""The ``delayq`` command: run a worker, and inspect or manage a queue.

delayq worker myapp.tasks:queue --concurrency 50 [--topics a,b] [--grace 10] [--heartbeat 5]
              [--metrics-port 9100]
delayq stats  myapp.tasks:queue          (or --url/--name without importing the app; add
              --cluster for a Redis Cluster node's URL, or --sentinel H:P,... --service NAME)
delayq get    myapp.tasks:queue order.close order-7
delayq cancel myapp.tasks:queue order.close order-7
delayq dead   myapp.tasks:queue order.close [--replay ID] [--limit 100]
delayq pause  myapp.tasks:queue payment.capture      (and `delayq resume ...`)
delayq web    myapp.tasks:queue --port 8080 [--token-file F] [--metrics-port 9100]  (needs delayq[web])
delayq workers myapp.tasks:queue [--json]   (the live workers; also --url/--name)
delayq periodic myapp.tasks:queue        (periodic topics, next ticks, whether a live worker runs them)
delayq history myapp.tasks:queue order.close [--limit 100] [--before SEQ] [--json]
delayq archive myapp.tasks:queue --to postgresql+asyncpg://... [--every 60]  (delayq[archive])
delayq --version

The parts: :mod:`delayq.cli.app` finds the queue (an app's ``module:attribute``, or a URL),
:mod:`delayq.cli.commands` holds one function per command and the parser,
:mod:`delayq.cli.run` runs one of them as a process (exit status, Ctrl-C, a closed pipe).
"""

from delayq.cli.app import load_queue
from delayq.cli.commands import build_parser
from delayq.cli.run import main, run_and_abandon

__all__ = ["build_parser", "load_queue", "main", "run_and_abandon"]
