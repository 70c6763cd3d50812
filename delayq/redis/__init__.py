"""Everything that speaks Redis: key names, the Lua scripts and their typed wrappers, the
script lane, connections, durable sends, start-up checks and wake-ups.

Imports only the leaves (errors, durations, task models), never the worker or the queue.
"""
