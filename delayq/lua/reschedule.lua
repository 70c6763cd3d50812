#!lua flags=allow-oom
-- reschedule.lua: move a delayed or ready task to a new due time.
-- KEYS[1] schedule (ZSET id -> due ms)   KEYS[2] tasks (HASH)
-- ARGV[1] id   ARGV[2] 'd' delay ms | 'a' absolute Unix ms   ARGV[3] value
-- ARGV[4] tolerance ms for an absolute time in the past   ARGV[5] wake channel
-- Returns: {1, due_ms} moved | {0} not delayed/ready | {-1, now_ms} time too far in the past
--@include _envelope
local schedule, tasks = KEYS[1], KEYS[2]
local id, mode, value = ARGV[1], ARGV[2], tonumber(ARGV[3])
local tolerance, channel = tonumber(ARGV[4]), ARGV[5]
if not redis.call('ZSCORE', schedule, id) then
  return { 0 }
end
local now = now_ms()
local due = now + value
if mode == 'a' then
  if value < now - tolerance then
    return { -1, now }
  end
  due = math.max(value, now)
end
local raw = redis.call('HGET', tasks, id)
local e = raw and parse_envelope(raw)
if e then
  e.due = due
  redis.call('HSET', tasks, id, format_envelope(e, raw))
end
local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
redis.call('ZADD', schedule, due, id)
wake_if_earliest(channel, head, due)
return { 1, due }
