"""Worker apps loaded by `delayq worker tests.faults.apps.<module>:queue` subprocesses."""
