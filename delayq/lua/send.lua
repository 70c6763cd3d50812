#!lua
-- send.lua: store a new task and schedule it, unless the id is already live (idempotent send).
-- KEYS[1] schedule (ZSET id -> due ms; delayed and ready tasks)
-- KEYS[2] tasks    (HASH id -> envelope)
-- KEYS[3] dead     (ZSET id -> dead-lettered at ms)
-- KEYS[4] errors   (HASH id -> last error)
-- ARGV[1] task id
-- ARGV[2] 'd' when ARGV[3] is a delay in ms, 'a' when it is an absolute Unix time in ms
-- ARGV[3] delay or time (ms)
-- ARGV[4] max attempts (0 = topic default)   ARGV[5] ttr ms (0 = topic default)
-- ARGV[6] body JSON   ARGV[7] tolerance ms for an absolute time in the past   ARGV[8] wake channel
-- Returns: {1, due_ms} stored | {0, due_ms} id already delayed/ready/reserved | {-1, now_ms} time too far in the past
--@include _envelope
local schedule, tasks, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, mode, value = ARGV[1], ARGV[2], tonumber(ARGV[3])
local max_attempts, ttr, body = ARGV[4], ARGV[5], ARGV[6]
local tolerance, channel = tonumber(ARGV[7]), ARGV[8]

local now = now_ms()
local due = now + value
if mode == 'a' then
  if value < now - tolerance then
    return { -1, now }
  end
  due = math.max(value, now)
end

if redis.call('HEXISTS', tasks, id) == 1 then
  if not redis.call('ZSCORE', dead, id) then
    return { 0, tonumber(redis.call('ZSCORE', schedule, id)) or 0 }
  end
  -- A dead task's id is free again: the new send replaces the dead letter.  (errors first:
  -- the only key not yet read, so a wrong type fails before anything changed.)
  redis.call('HDEL', errors, id)
  redis.call('ZREM', dead, id)
end

local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
redis.call('ZADD', schedule, due, id)
redis.call('HSET', tasks, id, table.concat({ 0, 0, max_attempts, ttr, now, string.format('%d', due), body }, ','))
wake_if_earliest(channel, head, due)
return { 1, due }
