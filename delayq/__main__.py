"""``python -m delayq`` runs the command line."""

from delayq.cli import main

raise SystemExit(main())
