#!lua flags=allow-oom
-- nack.lua: end a lease without success: retry later, dead-letter, or release untouched.
-- KEYS[1] schedule (ZSET)  KEYS[2] reserved (ZSET)  KEYS[3] tasks (HASH)  KEYS[4] dead (ZSET)  KEYS[5] errors (HASH)
-- ARGV[1] id   ARGV[2] lease token
-- ARGV[3] mode: 'retry' (failed attempt; dead once attempts reach the limit), 'dead' (no more
--         attempts, e.g. a body that no longer validates) or 'release' (the attempt never ran:
--         due now and not counted, as on a graceful shutdown)
-- ARGV[4] retry delay ms   ARGV[5] error text ('' for none)   ARGV[6] topic default max attempts
-- ARGV[7] wake channel
-- Returns: {0} lease lost | {1, due_ms} rescheduled | {2, now_ms} dead-lettered
-- allow-oom: finishing, retrying or moving tasks frees or keeps memory, and a full Redis
-- must still be drainable; only sends are refused when Redis is at maxmemory.
--@include _envelope
local schedule, reserved, tasks, dead, errors = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, token, mode = ARGV[1], ARGV[2], ARGV[3]
local delay, err, default_max, channel = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), ARGV[7]

local bad = check_types({ [schedule] = 'zset', [reserved] = 'zset', [tasks] = 'hash',
  [dead] = 'zset', [errors] = 'hash' })
if bad then
  return bad
end
local raw = redis.call('HGET', tasks, id)
local e = raw and parse_envelope(raw)
if not e or e.token ~= token or redis.call('ZREM', reserved, id) == 0 then
  return { 0 }
end
local now = now_ms()
if err ~= '' then
  redis.call('HSET', errors, id, err)
end

local limit = e.max_attempts > 0 and e.max_attempts or default_max
if mode == 'dead' or (mode == 'retry' and e.attempts >= limit) then
  redis.call('ZADD', dead, now, id)
  return { 2, now }
end

local due = now + delay
if mode == 'release' then
  e.attempts = math.max(e.attempts - 1, 0)
  due = now
end
e.due = due
local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
redis.call('HSET', tasks, id, format_envelope(e, raw))
redis.call('ZADD', schedule, due, id)
wake_if_earliest(channel, head, due)
return { 1, due }
