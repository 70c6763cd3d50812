#!lua flags=allow-oom
-- extend.lua: push a lease's deadline to ARGV[3] ms from now (never shortens it).
-- KEYS[1] reserved (ZSET id -> deadline ms)   KEYS[2] tasks (HASH)
-- ARGV[1] id   ARGV[2] lease token   ARGV[3] ms from now
-- Returns: the new deadline in ms, or 0 when the lease was lost.
--@include _envelope
local reserved, tasks = KEYS[1], KEYS[2]
local id, token, extra = ARGV[1], ARGV[2], tonumber(ARGV[3])
local raw = redis.call('HGET', tasks, id)
local e = raw and parse_envelope(raw)
local deadline = redis.call('ZSCORE', reserved, id)
if not e or e.token ~= token or not deadline then
  return 0
end
local wanted = now_ms() + extra
if wanted > tonumber(deadline) then
  redis.call('ZADD', reserved, wanted, id)
  return wanted
end
return tonumber(deadline)
