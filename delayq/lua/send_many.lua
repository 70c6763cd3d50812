#!lua
-- send_many.lua: send.lua for a batch of tasks in one call (one round trip, one atomic step).
-- KEYS[1] schedule (ZSET)  KEYS[2] tasks (HASH)  KEYS[3] dead (ZSET)  KEYS[4] errors (HASH)
-- ARGV[1] tolerance ms for absolute times in the past   ARGV[2] wake channel
-- ARGV[3..] six fields per task: id, 'd'|'a', delay-or-time ms, max attempts, ttr ms, body
-- Returns: {status1, status2, ...}: 1 stored, 0 id already live (or repeated earlier in the
--   batch; nothing written), -1 time too far past
--@include _envelope
local schedule, tasks, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tolerance, channel = tonumber(ARGV[1]), ARGV[2]
local now = now_ms()

local ids = {}
for i = 3, #ARGV, 6 do
  ids[#ids + 1] = ARGV[i]
end
-- Batch reads and writes: per-call overhead dominates the cost of a script.
local existing = redis.call('HMGET', tasks, unpack(ids))
local was_dead = redis.call('ZMSCORE', dead, unpack(ids))
local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
local scheduled, stored, revived, out, seen = {}, {}, {}, {}, {}
local earliest = nil
for n, id in ipairs(ids) do
  local i = 3 + (n - 1) * 6
  local mode, value = ARGV[i + 1], tonumber(ARGV[i + 2])
  local due = now + value
  local status = 1
  if mode == 'a' then
    due = math.max(value, now)
    if value < now - tolerance then
      status = -1
    end
  end
  if status == 1 and (seen[id] or (existing[n] and not was_dead[n])) then
    status = 0
  end
  if status == 1 then
    seen[id] = true
    if existing[n] then
      revived[#revived + 1] = id
    end
    scheduled[#scheduled + 1] = due
    scheduled[#scheduled + 1] = id
    stored[#stored + 1] = id
    stored[#stored + 1] = table.concat(
      { 0, 0, ARGV[i + 3], ARGV[i + 4], now, string.format('%d', due), ARGV[i + 5] }, ',')
    if not earliest or due < earliest then
      earliest = due
    end
  end
  out[n] = status
end
if #revived > 0 then
  -- A dead task's id is free again: the new send replaces the dead letter.
  redis.call('HDEL', errors, unpack(revived))
  redis.call('ZREM', dead, unpack(revived))
end
if earliest then
  redis.call('ZADD', schedule, unpack(scheduled))
  redis.call('HSET', tasks, unpack(stored))
  wake_if_earliest(channel, head, earliest)
end
return out
