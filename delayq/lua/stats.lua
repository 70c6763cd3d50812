#!lua flags=no-writes
-- stats.lua: count a topic's tasks by state.
-- KEYS[1] schedule (ZSET id -> due ms)  KEYS[2] reserved (ZSET)  KEYS[3] dead (ZSET)
-- Returns: {delayed, ready, reserved, dead}
--@include _envelope
local schedule, reserved, dead = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
return {
  redis.call('ZCOUNT', schedule, '(' .. now, '+inf'),
  redis.call('ZCOUNT', schedule, '-inf', now),
  redis.call('ZCARD', reserved),
  redis.call('ZCARD', dead),
}
