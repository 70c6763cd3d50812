#!lua flags=allow-oom
-- replay.lua: move a dead-lettered task back to the schedule, due now, attempts reset.
-- KEYS[1] schedule (ZSET)  KEYS[2] tasks (HASH)  KEYS[3] dead (ZSET)  KEYS[4] errors (HASH)
-- ARGV[1] id   ARGV[2] wake channel
-- Returns: 1 replayed | 0 not dead
--@include _envelope
local schedule, tasks, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, channel = ARGV[1], ARGV[2]
local bad = check_types({ [schedule] = 'zset', [tasks] = 'hash', [dead] = 'zset', [errors] = 'hash' })
if bad then
  return bad
end
if redis.call('ZREM', dead, id) == 0 then
  return 0
end
local raw = redis.call('HGET', tasks, id)
local e = raw and parse_envelope(raw)
if not e then
  -- Nothing runnable to replay: a corrupt letter is dropped rather than re-buried forever.
  redis.call('HDEL', tasks, id)
  redis.call('HDEL', errors, id)
  return 0
end
local now = now_ms()
e.attempts = 0
e.due = now
redis.call('HSET', tasks, id, format_envelope(e, raw))
redis.call('HDEL', errors, id)
local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
redis.call('ZADD', schedule, now, id)
wake_if_earliest(channel, head, now)
return 1
