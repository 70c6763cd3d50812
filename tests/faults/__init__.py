"""Fault-injection suite: real processes, real redis-servers, faults on demand."""
